"""OpenTelemetry spans: one span per request, its attempts and decisions as events.

`RequestTracing` is a [`RequestObserver`][semisched.telemetry.observe.RequestObserver] that
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
``semisched.rule``,                 at what severity (`semisched.core.explain`)
``semisched.reason``,
``semisched.severity``
``gen_ai.usage.input_tokens``,      a completed call's token counts, when known
``gen_ai.usage.output_tokens``
=================================  ===================================================

Each attempt is an event ``semisched.attempt`` (attempt, endpoint); each
deferral, retry or failover an event ``semisched.decision`` with the
explanation's fields. A rejected, expired or failed request ends with status
``ERROR`` and the reason. Span and event times are wall clock (the SDK's); the
``_s`` attributes are the scheduler's clock, which differs only under a scaled
or virtual clock.

**Built when the request ends** (the default). On the request's way to the
provider only its times and the caller's context are noted (a few
microseconds); the span is started, filled and ended in one go once the
request's outcome is known, with the recorded start time, each event's own
time, and the span current at ``submit`` as its parent. The sampler therefore
sees every attribute. Each provider call runs in the caller's context, so the
spans of an instrumented HTTP client sit beside the request's span, under the
caller's.

**Live** (``RequestTracing(provider, nest_http=True)``). The span is started at
submission and is the current span during each provider call, so an
instrumented HTTP client's spans nest *under* it. Starting an SDK span on the
request's way costs tens of microseconds of CPU per request (measured by
``python -m bench sdk-overhead``); pass it through
``Scheduler(tracing=False, observers=[RequestTracing(provider, nest_http=True)])``.

No prompt, parameter or key is ever recorded. While no SDK is configured (the
API's proxy provider) a request's times are noted as always, and one check when it
ends finds nothing to build the span for (a request that ends after an SDK is
configured gets its span). In live mode the check comes at submission, and a request
submitted before the SDK has no span.
"""

from __future__ import annotations

import contextlib
import time
from contextlib import AbstractContextManager
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import trace

from semisched.core.explain import Explanation
from semisched.core.request import Request
from semisched.telemetry.observe import Finished, Outcome, RequestObserver

__all__ = ["SPAN_NAME", "RequestTracing"]

#: The name of each request's span.
SPAN_NAME = "semisched.request"
_OK = {Outcome.COMPLETED, Outcome.CANCELLED}
_Event = tuple[int, str, dict[str, Any]]  # wall ns, name, attributes
_NOTHING = contextlib.nullcontext()  # reusable: it holds no state


class _Open:
    """One request's recorded times while it runs (and its span, when live)."""

    __slots__ = ("events", "first_send", "first_token", "parent", "span", "start_ns",
                 "submitted")  # fmt: skip

    def __init__(self, submitted: float, parent: otel_context.Context,
                 span: trace.Span | None) -> None:  # fmt: skip
        self.submitted = submitted
        self.start_ns = time.time_ns()
        self.parent = parent  # the caller's context at submit
        self.span = span  # live mode: started at submission; else built at the end
        self.first_send: float | None = None
        self.first_token: float | None = None
        self.events: list[_Event] = []


class _InContext:
    """Runs a provider call in the caller's context (what was current at ``submit``)."""

    __slots__ = ("_context", "_token")

    def __init__(self, context: otel_context.Context) -> None:
        self._context = context

    def __enter__(self) -> None:
        self._token = otel_context.attach(self._context)

    def __exit__(self, *exc: object) -> None:
        otel_context.detach(self._token)


class RequestTracing(RequestObserver):
    """One span per request (module docstring).

    Args:
        provider: The tracer provider (``None``: the global one; its proxy tracer
            follows an SDK configured after the scheduler was built).
        nest_http: Start each span at submission and make it current during each
            provider call, so an instrumented HTTP client's spans nest under it
            (costs a span start on the request's way). ``False``: build the span
            when the request ends, from its recorded times.
    """

    def __init__(self, provider: trace.TracerProvider | None = None, *,
                 nest_http: bool = False) -> None:  # fmt: skip
        self._tracer = trace.get_tracer("semisched", tracer_provider=provider)
        self._global = provider is None
        self.nest_http = nest_http
        self._open: dict[str, _Open] = {}

    def __repr__(self) -> str:
        mode = "live" if self.nest_http else "at end"
        return f"<RequestTracing {mode} open={len(self._open)}>"

    def submitted(self, request: Request, now: float) -> None:
        span = None
        if self.nest_http:
            if self._no_sdk():
                return  # no SDK configured (yet): a span would record nothing
            span = self._tracer.start_span(SPAN_NAME, kind=trace.SpanKind.CLIENT,
                                           attributes=_identity(request))  # fmt: skip
            if not span.is_recording():  # a provider that records nothing
                return
        # Built at the end: whether an SDK records it is asked then, off the request's way
        # (the global provider check reads the environment: microseconds).
        self._open[request.id] = _Open(now, otel_context.get_current(), span)

    def _no_sdk(self) -> bool:
        """The global provider is still the API's proxy: no SDK is configured (yet)."""
        return self._global and isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider)

    def sent(self, request: Request, attempt: int, endpoint: str, now: float) -> None:
        state = self._open.get(request.id)
        if state is None:
            return
        if state.first_send is None:
            state.first_send = now
        event = {"attempt": attempt, "endpoint": endpoint}
        state.events.append((time.time_ns(), "semisched.attempt", event))

    def attempt(
        self, request: Request, attempt: int, endpoint: str
    ) -> AbstractContextManager[object]:
        state = self._open.get(request.id)
        if state is None:
            return _NOTHING
        if state.span is not None:
            return trace.use_span(state.span, end_on_exit=False)
        if otel_context.get_current() is state.parent:  # the call's task inherited it
            return _NOTHING
        return _InContext(state.parent)

    def decided(self, request: Request, explanation: Explanation, now: float) -> None:
        state = self._open.get(request.id)
        if state is not None:
            state.events.append((time.time_ns(), "semisched.decision", _attributes(explanation)))

    def first_token(self, request: Request, now: float) -> None:
        state = self._open.get(request.id)
        if state is not None:
            state.first_token = now

    def finished(self, request: Request, finished: Finished, now: float) -> None:
        state = self._open.pop(request.id, None)
        if state is None:
            return
        span = state.span
        if span is None and self._no_sdk():
            return  # no SDK configured: nothing would record the span
        attributes = _outcome(state, finished)
        if span is None:  # built now, all at once, from the recorded times
            attributes.update(_identity(request))
            span = self._tracer.start_span(SPAN_NAME, context=state.parent,
                                           kind=trace.SpanKind.CLIENT, attributes=attributes,
                                           start_time=state.start_ns)  # fmt: skip
        else:  # one call: the SDK takes its span lock once per call, not per attribute
            span.set_attributes(attributes)
        for at, name, event in state.events:
            span.add_event(name, event, timestamp=at)
        if finished.outcome not in _OK:
            why = finished.explanation
            reason = why.reason if why is not None else finished.outcome.value
            span.set_status(trace.Status(trace.StatusCode.ERROR, reason))
        span.end()


def _identity(request: Request) -> dict[str, Any]:
    """What the request is (known at submission)."""
    return {
        "semisched.request_id": request.id,
        "semisched.class": request.klass,
        "semisched.tenant": request.tenant,
        "semisched.bucket": request.bucket.value,
        "gen_ai.request.model": request.model,
    }


def _outcome(state: _Open, finished: Finished) -> dict[str, Any]:
    """How the request went (known at its end)."""
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
    return attributes


def _attributes(explanation: Explanation) -> dict[str, Any]:
    """The explanation as span attributes (OpenTelemetry takes str, bool, int, float)."""
    return {key: value for key, value in explanation.as_dict().items() if value is not None}
