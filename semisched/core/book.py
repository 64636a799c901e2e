"""The engine's books: where every request is, and what the policies may read of it.

:class:`EngineBook` holds the state of a :class:`~semisched.core.engine.Engine`
(the class queues, the entries, the timer heap, flight and its counts, the
fleet, the counters) and the primitives that keep it consistent: enqueue,
dequeue, take out of flight, timers, the wake a shell is told about. It also
answers the read-only views the policies are given
(:class:`~semisched.core.allocation.AllocationView`,
:class:`~semisched.core.ordering.PackingView`) and ``statistics()``.

It decides nothing: every decision (admission, dispatch, routing, retries)
is in :mod:`semisched.core.engine`, whose module rules these books uphold.
Pure: no clock, no I/O.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Sequence
from statistics import NormalDist

from semisched.core.actions import Action, Reject, Wake
from semisched.core.admission import AdmissionLayer
from semisched.core.allocation import AllocationPolicy, make_allocation
from semisched.core.buckets import Bucket
from semisched.core.budget import ProviderLimits
from semisched.core.checks import check_number
from semisched.core.config import SchedulerConfig
from semisched.core.explain import Decision, Explainer
from semisched.core.fleet.endpoint import EndpointSpec
from semisched.core.fleet.fleet import DEFAULT_ENDPOINT, Fleet
from semisched.core.lifecycle import FailureKind, JitterSource
from semisched.core.ordering import LatencyEstimate, OrderingPolicy, make_ordering
from semisched.core.overload import OverloadController
from semisched.core.queue import ClassQueue, Entry, EntryState
from semisched.core.signals import SignalSnapshot
from semisched.core.states import Event, advance
from semisched.core.stats import BucketCounts, EngineStats, EngineTally, FailureCounts
from semisched.core.tenants.lanes import TenantLane, TenantLedger, entitlements
from semisched.core.tenants.policies import TenantPolicy, make_tenant_policy

__all__ = ["DEADLINE", "WAKE", "EngineBook"]

#: Timer kinds: a deferred entry's return, a deadline.
WAKE = 0
DEADLINE = 1
_QUEUED, _DEFERRED = EntryState.QUEUED, EntryState.DEFERRED
_INFLIGHT = EntryState.INFLIGHT
_SEND = Event.SEND


def _bucket_counts(counts: dict[Bucket, int]) -> BucketCounts:
    return BucketCounts(**{bucket.value: n for bucket, n in counts.items()})


class EngineBook:
    """The engine's state and its bookkeeping (module docstring); no decisions."""

    def __init__(
        self,
        config: SchedulerConfig | None,
        jitter: JitterSource | None,
        endpoints: Sequence[EndpointSpec] | None,
    ) -> None:
        cfg = config if config is not None else SchedulerConfig()
        self.config = cfg
        self._jitter = jitter
        self._order: OrderingPolicy = make_ordering(cfg.ordering)
        self._order.attach(self)
        # The standard score of the quantile the ordering tests deadlines with.
        self._feasibility_z = NormalDist().inv_cdf(cfg.ordering.feasibility_quantile)
        self._inflight_cap = math.inf if cfg.max_inflight is None else cfg.max_inflight
        self._max_inflight, self._weights = cfg.max_inflight, cfg.overload  # severity's
        self._class_names = tuple(c.name for c in cfg.classes)
        self._input_weight = cfg.input_token_weight
        self._build_tenant_layer(cfg)
        self._entries: dict[str, Entry] = {}
        self._timers: list[tuple[float, int, int, Entry]] = []
        self._seq = 0
        self._now = float("-inf")
        self._queued = 0
        self._queued_tokens = 0.0
        self._queued_charge = 0.0  # rate charges of queued entries (PackingView.backlog)
        self._deferred = 0
        self._inflight = 0
        self._inflight_tokens = 0.0
        self._severity = 0.0
        self._reported_wake: float | None = None
        self._send_wake: float | None = None  # when the fleet can next send the head
        self._held = False
        self._counters = EngineTally()
        self._fleet = Fleet(
            cfg, endpoints if endpoints is not None else (DEFAULT_ENDPOINT,), self._counters, jitter
        )
        # The fleet's aggregate: latency averages for ordering and queue pressure. The
        # tail signal comes from the endpoints' own Signals (Fleet.pressure).
        self._signals = self._fleet.signals
        # Bound once: the ordering layer calls it for every candidate it scores.
        self._estimate: LatencyEstimate = self._signals.estimate_latency
        self._failures: dict[FailureKind, int] = {}
        # Keyed by Bucket (a cheap hash); statistics() reports the bucket names.
        self._rejects_by_bucket: dict[Bucket, int] = {}
        self._defers_by_bucket: dict[Bucket, int] = {}
        self._explain = Explainer(self._snapshot)  # explained decisions, counted by rule
        self._admission = AdmissionLayer(
            OverloadController(cfg.overload),
            self._tenant_policy,
            self,
            self._current_severity,
            self._signals,
            self._explain,
        )

    def _build_tenant_layer(self, cfg: SchedulerConfig) -> None:
        """The tenant layer: one lane (class queues, allocation policy, usage) per tenant."""
        self._tenant_policy: TenantPolicy = make_tenant_policy(cfg.tenants)
        shares = entitlements(cfg.tenants.tenants)
        lanes = [
            TenantLane(
                spec,
                shares[spec.name],
                make_allocation(cfg.allocation, cfg.classes),
                self._class_names,
                cfg.ordering.band_ratio,
                self,
            )
            for spec in cfg.tenants.tenants
        ]
        self._ledger = TenantLedger(lanes, cfg.tenants.half_life_s)
        self._lanes = self._ledger.lanes
        self._lane_of: dict[str | None, TenantLane] = {}  # request tenant -> lane, memoised
        self._alloc: AllocationPolicy = lanes[0].alloc  # the first tenant's (statistics)
        self._ready: list[TenantLane] = []  # lanes with queued requests, in declared order
        self._capped = any(t.max_concurrency is not None for t in cfg.tenants.tenants)
        self._solo = len(lanes) == 1

    def __repr__(self) -> str:
        return (
            f"<Engine alloc={self._alloc.name} order={self._order.name} "
            f"overload={self.config.overload.policy} queued={self._queued} "
            f"deferred={self._deferred} inflight={self._inflight} now={self._now:.3f}>"
        )

    # -- LaneHost (what a tenant's lane reads of the engine) ----------------------------

    @property
    def severity(self) -> float:
        """Overload severity computed at the start of the current decision."""
        return self._severity

    @property
    def max_inflight(self) -> int | None:
        """The concurrency in force: the sum of the endpoints' caps when each has one
        (learned or set), at most ``config.max_inflight``; ``None``: no limit."""
        ceiling, total = self._max_inflight, self._fleet.capacity
        if total is None:
            return ceiling
        return total if ceiling is None or total < ceiling else ceiling

    @property
    def request_tokens(self) -> float:
        """What one request costs in allocation besides its tokens: the configured
        ``AllocationConfig.request_tokens``, or the fleet's learned one."""
        fixed = self.config.allocation.request_tokens
        return self._fleet.request_tokens if fixed is None else fixed

    @property
    def ledger(self) -> TenantLedger:
        """Every tenant's lane and usage (what a tenant policy reads)."""
        return self._ledger

    @property
    def inflight_total(self) -> int:
        """Requests in flight now, every tenant's."""
        return self._inflight

    def choose(self, queue: ClassQueue) -> Entry:
        """The ordering policy's pick in ``queue`` now."""
        return self._order.choose(queue, self._now, self._estimate)

    # -- PackingView (what an ordering policy may see of the budget) ----------------

    def budget_limits(self) -> tuple[int | None, int | None]:
        """The rate budget's effective (requests, tokens) per window, if any."""
        return self._fleet.budget_limits()

    def shared_limits(
        self, endpoint: str | None
    ) -> tuple[int | None, int | None, int | None, float]:
        """What a shared state must hold across processes for ``endpoint`` (``None``: the
        fleet; :meth:`~semisched.core.fleet.fleet.Fleet.shared_limits`)."""
        return self._fleet.shared_limits(endpoint, self.config.max_inflight)

    def fits_now(self, tokens: float) -> bool:
        """Whether one request charging ``tokens`` fits the rate budget now."""
        return self._fleet.fits_now(tokens, self._now)

    def backlog(self) -> tuple[float, float]:
        """Queued requests (all classes) and the sum of their rate charges."""
        return float(self._queued), self._queued_charge

    # -- observations (no decision follows) ------------------------------------

    def observe_headroom(self, fraction: float, now: float, request_id: str | None = None) -> None:
        """The provider reported rate-limit headroom (smallest remaining/limit) on the
        answer to ``request_id`` (its endpoint's signal; ``None``: every endpoint's)."""
        self._advance(now)
        entry = None if request_id is None else self._entries.get(request_id)
        self._fleet.observe_headroom(fraction, None if entry is None else entry.endpoint)

    def first_token(self, request_id: str, now: float) -> None:
        """The first token of ``request_id``'s answer arrived (a learned limit reads it)."""
        self._advance(now)
        entry = self._entries.get(request_id)
        if entry is not None and entry.state == _INFLIGHT and entry.first_token_s is None:
            entry.first_token_s = now - entry.sent_at  # type: ignore[operator]
            if entry.endpoint is not None:
                self._fleet.limits.first_token(entry.endpoint, entry, now)

    def observe_limits(self, request_id: str, now: float, limits: ProviderLimits) -> None:
        """The provider's rate-limit headers on the response to ``request_id``.

        With a rate budget (the fleet's, or the endpoint's own), tighter
        advertised limits are adopted and traffic the provider counts beyond
        this client's own is reserved until its reset
        (:meth:`RateBudget.observe`); without one this is a no-op.
        """
        self._advance(now)
        entry = self._entries.get(request_id)
        endpoint = None if entry is None else entry.endpoint
        self._fleet.observe_limits(endpoint, request_id, now, limits)

    # -- queries ------------------------------------------------------------------

    def next_wakeup(self) -> float | None:
        """Earliest pending timer, if any (may be stale; polling then is harmless)."""
        timers = self._timers
        while timers and not self._timer_live(timers[0]):
            heapq.heappop(timers)
        first = timers[0][0] if timers else None
        send = self._send_wake
        if send is not None and (first is None or send < first):
            return send
        return first

    def estimate_latency(self, output_tokens: float) -> float:
        """Expected send-to-completion seconds for ``output_tokens`` (observed)."""
        return self._signals.estimate_latency(output_tokens)

    def signals(self) -> SignalSnapshot:
        """The current overload signals."""
        return self._snapshot()

    def statistics(self) -> EngineStats:
        """A frozen snapshot of queues, flight, signals and counters."""
        return EngineStats(
            now=self._now,
            queued={n: sum(len(lane.queues[n]) for lane in self._lanes) for n in self._class_names},
            queued_tokens=self._queued_tokens,
            deferred=self._deferred,
            inflight=self._inflight,
            inflight_by_class={
                n: sum(lane.inflight_by_class[n] for lane in self._lanes) for n in self._class_names
            },
            inflight_tokens=self._inflight_tokens,
            signals=self._snapshot(),
            s_per_token=self._signals.s_per_token,
            counters=self._counters.freeze(),
            failures=FailureCounts(**{k.value: n for k, n in self._failures.items()}),
            rejects_by_bucket=_bucket_counts(self._rejects_by_bucket),
            defers_by_bucket=_bucket_counts(self._defers_by_bucket),
            allocation_state=self._alloc.state(),
            request_tokens=self.request_tokens,
            budget=self._fleet.budget_snapshot(self._now),
            held=self._held,
            endpoints=self._fleet.statistics(self._now),
            tenants=tuple(self._ledger.stats(lane, self._now) for lane in self._lanes),
            decisions=self._explain.counts(),
        )

    def tenant_usage(self, tenant: str, now: float | None = None) -> float:
        """This process's own decayed usage of ``tenant`` at ``now`` (default: the last
        event's time), in work tokens: what a shared state adds up across processes.

        Raises:
            ValueError: ``tenant`` is not declared, or ``now`` goes backwards.
        """
        if now is not None:
            self._advance(now)
        return self._ledger.own(self._lane(tenant), self._now)

    def _observe_usage(self, tenant: str, fleet_usage: float, now: float) -> None:
        check_number("fleet_usage", fleet_usage, minimum=0)
        self._advance(now)
        self._ledger.observe_shared(self._lane(tenant), fleet_usage, now)

    def _lane(self, tenant: str | None) -> TenantLane:
        lane = self._lane_of.get(tenant)
        if lane is None:  # first sight of this name (declared ones only: others raise)
            found = self._ledger.by_name.get(self.config.tenants.tenant_for(tenant))
            assert found is not None
            lane = self._lane_of[tenant] = found
        return lane

    def __len__(self) -> int:
        """Requests not yet terminal (deferred, queued or in flight)."""
        return len(self._entries)

    def __contains__(self, request_id: object) -> bool:
        """Whether ``request_id`` is not yet terminal: the engine still awaits news of it."""
        return request_id in self._entries

    # -- internals ----------------------------------------------------------------

    def _advance(self, now: float) -> None:
        if not now >= self._now:
            raise ValueError(f"now={now!r} must not be earlier than the last now={self._now!r}")
        self._now = now

    def _next_seq(self) -> int:
        self._seq += 1
        return self._seq

    def _snapshot(self) -> SignalSnapshot:
        tail, load = self._fleet.pressure(self._now)
        return self._signals.snapshot(
            inflight=self._inflight,
            max_inflight=self.max_inflight,
            queued_tokens=self._queued_tokens,
            weights=self.config.overload,
            tail=tail,
            load_floor=load,
        )

    def _current_severity(self) -> float:
        tail, load = self._fleet.pressure(self._now)
        # positional: the hot path of admission and dispatch
        return self._signals.severity(
            self._inflight, self.max_inflight, self._queued_tokens, self._weights, tail, load
        )

    def _push_timer(self, at: float, kind: int, entry: Entry) -> None:
        self._seq += 1  # _next_seq(), inlined: one timer per arrival and per deferral
        heapq.heappush(self._timers, (at, self._seq, kind, entry))

    def _timer_live(self, timer: tuple[float, int, int, Entry]) -> bool:
        at, _, kind, entry = timer
        if kind == WAKE:
            return entry.state == _DEFERRED and entry.wake_at == at
        return entry.state == _QUEUED or entry.state == _DEFERRED

    def _enqueue(self, entry: Entry, event: int) -> None:
        """``entry`` joins its class queue by ``event`` (ENQUEUE, WAKE or REFUSED)."""
        lane = entry.lane
        assert lane is not None
        advance(entry, event)
        entry.seq = self._next_seq()
        lane.add(entry)
        self._queued += 1
        self._queued_tokens += entry.cost
        self._queued_charge += entry.charge
        if lane.queued == 1:
            self._renew_ready()

    def _dequeue(self, entry: Entry) -> None:
        lane = entry.lane
        assert lane is not None
        lane.remove(entry)
        self._queued -= 1
        tokens = self._queued_tokens - entry.cost
        self._queued_tokens = tokens if tokens > 0.0 else 0.0  # max(0.0, ...), clamping drift
        charge = self._queued_charge - entry.charge
        self._queued_charge = charge if charge > 0.0 else 0.0
        if not lane.queued:
            self._renew_ready()

    def _reject(self, entry: Entry, bucket: Bucket) -> None:
        self._terminal(entry, Event.REJECT)
        assert entry.lane is not None
        entry.lane.rejected += 1
        self._counters.rejected += 1
        self._rejects_by_bucket[bucket] = self._rejects_by_bucket.get(bucket, 0) + 1

    def _expired(self, entry: Entry) -> None:
        self._counters.expired += 1
        assert entry.lane is not None
        entry.lane.expired += 1

    def _defer(self, entry: Entry, until: float, event: int = Event.DEFER) -> None:
        """``entry`` waits until ``until`` by ``event`` (DEFER or RETRY)."""
        advance(entry, event)
        entry.wake_at = until
        self._deferred += 1
        self._push_timer(until, WAKE, entry)

    def _pick_lane(self, blocked: list[TenantLane]) -> TenantLane | None:
        """The tenant policy's pick among the ready lanes (rule 1 of core.tenants)."""
        ready = self._ready
        if self._capped or blocked:
            ready = [
                lane
                for lane in ready
                if lane not in blocked
                and (lane.spec.max_concurrency or math.inf) > lane.outstanding
            ]
        if not ready:
            return None
        if self._solo:  # one declared tenant: nothing to choose
            return ready[0]
        return self._tenant_policy.select(ready, self)

    def _mark_sent(self, entry: Entry, klass: str, now: float) -> None:
        """``entry``, the head of its lane's ``klass``, goes in flight at ``now``."""
        lane = entry.lane
        assert lane is not None
        # Charge before dequeuing: a class emptied by this send then forfeits
        # its remaining deficit (on_idle) instead of carrying the charge.
        lane.alloc.on_send(klass, entry.cost)
        self._dequeue(entry)
        advance(entry, _SEND)
        entry.attempts += 1
        entry.sent_at = now
        self._entries[entry.request.id] = entry
        self._inflight += 1
        self._ledger.sent(entry, klass, now)
        self._inflight_tokens += entry.reserve
        self._counters.sent += 1

    def _lane_pays(
        self,
        lane: TenantLane,
        entry: Entry,
        now: float,
        blocked: list[TenantLane],
        actions: list[Action],
    ) -> bool:
        """Whether ``lane``'s own rate cap pays for ``entry`` now; if not, the lane sits
        out this dispatch (a wake at the time it can), or the entry is rejected when
        the cap never can (rule 1 of core.tenants)."""
        assert lane.budget is not None
        wait = lane.budget.wait(now, entry.charge)
        if wait is None:
            self._dequeue(entry)
            tpm = lane.spec.tpm
            reason = f"tenant {lane.name!r}: {entry.charge:.0f} tokens exceed its tpm={tpm} cap"
            why = self._explain(entry.request, Decision.REJECT, "tenant.tpm_cap", reason)
            actions.append(Reject(entry.request, reason, self._severity, None, why))
            self._reject(entry, entry.request.bucket)
            return False
        if wait > 0.0:
            blocked.append(lane)
            wake = now + wait
            if self._send_wake is None or wake < self._send_wake:
                self._send_wake = wake
            return False
        return True

    def _renew_ready(self) -> None:
        self._ready = [lane for lane in self._lanes if lane.queued]

    def _terminal(self, entry: Entry, event: int) -> None:
        """``entry`` ends by ``event`` (its outcome) and leaves the books."""
        advance(entry, event)
        self._entries.pop(entry.request.id, None)

    def _take_inflight(self, request_id: str) -> Entry:
        """Take the in-flight ``request_id`` out of flight's counts; its state is left to
        the caller's move (its outcome, a retry, a refusal)."""
        entry = self._entries.get(request_id)
        if entry is None or entry.state != _INFLIGHT:
            raise ValueError(f"request_id={request_id!r} is not in flight")
        self._fleet.release(entry, self._now)
        self._inflight -= 1
        lane = entry.lane
        assert lane is not None
        lane.outstanding -= 1
        lane.inflight_by_class[entry.request.klass] -= 1
        tokens = self._inflight_tokens - entry.reserve
        self._inflight_tokens = tokens if tokens > 0.0 else 0.0  # max(0.0, ...), clamping drift
        return entry

    def _has_capacity(self, entry_reserve: float) -> bool:
        if self._inflight >= self._inflight_cap:
            return False
        limit = self.config.max_inflight_tokens
        return (
            limit is None or self._inflight == 0 or self._inflight_tokens + entry_reserve <= limit
        )

    def _finish(self, now: float, actions: list[Action]) -> list[Action]:
        wake = self.next_wakeup()
        last = self._reported_wake
        if wake is not None and (last is None or wake < last or last <= now):
            self._reported_wake = wake
            actions.append(Wake(wake))
        return actions
