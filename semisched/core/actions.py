"""The actions the engine returns: what a shell must do (send, wait) or report (outcomes).

Each action is a frozen value. A shell executes them in the order given:
`Send` and `Wake` ask for work; `Defer` and
`Retry` say a request is held back until a time (the engine itself
brings it back); `Reject`, `Expire` and `Fail` are
terminal outcomes, each reported once per request; `Pause` says an
endpoint is kept off until a time (for a shell that shares it).

Every action of a decision other than sending (`Reject`, `Defer`,
`Expire`, `Retry`, `Fail`) carries its
[`Explanation`][semisched.core.explain.Explanation]; ``None`` only in an action built
by hand.

Values only: nothing here decides or does I/O.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from semisched.core.explain import Explanation, LazyExplanation, resolve
from semisched.core.lifecycle import FailureKind
from semisched.core.overload import Admission
from semisched.core.request import Request

__all__ = ["Action", "Defer", "Expire", "Fail", "Pause", "Reject", "Retry", "Send", "Wake"]


@dataclass(frozen=True, slots=True)
class Send:
    """Send ``request`` to endpoint ``endpoint`` now (``attempt`` counts from 1)."""

    request: Request
    attempt: int
    cost: float
    endpoint: str


@dataclass(frozen=True, slots=True)
class Reject:
    """Refuse ``request``; terminal. ``retry_after`` is a hint in seconds."""

    request: Request
    reason: str
    severity: float
    retry_after: float | None
    why: Explanation | LazyExplanation | None = field(default=None, compare=False, repr=False)

    @property
    def explanation(self) -> Explanation | None:
        """Why it was rejected (built when first read)."""
        return resolve(self.why)


@dataclass(frozen=True, slots=True)
class Defer:
    """``request`` is held back by overload control until ``until``."""

    request: Request
    until: float
    admission: Admission
    why: Explanation | LazyExplanation | None = field(default=None, compare=False, repr=False)

    @property
    def explanation(self) -> Explanation | None:
        """Why it was deferred (built when first read)."""
        return resolve(self.why)

    @property
    def severity(self) -> float:
        """Severity the deferral was decided at."""
        return self.admission.severity

    @property
    def reason(self) -> str:
        """Why it was deferred."""
        return self.admission.reason


@dataclass(frozen=True, slots=True)
class Expire:
    """``request`` can no longer be served in time; terminal."""

    request: Request
    reason: str
    explanation: Explanation | None = None


@dataclass(frozen=True, slots=True)
class Retry:
    """A failed attempt of ``request`` will be sent again at ``at`` (not terminal).

    Attributes:
        request: The request.
        at: When it rejoins its class queue (engine seconds).
        kind: How the attempt failed.
        attempts: Sends so far, the failed one included.
        endpoint: Where the attempt failed.
        failover: It goes at once to another endpoint (no back-off).
        explanation: Why (``retry.backoff`` or ``retry.failover``).
    """

    request: Request
    at: float
    kind: FailureKind
    attempts: int
    endpoint: str = ""
    failover: bool = False
    explanation: Explanation | None = None


@dataclass(frozen=True, slots=True)
class Fail:
    """``request`` failed for good; terminal.

    Attributes:
        request: The request.
        kind: How its last attempt failed.
        reason: Why it is not retried (not retryable, attempts spent).
        attempts: Sends made, the failed one included.
        retry_after: The provider's last hint in engine seconds, if any
            (useful to a caller who wants to try again later).
        explanation: Why it is not retried.
    """

    request: Request
    kind: FailureKind
    reason: str
    attempts: int
    retry_after: float | None
    explanation: Explanation | None = None


@dataclass(frozen=True, slots=True)
class Wake:
    """Call `Engine.poll` at ``at`` (or earlier)."""

    at: float


@dataclass(frozen=True, slots=True)
class Pause:
    """Nothing should go to endpoint ``endpoint`` before ``until`` (engine seconds).

    The engine already keeps off it; the action is for what the shell shares with
    other processes (`semisched.state`). ``cause`` is ``"rate_limited"`` (a 429
    named its retry time: the key's window is full for everyone) or
    ``"circuit_open"`` (the endpoint failed ``failure_threshold`` times in a row).
    """

    endpoint: str
    until: float
    cause: str


Action = Send | Reject | Defer | Expire | Retry | Fail | Wake | Pause
