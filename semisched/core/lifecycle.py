"""What happens to a request after a failed attempt: the failure kinds and the retry policy.

A hosted API fails in a handful of ways a client can tell apart, and each asks
for a different answer. The shells (the async runtime, the simulator) only
*classify* a failure into a `FailureKind`; the decision (retry when, or
give up and why) is made here, once, for both. So the benchmark exercises the
same retry code users run.

Rules (enforced by `decide_retry`, called by ``Engine.failed``):

1. Never retried at the same endpoint: `FailureKind.QUOTA_EXHAUSTED`
   (billing: waiting does not help), `FailureKind.AUTH` (the endpoint's
   key is refused: neither), `FailureKind.BAD_REQUEST` (the same request
   fails the same way) and `FailureKind.UNKNOWN`. Which kinds are
   retried is `RetryPolicy.retry_on`.
2. At most `RetryPolicy.max_attempts` sends per request, the first included.
3. The provider's ``retry-after`` is honoured when it is given (and
   `RetryPolicy.honour_retry_after`): the retry waits that long, at most
   `RetryPolicy.max_retry_after_s` (the same cap keeps the endpoint off
   no longer: `semisched.core.fleet.fleet` rule 7).
   Otherwise the wait is exponential back-off, ``base_delay_s * 2**(n-1)``
   after the ``n``-th attempt, capped at ``max_delay_s``, times a jitter
   factor uniform in ``[1 - jitter, 1 + jitter]`` drawn from the source the
   caller passes in (seeded by the shell: the same seed gives the same waits).
4. Never past the deadline: a retry that would start at or after the request's
   deadline is not scheduled; the request expires at once instead.
5. Failover (a fleet of endpoints, ``RoutingConfig.failover``): when another
   endpoint can serve the request, a retried failure goes there at once (no
   back-off, no ``retry-after``: both are about the endpoint that failed), and
   `FailureKind.QUOTA_EXHAUSTED` and `FailureKind.AUTH` are retried
   too (that endpoint's quota is spent, its key refused, not the others').
   Rules 1 (bad requests, unknown failures) and 2 hold.

Pure: no clock, no randomness of its own, no I/O.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass

from semisched.core.checks import check_bool, check_int, check_number

__all__ = [
    "DEFAULT_RETRY_ON",
    "FailureKind",
    "JitterSource",
    "RetryDecision",
    "RetryPolicy",
    "decide_retry",
]


class FailureKind(enum.Enum):
    """How one attempt failed, as far as a client can tell."""

    # Members are singletons: hash by identity, in C (Enum hashes its name in Python,
    # and these key the hot path's tallies).
    __hash__ = object.__hash__

    RATE_LIMITED = "rate_limited"
    """429 ``rate_limit_exceeded``: the provider's RPM/TPM window is full."""
    QUOTA_EXHAUSTED = "quota_exhausted"
    """429 ``insufficient_quota``: the account's billing quota is spent."""
    SERVER_ERROR = "server_error"
    """5xx (and 409 conflict): the provider failed; another attempt may work."""
    TIMEOUT = "timeout"
    """No answer in time: the client's timeout, a 408 or a gateway 504."""
    CONNECTION = "connection"
    """The connection failed or dropped mid-response."""
    AUTH = "auth"
    """401 or 403: the endpoint's key (or its access) is refused, whatever the request."""
    BAD_REQUEST = "bad_request"
    """Any other 4xx: the request itself is wrong."""
    UNKNOWN = "unknown"
    """Anything the shell could not classify."""


#: Kinds retried by default: the transient ones.
DEFAULT_RETRY_ON: frozenset[FailureKind] = frozenset(
    {
        FailureKind.RATE_LIMITED,
        FailureKind.SERVER_ERROR,
        FailureKind.TIMEOUT,
        FailureKind.CONNECTION,
    }
)

#: Kinds never retried at the endpoint that failed them (rule 1; failover may, rule 5).
_NEVER_RETRIED = frozenset({FailureKind.QUOTA_EXHAUSTED, FailureKind.AUTH, FailureKind.BAD_REQUEST})
#: Kinds a failover retries though ``retry_on`` does not name them (rule 5).
_FAILOVER_ONLY = frozenset({FailureKind.QUOTA_EXHAUSTED, FailureKind.AUTH})

#: A uniform draw in ``[0, 1)``, e.g. ``random.Random(seed).random``.
JitterSource = Callable[[], float]


@dataclass(frozen=True, kw_only=True)
class RetryPolicy:
    """Bounded, jittered retries, always inside the request's deadline.

    Defaults follow the OpenAI client's own (2 retries, 0.5 s doubling,
    capped) with one more attempt, since a scheduler that paces its sends
    meets fewer 429s than a client that does not.

    Attributes:
        max_attempts: Total sends per request, the first included (1: never retry).
        base_delay_s: Back-off after the first failed attempt (engine seconds);
            doubles per further attempt.
        max_delay_s: Cap on one back-off (not on a provider's ``retry-after``).
        jitter: Each back-off is multiplied by a factor uniform in
            ``[1 - jitter, 1 + jitter]`` (0: exact waits).
        honour_retry_after: Wait the provider's ``retry-after`` when it gives
            one (at most ``max_retry_after_s``), instead of the back-off.
        retry_on: The failure kinds that are retried at all.
        max_retry_after_s: The longest a provider's ``retry-after`` is honoured
            (rule 3), and the longest a 429 keeps its endpoint off: past it one
            request goes as a probe, and its answer resumes the endpoint or
            pauses it again. 30 s: a rate window (RPM, TPM) refills within a
            minute, and one 429's ``Retry-After: 120`` from an upstream that was
            healthy a second later must not stop every tenant for two minutes.
    """

    max_attempts: int = 4
    base_delay_s: float = 0.5
    max_delay_s: float = 30.0
    jitter: float = 0.5
    honour_retry_after: bool = True
    retry_on: frozenset[FailureKind] = DEFAULT_RETRY_ON
    max_retry_after_s: float = 30.0

    def __post_init__(self) -> None:
        check_int("max_attempts", self.max_attempts, minimum=1)
        check_number("base_delay_s", self.base_delay_s, minimum=0)
        check_number("max_delay_s", self.max_delay_s, minimum=0)
        if self.max_delay_s < self.base_delay_s:
            raise ValueError(
                f"max_delay_s={self.max_delay_s!r} must be >= base_delay_s={self.base_delay_s!r}"
            )
        check_number("jitter", self.jitter, minimum=0, maximum=1, strict_max=True)
        check_bool("honour_retry_after", self.honour_retry_after)
        kinds = self.retry_on
        if not isinstance(kinds, frozenset) or not all(isinstance(k, FailureKind) for k in kinds):
            raise ValueError(f"retry_on={kinds!r} must be a frozenset of FailureKind")
        never = kinds & _NEVER_RETRIED
        if never:
            names = sorted(k.value for k in never)
            raise ValueError(
                f"retry_on={names!r} must not name quota_exhausted, auth or bad_request"
                " (waiting does not help: they are never retried at the same endpoint)"
            )
        check_number("max_retry_after_s", self.max_retry_after_s, minimum=0, strict_min=True)

    def capped(self, retry_after: float) -> float:
        """``retry_after`` (a provider's hint, seconds), at most ``max_retry_after_s``."""
        return min(retry_after, self.max_retry_after_s)

    def backoff(self, attempts: int, draw: JitterSource | None) -> float:
        """Back-off after ``attempts`` sends (rule 3), before the jitter's draw.

        ``draw`` is a uniform source in ``[0, 1)``; ``None`` means no jitter.
        """
        delay = min(self.max_delay_s, self.base_delay_s * 2.0 ** max(0, attempts - 1))
        if draw is None or self.jitter == 0.0:
            return delay
        return delay * (1.0 + self.jitter * (2.0 * draw() - 1.0))


@dataclass(frozen=True, slots=True)
class RetryDecision:
    """The verdict on one failed attempt.

    Attributes:
        retry_at: When to send again, or ``None`` when the request is finished.
        expired: It would have been retried, but no retry fits before its deadline.
        reason: Why it is not retried (empty when it is).
        rule: The rule that decided (`semisched.core.explain.RULES`).
    """

    retry_at: float | None
    expired: bool
    reason: str
    rule: str = ""


def decide_retry(
    policy: RetryPolicy,
    kind: FailureKind,
    *,
    now: float,
    attempts: int,
    deadline: float | None,
    retry_after: float | None,
    draw: JitterSource | None,
    elsewhere: bool = False,
) -> RetryDecision:
    """Apply the module's rules to one failed attempt.

    Args:
        policy: The retry policy.
        kind: How the attempt failed.
        now: Current time (engine seconds).
        attempts: Sends so far, the failed one included.
        deadline: The request's deadline, if any.
        retry_after: The provider's hint in engine seconds, if any.
        draw: Jitter source (``None``: no jitter).
        elsewhere: Another endpoint can serve the request (rule 5).
    """
    failover = elsewhere and kind in _FAILOVER_ONLY
    if kind not in policy.retry_on and not failover:
        return RetryDecision(None, False, f"{kind.value} is not retried", "retry.not_retryable")
    if attempts >= policy.max_attempts:
        reason = f"gave up after {attempts} attempts ({kind.value})"
        return RetryDecision(None, False, reason, "retry.attempts_spent")
    if elsewhere:
        delay = 0.0
    elif retry_after is not None and policy.honour_retry_after:
        delay = policy.capped(max(0.0, retry_after))
    else:
        delay = policy.backoff(attempts, draw)
    retry_at = now + delay
    if deadline is not None and retry_at >= deadline:
        reason = f"{kind.value}: no retry fits before the deadline"
        return RetryDecision(None, True, reason, "retry.past_deadline")
    return RetryDecision(retry_at, False, "", "retry.failover" if elsewhere else "retry.backoff")
