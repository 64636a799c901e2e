"""The tenant layer: which tenant's queue gets the next send opportunity.

A level above allocation and ordering (the Token Management paper, client-side; the meanings of
entitlement and service class are in `semisched.core.tenants.config`). Each
tenant has its own *lane*: its class queues, its own allocation policy
instance, its flight and its usage. On a free send opportunity the engine asks
the tenant policy for a lane, then that lane's allocation policy for a class,
then the ordering policy for the request; within a tenant nothing changes.

Rules:

1. Only a *ready* lane is offered to the policy (with one declared tenant the
   policy is not asked: there is nothing to choose): it has queued requests and is
   inside its own caps (``max_concurrency`` in flight; ``rpm``/``tpm``: a lane
   whose chosen request its budget cannot pay for now sits out until it can,
   and one that never can is rejected). So a capped tenant never blocks the others.
2. Usage is counted in *work tokens* (output tokens plus ``input_token_weight``
   times prompt tokens: the engine's cost unit). A send charges its estimate
   at once; completion replaces it with what was generated; a failed attempt,
   a refusal or a retry refunds it (a cancelled one keeps it). Usage decays
   with ``half_life_s``: a value ``x`` charged at ``t`` counts
   ``x * 2**(-(now - t) / half_life_s)`` at ``now``.
3. A tenant's *share* is its decayed usage over everyone's; its *debt* is
   ``usage - entitlement * total``, in work tokens (positive: served beyond its
   entitlement; negative: owed). The token-pools paper defines debt with the opposite sign
   (positive when underserved); the ordering it induces is the same.
4. With a shared state (`semisched.state`), the other processes' usage of
   each tenant is added (`TenantLedger.observe_shared`), so shares and
   debt are fleet-wide.

The policies that choose among ready lanes are in
`semisched.core.tenants.policies`.

Pure: no clock, no I/O.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import replace
from typing import Protocol

from semisched.core.allocation import AllocationPolicy
from semisched.core.budget import RateBudget
from semisched.core.config import BudgetConfig
from semisched.core.queue import ClassQueue, Entry
from semisched.core.request import Request
from semisched.core.stats import TenantStats
from semisched.core.tenants.config import ServiceClass, TenantSpec

__all__ = [
    "LaneHost",
    "SoloLedger",
    "TenantLane",
    "TenantLedger",
    "TenantView",
    "entitlements",
    "work_tokens",
]

#: Rebase the usage scale when it passes 2**_REBASE (keeps floats far from overflow).
_REBASE = 64.0


class LaneHost(Protocol):
    """What a lane reads of the engine that owns it."""

    @property
    def severity(self) -> float:
        """Overload severity computed at the start of the current decision."""
        ...

    @property
    def max_inflight(self) -> int | None:
        """The client's concurrency budget."""
        ...

    @property
    def request_tokens(self) -> float:
        """What one request costs in allocation besides its tokens."""
        ...

    def choose(self, queue: ClassQueue) -> Entry:
        """The ordering policy's pick in ``queue`` now."""
        ...


class TenantView(Protocol):
    """What a tenant policy reads of the engine."""

    @property
    def ledger(self) -> TenantLedger:
        """Every tenant's lane and usage."""
        ...

    @property
    def max_inflight(self) -> int | None:
        """The client's concurrency budget."""
        ...

    @property
    def inflight_total(self) -> int:
        """Requests in flight now, every tenant's."""
        ...


class TenantLane:
    """One tenant's queues, flight and usage; the `AllocationView` of its classes."""

    __slots__ = (
        "_backlog",
        "_heads",
        "_host",
        "alloc",
        "budget",
        "completed",
        "deferrals",
        "entitlement",
        "expired",
        "external",
        "inflight_by_class",
        "input_tokens",
        "output_tokens",
        "outstanding",
        "queued",
        "queues",
        "rejected",
        "sent",
        "served_tokens",
        "spec",
        "usage",
    )

    def __init__(
        self,
        spec: TenantSpec,
        entitlement: float,
        alloc: AllocationPolicy,
        class_names: Sequence[str],
        band_ratio: float,
        host: LaneHost,
    ) -> None:
        self.spec = spec
        self.entitlement = entitlement
        self.alloc = alloc
        self._host = host
        self.queues = {n: ClassQueue(n, band_ratio) for n in class_names}
        self._backlog: tuple[str, ...] = ()
        self._heads: dict[str, Entry] = {}
        self.inflight_by_class = dict.fromkeys(class_names, 0)
        self.queued = 0
        self.outstanding = 0  # requests in flight (all classes)
        self.usage = 0.0  # this process's decayed usage, in the ledger's scaled units
        self.external = 0.0  # other processes' (shared state), same units
        self.budget: RateBudget | None = None
        if spec.rpm is not None or spec.tpm is not None:
            self.budget = RateBudget(BudgetConfig(rpm=spec.rpm, tpm=spec.tpm, adapt=False))
        self.sent = self.completed = self.rejected = self.deferrals = self.expired = 0
        self.served_tokens = self.output_tokens = self.input_tokens = 0.0

    def __repr__(self) -> str:
        return f"<TenantLane {self.spec.name} queued={self.queued} inflight={self.outstanding}>"

    @property
    def name(self) -> str:
        """The tenant's name."""
        return self.spec.name

    @property
    def weight(self) -> float:
        """The tenant's weight."""
        return self.spec.weight

    @property
    def service(self) -> ServiceClass:
        """The tenant's service class."""
        return ServiceClass(self.spec.service)

    @property
    def scaled_usage(self) -> float:
        """Own plus shared usage in the ledger's scaled units (compare, don't read)."""
        return self.usage + self.external

    # -- AllocationView ------------------------------------------------------------

    @property
    def severity(self) -> float:
        """Overload severity computed at the start of the current decision."""
        return self._host.severity

    @property
    def max_inflight(self) -> int | None:
        """The client's concurrency budget."""
        return self._host.max_inflight

    @property
    def request_tokens(self) -> float:
        """What one request costs in allocation besides its tokens."""
        return self._host.request_tokens

    def backlogged(self) -> Sequence[str]:
        """This tenant's classes with queued requests, in configured order."""
        return self._backlog

    def head(self, klass: str) -> Entry:
        """The entry the ordering policy picks next in ``klass`` (cached per decision)."""
        entry = self._heads.get(klass)
        if entry is None:
            entry = self._heads[klass] = self._host.choose(self.queues[klass])
        return entry

    def oldest_seq(self, klass: str) -> int:
        """Enqueue number of the longest-queued request of this tenant in ``klass``."""
        entry = self.queues[klass].oldest()
        if entry is None:
            raise ValueError(f"class {klass!r} has no queued request of tenant {self.name!r}")
        return entry.seq

    def inflight(self, klass: str) -> int:
        """This tenant's requests of ``klass`` in flight."""
        return self.inflight_by_class[klass]

    # -- the books -------------------------------------------------------------------

    def first_seq(self) -> int:
        """Enqueue number of this tenant's longest-queued request (any class)."""
        return min(self.oldest_seq(k) for k in self._backlog)

    def forget_heads(self) -> None:
        """Drop the per-decision head cache."""
        self._heads.clear()

    def add(self, entry: Entry) -> None:
        """Queue ``entry`` in its class."""
        klass = entry.request.klass
        first = self.queues[klass].add(entry)
        self.queued += 1
        self._heads.pop(klass, None)
        if first:
            self._backlog = tuple([n for n, q in self.queues.items() if q])

    def remove(self, entry: Entry) -> bool:
        """Take ``entry`` out of its class queue; ``True`` when that queue emptied."""
        klass = entry.request.klass
        emptied = self.queues[klass].remove(entry)
        self.queued -= 1
        self._heads.pop(klass, None)
        if not emptied:
            return False
        self._backlog = tuple([n for n, q in self.queues.items() if q])
        self.alloc.on_idle(klass)
        return True


def count_sent(entry: Entry, klass: str, now: float) -> None:
    """``entry`` of class ``klass`` was sent at ``now``: its lane's flight and rate cap
    count it."""
    lane = entry.lane
    lane.outstanding += 1
    lane.inflight_by_class[klass] += 1
    lane.sent += 1
    if lane.budget is not None:
        lane.budget.charge(now, entry.request.id, entry.charge)


def count_completed(
    entry: Entry, output_tokens: int, input_token_weight: float, charged_tokens: float | None,
    now: float,
) -> float:
    """``entry`` was answered at ``now``: its lane's counts and rate cap; returns the work
    it served (`work_tokens`)."""
    lane = entry.lane
    work = output_tokens + input_token_weight * entry.request.input_tokens  # work_tokens
    lane.completed += 1
    lane.served_tokens += work
    lane.output_tokens += output_tokens
    if lane.budget is not None and charged_tokens is not None:
        lane.budget.settle(entry.request.id, charged_tokens, now)
    return work


class TenantLedger:
    """Every tenant's lane and the decaying usage scale they share (module rules 2-4)."""

    __slots__ = ("_half_life", "_t0", "by_name", "lanes", "total")

    def __init__(self, lanes: Sequence[TenantLane], half_life_s: float) -> None:
        self.lanes = tuple(lanes)
        self.by_name = {lane.name: lane for lane in self.lanes}
        self._half_life = half_life_s
        self._t0 = 0.0
        self.total = 0.0  # sum of every lane's scaled usage (own and shared)

    def _scale(self, at: float) -> float:
        """``2**((at - t0) / half_life)``, moving the origin ``t0`` forward when that
        would leave the floats' comfortable range (any clock: monotonic, epoch, scaled)."""
        exponent = (at - self._t0) / self._half_life
        if -_REBASE < exponent < _REBASE:
            return float(2.0**exponent)
        if not math.isfinite(at):  # no event yet (now = -inf)
            return 1.0
        if exponent >= _REBASE or self.total == 0.0:
            self._rebase(at, exponent)
            return 1.0
        # Long before the origin (an old send settling): it has decayed away.
        return float(2.0 ** max(exponent, -1074.0))

    def _rebase(self, now: float, exponent: float) -> None:
        if self.total > 0.0:
            # Beyond a thousand half-lives nothing is left.
            factor = math.inf if exponent > 1000.0 else float(2.0**exponent)
            for lane in self.lanes:
                lane.usage /= factor
                lane.external /= factor
            self.total /= factor
        self._t0 = now

    def charge(self, lane: TenantLane, tokens: float, at: float) -> None:
        """Add ``tokens`` of usage charged at time ``at`` (negative: take it back)."""
        exponent = (at - self._t0) / self._half_life
        # _scale(at), its common case inlined (two charges per request)
        amount = tokens * (2.0**exponent if -_REBASE < exponent < _REBASE else self._scale(at))
        usage = lane.usage + amount
        if usage < 0.0:  # float drift on a refund: never below nothing
            amount -= usage
            usage = 0.0
        lane.usage = usage
        total = self.total + amount
        self.total = total if total > 0.0 else 0.0

    def sent(self, entry: Entry, klass: str, now: float) -> None:
        """``entry`` of class ``klass`` was sent at ``now``: its lane's flight, caps
        and usage count it (its estimate, until it completes)."""
        count_sent(entry, klass, now)
        self.charge(entry.lane, entry.cost, now)

    def completed(
        self,
        entry: Entry,
        output_tokens: int,
        input_token_weight: float,
        charged_tokens: float | None,
        now: float,
    ) -> None:
        """``entry`` was answered: the estimate charged at its send becomes what was
        served, still counted from the send (rule 2)."""
        assert entry.sent_at is not None
        work = count_completed(entry, output_tokens, input_token_weight, charged_tokens, now)
        self.charge(entry.lane, work - entry.cost, entry.sent_at)

    def refund(self, entry: Entry, *, sent: bool) -> None:
        """``entry``'s attempt served nothing: its usage charge is taken back, and with
        ``sent`` (a send refused before it left) its send and rate-cap charge too."""
        lane = entry.lane
        assert lane is not None and entry.sent_at is not None
        self.charge(lane, -entry.cost, entry.sent_at)
        if sent:
            lane.sent -= 1
            if lane.budget is not None:
                lane.budget.refund(entry.request.id)

    def observe_shared(self, lane: TenantLane, fleet_usage: float, now: float) -> None:
        """Every process's decayed usage of ``lane``'s tenant at ``now`` (work tokens);
        the part beyond this process's own becomes its shared usage."""
        scale = self._scale(now)
        external = fleet_usage * scale - lane.usage
        if external < 0.0 or not math.isfinite(external):
            external = 0.0
        self.total += external - lane.external
        lane.external = external

    def decayed(self, lane: TenantLane, now: float) -> tuple[float, float]:
        """``lane``'s usage and everyone's at ``now``, in work tokens."""
        scale = self._scale(now)
        return lane.scaled_usage / scale, self.total / scale

    def stats(self, lane: TenantLane, now: float) -> TenantStats:
        """``lane``'s tenant at ``now`` ([`TenantStats`][semisched.core.stats.TenantStats])."""
        usage, total = self.decayed(lane, now)
        return TenantStats(
            name=lane.name,
            service=lane.service.value,
            weight=lane.weight,
            entitlement=lane.entitlement,
            queued=lane.queued,
            inflight=lane.outstanding,
            sent=lane.sent,
            completed=lane.completed,
            rejected=lane.rejected,
            deferrals=lane.deferrals,
            expired=lane.expired,
            served_tokens=lane.served_tokens,
            output_tokens=lane.output_tokens,
            usage=usage,
            share=usage / total if total > 0.0 else 0.0,
            debt=usage - lane.entitlement * total,
            allocation_state=lane.alloc.state(),
        )

    def own(self, lane: TenantLane, now: float) -> float:
        """This process's own decayed usage of ``lane``'s tenant at ``now`` (work tokens)."""
        return lane.usage / self._scale(now)


class SoloLedger(TenantLedger):
    """The ledger of a scheduler with one tenant: its lane's counts and caps, no usage.

    With nobody to share with, usage decides nothing (no tenant policy is asked,
    overload control judges the one tenant as the scheduler), so none is kept: a
    send and an answer cost no decay arithmetic. Its ``usage`` and ``debt`` read 0,
    its ``share`` 1 (it is everyone).
    """

    __slots__ = ()

    def stats(self, lane: TenantLane, now: float) -> TenantStats:
        """The one tenant at ``now``: its counts, the whole share."""
        return replace(super().stats(lane, now), share=1.0)

    def charge(self, lane: TenantLane, tokens: float, at: float) -> None:
        """Nothing: one tenant's usage is not kept."""

    # A send and an answer only count (no usage to charge).
    sent = staticmethod(count_sent)
    completed = staticmethod(count_completed)  # type: ignore[assignment]

    def observe_shared(self, lane: TenantLane, fleet_usage: float, now: float) -> None:
        """Nothing: one tenant's usage is not kept."""


def work_tokens(request: Request, output_tokens: int, input_token_weight: float) -> float:
    """What answering ``request`` with ``output_tokens`` served, in work tokens (rule 2):
    the output plus ``input_token_weight`` times its prompt estimate."""
    return output_tokens + input_token_weight * request.input_tokens


def entitlements(specs: Sequence[TenantSpec]) -> dict[str, float]:
    """Each tenant's entitled share: its weight over the entitled tenants' weights
    (best-effort tenants: 0)."""
    total = sum(t.weight for t in specs if t.has_entitlement)
    return {t.name: (t.weight / total if t.has_entitlement and total else 0.0) for t in specs}
