"""The dispatcher's one event sink: every telemetry event of a request's life, in one place.

The runtime's dispatcher tells `EventSink` what happened to a request, one
call per event, and never asks whether anyone listens: the sink calls the request
observers (`Observers`: Prometheus,
OpenTelemetry, your own), writes the decision log and the retry log, and skips
what nobody reads (no observer: no [`Finished`][semisched.telemetry.observe.Finished]
built; the decision log at DEBUG only). A new API or a new layer touches no
telemetry code: the events are about requests, not about what they call.

Events: ``submitted``, ``sent``, ``deferred`` (a deferral or a retry, explained),
``decided`` (a terminal outcome, explained), ``first_token``, ``finished``.
"""

from __future__ import annotations

import logging

from semisched.core.actions import Defer, Retry, Send
from semisched.core.explain import Explanation
from semisched.core.request import Request
from semisched.telemetry.observe import (
    DECISION_LOGGER,
    Finished,
    Observers,
    Outcome,
    log_decision,
)
from semisched.telemetry.retries import RetryLog

__all__ = ["EventSink"]


class EventSink:
    """Where the dispatcher reports each request's events (module docstring).

    Args:
        observers: The request observers (none: only the logs are written).
    """

    __slots__ = ("_observed", "observers", "retry_log")

    def __init__(self, observers: Observers | None) -> None:
        self.observers = observers if observers is not None else Observers(())
        self._observed = bool(self.observers)  # read on every event: once, not a call each
        #: Retries, logged at INFO (rate-limited).
        self.retry_log = RetryLog()

    def submitted(self, request: Request) -> None:
        """``request`` was handed to the engine at its arrival."""
        if self._observed:
            self.observers.submitted(request, request.arrival)

    def sent(self, action: Send, now: float) -> None:
        """The engine sent ``action``'s request at ``now``."""
        if self._observed:
            self.observers.sent(action.request, action.attempt, action.endpoint, now)

    def deferred(self, action: Retry | Defer, now: float) -> None:
        """A deferral or a retry at ``now``: the retry log, the decision log, observers."""
        if isinstance(action, Retry):
            self.retry_log.retry(action, now)  # INFO, rate-limited
        # Built only for a reader: observers, or the decision log at DEBUG.
        if self._observed or DECISION_LOGGER.isEnabledFor(logging.DEBUG):
            why = action.explanation
            if why is not None:
                log_decision(action.request, why)
                if self._observed:
                    self.observers.decided(action.request, why, now)

    def decided(self, request: Request, explanation: Explanation | None) -> None:
        """``request``'s terminal outcome was decided by the engine (logged)."""
        if explanation is not None:
            log_decision(request, explanation)

    def first_token(self, request: Request, now: float) -> None:
        """``request``'s stream sent its first content at ``now``."""
        if self._observed:
            self.observers.first_token(request, now)

    def finished(
        self,
        request: Request,
        now: float,
        outcome: Outcome,
        attempts: int,
        endpoint: str,
        *,
        prompt_tokens: int | None = None,
        output_tokens: int | None = None,
        explanation: Explanation | None = None,
        cost_usd: float | None = None,
    ) -> None:
        """``request`` ended at ``now`` (once)."""
        if self._observed:
            done = Finished(outcome, attempts, endpoint, prompt_tokens, output_tokens,
                            explanation, cost_usd)  # fmt: skip
            self.observers.finished(request, done, now)
