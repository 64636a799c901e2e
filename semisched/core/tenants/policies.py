"""Tenant policies: which ready tenant lane sends next (`semisched.core.tenants.lanes`).

Policies (`TENANT_POLICIES`, chosen by ``TenantConfig.policy``):

``fair_share`` (the Token Management paper)
    Tiers first: guaranteed tenants inside their entitlement, then guaranteed
    and elastic tenants, then best-effort ones. Within a tier, the lowest
    usage per unit of weight (the lowest debt per weight): backlogged tenants
    converge to their weights, an idle tenant's share goes to the busy ones
    (work-conserving) and comes back to it when it returns, since its usage
    decayed meanwhile. The last ``TenantConfig.headroom`` of ``max_inflight``
    is kept for tenants inside their entitlement while one of them is around:
    borrowers cannot fill the provider's batch. Overload control judges each
    arrival by its tenant's standing (``r``: share over entitlement): a tenant
    owed its share (``r < 1``) at a steeply lower severity
    (``severity * r**8``), one beyond it (``r > 1.25``) one ladder level
    sooner, a best-effort tenant two levels sooner; a guaranteed tenant inside
    its entitlement is never shed. Short requests stay unshed, as for everyone.
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
from typing import ClassVar

from semisched.core.registry import TENANT, policy_class
from semisched.core.tenants.config import ServiceClass, TenantConfig
from semisched.core.tenants.lanes import TenantLane, TenantLedger, TenantView

__all__ = [
    "BEYOND",
    "OWED",
    "OWED_EXPONENT",
    "TENANT_POLICIES",
    "FairShare",
    "FifoTenants",
    "StaticQuota",
    "TenantPolicy",
    "make_tenant_policy",
]

_GUARANTEED, _BEST_EFFORT = ServiceClass.GUARANTEED, ServiceClass.BEST_EFFORT


class TenantPolicy(ABC):
    """Chooses the tenant whose lane sends next (subclass and set ``name``)."""

    name: ClassVar[str]

    def __init__(self, cfg: TenantConfig) -> None:
        self.cfg = cfg

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name}>"

    @abstractmethod
    def select(self, ready: Sequence[TenantLane], view: TenantView) -> TenantLane | None:
        """One of the ``ready`` lanes (never empty), or ``None`` to send nothing now."""

    def standing(
        self, lane: TenantLane, view: TenantView, severity: float
    ) -> tuple[float, int | None]:
        """How overload control judges an arrival of ``lane``'s tenant: the severity it
        is judged at and the ladder levels added to its bucket's (``None``: never shed)."""
        return severity, 0


def _oldest(lanes: Sequence[TenantLane]) -> TenantLane | None:
    best: TenantLane | None = None
    best_seq = 0
    for lane in lanes:
        seq = lane.first_seq()
        if best is None or seq < best_seq:
            best, best_seq = lane, seq
    return best


#: A tenant counts as beyond its entitlement once its share passes this multiple of
#: it: tenants of equal weight and equal traffic wander around their entitlement
#: and must not take turns being treated as borrowers.
BEYOND = 1.25
#: A tenant whose share is below ``OWED`` of its entitlement (``r`` = share over
#: entitlement) is judged by overload control at ``severity * r**OWED_EXPONENT``:
#: steeply lower, so that a backlogged tenant owed its share is barely shed while
#: its peers beyond theirs are (shed at the plain severity, it would lose its
#: heavy requests and never reach its share). Just under 1, so that one tenant
#: alone (share = entitlement = 1) is judged exactly as without tenants.
OWED = 0.999
OWED_EXPONENT = 8.0


def _within(lane: TenantLane, ledger: TenantLedger) -> bool:
    """Whether ``lane``'s decayed usage is inside its entitlement's part of everyone's."""
    return lane.scaled_usage <= lane.entitlement * ledger.total * BEYOND


def _owners_around(ledger: TenantLedger) -> bool:
    """Whether a tenant inside its entitlement has work or recent usage (>= 1% of all)."""
    floor = 0.01 * ledger.total
    return any(
        lane.entitlement > 0.0
        and _within(lane, ledger)
        and (lane.queued or lane.outstanding or lane.scaled_usage >= floor)
        for lane in ledger.lanes
    )


@TENANT.register
class FairShare(TenantPolicy):
    """Service-class tiers, then the lowest usage per weight (module docstring)."""

    name = "fair_share"

    def select(self, ready: Sequence[TenantLane], view: TenantView) -> TenantLane | None:
        ledger = view.ledger
        cap = view.max_inflight
        headroom = self.cfg.headroom
        # The last slots are kept for tenants inside their entitlement, while one of
        # them is around to use them (the docstring of TenantConfig.headroom). Never
        # all of them: a borrower blocked by the reserve always has a request in
        # flight whose answer dispatches again.
        reserved = (
            cap is not None
            and headroom > 0.0
            and view.inflight_total >= cap - min(max(1, round(headroom * cap)), cap - 1)
            and _owners_around(ledger)
        )
        if len(ready) == 1 and not reserved:
            return ready[0]
        best: TenantLane | None = None
        best_key = (3, 0.0)
        for lane in ready:
            service = lane.spec.service
            within = service is not _BEST_EFFORT and _within(lane, ledger)
            if reserved and not within:
                continue
            if service is _BEST_EFFORT:
                tier = 2
            elif service is _GUARANTEED and within:
                tier = 0
            else:
                tier = 1
            key = (tier, lane.scaled_usage / lane.spec.weight)
            if key < best_key:
                best, best_key = lane, key
        return best

    def standing(
        self, lane: TenantLane, view: TenantView, severity: float
    ) -> tuple[float, int | None]:
        service = lane.spec.service
        if service is _BEST_EFFORT:
            return severity, 2
        if lane.entitlement >= 1.0:  # the only entitled tenant: judged as without tenants
            return severity, None if service is _GUARANTEED else 0
        ledger = view.ledger
        total = ledger.total
        ratio = lane.scaled_usage / (lane.entitlement * total) if total > 0.0 else 1.0
        if ratio < OWED:  # owed: judged at a lower severity, the more it is owed
            return severity * ratio**OWED_EXPONENT, None if service is _GUARANTEED else 0
        if ratio <= BEYOND:
            return severity, None if service is _GUARANTEED else 0
        return severity, 0 if service is _GUARANTEED else 1


@TENANT.register
class FifoTenants(TenantPolicy):
    """Tenant-blind: the tenant whose oldest queued request came first."""

    name = "fifo"

    def select(self, ready: Sequence[TenantLane], view: TenantView) -> TenantLane | None:
        return ready[0] if len(ready) == 1 else _oldest(ready)


@TENANT.register
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

    def select(self, ready: Sequence[TenantLane], view: TenantView) -> TenantLane | None:
        cap = view.max_inflight
        under = [lane for lane in ready if lane.outstanding < self.quota(lane, cap)]
        return _oldest(under)


#: The built-in policies by name (read-only: each registers itself under its ``name``,
#: in the order defined above; a config checks its name here when it is built).
TENANT_POLICIES: Mapping[str, type[TenantPolicy]] = TENANT


def make_tenant_policy(cfg: TenantConfig) -> TenantPolicy:
    """Instantiate ``cfg.policy`` (a registered name or a `TenantPolicy` subclass).

    Raises:
        TypeError: A class that is not a `TenantPolicy` subclass.
    """
    return policy_class(cfg.policy, TenantPolicy, TENANT_POLICIES)(cfg)
