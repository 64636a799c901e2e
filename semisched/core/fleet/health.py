"""The fleet's health rules: what a failed attempt or a 429 does to its endpoint.

`Health` carries out `semisched.core.fleet.fleet`'s rules 6-8 for the fleet that owns
it: a failed attempt is counted in its endpoint's signals (and the fleet's), a 5xx, a
timeout or a lost connection in its circuit (endpoint rules 1-3) and its concurrency
limit, a refused key opens its circuit for a long cool-off while another endpoint can
serve (endpoint rule 5), ``insufficient_quota`` takes it out for good; the last
endpoint whose circuit is closed never opens it (fleet rule 6). A 429 keeps its endpoint
off, and pauses the budget that governs it, until its ``retry-after``, at most
``RetryPolicy.max_retry_after_s`` (fleet rule 7). The retry layer
(`semisched.core.retrying`) asks it, then decides the request's retry.

Pure: no clock, no I/O; the caller passes ``now``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from semisched.core.config import SchedulerConfig
from semisched.core.fleet.budgets import Budgets
from semisched.core.fleet.endpoint import AUTH, RATE_LIMITED, Circuit, EndpointState
from semisched.core.fleet.limiting import Limits
from semisched.core.lifecycle import FailureKind
from semisched.core.queue import Entry
from semisched.core.signals import Signals

__all__ = ["Health"]

_CLOSED = Circuit.CLOSED
_HEALTH_KINDS = frozenset({FailureKind.SERVER_ERROR, FailureKind.TIMEOUT, FailureKind.CONNECTION})


class Health:
    """A fleet's failed attempts and 429s (module docstring).

    Args:
        config: The scheduler's config (its routing thresholds and cool-offs, the
            retry policy's cap on a ``retry-after``).
        endpoints: The fleet's endpoints, the fleet's own list (kept by the fleet).
        signals: The fleet's aggregate signals.
        limits: The fleet's concurrency limits.
        budgets: The fleet's rate budgets.
        changed: Called when an endpoint's availability changed (out of quota).
    """

    __slots__ = ("_budgets", "_changed", "_endpoints", "_limits", "_max_retry_after_s",
                 "_routing", "_signals")  # fmt: skip

    def __init__(
        self,
        config: SchedulerConfig,
        endpoints: Sequence[EndpointState],
        signals: Signals,
        limits: Limits,
        budgets: Budgets,
        changed: Callable[[], None],
    ) -> None:
        self._routing = config.routing
        self._max_retry_after_s = config.retry.max_retry_after_s
        self._endpoints = endpoints
        self._signals = signals
        self._limits = limits
        self._budgets = budgets
        self._changed = changed

    def failed(
        self, endpoint: EndpointState, entry: Entry, now: float, kind: FailureKind
    ) -> float | None:
        """``entry``'s failed attempt at ``endpoint``: its signals, circuit or quota, its
        concurrency limit (module docstring).

        Returns:
            The time its circuit stays open until, when this failure opened it; else ``None``.
        """
        endpoint.failed_attempts += 1
        if kind is FailureKind.RATE_LIMITED:
            endpoint.throttled += 1
            endpoint.signals.record_throttle()
            if endpoint.signals is not self._signals:
                self._signals.record_throttle()
            self._limits.throttled(endpoint, entry, now)
            return None
        endpoint.signals.record_failure()
        if endpoint.signals is not self._signals:
            self._signals.record_failure()
        if kind is FailureKind.QUOTA_EXHAUSTED:
            endpoint.out_reason = "insufficient_quota"
            self._changed()
        elif kind is FailureKind.AUTH:  # fleet rules 6 and 8
            if self._elsewhere(endpoint):
                return endpoint.open_circuit(now + self._routing.auth_cooloff_s, AUTH)
            if endpoint.circuit is Circuit.HALF_OPEN:  # a refused probe, nowhere else
                endpoint.on_success()  # closed (rule 6): the refusals reach the callers
        elif kind in _HEALTH_KINDS:
            self._limits.failed(endpoint, entry, now)
            opens = endpoint.circuit_opens
            # Fleet rule 6: the last closed circuit never opens (nowhere else to send).
            threshold = self._routing.failure_threshold if self._elsewhere(endpoint) else None
            endpoint.on_failure(now, threshold, self._routing.cooloff_s)
            if endpoint.circuit_opens != opens:
                return endpoint.open_until
        return None

    def _elsewhere(self, endpoint: EndpointState) -> bool:
        """Whether another endpoint takes work with its circuit closed (fleet rule 6)."""
        return any(
            e is not endpoint and not e.out_reason and e.circuit is Circuit.CLOSED
            for e in self._endpoints
        )

    def throttle(self, endpoint: EndpointState, until: float | None, now: float) -> float | None:
        """A 429 from ``endpoint``: it is avoided until ``until``, at most the cap of fleet
        rule 7 (past it, a probe); the budget that governs it (its own, else the fleet's:
        one key) sends nothing before then.

        Returns:
            The time it is kept off until (``until`` capped), or ``None`` when no time
            was given.
        """
        if until is None:
            endpoint.throttled_until = now
            return None
        cap = now + self._max_retry_after_s
        probing = endpoint.circuit is not _CLOSED and endpoint.circuit_reason == RATE_LIMITED
        if until > cap or probing:  # rule 7: pause for the cap at most, then probe
            until = endpoint.open_circuit(min(until, cap), RATE_LIMITED)
        endpoint.throttled_until = until
        governing = self._budgets.governing(endpoint)
        if governing is not None:
            governing.pause_until(until)
        return until
