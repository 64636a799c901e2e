"""Allocation layer: which class gets the next send opportunity.

Policies implement :class:`AllocationPolicy` and are chosen by name through
:data:`ALLOCATION_POLICIES`. The engine asks :meth:`AllocationPolicy.select`
whenever it has a free send opportunity and at least one class is backlogged;
it then tells the policy what was sent (:meth:`on_send`) and when a class's
queue drains (:meth:`on_idle`). Policies read the engine's state through the
narrow :class:`AllocationView`; they never see the clock except as ``now``.

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
from types import MappingProxyType
from typing import ClassVar, Protocol

from semisched.core.config import AllocationConfig, ClassSpec
from semisched.core.queue import Entry
from semisched.core.registry import policy_class

__all__ = [
    "ALLOCATION_POLICIES",
    "AdaptiveDRR",
    "AllocationPolicy",
    "AllocationView",
    "FairQueuing",
    "FifoAllocation",
    "QuotaTiered",
    "ShortPriority",
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


class FifoAllocation(AllocationPolicy):
    """One global FIFO across classes."""

    name = "fifo"

    def select(self, view: AllocationView) -> str | None:
        return _oldest(view, view.backlogged())


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


class AdaptiveDRR(AllocationPolicy):
    """Work-conserving, congestion-aware Deficit Round Robin in tokens."""

    name = "adaptive_drr"

    def __init__(self, cfg: AllocationConfig, classes: Sequence[ClassSpec]) -> None:
        super().__init__(cfg, classes)
        self.deficit = {c.name: 0.0 for c in self.classes}
        self.current: str | None = None
        self._spec = {c.name: c for c in self.classes}
        names = tuple(c.name for c in self.classes)
        # Visiting order after each class (and from the start, key None): the others cyclically.
        self._after: dict[str | None, tuple[str, ...]] = {None: names}
        for i, name in enumerate(names):
            self._after[name] = names[i + 1 :] + names[: i + 1]

    def quantum(self, klass: str, severity: float) -> float:
        """This turn's quantum for ``klass`` at the given severity."""
        spec = self._spec[klass]
        q = self.cfg.quantum_tokens * spec.weight
        if spec.interactive:
            q *= 1.0 + self.cfg.congestion_gain * severity
        return q

    def select(self, view: AllocationView) -> str | None:
        backlog = view.backlogged()
        if not backlog:
            return None
        cur = self.current
        if cur is not None and cur in backlog and view.head(cur).cost <= self.deficit[cur]:
            return cur
        # Visiting order: the backlogged classes after the current one, cyclically.
        ring = [k for k in self._after[cur] if k in backlog]
        m = len(ring)
        severity = view.severity
        best: tuple[int, str] | None = None
        quanta: dict[str, float] = {}
        for pos, k in enumerate(ring, start=1):
            q = quanta[k] = self.quantum(k, severity)
            need = view.head(k).cost - self.deficit[k]
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
        self.deficit[klass] -= cost

    def on_idle(self, klass: str) -> None:
        self.deficit[klass] = 0.0

    def state(self) -> dict[str, float]:
        return dict(self.deficit)


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


#: Allocation policies by name (read-only; the names are
#: :data:`semisched.core.config.ALLOCATION_POLICY_NAMES`, checked when a config is built).
ALLOCATION_POLICIES: Mapping[str, type[AllocationPolicy]] = MappingProxyType(
    {
        cls.name: cls
        for cls in (FifoAllocation, QuotaTiered, AdaptiveDRR, FairQueuing, ShortPriority)
    }
)


def make_allocation(cfg: AllocationConfig, classes: Sequence[ClassSpec]) -> AllocationPolicy:
    """Build the allocation policy ``cfg.policy`` names (or is: a user's class).

    Raises:
        ValueError: For an unknown policy name (only reachable by bypassing the
            config's own check, which runs when the config is built).
        TypeError: For a class that is not a policy of this layer.
    """
    return policy_class(cfg.policy, AllocationPolicy, ALLOCATION_POLICIES)(cfg, classes)
