"""Allocation layer: which class gets the next send opportunity.

Policies implement `AllocationPolicy` and are chosen by name through
`ALLOCATION_POLICIES`. The engine asks `AllocationPolicy.select`
whenever it has a free send opportunity and at least one class is backlogged;
it then tells the policy what was sent (`on_send`) and when a class's
queue drains (`on_idle`). Policies read the engine's state through the
narrow `AllocationView`; they never see the clock except as ``now``.

``fifo``
    The class whose oldest waiting entry was enqueued first: one global FIFO.
``quota_tiered``
    Each class may hold at most ``quota * max_inflight`` requests in flight
    (at least one); no borrowing, so a busy class waits even when its peer's
    quota is idle. Oldest first among eligible classes.
``adaptive_drr``
    Deficit Round Robin (Shreedhar & Varghese) in estimated tokens. Each
    backlogged class, on its turn, adds its quantum to a deficit counter and
    sends while ``deficit >= cost`` of the entry its ordering policy picks.
    A request's cost is its estimated tokens plus the per-request part of the
    slot it holds (``view.request_tokens``): the provider's fixed time per call,
    which a one-token request pays as fully as a long one. The round's quantum
    is ``quantum_tokens`` or the largest cost waiting at a class's head,
    whichever is smaller: Shreedhar & Varghese's O(1) needs a quantum of at
    least the largest cost, and a larger one only lengthens the round a newly
    backlogged class waits (a class of one-token requests would send hundreds
    a turn).
    Work-conserving borrowing: only backlogged classes take turns, and a class
    whose queue empties forfeits its deficit, so an idle class's share flows
    to its backlogged peers instead of being held for it. Congestion
    feedback: an interactive class's quantum is scaled by
    ``1 + congestion_gain * severity`` (Scheduling the Unschedulable §3.1). The turns are computed
    in closed form (how many rounds each class needs), so one decision is
    O(classes), however large the costs are relative to the quantum.
``fair_queuing``
    Round robin across backlogged classes, one request per turn, regardless
    of size (Scheduling the Unschedulable §4.6).
``short_priority``
    Interactive classes strictly first, in configured order; others after.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from typing import ClassVar, Protocol

from semisched.core.config import AllocationConfig, ClassSpec
from semisched.core.queue import Entry
from semisched.core.registry import ALLOCATION, policy_class

__all__ = [
    "ALLOCATION_POLICIES",
    "AdaptiveDRR",
    "AllocationPolicy",
    "AllocationView",
    "FairQueuing",
    "FifoAllocation",
    "QuotaTiered",
    "ShortPriority",
    "Tiered",
    "make_allocation",
]


class AllocationView(Protocol):
    """What an allocation policy may read of the engine at decision time."""

    @property
    def severity(self) -> float:
        """Current overload severity in [0, 1]."""
        ...

    @property
    def max_inflight(self) -> int | None:
        """The client's concurrency budget, ``None`` for unlimited."""
        ...

    def backlogged(self) -> Sequence[str]:
        """Names of classes with waiting entries, in configured class order."""
        ...

    def head(self, klass: str) -> Entry:
        """The entry the ordering policy would send next from ``klass``."""
        ...

    def oldest_seq(self, klass: str) -> int:
        """Enqueue sequence number of ``klass``'s longest-queued entry."""
        ...

    def inflight(self, klass: str) -> int:
        """Requests of ``klass`` in flight now."""
        ...

    @property
    def request_tokens(self) -> float:
        """What one request costs besides its tokens (``AllocationConfig.request_tokens``,
        or the fleet's learned value), in tokens."""
        ...


class AllocationPolicy(ABC):
    """Choose a class for the next send opportunity."""

    name: ClassVar[str]

    def __init__(self, cfg: AllocationConfig, classes: Sequence[ClassSpec]) -> None:
        self.cfg = cfg
        self.classes = tuple(classes)
        self.order = {c.name: i for i, c in enumerate(self.classes)}

    def __repr__(self) -> str:
        state = ", ".join(f"{k}={v:.0f}" for k, v in self.state().items())
        return f"<{type(self).__name__} {self.name!r}{' ' + state if state else ''}>"

    @abstractmethod
    def select(self, view: AllocationView) -> str | None:
        """Return the class to serve, or ``None`` if no class may send now."""

    def on_send(self, klass: str, cost: float) -> None:  # noqa: B027 - optional hook
        """An entry of ``klass`` with estimated ``cost`` tokens was sent."""

    def on_idle(self, klass: str) -> None:  # noqa: B027 - optional hook
        """``klass``'s queue just became empty."""

    def state(self) -> dict[str, float]:
        """Per-class internal state for statistics (deficits, pointers)."""
        return {}


def _oldest(view: AllocationView, names: Sequence[str]) -> str | None:
    return min(names, key=view.oldest_seq) if names else None


@ALLOCATION.register
class FifoAllocation(AllocationPolicy):
    """One global FIFO across classes."""

    name = "fifo"

    def select(self, view: AllocationView) -> str | None:
        return _oldest(view, view.backlogged())


@ALLOCATION.register
class QuotaTiered(AllocationPolicy):
    """Fixed per-class in-flight quotas, no borrowing."""

    name = "quota_tiered"

    def __init__(self, cfg: AllocationConfig, classes: Sequence[ClassSpec]) -> None:
        super().__init__(cfg, classes)
        total_weight = sum(c.weight for c in self.classes)
        self.share = {
            c.name: c.quota if c.quota is not None else c.weight / total_weight
            for c in self.classes
        }

    def limit(self, klass: str, max_inflight: int | None) -> float:
        """In-flight cap of ``klass`` (infinite when the budget is unlimited)."""
        if max_inflight is None:
            return math.inf
        return max(1, math.floor(self.share[klass] * max_inflight))

    def select(self, view: AllocationView) -> str | None:
        budget = view.max_inflight
        eligible = [k for k in view.backlogged() if view.inflight(k) < self.limit(k, budget)]
        return _oldest(view, eligible)


@ALLOCATION.register
class AdaptiveDRR(AllocationPolicy):
    """Work-conserving, congestion-aware Deficit Round Robin in tokens."""

    name = "adaptive_drr"

    def __init__(self, cfg: AllocationConfig, classes: Sequence[ClassSpec]) -> None:
        super().__init__(cfg, classes)
        self.deficit = {c.name: 0.0 for c in self.classes}
        self.current: str | None = None
        self._floor = 0.0  # the request cost's fixed part at the last select
        self._spec = {c.name: c for c in self.classes}
        names = tuple(c.name for c in self.classes)
        # Visiting order after each class (and from the start, key None): the others cyclically.
        self._after: dict[str | None, tuple[str, ...]] = {None: names}
        for i, name in enumerate(names):
            self._after[name] = names[i + 1 :] + names[: i + 1]

    def quantum(self, klass: str, severity: float, base: float | None = None) -> float:
        """This turn's quantum for ``klass`` at the given severity (``base``: the
        round's base quantum, ``quantum_tokens`` unless given)."""
        spec = self._spec[klass]
        q = (self.cfg.quantum_tokens if base is None else base) * spec.weight
        if spec.interactive:
            q *= 1.0 + self.cfg.congestion_gain * severity
        return q

    def select(self, view: AllocationView) -> str | None:
        backlog = view.backlogged()
        if not backlog:
            return None
        floor = self._floor = view.request_tokens
        cur = self.current
        if cur is not None and cur in backlog and view.head(cur).cost + floor <= self.deficit[cur]:
            return cur
        # Visiting order: the backlogged classes after the current one, cyclically.
        ring = [k for k in self._after[cur] if k in backlog]
        m = len(ring)
        severity = view.severity
        best: tuple[int, str] | None = None
        quanta: dict[str, float] = {}
        costs = {k: view.head(k).cost + floor for k in ring}
        base = min(self.cfg.quantum_tokens, max(costs.values()))
        for pos, k in enumerate(ring, start=1):
            q = quanta[k] = self.quantum(k, severity, base)
            need = costs[k] - self.deficit[k]
            rounds = math.ceil(need / q) if need > 0 else 1
            if rounds < 1:  # need / q underflowed to 0 (max() without the builtin's overhead)
                rounds = 1
            visit = pos + (rounds - 1) * m
            if best is None or visit < best[0]:
                best = (visit, k)
        assert best is not None
        visit, chosen = best
        for pos, k in enumerate(ring, start=1):
            visits = (visit - pos) // m + 1 if visit >= pos else 0
            self.deficit[k] += visits * quanta[k]
        self.current = chosen
        return chosen

    def on_send(self, klass: str, cost: float) -> None:
        self.deficit[klass] -= cost + self._floor

    def on_idle(self, klass: str) -> None:
        self.deficit[klass] = 0.0

    def state(self) -> dict[str, float]:
        return dict(self.deficit)


@ALLOCATION.register
class FairQueuing(AllocationPolicy):
    """Round robin over backlogged classes, one request per turn."""

    name = "fair_queuing"

    def __init__(self, cfg: AllocationConfig, classes: Sequence[ClassSpec]) -> None:
        super().__init__(cfg, classes)
        self.last = -1

    def select(self, view: AllocationView) -> str | None:
        backlog = view.backlogged()
        if not backlog:
            return None
        n = len(self.classes)
        return min(backlog, key=lambda k: (self.order[k] - self.last - 1) % n)

    def on_send(self, klass: str, cost: float) -> None:
        self.last = self.order[klass]


@ALLOCATION.register
class ShortPriority(AllocationPolicy):
    """Interactive classes strictly before the rest."""

    name = "short_priority"

    def select(self, view: AllocationView) -> str | None:
        backlog = view.backlogged()
        if not backlog:
            return None
        for k in backlog:
            if self.classes[self.order[k]].interactive:
                return k
        return backlog[0]


class _TierView:
    """An allocation view that shows only some backlogged classes (one tier's)."""

    __slots__ = ("_backlog", "_view")

    def __init__(self, view: AllocationView, backlog: Sequence[str]) -> None:
        self._view = view
        self._backlog = backlog

    @property
    def severity(self) -> float:
        return self._view.severity

    @property
    def max_inflight(self) -> int | None:
        return self._view.max_inflight

    @property
    def request_tokens(self) -> float:
        return self._view.request_tokens

    def backlogged(self) -> Sequence[str]:
        return self._backlog

    def head(self, klass: str) -> Entry:
        return self._view.head(klass)

    def oldest_seq(self, klass: str) -> int:
        return self._view.oldest_seq(klass)

    def inflight(self, klass: str) -> int:
        return self._view.inflight(klass)


class Tiered(AllocationPolicy):
    """Strict tiers around any allocation policy, with a starvation guard.

    Rules (``ClassSpec.tier`` and ``ClassSpec.min_share``):

    1. The policy inside chooses among the backlogged classes of the most urgent
       (lowest) tier that has any; the classes of later tiers wait, whatever
       their weights.
    2. Guard: at each choice, every backlogged class of a later tier with a
       ``min_share`` earns that much credit; one whose credit reaches a whole
       send is served instead, and pays it. So while it waits, it gets at least
       ``min_share`` of the sends. A class with nothing waiting holds no credit.
    3. The policy inside is told every send (its books stay whole), and a class
       that goes idle.

    Built by `make_allocation` when any class has a ``tier`` or a
    ``min_share``; with neither, the policy runs bare.
    """

    name = "tiered"

    def __init__(self, inner: AllocationPolicy) -> None:
        super().__init__(inner.cfg, inner.classes)
        self.inner = inner
        self.tier = {c.name: c.tier for c in self.classes}
        self.share = {c.name: c.min_share for c in self.classes if c.min_share}
        self.credit = dict.fromkeys(self.share, 0.0)

    def __repr__(self) -> str:
        return f"<Tiered {self.inner!r}>"

    def select(self, view: AllocationView) -> str | None:
        backlog = view.backlogged()
        if not backlog:
            return None
        top = min(self.tier[k] for k in backlog)
        guarded: str | None = None
        for k, share in self.share.items():
            if k not in backlog:
                self.credit[k] = 0.0
            elif self.tier[k] > top:
                credit = self.credit[k] = self.credit[k] + share
                if credit >= 1.0 and (guarded is None or credit > self.credit[guarded]):
                    guarded = k
        if guarded is not None:
            self.credit[guarded] -= 1.0
            return guarded
        first = [k for k in backlog if self.tier[k] == top]
        return self.inner.select(view if len(first) == len(backlog) else _TierView(view, first))

    def on_send(self, klass: str, cost: float) -> None:
        self.inner.on_send(klass, cost)

    def on_idle(self, klass: str) -> None:
        self.inner.on_idle(klass)

    def state(self) -> dict[str, float]:
        return self.inner.state()


#: The built-in policies by name (read-only: each registers itself under its ``name``,
#: in the order defined above; a config checks its name here when it is built).
ALLOCATION_POLICIES: Mapping[str, type[AllocationPolicy]] = ALLOCATION


def make_allocation(cfg: AllocationConfig, classes: Sequence[ClassSpec]) -> AllocationPolicy:
    """Build the allocation policy ``cfg.policy`` names (or is: a user's class).

    Raises:
        ValueError: For an unknown policy name (only reachable by bypassing the
            config's own check, which runs when the config is built).
        TypeError: For a class that is not a policy of this layer.
    """
    policy = policy_class(cfg.policy, AllocationPolicy, ALLOCATION_POLICIES)(cfg, classes)
    return Tiered(policy) if any(c.tier or c.min_share for c in classes) else policy
