"""Every exception semisched raises on its own, in one tree with one root.

Exception tree:

```text
SemischedError             the root (semisched.core.errors): ``except SemischedError``
│                          catches everything below and nothing else
├── RequestError           a request's outcome other than a response; carries the
│   │                      request id, its class and, when the scheduler decided
│   │                      it, the explanation
│   ├── RequestRejected    overload control refused it (reason, bucket, severity, retry_after)
│   ├── QueueFull          the scheduler's own queue limit was reached (retry_after)
│   ├── DeadlineExceeded   the deadline passed: queued, deferred, in flight, before a retry
│   ├── SchedulerClosed    submitted to, or still pending in, a closed scheduler
│   ├── InternalError      a bug in semisched failed this request alone (logged with its
│   │                      traceback and counted); the scheduler goes on serving
│   └── ProviderError      the provider failed: not retryable, or the retries are spent
│       ├── RateLimited    429 rate_limit_exceeded and no retry is left
│       └── QuotaExceeded  429 insufficient_quota: never retried
├── StateUnavailable       the shared state cannot be reached (semisched.state); at
│                          start the scheduler does not start, later it falls back
├── FleetFileError         a fleet file or --endpoint option is not usable
│                          (semisched.fleet.fleetfile); also a ValueError: it is the
│                          caller's input, and argument checks catch it as one
├── GatewayConfigError     the gateway's file or flags are not usable
│                          (semisched.gateway.config); also a ValueError
├── BatchError             a batch job cannot start: unreadable input, unwritable
│   │                      output, no API key (semisched.batch)
│   └── InvalidInput       the input file has invalid lines; nothing was sent
├── Infeasible             no number of units meets an SLO; the message says what
│                          it would take (semisched.plan)
├── MissingDependency      a feature's optional package is not installed; the message
│                          is the pip install line (semisched.extras); also a
│                          ModuleNotFoundError
└── IllegalTransition      a request moved between lifecycle states in a way the
                           table forbids (semisched.core): a bug in semisched
```

A retryable failure whose next retry would not start before the deadline ends
as `DeadlineExceeded` with ``phase="retry"``, not as a provider error.

Misuse (a bad argument) raises ``ValueError`` or ``TypeError`` before anything is
queued; those are not in the tree. Each of these leaves ``async with Scheduler(...)`` as
itself, never inside an ``ExceptionGroup`` (the rule is [`Scheduler`][semisched.Scheduler]'s).
Provider exceptions (``openai.*``) are mapped to it in exactly one place,
`semisched.runtime.failures`, and always chained, so ``err.__cause__`` is the original.

What this module is not: it raises nothing itself and reads no exception. The
classes that belong to one capability live beside it (``StateUnavailable`` in
`semisched.state.base`, ``FleetFileError`` in `semisched.fleet.fleetfile`,
``GatewayConfigError`` in `semisched.gateway.config`,
``BatchError`` in `semisched.batch.input`, ``Infeasible`` in
`semisched.plan.pools`, ``MissingDependency`` in `semisched.extras`); each
derives from `SemischedError`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from semisched.core.errors import SemischedError
from semisched.core.lifecycle import FailureKind

if TYPE_CHECKING:
    from semisched.core.explain import Explanation

__all__ = [
    "DeadlineExceeded",
    "InternalError",
    "ProviderError",
    "QueueFull",
    "QuotaExceeded",
    "RateLimited",
    "RequestError",
    "RequestRejected",
    "SchedulerClosed",
    "SemischedError",
    "SpendCapExceeded",
]


class RequestError(SemischedError):
    """Base of every request outcome that is not a response.

    Attributes:
        request_id: The scheduler's id for the request.
        klass: The request's scheduling class.
        explanation: Why, when the scheduler decided it
            ([`Explanation`][semisched.core.explain.Explanation]: the rule, the
            severity and signals, the retry hint); ``None`` otherwise (a full
            queue, a closed scheduler).
    """

    explanation: Explanation | None = None

    def __init__(self, message: str, *, request_id: str, klass: str) -> None:
        super().__init__(message)
        self.request_id = request_id
        self.klass = klass


class InternalError(RequestError):
    """An unexpected exception inside semisched failed this request, and only this one.

    Every request's work is supervised: such an exception is logged once with its
    traceback (logger ``semisched.runtime``), counted
    (``statistics().counters.internal_errors``, ``semisched_internal_errors_total``)
    and ends that request with this error, chained to it (``__cause__``); the
    scheduler goes on serving the others. It is a bug in semisched: please report it.
    """


class RequestRejected(RequestError):
    """Overload control refused the request (Scheduling the Unschedulable §3.1 cost ladder).

    Attributes:
        reason: Human explanation (severity, threshold, bucket).
        bucket: Routing bucket the decision used.
        severity: Severity at decision time, in [0, 1].
        retry_after: Seconds after which a retry may be admitted (a hint).
    """

    def __init__(
        self,
        message: str,
        *,
        request_id: str,
        klass: str,
        reason: str,
        bucket: str,
        severity: float,
        retry_after: float | None,
    ) -> None:
        super().__init__(message, request_id=request_id, klass=klass)
        self.reason = reason
        self.bucket = bucket
        self.severity = severity
        self.retry_after = retry_after


class SpendCapExceeded(RequestRejected):
    """A spend cap refused the request before it was sent: its cost (prompt plus its
    prior's p90 output, at its endpoint's price) would take the cap's period past it.

    Attributes:
        cap: The cap in a user's words (``"$5.00 per day for tenant acme"``).
        limit_usd: The cap's allowance for its period.
        spent_usd: What the period held when it refused (settled plus reserved).
        reset_at: When the period ends and the cap starts afresh (Unix seconds, UTC).
    """

    def __init__(
        self,
        message: str,
        *,
        cap: str,
        limit_usd: float,
        spent_usd: float,
        reset_at: float,
        **rejected: Any,
    ) -> None:
        super().__init__(message, **rejected)
        self.cap = cap
        self.limit_usd = limit_usd
        self.spent_usd = spent_usd
        self.reset_at = reset_at


class QueueFull(RequestError):
    """The scheduler already holds ``limit`` pending requests."""

    def __init__(self, message: str, *, request_id: str, klass: str, limit: int) -> None:
        super().__init__(message, request_id=request_id, klass=klass)
        self.limit = limit
        self.retry_after: float | None = None


class DeadlineExceeded(RequestError):
    """The request's deadline passed before it could complete.

    Attributes:
        phase: ``"queued"`` (never sent), ``"in_flight"`` (the call was
            aborted), or ``"retry"`` (it had been sent and failed, and no
            retry could be sent before the deadline; ``__cause__`` is the
            last attempt's exception when the expiry followed it directly).
        deadline: The absolute deadline on the scheduler's clock.
    """

    def __init__(
        self, message: str, *, request_id: str, klass: str, phase: str, deadline: float | None
    ) -> None:
        super().__init__(message, request_id=request_id, klass=klass)
        self.phase = phase
        self.deadline = deadline


class SchedulerClosed(RequestError):
    """The scheduler was closed before the request could be served."""


class ProviderError(RequestError):
    """The provider failed and the scheduler's retries are spent (or it is not retryable).

    ``err.__cause__`` is always the last attempt's own exception from the wrapped
    client (``openai.RateLimitError``, ``openai.APIConnectionError``, ...), which
    handlers written for the bare client caught.

    Attributes:
        status_code: HTTP status, ``None`` for connection errors and timeouts.
        attempts: How many times the request was sent.
        retry_after: The provider's last retry hint in the scheduler's clock
            seconds, if it gave one (``None`` for an exhausted quota).
        kind: How the last attempt failed, as the core saw it.
        reason: Why it was not retried (not retryable, attempts spent).
        hint: What to check when the failure points at a setting, also at the
            end of the message: a 404 from a base URL without ``/v1``, the URL a
            connection failed at (``None`` otherwise).
    """

    def __init__(
        self,
        message: str,
        *,
        request_id: str,
        klass: str,
        status_code: int | None,
        attempts: int,
        retry_after: float | None = None,
        kind: FailureKind = FailureKind.UNKNOWN,
        reason: str = "",
        hint: str | None = None,
    ) -> None:
        super().__init__(message, request_id=request_id, klass=klass)
        self.status_code = status_code
        self.attempts = attempts
        self.retry_after = retry_after
        self.kind = kind
        self.reason = reason
        self.hint = hint


class RateLimited(ProviderError):
    """429 ``rate_limit_exceeded`` on the last attempt, and the retry policy allows no more."""


class QuotaExceeded(ProviderError):
    """429 ``insufficient_quota``: the account is out of quota; retrying cannot help."""
