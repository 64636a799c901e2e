"""Explained decisions reach the caller's exception, the statistics and the logs; spans too.

Virtual time, the in-process mock. A rejected, deferred, retried, expired or
failed request carries the core's explanation (rule, severity, signals, retry
hint); ``semisched.decisions`` logs it at DEBUG with structured ``extra``; no
semisched log line ever holds a prompt or a key; an OpenTelemetry SDK sees one
span per request, with the client's HTTP spans beside it (or under it, live).
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import httpx2
import openai
import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from runtime_kit import FOREVER, Recorder, Scripted, chat, overload_scenario

from mockprovider.app import MockConfig, create_app
from semisched import DeadlineExceeded, ProviderError, RequestRejected, Scheduler
from semisched.core import preset
from semisched.core.config import OverloadConfig
from semisched.core.lifecycle import RetryPolicy
from semisched.telemetry.observe import Finished, RequestObserver
from semisched.telemetry.tracing import RequestTracing

pytestmark = pytest.mark.anyio

SECRET_PROMPT = "TOP-SECRET-PROMPT-TEXT"
SECRET_KEY = "sk-SECRET-KEY-0123456789"


@asynccontextmanager
async def client(
    script: tuple[Scripted, ...] = (), **mock: Any
) -> AsyncIterator[openai.AsyncOpenAI]:
    app = create_app(MockConfig(**mock), clock=anyio.current_time)
    transport = Recorder(httpx2.ASGITransport(app=app), script)
    async with httpx2.AsyncClient(transport=transport, base_url="http://mock") as http:
        yield openai.AsyncOpenAI(base_url="http://mock/v1", api_key=SECRET_KEY, http_client=http)


def overloaded() -> Any:
    # A full budget (load 1.0 * w_load 0.3) crosses these lowered thresholds: long
    # requests are deferred, xlong ones rejected, short ones admitted.
    overload = OverloadConfig(defer_threshold=0.25, reject_xlong_threshold=0.28,
                              reject_long_threshold=0.95, max_defers=2)  # fmt: skip
    return preset("final_adrr_olc", max_inflight=2, overload=overload,
                  retry=RetryPolicy(max_attempts=2, base_delay_s=1.0))  # fmt: skip


async def test_a_rejection_carries_its_explanation_and_the_statistics_count_rules() -> None:
    async with client() as c, Scheduler(c, config=overloaded()) as s:
        results = await overload_scenario(s, SECRET_PROMPT)
        stats = s.statistics()
    rejected = results["xlong"]
    assert isinstance(rejected, RequestRejected)
    why = rejected.explanation
    assert why is not None
    assert (why.decision.value, why.rule, why.bucket) == (
        "reject",
        "overload.reject_xlong",
        "xlong",
    )
    assert why.threshold == 0.28 and why.level == 2 and why.severity >= 0.28
    assert why.retry_after == rejected.retry_after
    assert why.signals.provider_load == pytest.approx(1.0)
    assert stats.engine.decisions.overload_reject_xlong == 1
    assert stats.engine.decisions.overload_defer >= 1  # the long one, then served


async def test_failures_and_deadlines_carry_theirs() -> None:
    script = (Scripted(500), Scripted(500))
    async with client(script) as c, Scheduler(c, config=overloaded()) as s:
        with pytest.raises(ProviderError) as failed:
            await s.submit(**chat(SECRET_PROMPT, max_tokens=5))
        with pytest.raises(DeadlineExceeded) as late:
            await s.submit(**chat(SECRET_PROMPT, max_tokens=FOREVER), deadline=30)
    assert failed.value.explanation is not None
    assert failed.value.explanation.rule == "retry.attempts_spent"
    assert late.value.phase == "in_flight"
    assert late.value.explanation is not None
    assert late.value.explanation.rule == "deadline.in_flight"


async def test_decisions_are_logged_at_debug_without_prompt_or_key(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    script = (Scripted(429, {"retry-after": "1"}), Scripted(500))  # a retry, then it gives up
    async with client(script) as c, Scheduler(c, config=overloaded()) as s:
        with pytest.raises(ProviderError):
            await s.submit(**chat(SECRET_PROMPT, max_tokens=5))
        await overload_scenario(s, SECRET_PROMPT)
    decisions = [r for r in caplog.records if r.name == "semisched.decisions"]
    rules = {r.semisched["rule"] for r in decisions}  # type: ignore[attr-defined]
    assert {
        "overload.reject_xlong",
        "overload.defer",
        "retry.backoff",
        "retry.attempts_spent",
    } <= rules
    rejected = next(r for r in decisions if r.semisched["rule"] == "overload.reject_xlong")  # type: ignore[attr-defined]
    assert rejected.levelno == logging.DEBUG
    assert rejected.semisched["severity"] >= 0.28 and rejected.semisched["klass"] == "batch"  # type: ignore[attr-defined]
    ours = [r for r in caplog.records if r.name.startswith("semisched")]
    assert ours
    for record in ours:
        text = f"{record.getMessage()} {record.args!r} {record.__dict__!r}"
        assert SECRET_PROMPT not in text and SECRET_KEY not in text, record.name


class Raising(RequestObserver):
    def __init__(self) -> None:
        self.finished_seen = 0

    def submitted(self, request: Any, now: float) -> None:
        raise RuntimeError("observer bug")

    def finished(self, request: Any, finished: Finished, now: float) -> None:
        self.finished_seen += 1


async def test_an_observer_that_raises_is_logged_once_and_scheduling_goes_on(
    caplog: pytest.LogCaptureFixture,
) -> None:
    observer = Raising()
    async with client() as c, Scheduler(c, observers=[observer]) as s:
        for _ in range(3):
            await s.submit(**chat(max_tokens=5))
    warnings = [r for r in caplog.records if r.name == "semisched.observe"]
    assert len(warnings) == 1 and "submitted" in warnings[0].getMessage()
    assert observer.finished_seen == 3
    with pytest.raises(TypeError, match="RequestObserver"):
        Scheduler(c, observers=[object()])  # type: ignore[list-item]


class HttpSpans(httpx2.AsyncBaseTransport):
    """What an instrumented httpx does: a client span per request, in the current context."""

    def __init__(self, inner: httpx2.AsyncBaseTransport, tracer: trace.Tracer) -> None:
        self.inner, self.tracer = inner, tracer

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        with self.tracer.start_as_current_span(f"HTTP {request.method}"):
            return await self.inner.handle_async_request(request)


# openai's AsyncStream leaves its SSE generators at [DONE] unclosed; trio closes them and
# says so (as in test_scheduler.py).
@pytest.mark.filterwarnings("ignore:Async generator 'openai._streaming.:ResourceWarning")
@pytest.mark.filterwarnings("ignore:Async generator 'httpx2._models.Response.aiter_bytes'")
@pytest.mark.parametrize("nest_http", [False, True], ids=["built-at-end", "live"])
async def test_one_span_per_request_beside_or_above_the_http_spans(nest_http: bool) -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    app = create_app(MockConfig(), clock=anyio.current_time)
    transport = HttpSpans(httpx2.ASGITransport(app=app), provider.get_tracer("http"))
    tracing: dict[str, Any] = (
        {"tracing": False, "observers": [RequestTracing(provider, nest_http=True)]}
        if nest_http else {"tracing": provider}
    )  # fmt: skip
    async with httpx2.AsyncClient(transport=transport, base_url="http://mock") as http:
        c = openai.AsyncOpenAI(base_url="http://mock/v1", api_key=SECRET_KEY, http_client=http)
        # The scheduler starts inside a span of its own: a provider call must not run in
        # that context, but in the caller's.
        with provider.get_tracer("app").start_as_current_span("startup"):
            s = await Scheduler(c, config=overloaded(), **tracing).__aenter__()
        try:
            with provider.get_tracer("app").start_as_current_span("handler"):
                await s.submit(**chat(SECRET_PROMPT, max_tokens=7), tenant=None)
            stream = await s.submit(**chat(SECRET_PROMPT, max_tokens=5), stream=True)
            async for _ in stream:
                pass
            results = await overload_scenario(s, SECRET_PROMPT)
        finally:
            await s.__aexit__(None, None, None)
    assert isinstance(results["xlong"], RequestRejected)
    spans = exporter.get_finished_spans()
    requests = [sp for sp in spans if sp.name == "semisched.request"]
    handler = next(sp for sp in spans if sp.name == "handler")
    first = requests[0]
    assert first.parent is not None and first.parent.span_id == handler.context.span_id
    attrs = first.attributes or {}
    assert attrs["semisched.outcome"] == "completed" and attrs["semisched.attempts"] == 1
    assert attrs["gen_ai.usage.output_tokens"] == 7 and attrs["semisched.queue_wait_s"] == 0.0
    assert attrs["semisched.class"] and attrs["gen_ai.request.model"] == "mock-1"
    assert "semisched.time_to_first_token_s" not in attrs  # not a stream
    assert [e.name for e in first.events] == ["semisched.attempt"]
    assert first.start_time is not None and first.end_time is not None
    http = [sp for sp in spans if sp.name.startswith("HTTP")]
    assert first.start_time <= http[0].start_time and http[0].end_time <= first.end_time
    under = first if nest_http else handler  # live: under the request's span; else beside it
    assert http[0].parent is not None and http[0].parent.span_id == under.context.span_id
    # The calls made outside any span of the caller's: under their request's (live), else
    # roots; never under the span the scheduler was started in.
    ids = {sp.context.span_id for sp in requests} if nest_http else {None}
    assert {sp.parent.span_id if sp.parent else None for sp in http[1:]} <= ids
    streamed = (requests[1].attributes or {})["semisched.time_to_first_token_s"]
    assert isinstance(streamed, float) and streamed >= 0.0
    rejected = next(sp for sp in requests if (sp.attributes or {}).get("semisched.outcome")
                    == "rejected")  # fmt: skip
    assert rejected.status.status_code is trace.StatusCode.ERROR
    assert (rejected.attributes or {})["semisched.rule"] == "overload.reject_xlong"
    deferred = [sp for sp in requests if any(e.name == "semisched.decision" for e in sp.events)]
    assert deferred  # the long call's deferral is an event of its span
    for span in spans:
        text = repr(span.attributes) + repr([e.attributes for e in span.events])
        assert SECRET_PROMPT not in text and SECRET_KEY not in text
