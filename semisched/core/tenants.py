"""The tenant layer: which tenant's queue gets the next send opportunity.

A level above allocation and ordering (seed 002, client-side; the meanings of
entitlement and service class are in :mod:`semisched.core.tenancy`). Each
tenant has its own *lane*: its class queues, its own allocation policy
instance, its flight and its usage. On a free send opportunity the engine asks
the tenant policy for a lane, then that lane's allocation policy for a class,
then the ordering policy for the request; within a tenant nothing changes.

Rules:

1. Only a *ready* lane is offered to the policy: it has queued requests and is
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
   entitlement; negative: owed). Seed 002 defines debt with the opposite sign
   (positive when underserved); the ordering it induces is the same.
4. With a shared state (:mod:`semisched.state`), the other processes' usage of
   each tenant is added (:meth:`TenantLedger.observe_shared`), so shares and
   debt are fleet-wide.

Policies (:data:`TENANT_POLICIES`, chosen by ``TenantConfig.policy``):

``fair_share`` (seed 002)
    Tiers first: guaranteed tenants inside their entitlement, then guaranteed
    and elastic tenants, then best-effort ones. Within a tier, the lowest
    usage per unit of weight (the lowest debt per weight): backlogged tenants
    converge to their weights, an idle tenant's share goes to the busy ones
    (work-conserving) and comes back to it when it returns, since its usage
    decayed meanwhile. Overload control's ladder is shifted per tenant: a
    guaranteed tenant inside its entitlement is never shed, an elastic tenant
    beyond it one level sooner, a best-effort tenant two levels sooner.
    Short requests stay unshed, as for everyone.
``fifo``
    Tenant-blind: the tenant whose oldest queued request came first.
``static_quota``
    A fixed per-tenant cap (LiteLLM's per-team limits): each tenant at most
    ``floor(weight / sum(weights) * max_inflight)`` in flight (at least one),
    never lent when idle; oldest request first among the tenants under their cap.

Pure: no clock, no I/O.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from types import MappingProxyType
from typing import ClassVar, Protocol

from semisched.core.allocation import AllocationPolicy
from semisched.core.budget import RateBudget
from semisched.core.config import BudgetConfig
from semisched.core.queue import ClassQueue, Entry
from semisched.core.tenancy import ServiceClass, TenantConfig, TenantSpec

__all__ = [
    "TENANT_POLICIES",
    "FairShare",
    "FifoTenants",
    "LaneHost",
    "StaticQuota",
    "TenantLane",
    "TenantLedger",
    "TenantPolicy",
    "make_tenant_policy",
]

_GUARANTEED, _BEST_EFFORT = ServiceClass.GUARANTEED, ServiceClass.BEST_EFFORT
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

    def choose(self, queue: ClassQueue) -> Entry:
        """The ordering policy's pick in ``queue`` now."""
        ...


class TenantLane:
    """One tenant's queues, flight and usage; the :class:`AllocationView` of its classes."""

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
        return self.spec.service

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
        queue = self.queues[klass]
        queue.add(entry)
        self.queued += 1
        self._heads.pop(klass, None)
        if len(queue) == 1:
            self._backlog = tuple([n for n, q in self.queues.items() if q])

    def remove(self, entry: Entry) -> bool:
        """Take ``entry`` out of its class queue; ``True`` when that queue emptied."""
        klass = entry.request.klass
        queue = self.queues[klass]
        queue.remove(entry)
        self.queued -= 1
        self._heads.pop(klass, None)
        if queue:
            return False
        self._backlog = tuple([n for n, q in self.queues.items() if q])
        self.alloc.on_idle(klass)
        return True


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
        exponent = (at - self._t0) / self._half_life
        if -_REBASE < exponent < _REBASE:
            return float(2.0**exponent)
        return self._rebase(at) if math.isfinite(at) else 1.0  # no event yet: -inf

    def _rebase(self, now: float) -> float:
        factor = 2.0 ** ((now - self._t0) / self._half_life)
        for lane in self.lanes:
            lane.usage /= factor
            lane.external /= factor
        self.total /= factor
        self._t0 = now
        return 1.0

    def charge(self, lane: TenantLane, tokens: float, at: float) -> None:
        """Add ``tokens`` of usage charged at time ``at`` (negative: take it back)."""
        amount = tokens * self._scale(at)
        usage = lane.usage + amount
        if usage < 0.0:  # float drift on a refund: never below nothing
            amount -= usage
            usage = 0.0
        lane.usage = usage
        total = self.total + amount
        self.total = total if total > 0.0 else 0.0

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

    def own(self, lane: TenantLane, now: float) -> float:
        """This process's own decayed usage of ``lane``'s tenant at ``now`` (work tokens)."""
        return lane.usage / self._scale(now)


# -- policies ---------------------------------------------------------------------------


class TenantPolicy(ABC):
    """Chooses the tenant whose lane sends next (subclass and set ``name``)."""

    name: ClassVar[str]

    def __init__(self, cfg: TenantConfig) -> None:
        self.cfg = cfg

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name}>"

    @abstractmethod
    def select(
        self, ready: Sequence[TenantLane], ledger: TenantLedger, max_inflight: int | None
    ) -> TenantLane | None:
        """One of the ``ready`` lanes (never empty), or ``None`` to send nothing now."""

    def shed_offset(self, lane: TenantLane, ledger: TenantLedger) -> int | None:
        """Ladder levels added to an arrival of ``lane``'s tenant (``None``: never shed)."""
        return 0


def _oldest(lanes: Sequence[TenantLane]) -> TenantLane | None:
    best: TenantLane | None = None
    best_seq = 0
    for lane in lanes:
        seq = lane.first_seq()
        if best is None or seq < best_seq:
            best, best_seq = lane, seq
    return best


def _within(lane: TenantLane, ledger: TenantLedger) -> bool:
    """Whether ``lane``'s decayed usage is inside its entitlement's part of everyone's."""
    return lane.scaled_usage <= lane.entitlement * ledger.total * (1.0 + 1e-9)


class FairShare(TenantPolicy):
    """Service-class tiers, then the lowest usage per weight (module docstring)."""

    name = "fair_share"

    def select(
        self, ready: Sequence[TenantLane], ledger: TenantLedger, max_inflight: int | None
    ) -> TenantLane | None:
        if len(ready) == 1:
            return ready[0]
        best: TenantLane | None = None
        best_key = (3, 0.0)
        for lane in ready:
            service = lane.spec.service
            if service is _BEST_EFFORT:
                tier = 2
            elif service is _GUARANTEED and _within(lane, ledger):
                tier = 0
            else:
                tier = 1
            key = (tier, lane.scaled_usage / lane.spec.weight)
            if key < best_key:
                best, best_key = lane, key
        return best

    def shed_offset(self, lane: TenantLane, ledger: TenantLedger) -> int | None:
        service = lane.spec.service
        if service is _BEST_EFFORT:
            return 2
        within = _within(lane, ledger)
        if service is _GUARANTEED:
            return None if within else 0
        return 0 if within else 1


class FifoTenants(TenantPolicy):
    """Tenant-blind: the tenant whose oldest queued request came first."""

    name = "fifo"

    def select(
        self, ready: Sequence[TenantLane], ledger: TenantLedger, max_inflight: int | None
    ) -> TenantLane | None:
        return ready[0] if len(ready) == 1 else _oldest(ready)


class StaticQuota(TenantPolicy):
    """Each tenant at most its weight's share of ``max_inflight`` in flight, never lent."""

    name = "static_quota"

    def __init__(self, cfg: TenantConfig) -> None:
        super().__init__(cfg)
        total = sum(t.weight for t in cfg.tenants)
        self._share = {t.name: t.weight / total for t in cfg.tenants}

    def quota(self, lane: TenantLane, max_inflight: int | None) -> float:
        """``lane``'s fixed cap on requests in flight."""
        if max_inflight is None:
            return math.inf
        return max(1, math.floor(self._share[lane.name] * max_inflight))

    def select(
        self, ready: Sequence[TenantLane], ledger: TenantLedger, max_inflight: int | None
    ) -> TenantLane | None:
        under = [lane for lane in ready if lane.outstanding < self.quota(lane, max_inflight)]
        return _oldest(under)


#: Tenant policies by name (read-only; the names are
#: :data:`semisched.core.tenancy.TENANT_POLICY_NAMES`).
TENANT_POLICIES: Mapping[str, type[TenantPolicy]] = MappingProxyType(
    {cls.name: cls for cls in (FairShare, FifoTenants, StaticQuota)}
)


def make_tenant_policy(cfg: TenantConfig) -> TenantPolicy:
    """Instantiate ``cfg.policy`` (a registered name or a :class:`TenantPolicy` subclass).

    Raises:
        TypeError: A class that is not a :class:`TenantPolicy` subclass.
    """
    policy = cfg.policy
    if isinstance(policy, type):
        if not issubclass(policy, TenantPolicy):
            raise TypeError(f"policy={policy!r} must be a TenantPolicy subclass")
        return policy(cfg)
    return TENANT_POLICIES[policy](cfg)


def entitlements(specs: Sequence[TenantSpec]) -> dict[str, float]:
    """Each tenant's entitled share: its weight over the entitled tenants' weights
    (best-effort tenants: 0)."""
    total = sum(t.weight for t in specs if t.has_entitlement)
    return {t.name: (t.weight / total if t.has_entitlement and total else 0.0) for t in specs}
