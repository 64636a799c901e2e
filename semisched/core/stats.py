"""The engine's statistics: frozen snapshots with named fields (trio's ``statistics()`` style).

`semisched.core.Engine.statistics` returns an `EngineStats`.
Nothing in it is read by string key: counters are fields, documented here.
Per-class maps (``queued``, ``inflight_by_class``, ``allocation_state``) are
keyed by the configured class names, which only the user knows.

Values only: nothing here decides or does I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from semisched.core.buckets import Bucket
from semisched.core.budget import BudgetSnapshot
from semisched.core.explain import DecisionCounts
from semisched.core.fleet.limits import LimitChange
from semisched.core.lifecycle import FailureKind
from semisched.core.signals import SignalSnapshot

__all__ = [
    "BucketCounts",
    "EngineCounters",
    "EngineStats",
    "EngineTally",
    "FailureCounts",
    "TenantStats",
]


@dataclass(frozen=True, slots=True, kw_only=True)
class EngineCounters:
    """What the engine decided so far (each a count of events).

    Attributes:
        submitted: Requests handed to `Engine.submit`.
        admitted: Requests overload control let into a class queue (first time).
        rejected: Requests refused (overload control or a budget that can never pay).
        deferrals: Deferral decisions (one request may be deferred several times).
        expired: Requests whose deadline passed before they could be (re)sent.
        sent: Sends that left, retries included (one a shared budget refused is not).
        completed: Requests answered by the provider.
        failed: Requests that failed for good (not retryable, or attempts spent).
        retries: Failed attempts that were scheduled again.
        cancelled: Requests the caller gave up on.
        throttled: Attempts the provider refused with a 429 rate limit.
        infeasible_sends: Sends of a request predicted to miss its deadline
            (no feasible candidate was left in its class).
        budget_waits: Times a send waited for the rate budget.
        budget_rejects: Requests rejected because the rate budget could never pay.
        failovers: Failed attempts retried at once on another endpoint.
        refused: Sends a shared budget refused before they left
            (`Engine.refused`): back to the queue, not attempts.
    """

    submitted: int = 0
    admitted: int = 0
    rejected: int = 0
    deferrals: int = 0
    expired: int = 0
    sent: int = 0
    completed: int = 0
    failed: int = 0
    retries: int = 0
    cancelled: int = 0
    throttled: int = 0
    infeasible_sends: int = 0
    budget_waits: int = 0
    budget_rejects: int = 0
    failovers: int = 0
    refused: int = 0

    @property
    def terminal(self) -> int:
        """Requests that reached an outcome: completed, rejected, expired, failed or cancelled."""
        return self.completed + self.rejected + self.expired + self.failed + self.cancelled


@dataclass(frozen=True, slots=True, kw_only=True)
class BucketCounts:
    """A count per token bucket (the main paper's short/medium/long/xlong, and unknown)."""

    short: int = 0
    medium: int = 0
    long: int = 0
    xlong: int = 0
    unknown: int = 0

    def of(self, bucket: Bucket) -> int:
        """The count of ``bucket``."""
        value: int = getattr(self, bucket.value)
        return value

    @property
    def total(self) -> int:
        """All buckets together."""
        return self.short + self.medium + self.long + self.xlong + self.unknown


@dataclass(frozen=True, slots=True, kw_only=True)
class FailureCounts:
    """Failed attempts per `FailureKind` (retried or not)."""

    rate_limited: int = 0
    quota_exhausted: int = 0
    server_error: int = 0
    timeout: int = 0
    connection: int = 0
    bad_request: int = 0
    unknown: int = 0
    auth: int = 0

    def of(self, kind: FailureKind) -> int:
        """The count of ``kind``."""
        value: int = getattr(self, kind.value)
        return value

    @property
    def total(self) -> int:
        """All failed attempts."""
        return (
            self.rate_limited
            + self.quota_exhausted
            + self.server_error
            + self.timeout
            + self.connection
            + self.bad_request
            + self.unknown
            + self.auth
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class EndpointStats:
    """One endpoint of the fleet at one instant (`semisched.core.fleet.endpoint`).

    Attributes:
        name: The endpoint's name.
        state: ``active``, ``drained``, ``removed`` or ``insufficient_quota``.
        circuit: ``closed``, ``open`` or ``half_open`` (an open one past its time
            reads ``half_open``: the next request there is its probe).
        circuit_reason: Why it is not closed: ``failures`` (consecutive failed
            attempts), ``auth`` (its key was refused), ``rate_limited`` (a long
            ``retry-after``, capped); ``""`` while closed.
        inflight: Requests in flight there.
        sent: Attempts sent there.
        completed: Answers from it.
        failed_attempts: Attempts that failed there (any kind, 429s included).
        throttled: Of those, 429 rate limits.
        failovers: Failed attempts there retried at once elsewhere.
        consecutive_failures: The circuit breaker's current run.
        circuit_opens: How often its circuit opened.
        s_per_token: EWMA of observed seconds per output token there.
        decode_tokens_per_s: Learned decode speed of one request there.
        intercept_s: Learned fixed latency of an answer (time to first token, network).
        anticipated_tokens: Predicted work left in flight there.
        budget: Its own rate budget's state, if it has one.
        limit: The requests it may hold now (``None``: no limit): its
            ``max_concurrency``, or its learned concurrency limit.
        limit_policy: ``fixed`` or ``learned`` (`semisched.core.fleet.limits`).
        limit_changes: How often its limit changed, by rule (``limit.start``,
            ``limit.probe``, ``limit.queued``, ``limit.overdue``, ``limit.throttled``,
            ``limit.failed``).
        last_limit_change: Its latest change, explained.
    """

    name: str
    state: str
    circuit: str
    inflight: int
    sent: int
    completed: int
    failed_attempts: int
    throttled: int
    failovers: int
    consecutive_failures: int
    circuit_opens: int
    s_per_token: float
    decode_tokens_per_s: float
    intercept_s: float
    anticipated_tokens: float
    budget: BudgetSnapshot | None = None
    circuit_reason: str = ""
    limit: int | None = None
    limit_policy: str = "fixed"
    limit_changes: Mapping[str, int] = field(default_factory=dict)
    last_limit_change: LimitChange | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class TenantStats:
    """One tenant at one instant (`semisched.core.tenants.lanes`).

    Usage, share and debt are in *work tokens* (output tokens plus
    ``input_token_weight`` times prompt tokens) decayed with the tenants'
    ``half_life_s``, and fleet-wide when a shared state adds the other processes'.

    Attributes:
        name: The tenant.
        service: ``guaranteed``, ``elastic`` or ``best_effort``.
        weight: Its configured weight.
        entitlement: Its entitled share (weight over the entitled tenants'; 0
            for best-effort).
        queued: Its requests queued now.
        inflight: Its requests in flight now.
        sent: Attempts sent for it.
        completed: Its answered requests.
        rejected: Its requests rejected (overload, budgets, caps).
        deferrals: Times overload control deferred one of its requests.
        expired: Its requests expired before they could be sent.
        served_tokens: Work tokens of its answered requests (not decayed).
        output_tokens: Output tokens of its answered requests.
        usage: Its decayed usage, in flight estimates included.
        share: ``usage`` over every tenant's (0 before anything is served).
        debt: ``usage - entitlement * total usage``: positive when served
            beyond its entitlement (its priority is lower), negative when owed.
        allocation_state: Its allocation policy's per-class state (DRR deficits).
    """

    name: str
    service: str
    weight: float
    entitlement: float
    queued: int
    inflight: int
    sent: int
    completed: int
    rejected: int
    deferrals: int
    expired: int
    served_tokens: float
    output_tokens: float
    usage: float
    share: float
    debt: float
    allocation_state: dict[str, float]


@dataclass(frozen=True, slots=True, kw_only=True)
class EngineStats:
    """A frozen snapshot of the engine's state and counters.

    Attributes:
        now: The engine's time at its last event.
        queued: Queued requests per class.
        queued_tokens: Estimated cost of everything queued (tokens).
        deferred: Requests held back (overload deferral or retry back-off).
        inflight: Requests sent and not yet answered.
        inflight_by_class: In flight per class.
        inflight_tokens: Reserved p90 tokens of what is in flight.
        signals: The overload signals and severity.
        s_per_token: Observed seconds per output token (EWMA).
        counters: Decision counters.
        failures: Failed attempts by kind.
        rejects_by_bucket: Rejections per routing bucket.
        defers_by_bucket: Deferrals per routing bucket.
        allocation_state: The allocation policy's per-class state (DRR deficits)
            of the first tenant (each tenant's is in ``tenants``).
        request_tokens: What one request costs in allocation besides its tokens
            (``AllocationConfig.request_tokens``, or the value learned from latency).
        budget: The fleet-wide rate budget's state, when one is configured.
        held: Sending is paused (`Engine.hold`).
        endpoints: Per endpoint, in fleet order.
        tenants: Per tenant, in declared order.
        decisions: How often each explained decision's rule fired
            (`semisched.core.explain`).
        limit_changes: The latest changes of the endpoints' concurrency limits, oldest
            first, each explained (at most the last 256; each endpoint's last one and
            its counts by rule are in ``endpoints``).
    """

    now: float
    queued: dict[str, int]
    queued_tokens: float
    deferred: int
    inflight: int
    inflight_by_class: dict[str, int]
    inflight_tokens: float
    signals: SignalSnapshot
    s_per_token: float
    counters: EngineCounters
    failures: FailureCounts
    rejects_by_bucket: BucketCounts
    defers_by_bucket: BucketCounts
    allocation_state: dict[str, float]
    request_tokens: float = 0.0
    budget: BudgetSnapshot | None = None
    held: bool = False
    endpoints: tuple[EndpointStats, ...] = ()
    tenants: tuple[TenantStats, ...] = ()
    decisions: DecisionCounts = field(default_factory=DecisionCounts)
    limit_changes: tuple[LimitChange, ...] = ()

    def tenant(self, name: str) -> TenantStats:
        """The statistics of tenant ``name``.

        Raises:
            KeyError: No tenant has that name.
        """
        for stats in self.tenants:
            if stats.name == name:
                return stats
        raise KeyError(name)


class EngineTally:
    """The engine's mutable tallies (`EngineCounters`' fields); ``freeze`` snapshots them."""

    __slots__ = (
        "admitted",
        "budget_rejects",
        "budget_waits",
        "cancelled",
        "completed",
        "deferrals",
        "expired",
        "failed",
        "failovers",
        "infeasible_sends",
        "refused",
        "rejected",
        "retries",
        "sent",
        "submitted",
        "throttled",
    )

    def __init__(self) -> None:
        self.submitted = 0
        self.admitted = 0
        self.rejected = 0
        self.deferrals = 0
        self.expired = 0
        self.sent = 0
        self.completed = 0
        self.failed = 0
        self.retries = 0
        self.cancelled = 0
        self.throttled = 0
        self.infeasible_sends = 0
        self.budget_waits = 0
        self.budget_rejects = 0
        self.failovers = 0
        self.refused = 0

    def freeze(self) -> EngineCounters:
        """The frozen snapshot."""
        return EngineCounters(**{name: getattr(self, name) for name in self.__slots__})
