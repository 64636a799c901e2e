"""The tenant layer's books: every tenant's lane, which are ready, and whose turn it is.

`Tenancy` owns the lanes of `semisched.core.tenants.lanes` (one per
declared tenant), the ledger of their usage, the tenant policy and the list of
lanes that have something queued. It is the `TenantView` a tenant policy
and overload control read: the ledger, the concurrency in force, the flight.

Pure: no clock, no I/O.
"""

from __future__ import annotations

import math

from semisched.core.allocation import AllocationPolicy, make_allocation
from semisched.core.book import Book
from semisched.core.config import SchedulerConfig
from semisched.core.tenants.lanes import (
    LaneHost,
    SoloLedger,
    TenantLane,
    TenantLedger,
    entitlements,
)
from semisched.core.tenants.policies import TenantPolicy, make_tenant_policy

__all__ = ["Tenancy"]


class Tenancy:
    """The lanes, their ledger and the tenant policy; the `TenantView`.

    Args:
        config: The scheduler's configuration (its tenants, classes, allocation).
        host: What each lane reads of the engine (severity, capacity, ordering).
        book: The flight book (every tenant's requests in flight).
    """

    def __init__(
        self,
        config: SchedulerConfig,
        host: LaneHost,
        book: Book,
    ) -> None:
        self._config = config
        self.policy: TenantPolicy = make_tenant_policy(config.tenants)
        shares = entitlements(config.tenants.tenants)
        class_names = tuple(c.name for c in config.classes)
        lanes = [
            TenantLane(
                spec,
                shares[spec.name],
                make_allocation(config.allocation, config.classes),
                class_names,
                config.ordering.band_ratio,
                host,
            )
            for spec in config.tenants.tenants
        ]
        ledger = SoloLedger if len(lanes) == 1 else TenantLedger  # one tenant: no usage
        self.ledger = ledger(lanes, config.tenants.half_life_s)
        self.lanes = self.ledger.lanes
        #: The lane of each tenant name requests gave so far (memoised by `lane`).
        self.lane_of: dict[str | None, TenantLane] = {}
        #: The first tenant's allocation policy (what ``statistics()`` shows).
        self.alloc: AllocationPolicy = lanes[0].alloc
        #: Lanes with queued requests, in declared order.
        self.ready: list[TenantLane] = []
        #: Whether a tenant has a concurrency cap of its own.
        self.capped = any(t.max_concurrency is not None for t in config.tenants.tenants)
        #: One declared tenant: nothing to choose.
        self.solo = len(lanes) == 1
        self._host = host
        self._book = book

    # -- TenantView ---------------------------------------------------------------------

    @property
    def max_inflight(self) -> int | None:
        """The concurrency in force."""
        return self._host.max_inflight

    @property
    def inflight_total(self) -> int:
        """Requests in flight now, every tenant's."""
        return self._book.inflight

    # -- the lanes ----------------------------------------------------------------------

    def lane(self, tenant: str | None) -> TenantLane:
        """The lane of a request naming ``tenant``.

        Raises:
            ValueError: ``tenant`` is not declared (and there is no default tenant).
        """
        lane = self.lane_of.get(tenant)
        if lane is None:  # first sight of this name (declared ones only: others raise)
            found = self.ledger.by_name.get(self._config.tenants.tenant_for(tenant))
            assert found is not None
            lane = self.lane_of[tenant] = found
        return lane

    def renew(self) -> None:
        """A lane's queue became empty or non-empty: the ready list follows."""
        self.ready = [lane for lane in self.lanes if lane.queued]

    def pick(self, blocked: list[TenantLane]) -> TenantLane | None:
        """The tenant policy's pick among the ready lanes that are inside their caps and
        not ``blocked`` (rule 1 of `semisched.core.tenants.lanes`)."""
        ready = self.ready
        if self.capped or blocked:
            ready = [
                lane
                for lane in ready
                if lane not in blocked
                and (lane.spec.max_concurrency or math.inf) > lane.outstanding
            ]
        if not ready:
            return None
        if self.solo:  # one declared tenant: nothing to choose
            return ready[0]
        return self.policy.select(ready, self)
