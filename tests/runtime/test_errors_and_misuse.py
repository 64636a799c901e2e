"""What a caller sees when something goes wrong: errors leave ``async with`` as themselves,
calls that can never succeed are refused before anything is sent, and constructor misuse is a
``TypeError``/``ValueError`` naming the argument, at construction.

Virtual time (the in-process mock) except one test against a real closed port on 127.0.0.1.
"""

from __future__ import annotations

import contextlib
import socket
import time
from typing import Any

import anyio
import httpx2
import openai
import pytest
from runtime_kit import Scripted, chat, mock_client

from mockprovider.app import MockConfig, create_app
from semisched import (
    AnyioClock,
    Endpoint,
    InternalError,
    Prior,
    ProviderError,
    QuotaExceeded,
    RateLimited,
    RetryPolicy,
    Scheduler,
    preset,
)
from semisched.core.lifecycle import FailureKind

pytestmark = pytest.mark.anyio


# -- errors leave the block as themselves -----------------------------------------------------


async def test_a_provider_error_leaves_async_with_as_itself() -> None:
    caught: ProviderError | None = None
    async with mock_client(script=[Scripted(400)]) as mock:
        try:
            async with Scheduler(mock.client) as s:
                await s.submit(**chat(max_tokens=5))
        except ProviderError as exc:  # not an ExceptionGroup around it
            caught = exc
    assert type(caught) is ProviderError
    assert caught.status_code == 400 and caught.attempts == 1
    assert isinstance(caught.__cause__, openai.BadRequestError)


async def test_the_callers_own_exception_leaves_as_itself() -> None:
    mine = LookupError("the caller's own")
    caught: LookupError | None = None
    async with mock_client() as mock:
        try:
            async with Scheduler(mock.client) as s:
                await s.submit(**chat(max_tokens=5))
                raise mine
        except LookupError as exc:
            caught = exc
    assert caught is mine


class _BreakingClock(AnyioClock):
    """The loop's clock, until ``broken``: then converting to wall seconds fails."""

    broken = False

    def to_wall(self, seconds: float) -> float:
        if self.broken:
            raise RuntimeError("the clock broke")
        return super().to_wall(seconds)


async def test_a_bug_in_one_requests_work_fails_it_alone_and_the_scheduler_serves_on(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock = _BreakingClock()
    async with mock_client() as mock, Scheduler(mock.client, clock=clock) as s:
        clock.broken = True  # the attempt's task reads it for the deadline
        with pytest.raises(InternalError) as caught:
            await s.submit(**chat(max_tokens=5), deadline=30)
        clock.broken = False
        answer = await s.submit(**chat(max_tokens=5), deadline=30)
        stats = s.statistics()
    assert isinstance(caught.value.__cause__, RuntimeError)
    assert str(caught.value.__cause__) == "the clock broke"
    assert answer.usage is not None
    assert (stats.counters.internal_errors, stats.counters.succeeded) == (1, 1)
    assert (stats.engine.inflight, stats.pending) == (0, 0)
    logged = [r for r in caplog.records if r.levelname == "ERROR"]
    assert len(logged) == 1 and logged[0].exc_info is not None  # once, with its traceback


def _closed_port() -> int:
    """A port on 127.0.0.1 nothing listens on (bound, then closed: connections are refused)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


@pytest.mark.wallclock
async def test_server_down_the_readme_way_is_caught_as_provider_error() -> None:
    port = _closed_port()
    client = openai.AsyncOpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="k")
    config = preset("final_adrr_olc", retry=RetryPolicy(max_attempts=2, base_delay_s=0.01))
    caught: ProviderError | None = None
    try:
        async with client, Scheduler(client, config=config) as scheduler:
            await scheduler.client.chat.completions.create(**chat(max_tokens=20), deadline=30)
    except ProviderError as exc:
        caught = exc
    assert type(caught) is ProviderError
    assert caught.kind is FailureKind.CONNECTION and caught.attempts == 2
    assert isinstance(caught.__cause__, openai.APIConnectionError)
    # openai says only "Connection error."; the error names where it tried
    where = f"could not connect to http://127.0.0.1:{port}/v1/chat/completions"
    assert caught.hint == where and str(caught).endswith(where)


@pytest.mark.parametrize(
    ("base_url", "hint"),
    [
        ("http://mock", "http://mock/chat/completions answered 404 and the base URL "
                        "http://mock does not end in /v1: OpenAI-compatible servers answer "
                        "under .../v1"),
        ("http://mock/other/v1", None),  # a 404 from a base URL that ends in /v1: no guess
    ],
)  # fmt: skip
async def test_a_404_from_a_base_url_without_v1_says_so(base_url: str, hint: str | None) -> None:
    app = create_app(MockConfig(), clock=anyio.current_time)
    transport = httpx2.ASGITransport(app=app)
    async with httpx2.AsyncClient(transport=transport, base_url="http://mock") as http:
        client = openai.AsyncOpenAI(base_url=base_url, api_key="k", http_client=http)
        with pytest.raises(ProviderError) as info:
            async with Scheduler(client) as scheduler:
                await scheduler.client.chat.completions.create(**chat(max_tokens=5))
    assert info.value.status_code == 404 and info.value.hint == hint
    assert hint is None or str(info.value).endswith(hint)


# -- calls that can never succeed are refused before anything is sent ------------------------


@pytest.mark.parametrize(
    ("refused", "at_the_limit", "match"),
    [
        ({"max_tokens": 0}, {"max_tokens": 1}, r"^max_tokens=0 must be an int >= 1"),
        ({"max_completion_tokens": 0}, {"max_completion_tokens": 1}, r"^max_completion_tokens=0 "),
        (
            {"max_tokens": 10**12},
            {"max_tokens": 10**8},  # sent: beyond the mock's context, its 400 answers it
            r"^max_tokens=1000000000000 must be at most 100_000_000",
        ),
        ({"prior": (0, 0)}, {"prior": (1, 1)}, r"^prior=\(0, 0\) must have 1 <= p50 <= p90"),
        ({"prior": Prior(p50=0.0, p90=0.0)}, {"prior": Prior(p50=1.0, p90=1.0)}, r"^prior=Prior"),
        ({"prior": (1e300, 1e301)}, {"prior": (1, 10**8)}, r"^prior=\(1e\+300, 1e\+301\) must"),
        ({"prior": (50, 10)}, {"prior": (10, 10)}, r"^prior=\(50, 10\): p90=10.0 must be >= p50"),
        ({"deadline": 1e300}, {"deadline": 1e8}, r"^deadline=1e\+300 must be at most 1e\+08 s"),
        ({"deadline": time.time() + 30}, {"deadline": 1e8}, r"^deadline=.* counts from submission"),
    ],
)
async def test_submit_refuses_what_can_never_succeed_before_sending(
    refused: dict[str, Any], at_the_limit: dict[str, Any], match: str
) -> None:
    async with mock_client() as mock, Scheduler(mock.client) as s:
        with pytest.raises(ValueError, match=match):
            await s.submit(**chat(**refused))
        with pytest.raises(ValueError, match=match):
            s.check(**chat(**refused))
        stats = s.statistics()
        assert mock.recorder.log == []  # nothing reached the provider
        assert stats.counters.submitted == 0 and stats.pending == 0
        with contextlib.suppress(ProviderError):
            await s.submit(**chat(**at_the_limit))
    assert len(mock.recorder.log) == 1  # the limit itself is sent


# -- constructor misuse: a TypeError or ValueError naming the argument, at construction ------


def test_the_sync_openai_client_is_refused_naming_async_openai() -> None:
    sync = openai.OpenAI(base_url="http://127.0.0.1:9/v1", api_key="k")
    with pytest.raises(TypeError, match=r"synchronous client.*openai\.AsyncOpenAI"):
        Scheduler(sync)
    with pytest.raises(TypeError, match=r"endpoint 'east' is openai's synchronous.*AsyncOpenAI"):
        Endpoint("east", sync)


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"config": 123}, TypeError, r"^config=123 must be a SchedulerConfig or a preset's name"),
        ({"config": "nope"}, ValueError, r"^config='nope': name='nope' must be one of"),
        ({"metrics": "yes"}, TypeError, r"^metrics='yes' must be True, False or an instance of "),
        ({"metrics": None}, TypeError, r"^metrics=None must be"),
        ({"tracing": "x"}, TypeError, r"^tracing='x' must be True, False or an instance of "),
        ({"clock": object()}, TypeError, r"^clock=<object .* must be a Clock instance"),
        ({"clock": AnyioClock}, TypeError, r"^clock=<class .* must be a Clock instance"),
        ({"observers": 123}, TypeError, r"^observers=123 must be a sequence"),
    ],
)
def test_constructor_misuse_names_the_argument(
    kwargs: dict[str, Any], error: type[Exception], match: str
) -> None:
    client = openai.AsyncOpenAI(base_url="http://127.0.0.1:9/v1", api_key="k")
    with pytest.raises(error, match=match):
        Scheduler(client, **kwargs)


# -- what openai's own handlers would have caught --------------------------------------------


@pytest.mark.parametrize(
    ("script", "caught", "original"),
    [
        ([Scripted(429, code="rate_limit_exceeded")] * 4, RateLimited, openai.RateLimitError),
        ([Scripted(429, code="insufficient_quota")], QuotaExceeded, openai.RateLimitError),
        ([Scripted(503)] * 4, ProviderError, openai.InternalServerError),
    ],
)
async def test_the_openai_exception_of_the_last_attempt_is_the_errors_cause(
    script: list[Scripted], caught: type[ProviderError], original: type[Exception]
) -> None:
    config = preset("final_adrr_olc", retry=RetryPolicy(max_attempts=4, base_delay_s=0.01))
    async with mock_client(script=script) as mock:
        with pytest.raises(caught) as info:
            async with Scheduler(mock.client, config=config) as s:
                await s.client.chat.completions.create(**chat(max_tokens=5))
    # `except openai.RateLimitError` no longer matches; the original is one attribute away
    assert type(info.value.__cause__) is original
    assert info.value.status_code == info.value.__cause__.status_code  # type: ignore[attr-defined]


# -- the rest of the client passes through, unscheduled --------------------------------------


async def test_the_drop_in_client_passes_models_through_and_schedules_every_api() -> None:
    async with mock_client() as mock:
        async with Scheduler(mock.client) as s:
            models = await s.client.models.list()
            assert [m.id async for m in models][:1] == ["mock-1"]
            assert s.statistics().counters.submitted == 0  # listing models is not scheduled
            answer = await s.client.responses.create(model="mock-1", input="hi",
                                                     max_output_tokens=5)  # fmt: skip
            vectors = await s.client.embeddings.create(model="mock-1", input=["a b", "c"])
            assert answer.usage.output_tokens <= 5 and len(vectors.data) == 2
            assert s.statistics().counters.submitted == 2  # both went through the scheduler
        assert mock.stats().requests_by_api.responses == 1
        assert mock.stats().requests_by_api.embeddings == 1


def test_a_fleets_drop_in_client_says_which_client_to_call() -> None:
    fleet = [Endpoint("a", openai.AsyncOpenAI(api_key="k", base_url="http://a/v1"))]
    s = Scheduler(endpoints=fleet)
    with pytest.raises(AttributeError, match=r"call an endpoint's own client"):
        _ = s.client.models
    with pytest.raises(AttributeError):
        _ = s.client._private
