"""OpenTelemetry spans: one span per request, its attempts as events, HTTP spans under it.

:class:`RequestTracing` is a :class:`~semisched.telemetry.observe.RequestObserver` that
depends on ``opentelemetry-api`` only: without an SDK configured by the
application the tracer is a no-op and costs a few microseconds a request.

One span, ``semisched.request`` (kind ``CLIENT``), per submitted request, from
submission to its outcome, a child of whatever span was current where
``submit`` was called. Its attributes:

=================================  ===================================================
attribute                           value
=================================  ===================================================
``semisched.request_id``            the scheduler's id
``semisched.class``                 the scheduling class
``semisched.tenant``                the tenant (``""``: the default one)
``semisched.bucket``                the routing bucket of its prior
``gen_ai.request.model``            the logical model asked for
``semisched.queue_wait_s``          submission to first send (the scheduler's clock)
``semisched.time_to_first_token_s`` submission to a stream's first content
``semisched.attempts``              attempts sent
``semisched.endpoint``              where the last attempt went
``semisched.outcome``               completed, rejected, expired, failed, cancelled
``semisched.decision``,             for a decided outcome: what, by which rule, why,
``semisched.rule``,                 at what severity (:mod:`semisched.core.explain`)
``semisched.reason``,
``semisched.severity``
``gen_ai.usage.input_tokens``,      a completed call's token counts, when known
``gen_ai.usage.output_tokens``
=================================  ===================================================

Each attempt is an event ``semisched.attempt`` (attempt, endpoint); each
deferral, retry or failover an event ``semisched.decision`` with the
explanation's fields. The provider call of each attempt runs with the request's
span current, so the HTTP client's own spans (an instrumented httpx) nest under
it. A rejected, expired or failed request ends with status ``ERROR`` and the
reason. Span times are the SDK's (wall clock); the ``_s`` attributes are the
scheduler's clock, which differs only under a scaled or virtual clock.

No prompt, parameter or key is ever recorded. While no SDK is configured (the
API's proxy provider) a request costs one check; with a provider that records
nothing, one ``start_span``.
"""

from __future__ import annotations

import contextlib
import time
from contextlib import AbstractContextManager
from typing import Any

from opentelemetry import trace

from semisched.core.explain import Explanation
from semisched.core.request import Request
from semisched.telemetry.observe import Finished, Outcome, RequestObserver

__all__ = ["SPAN_NAME", "RequestTracing"]

#: The name of each request's span.
SPAN_NAME = "semisched.request"
_OK = {Outcome.COMPLETED, Outcome.CANCELLED}


class _Open:
    """One request's span and its times."""

    __slots__ = ("attempts", "first_send", "first_token", "span", "submitted")

    def __init__(self, span: trace.Span, submitted: float) -> None:
        self.span = span
        self.submitted = submitted
        self.first_send: float | None = None
        self.first_token: float | None = None
        self.attempts: list[tuple[int, str, int]] = []  # attempt, endpoint, wall ns


class RequestTracing(RequestObserver):
    """One span per request (module docstring).

    Args:
        provider: The tracer provider (``None``: the global one; its proxy tracer
            follows an SDK configured after the scheduler was built).
    """

    def __init__(self, provider: trace.TracerProvider | None = None) -> None:
        self._tracer = trace.get_tracer("semisched", tracer_provider=provider)
        self._global = provider is None
        self._open: dict[str, _Open] = {}

    def __repr__(self) -> str:
        return f"<RequestTracing open={len(self._open)}>"

    def submitted(self, request: Request, now: float) -> None:
        if self._global and isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider):
            return  # no SDK configured (yet): a span would record nothing
        attributes: dict[str, Any] = {
            "semisched.request_id": request.id,
            "semisched.class": request.klass,
            "semisched.tenant": request.tenant,
            "semisched.bucket": request.bucket.value,
            "gen_ai.request.model": request.model,
        }
        span = self._tracer.start_span(SPAN_NAME, kind=trace.SpanKind.CLIENT,
                                         attributes=attributes)  # fmt: skip
        if span.is_recording():  # no SDK configured: nothing more to do for this request
            self._open[request.id] = _Open(span, now)

    def sent(self, request: Request, attempt: int, endpoint: str, now: float) -> None:
        # Only noted here: the events and attributes are written at the end, off the
        # request's way to the provider (each event keeps its own time).
        state = self._open.get(request.id)
        if state is None:
            return
        if state.first_send is None:
            state.first_send = now
        state.attempts.append((attempt, endpoint, time.time_ns()))

    def attempt(
        self, request: Request, attempt: int, endpoint: str
    ) -> AbstractContextManager[object]:
        state = self._open.get(request.id)
        if state is None:
            return contextlib.nullcontext()
        return trace.use_span(state.span, end_on_exit=False)

    def decided(self, request: Request, explanation: Explanation, now: float) -> None:
        state = self._open.get(request.id)
        if state is not None:
            state.span.add_event("semisched.decision", _attributes(explanation))

    def first_token(self, request: Request, now: float) -> None:
        state = self._open.get(request.id)
        if state is not None:
            state.first_token = now

    def finished(self, request: Request, finished: Finished, now: float) -> None:
        state = self._open.pop(request.id, None)
        if state is None:
            return
        span = state.span
        for attempt, endpoint, at in state.attempts:
            span.add_event("semisched.attempt", {"attempt": attempt, "endpoint": endpoint},
                           timestamp=at)  # fmt: skip
        # One call: the SDK takes its span lock once per call, not once per attribute.
        attributes: dict[str, Any] = {
            "semisched.outcome": finished.outcome.value,
            "semisched.attempts": finished.attempts,
        }
        if state.first_send is not None:
            attributes["semisched.queue_wait_s"] = state.first_send - state.submitted
        if state.first_token is not None:
            attributes["semisched.time_to_first_token_s"] = state.first_token - state.submitted
        if finished.endpoint:
            attributes["semisched.endpoint"] = finished.endpoint
        if finished.prompt_tokens is not None:
            attributes["gen_ai.usage.input_tokens"] = finished.prompt_tokens
        if finished.output_tokens is not None:
            attributes["gen_ai.usage.output_tokens"] = finished.output_tokens
        why = finished.explanation
        if why is not None:
            attributes["semisched.decision"] = why.decision.value
            attributes["semisched.rule"] = why.rule
            attributes["semisched.reason"] = why.reason
            attributes["semisched.severity"] = why.severity
        span.set_attributes(attributes)
        if finished.outcome not in _OK:
            reason = why.reason if why is not None else finished.outcome.value
            span.set_status(trace.Status(trace.StatusCode.ERROR, reason))
        span.end()


def _attributes(explanation: Explanation) -> dict[str, Any]:
    """The explanation as span attributes (OpenTelemetry takes str, bool, int, float)."""
    return {key: value for key, value in explanation.as_dict().items() if value is not None}
