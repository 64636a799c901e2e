"""The async runtime's statistics: frozen snapshots with named fields (trio's ``statistics()``).

`semisched.Scheduler.statistics` returns a `SchedulerStats`.
Nothing in it is read by string key: the runtime's outcome counters are the
fields of `RuntimeCounters`, the core's are
[`EngineCounters`][semisched.core.EngineCounters] (``stats.engine.counters``). The two
overlap on purpose where both see an event (retries, 429s): the runtime counts
what callers got, the engine what it decided.

What this module is not: values only; nothing here counts or decides.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields

from semisched.compress.runtime import CompressionStats
from semisched.core.budget import ProviderLimits
from semisched.core.stats import EngineStats
from semisched.priors.calibration import CalibrationStats
from semisched.priors.sources import PriorsChoice
from semisched.runtime.estimate import EstimatorStats
from semisched.runtime.spending import SpendStats
from semisched.state.base import StateStats

__all__ = ["RuntimeCounters", "RuntimeTally", "SchedulerStats"]


@dataclass(frozen=True, slots=True, kw_only=True)
class RuntimeCounters:
    """What callers of `submit` got, and what the runtime did.

    Each outcome counter counts requests; every submitted request ends in
    exactly one of ``succeeded``, ``rejected``, ``deadline_exceeded``,
    ``rate_limited``, ``quota_exceeded``, ``provider_errors``, ``closed``,
    ``cancelled`` or ``internal_errors`` (see `outcomes`).

    Attributes:
        submitted: Calls that passed validation and got a request id
            (``queue_full`` refusals included).
        succeeded: Requests answered by the provider (a stream counts when it
            is handed to the caller).
        rejected: Requests refused by overload control or the rate budget
            ([`RequestRejected`][semisched.errors.RequestRejected]).
        deadline_exceeded: Requests whose deadline passed: queued, in flight
            or before a retry ([`DeadlineExceeded`][semisched.errors.DeadlineExceeded]).
        queue_full: Calls refused because ``max_pending`` requests were pending
            ([`QueueFull`][semisched.errors.QueueFull]).
        rate_limited: Requests that ended with a 429 rate limit and no retry
            left ([`RateLimited`][semisched.errors.RateLimited]).
        quota_exceeded: Requests refused for an exhausted quota
            ([`QuotaExceeded`][semisched.errors.QuotaExceeded]).
        provider_errors: Requests that ended with any other provider failure
            ([`ProviderError`][semisched.errors.ProviderError]).
        closed: Requests still pending when the scheduler closed
            ([`SchedulerClosed`][semisched.errors.SchedulerClosed]).
        cancelled: Requests whose caller stopped waiting (task cancelled).
        retries: Failed attempts the core scheduled again.
        throttled: Attempts answered 429 ``rate_limit_exceeded`` (retried or
            not; an exhausted quota's 429 counts in ``quota_exceeded``).
        resent: Attempts sent once more at once because their connection closed
            before any byte of the answer came (a kept-alive connection the server
            closed idle as the request went out on it): not failures, so neither
            retries nor the endpoint's failures count them.
        prior_fallbacks: Requests whose prior came from the fallback source
            (the configured source was slow or failed).
        internal_errors: Requests ended by an unexpected exception inside
            semisched ([`InternalError`][semisched.errors.InternalError]): logged, counted,
            survived. Anything above 0 is a bug worth reporting.
        task_errors: Unexpected exceptions in the scheduler's own work outside any
            one request (its timer, a background task), logged and survived.
    """

    submitted: int = 0
    succeeded: int = 0
    rejected: int = 0
    deadline_exceeded: int = 0
    queue_full: int = 0
    rate_limited: int = 0
    quota_exceeded: int = 0
    provider_errors: int = 0
    closed: int = 0
    cancelled: int = 0
    retries: int = 0
    throttled: int = 0
    resent: int = 0
    prior_fallbacks: int = 0
    internal_errors: int = 0
    task_errors: int = 0

    @property
    def outcomes(self) -> int:
        """Requests that reached an outcome (a response or an exception)."""
        return (
            self.succeeded
            + self.rejected
            + self.deadline_exceeded
            + self.queue_full
            + self.rate_limited
            + self.quota_exceeded
            + self.provider_errors
            + self.closed
            + self.cancelled
            + self.internal_errors
        )


class RuntimeTally:
    """The runtime's mutable tallies; `freeze` makes a `RuntimeCounters`.

    Its attributes are exactly `RuntimeCounters`'s fields, all starting at 0.
    """

    __slots__ = (
        "cancelled",
        "closed",
        "deadline_exceeded",
        "internal_errors",
        "prior_fallbacks",
        "provider_errors",
        "queue_full",
        "quota_exceeded",
        "rate_limited",
        "rejected",
        "resent",
        "retries",
        "submitted",
        "succeeded",
        "task_errors",
        "throttled",
    )

    def __init__(self) -> None:
        self.submitted = self.succeeded = self.rejected = self.deadline_exceeded = 0
        self.queue_full = self.rate_limited = self.quota_exceeded = self.provider_errors = 0
        self.closed = self.cancelled = self.retries = self.throttled = self.resent = 0
        self.prior_fallbacks = self.internal_errors = self.task_errors = 0

    def freeze(self) -> RuntimeCounters:
        """The current counts, frozen."""
        return RuntimeCounters(**{f.name: getattr(self, f.name) for f in fields(RuntimeCounters)})


@dataclass(frozen=True, slots=True, kw_only=True)
class SchedulerStats:
    """A frozen snapshot of the runtime and its core.

    Attributes:
        pending: Requests submitted and not yet resolved.
        open_streams: Streams handed to callers and not yet finished.
        counters: The runtime's outcome counters.
        engine: The core's snapshot (queues per class, in flight, signals,
            decision counters, failures by kind, rejects/defers per bucket).
        rate_limits: The last ``x-ratelimit-*`` headers seen.
        rate_limits_by_endpoint: The last ones seen from each endpoint.
        state: The shared state's view (``None``: no ``state=``).
        estimator: The prompt-token estimator's calibration per model and kind.
        priors: The prior source in use, and why (``auto`` resolved to ...).
        calibration: What the length calibration learned, per source and model
            (``None``: calibration is off).
        compression: What compress-and-route did (``None``: it is off,
            ``RoutingConfig.compress_band`` 1; `semisched.compress.runtime`).
        spend: What the run spent at its endpoints' prices, and its spend caps
            (``None``: no prices and no caps; `semisched.runtime.spending`).
    """

    pending: int
    open_streams: int
    counters: RuntimeCounters
    engine: EngineStats
    rate_limits: ProviderLimits | None
    estimator: EstimatorStats
    priors: PriorsChoice
    calibration: CalibrationStats | None
    rate_limits_by_endpoint: dict[str, ProviderLimits] = field(default_factory=dict)
    state: StateStats | None = None
    compression: CompressionStats | None = None
    spend: SpendStats | None = None

    @property
    def severity(self) -> float:
        """Current overload severity."""
        return self.engine.signals.severity

    @property
    def queued(self) -> dict[str, int]:
        """Queue depth per class."""
        return self.engine.queued

    @property
    def inflight(self) -> int:
        """Requests in flight."""
        return self.engine.inflight
