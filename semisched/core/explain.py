"""Explained decisions: why the engine rejected, deferred, expired, retried or failed a request.

Every `Reject`, `Defer`,
`Expire`, `Retry`
(a failover included) and `Fail` the engine
returns carries an `Explanation`: the decision, the rule that fired (a
stable name from `RULES`), the severity and the overload signals it was
decided at, the threshold and ladder level when overload control decided, the
request's bucket and tenant, and the hint of when trying again makes sense.
The shells pass it on unchanged: to the exception a caller catches, the
statistics, the ``logging`` module and the trace of the request.

It never holds request content: no prompt, no parameters, no key. Values
only; nothing here decides or does I/O.

==================================  =========  ===================================================
rule                                decision   fires when
==================================  =========  ===================================================
``overload.reject_long``            reject     severity >= ``reject_long_threshold``, level >= 1
``overload.reject_xlong``           reject     severity >= ``reject_xlong_threshold``, level >= 2
``overload.defer``                  defer      severity >= ``defer_threshold``, level >= 1
``overload.defer_past_deadline``    reject     a deferral would end at or after the deadline
``deadline.at_submit``              expire     the deadline had passed at submission
``deadline.waiting``                expire     the deadline passed while queued or deferred
``retry.past_deadline``             expire     no retry of a failed attempt fits before it
``deadline.in_flight``              expire     the deadline passed in flight and the shell
                                               aborted the call (`Engine.expire`)
``routing.no_endpoint``             reject     no endpoint can ever take it (model, context,
                                               its budget), or none is left
``tenant.tpm_cap``                  reject     its tenant's ``tpm`` cap can never pay for it
``spend.cap``                       reject     a spend cap refused its cost before it was sent
                                               (`Engine.declined`)
``retry.backoff``                   retry      a failed attempt is retried after a back-off
``retry.failover``                  failover   a failed attempt goes at once to another endpoint
``retry.not_retryable``             fail       the failure kind is not retried
``retry.attempts_spent``            fail       its attempts are spent
==================================  =========  ===================================================

The overload rules' levels are the tenant-shifted ones (`semisched.core.tenants.policies`).
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Any

from semisched.core.lifecycle import FailureKind, RetryDecision
from semisched.core.signals import SignalSnapshot

if TYPE_CHECKING:
    from semisched.core.overload import Admission
    from semisched.core.request import Request

__all__ = [
    "RULES",
    "Decision",
    "DecisionCounts",
    "Explainer",
    "Explanation",
    "LazyExplanation",
    "resolve",
]


class Decision(enum.Enum):
    """What the engine decided about a request."""

    # Members are singletons: hash by identity, in C (Enum hashes its name in Python,
    # and these key the hot path's tallies).
    __hash__ = object.__hash__

    REJECT = "reject"
    DEFER = "defer"
    EXPIRE = "expire"
    RETRY = "retry"
    FAILOVER = "failover"
    FAIL = "fail"


#: Every rule's stable name, in the module table's order.
RULES: tuple[str, ...] = (
    "overload.reject_long",
    "overload.reject_xlong",
    "overload.defer",
    "overload.defer_past_deadline",
    "deadline.at_submit",
    "deadline.waiting",
    "retry.past_deadline",
    "deadline.in_flight",
    "routing.no_endpoint",
    "tenant.tpm_cap",
    "spend.cap",
    "retry.backoff",
    "retry.failover",
    "retry.not_retryable",
    "retry.attempts_spent",
)


@dataclass(frozen=True, slots=True, kw_only=True)
class Explanation:
    """Why one decision was made (module docstring).

    Attributes:
        decision: What was decided.
        rule: The rule that fired (`RULES`).
        reason: The same in one human sentence.
        severity: Overload severity when it was decided, in [0, 1].
        signals: The overload signals behind that severity.
        bucket: The request's routing bucket (``short`` .. ``xlong``, ``unknown``).
        tenant: The request's tenant (``""``: the default tenant).
        threshold: The overload threshold that was crossed, when overload control decided.
        level: The request's ladder level then (its tenant's shift included).
        retry_after: Engine seconds after which trying again makes sense: a
            rejection's hint, the length of a deferral or back-off, the
            provider's last hint on a failure (``None``: no hint).
        endpoint: The endpoint a failed attempt failed at (retries, failovers, fails).
    """

    decision: Decision
    rule: str
    reason: str
    severity: float
    signals: SignalSnapshot
    bucket: str
    tenant: str = ""
    threshold: float | None = None
    level: int | None = None
    retry_after: float | None = None
    endpoint: str = ""

    def as_dict(self) -> dict[str, object]:
        """A flat, JSON-ready view (for structured logs and span attributes)."""
        out: dict[str, object] = {
            "decision": self.decision.value,
            "rule": self.rule,
            "reason": self.reason,
            "severity": round(self.severity, 4),
            "provider_load": round(self.signals.provider_load, 4),
            "queue_pressure": round(self.signals.queue_pressure, 4),
            "tail_latency_ratio": round(self.signals.tail_latency_ratio, 4),
            "bucket": self.bucket,
            "tenant": self.tenant,
        }
        for name in ("threshold", "level", "retry_after"):
            value = getattr(self, name)
            if value is not None:
                out[name] = value
        if self.endpoint:
            out["endpoint"] = self.endpoint
        return out


def _field(rule: str) -> str:
    return rule.replace(".", "_")


@dataclass(frozen=True, slots=True, kw_only=True)
class DecisionCounts:
    """How often each rule fired (`RULES`; a field per rule, dots as underscores)."""

    overload_reject_long: int = 0
    overload_reject_xlong: int = 0
    overload_defer: int = 0
    overload_defer_past_deadline: int = 0
    deadline_at_submit: int = 0
    deadline_waiting: int = 0
    retry_past_deadline: int = 0
    deadline_in_flight: int = 0
    routing_no_endpoint: int = 0
    tenant_tpm_cap: int = 0
    spend_cap: int = 0
    retry_backoff: int = 0
    retry_failover: int = 0
    retry_not_retryable: int = 0
    retry_attempts_spent: int = 0

    def of(self, rule: str) -> int:
        """The count of ``rule`` (a name from `RULES`).

        Raises:
            KeyError: Not a rule's name.
        """
        if rule not in RULES:
            raise KeyError(rule)
        return int(getattr(self, _field(rule)))

    @classmethod
    def from_counts(cls, counts: dict[str, int]) -> DecisionCounts:
        """Build from ``{rule: count}``."""
        return cls(**{_field(rule): n for rule, n in counts.items()})


assert [f.name for f in fields(DecisionCounts)] == [_field(r) for r in RULES]


class LazyExplanation:
    """An `Explanation` whose values were taken when its decision was made and
    which is built the first time someone reads it (`get`).

    Overload control defers and rejects on the engine's hot path; a simulation reads
    none of those explanations and a live run logs them only at DEBUG, so building
    each one there would cost every decision for nothing.
    """

    __slots__ = ("_args", "_build", "_done")

    def __init__(self, build: Callable[..., Explanation], *args: Any) -> None:
        self._build = build
        self._args = args
        self._done: Explanation | None = None

    def get(self) -> Explanation:
        """The explanation (built once, then kept)."""
        done = self._done
        if done is None:
            done = self._done = self._build(*self._args)
            self._args = ()
        return done


def resolve(why: Explanation | LazyExplanation | None) -> Explanation | None:
    """``why`` as an `Explanation` (an action's ``explanation``)."""
    return why.get() if isinstance(why, LazyExplanation) else why


def _shed_explanation(
    request: Request, decision: Decision, rule: str, verdict: Admission,
    retry_after: float | None, signals: tuple[float, float, float, float], reason: str | None,
) -> Explanation:  # fmt: skip
    return Explanation(
        decision=decision,
        rule=rule,
        reason=verdict.reason if reason is None else reason,
        severity=verdict.severity,
        signals=SignalSnapshot(*signals),
        bucket=request.bucket._value_,  # .value, without the enum property's call
        tenant=request.tenant,
        threshold=verdict.threshold,
        level=verdict.level,
        retry_after=retry_after,
    )


class Explainer:
    """Builds the engine's explanations with the signals of the moment and counts them
    by rule (what `Engine.statistics` reports as ``decisions``).

    Args:
        signals: The engine's current overload signals (called once per explanation).
    """

    __slots__ = ("_counts", "_signals")

    def __init__(self, signals: Callable[[], SignalSnapshot]) -> None:
        self._signals = signals
        self._counts: dict[str, int] = {}

    def __call__(
        self, request: Request, decision: Decision, rule: str, reason: str, **extra: Any
    ) -> Explanation:
        """Explain a decision on ``request``; ``extra``: severity (default: the signals'),
        threshold, level, retry_after, endpoint."""
        self._counts[rule] = self._counts.get(rule, 0) + 1
        signals = self._signals()
        extra.setdefault("severity", signals.severity)
        return Explanation(
            decision=decision,
            rule=rule,
            reason=reason,
            signals=signals,
            bucket=request.bucket.value,
            tenant=request.tenant,
            **extra,
        )

    def shed(
        self, request: Request, decision: Decision, rule: str, verdict: Admission,
        retry_after: float | None, signals: tuple[float, float, float, float],
        reason: str | None = None,
    ) -> LazyExplanation:  # fmt: skip
        """An overload control decision: its severity, threshold and level, with the
        ``signals`` that severity came from (`Signals.last`; ``reason``:
        ``verdict.reason``, when the caller already has it). Counted now, built when
        read: most deferrals are never read by anyone."""
        counts = self._counts
        counts[rule] = counts.get(rule, 0) + 1
        return LazyExplanation(
            _shed_explanation, request, decision, rule, verdict, retry_after, signals, reason
        )

    def failure(
        self,
        request: Request,
        verdict: RetryDecision,
        kind: FailureKind,
        endpoint: str,
        now: float,
        retry_after: float | None,
    ) -> Explanation:
        """The retry policy's verdict on a failed attempt at ``endpoint``: a retry or a
        failover (with its delay), an expiry, or a failure (with the provider's hint)."""
        at = verdict.retry_at
        if at is None:
            decision = Decision.EXPIRE if verdict.expired else Decision.FAIL
            hint = None if verdict.expired else retry_after
            return self(request, decision, verdict.rule, verdict.reason, retry_after=hint,
                        endpoint=endpoint)  # fmt: skip
        failover = verdict.rule == "retry.failover"
        how = "failed over at once" if failover else f"retried in {at - now:.3g} s"
        return self(request, Decision.FAILOVER if failover else Decision.RETRY, verdict.rule,
                    f"{kind.value} at {endpoint!r}: {how}", retry_after=at - now,
                    endpoint=endpoint)  # fmt: skip

    def counts(self) -> DecisionCounts:
        """How often each rule fired so far."""
        return DecisionCounts.from_counts(self._counts)
