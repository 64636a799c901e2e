"""The async SDK end to end: real AsyncOpenAI client, in-process mock provider, virtual time.

Retries and failures have their own module (``test_lifecycle.py``); blocking prior
sources too (``test_prior_sources.py``).
"""

from __future__ import annotations

import json
import math
from dataclasses import fields
from typing import Any

import anyio
import httpx2
import openai
import pytest
from runtime_kit import FOREVER, SCALE, chat, mock_client

from semisched import (
    DeadlineExceeded,
    QueueFull,
    RequestRejected,
    RetryPolicy,
    RuntimeOptions,
    Scheduler,
    SchedulerClosed,
)
from semisched.core import Prior, preset
from semisched.core.config import BudgetConfig, OverloadConfig
from semisched.priors.sources import Heuristic, PriorQuery
from semisched.runtime.clock import AnyioClock, ScaledClock
from semisched.runtime.stats import RuntimeCounters, RuntimeTally

pytestmark = [
    pytest.mark.anyio,
    # openai's AsyncStream leaves its SSE generators (and httpx2's byte iterator under
    # them) at [DONE] without closing them, even after stream.close(); trio (unlike
    # asyncio) closes such generators itself and says so with these warnings.
    pytest.mark.filterwarnings("ignore:Async generator 'openai._streaming.:ResourceWarning"),
    pytest.mark.filterwarnings(
        "ignore:Async generator 'httpx2._models.Response.aiter_bytes':ResourceWarning"
    ),
]


async def test_submit_returns_the_providers_own_response() -> None:
    async with mock_client() as mock, Scheduler(mock.client) as scheduler:
        response = await scheduler.submit(**chat(max_tokens=40), deadline=60)
    assert isinstance(response, openai.types.chat.ChatCompletion)
    assert response.usage is not None
    assert response.usage.completion_tokens == 40
    stats = scheduler.statistics()
    assert stats.counters == RuntimeCounters(submitted=1, succeeded=1)
    assert stats.engine.counters.completed == 1
    assert stats.pending == 0


async def test_drop_in_facade_and_completions_endpoint() -> None:
    async with mock_client() as mock, Scheduler(mock.client) as scheduler:
        wrapped = scheduler.client
        chat_resp = await wrapped.chat.completions.create(**chat(max_tokens=5), klass="interactive")
        text_resp = await wrapped.completions.create(model="mock-1", prompt="once", max_tokens=7)
    assert chat_resp.choices[0].message.content
    assert isinstance(text_resp, openai.types.Completion)
    assert text_resp.usage is not None and text_resp.usage.completion_tokens == 7
    assert scheduler.statistics().engine.counters.sent == 2


def _echo_client(bodies: list[dict[str, Any]]) -> openai.AsyncOpenAI:
    def handler(request: httpx2.Request) -> httpx2.Response:
        bodies.append(json.loads(request.content))
        return httpx2.Response(
            200,
            json={
                "id": "x",
                "object": "chat.completion",
                "created": 0,
                "model": "m",
                "choices": [
                    {"index": 0, "message": {"role": "assistant", "content": "ok"},
                     "finish_reason": "stop"}
                ],
                "usage": {"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4},
            },
        )  # fmt: skip

    http = httpx2.AsyncClient(transport=httpx2.MockTransport(handler))
    return openai.AsyncOpenAI(base_url="http://x/v1", api_key="k", http_client=http)


async def test_scheduler_only_arguments_never_reach_the_provider() -> None:
    bodies: list[dict[str, Any]] = []
    async with Scheduler(_echo_client(bodies)) as scheduler:
        await scheduler.submit(
            **chat(max_tokens=5), klass="batch", deadline=30, prior=(10, 20), temperature=0.1
        )
    (body,) = bodies
    assert body["temperature"] == 0.1
    assert body["max_tokens"] == 5
    assert not {"klass", "deadline", "prior"} & set(body)


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"bogus_arg": 1}, TypeError, "bogus_arg"),
        ({"deadline": -1.0}, ValueError, "deadline="),
        ({"deadline": math.nan}, ValueError, "deadline="),
        ({"deadline": math.inf}, ValueError, "deadline="),
        ({"deadline": True}, TypeError, "deadline="),
        ({"messages": []}, ValueError, "messages"),
        ({"prior": (100, 50)}, ValueError, "p90="),
        ({"prior": "big"}, TypeError, "prior="),
        ({"klass": "vip"}, ValueError, "klass="),
        ({"stream": "yes"}, TypeError, "stream="),
        ({"model": ""}, ValueError, "model="),
        ({"max_tokens": True}, TypeError, "max_tokens="),
        ({"max_tokens": 10, "max_completion_tokens": 20}, ValueError, "max_completion_tokens="),
    ],
)
async def test_bad_input_fails_before_anything_is_queued(
    kwargs: dict[str, Any], error: type[Exception], match: str
) -> None:
    async with mock_client() as mock, Scheduler(mock.client) as scheduler:
        with pytest.raises(error, match=match):
            await scheduler.submit(**{**chat(), **kwargs})
        stats = scheduler.statistics()
    assert stats.counters.submitted == 0
    assert stats.engine.counters.submitted == 0
    assert mock.recorder.log == []


@pytest.mark.parametrize(
    "caps",
    [
        {"max_completion_tokens": 30},
        {"max_tokens": 30},
        {"max_completion_tokens": 30, "max_tokens": 30},
        {"max_completion_tokens": 30, "max_tokens": None},
    ],
)
async def test_one_output_cap_feeds_both_the_prior_and_the_rate_budget(
    caps: dict[str, Any],
) -> None:
    seen: list[int | None] = []

    class Recording:
        name = "recording"

        def prior(self, query: PriorQuery) -> Prior:
            seen.append(query.max_tokens)
            return Heuristic().prior(query)

    bodies: list[dict[str, Any]] = []
    config = preset("final_adrr_olc", budget=BudgetConfig(tpm=1_000_000))
    async with Scheduler(_echo_client(bodies), config=config, priors=Recording()) as scheduler:
        await scheduler.submit(**chat(**caps))
        budget = scheduler.statistics().engine.budget
    assert seen == [30]
    assert budget is not None
    assert budget.used_tokens == 3 + 30  # usage.prompt_tokens + the cap, not the 1 generated


def _olc(**overload: float) -> Any:
    return preset("final_adrr_olc", max_inflight=2, overload=OverloadConfig(**overload))


async def test_admit_defer_and_reject_end_to_end() -> None:
    # A full budget (load 1.0 * w_load 0.3) crosses these lowered thresholds:
    # long requests are deferred, xlong rejected, short requests admitted.
    config = _olc(
        defer_threshold=0.25, reject_xlong_threshold=0.28, reject_long_threshold=0.95, max_defers=2
    )
    async with mock_client() as mock, Scheduler(mock.client, config=config) as s:
        results: dict[str, Any] = {}
        fills = [anyio.CancelScope(), anyio.CancelScope()]

        async def fill(scope: anyio.CancelScope) -> None:
            with scope:
                await s.submit(**chat(max_tokens=FOREVER), prior=(200.0, 256.0))

        async def call(name: str, prior: tuple[float, float]) -> None:
            try:
                results[name] = await s.submit(**chat(max_tokens=20), prior=prior, deadline=600)
            except RequestRejected as exc:
                results[name] = exc

        async with anyio.create_task_group() as tg:
            for scope in fills:
                tg.start_soon(fill, scope)
            await anyio.wait_all_tasks_blocked()
            assert s.statistics().inflight == 2
            tg.start_soon(call, "short", (30.0, 60.0))
            tg.start_soon(call, "long", (600.0, 1000.0))
            tg.start_soon(call, "xlong", (3000.0, 4000.0))
            await anyio.wait_all_tasks_blocked()
            for scope in fills:  # free the budget: the short and the deferred long go through
                scope.cancel()
        stats = s.statistics()
    rejected = results["xlong"]
    assert isinstance(rejected, RequestRejected)
    assert rejected.bucket == "xlong"
    assert rejected.severity >= 0.28
    assert rejected.retry_after is not None and rejected.retry_after > 0
    assert "severity" in rejected.reason
    assert isinstance(results["short"], openai.types.chat.ChatCompletion)
    assert isinstance(results["long"], openai.types.chat.ChatCompletion)  # deferred, then served
    assert stats.engine.defers_by_bucket.long >= 1
    assert stats.engine.defers_by_bucket.short == 0
    assert stats.engine.rejects_by_bucket.xlong == 1
    assert stats.engine.rejects_by_bucket.total == 1
    assert stats.counters.rejected == 1


async def test_streaming_hides_the_usage_chunk_it_added() -> None:
    async with mock_client() as mock, Scheduler(mock.client) as s:
        stream = await s.submit(**chat(max_tokens=12), stream=True)
        chunks = [c async for c in stream]
        asked = await s.submit(
            **chat(max_tokens=12), stream=True, stream_options={"include_usage": True}
        )
        asked_chunks = [c async for c in asked]
        stats = s.statistics()
    assert all(c.choices for c in chunks)  # no usage-only chunk leaked
    text = "".join(c.choices[0].delta.content or "" for c in chunks)
    assert len(text.split()) == 12
    assert stream.usage is not None and stream.usage.completion_tokens == 12
    assert not asked_chunks[-1].choices and asked_chunks[-1].usage is not None
    assert stats.engine.counters.completed == 2
    assert stats.open_streams == 0


async def test_a_stream_that_ends_without_usage_still_completes() -> None:
    class Chunk:
        def __init__(self, text: str) -> None:
            self.choices = [text]
            self.usage = None

    class Stream:
        def __aiter__(self) -> Any:
            return self._gen()

        async def _gen(self) -> Any:
            for word in ("a", "b", "c"):
                yield Chunk(word)

    class Completions:
        async def create(self, **kwargs: Any) -> Any:
            assert kwargs["stream_options"] == {"include_usage": True}
            return Stream()

    class Client:
        class chat:
            completions = Completions()

    async with Scheduler(Client()) as s:
        stream = await s.submit(**chat(), stream=True)
        assert len([c async for c in stream]) == 3
    assert s.statistics().engine.counters.completed == 1


async def test_cancelling_a_queued_request_removes_it() -> None:
    config = preset("adaptive_drr", max_inflight=1)
    async with mock_client() as mock, Scheduler(mock.client, config=config) as s:
        first, second = anyio.CancelScope(), anyio.CancelScope()

        async def call(scope: anyio.CancelScope, tokens: int) -> None:
            with scope:
                await s.submit(**chat(max_tokens=tokens))

        async with anyio.create_task_group() as tg:
            tg.start_soon(call, first, FOREVER)
            await anyio.wait_all_tasks_blocked()
            tg.start_soon(call, second, 5)
            await anyio.wait_all_tasks_blocked()
            assert s.statistics().queued == {"interactive": 1, "batch": 0}
            second.cancel()
            await anyio.wait_all_tasks_blocked()
            assert s.statistics().queued == {"interactive": 0, "batch": 0}
            assert s.statistics().inflight == 1
            first.cancel()
        await anyio.wait_all_tasks_blocked()  # the aborted attempt reports its cancel
        stats = s.statistics()
    assert stats.counters.cancelled == 2
    assert stats.engine.counters.cancelled == 2
    assert stats.engine.counters.sent == 1  # the queued one was never sent
    assert stats.pending == 0


async def test_cancelling_an_in_flight_request_aborts_the_call() -> None:
    config = preset("adaptive_drr", max_inflight=1)
    async with mock_client() as mock, Scheduler(mock.client, config=config) as s:
        caller = anyio.CancelScope()

        async def long_call() -> None:
            with caller:
                await s.submit(**chat(max_tokens=FOREVER))

        async with anyio.create_task_group() as tg:
            tg.start_soon(long_call)
            await anyio.wait_all_tasks_blocked()
            assert s.statistics().inflight == 1
            caller.cancel()
        await anyio.wait_all_tasks_blocked()  # the aborted attempt reports its cancel
        assert s.statistics().inflight == 0
        # The freed send opportunity serves the next request at once.
        quick = await s.submit(**chat(max_tokens=3))
        physics = mock.stats().physics
    assert quick.usage is not None
    assert s.statistics().engine.counters.cancelled == 1
    assert physics.active == 0
    assert physics.queued == 0
    assert physics.cancelled == 1


async def test_deadline_expiry_in_queue_and_in_flight() -> None:
    config = preset("adaptive_drr", max_inflight=1)
    async with mock_client() as mock, Scheduler(mock.client, config=config) as s:
        outcomes: list[tuple[str, float]] = []
        start = anyio.current_time()

        async def call(tokens: int, deadline: float) -> None:
            try:
                await s.submit(**chat(max_tokens=tokens), deadline=deadline)
            except DeadlineExceeded as exc:
                outcomes.append((exc.phase, anyio.current_time() - start))

        async with anyio.create_task_group() as tg:
            tg.start_soon(call, FOREVER, 120.0)  # aborted in flight at its deadline
            await anyio.wait_all_tasks_blocked()
            tg.start_soon(call, 10, 2.0)  # waits behind it and expires in the queue
        stats = s.statistics()
    # Virtual time: each outcome lands exactly at its deadline.
    assert outcomes == [("queued", 2.0), ("in_flight", 120.0)]
    assert stats.counters.deadline_exceeded == 2
    assert stats.inflight == 0 and stats.pending == 0


async def test_a_thousand_concurrent_submits_each_resolve_once() -> None:
    config = preset("final_adrr_olc", max_inflight=64)
    async with mock_client() as mock, Scheduler(mock.client, config=config) as s:
        outcomes: list[str] = []

        async def call(i: int) -> None:
            try:
                await s.submit(**chat(f"q{i}", max_tokens=1 + i % 50), deadline=3600)
                outcomes.append("ok")
            except RequestRejected:
                outcomes.append("rejected")

        async with anyio.create_task_group() as tg:
            for i in range(1000):
                tg.start_soon(call, i)
        stats = s.statistics()
    assert len(outcomes) == 1000
    engine = stats.engine.counters
    assert engine.submitted == 1000
    assert engine.completed + engine.rejected == 1000
    assert outcomes.count("ok") == engine.completed == stats.counters.succeeded
    assert stats.counters.outcomes == stats.counters.submitted == 1000
    assert stats.pending == 0 and stats.inflight == 0


async def test_provider_losing_half_its_capacity_mid_run() -> None:
    async with mock_client(capacity_loss=(2.0, 0.5)) as mock:
        async with Scheduler(mock.client, config=preset("final_adrr_olc")) as s:
            served = 0

            async def call(i: int) -> None:
                nonlocal served
                await s.submit(**chat(max_tokens=20 + i), deadline=3600, prior=(64, 128))
                served += 1

            async with anyio.create_task_group() as tg:
                for i in range(80):
                    tg.start_soon(call, i)
        stats = mock.stats()
    assert served == 80
    assert stats.physics.slots == 16
    assert stats.capacity_loss_applied_at == pytest.approx(2.0)


async def test_prompt_token_estimate_calibrates_from_usage() -> None:
    async with mock_client() as mock, Scheduler(mock.client) as s:
        for _ in range(3):
            await s.submit(**chat("word " * 200, max_tokens=1))
        estimator = s.statistics().estimator
    (category,) = estimator.categories
    assert (category.model, category.kind) == ("mock-1", "prose")
    assert category.observations == 3
    assert category.mean == pytest.approx(4.0, rel=0.05)  # the mock counts bytes / 4
    assert estimator.get("mock-1", "prose") == category


async def test_a_failing_prior_source_falls_back() -> None:
    class Broken:
        name = "broken"

        def prior(self, query: PriorQuery) -> Prior:
            raise RuntimeError("no model")

    async with mock_client() as mock, Scheduler(mock.client, priors=Broken()) as s:
        await s.submit(**chat())
        stats = s.statistics()
    assert stats.counters.prior_fallbacks == 1
    assert stats.counters.succeeded == 1


async def test_max_pending_refuses_at_once_with_queue_full() -> None:
    async with (
        mock_client() as mock,
        Scheduler(mock.client, options=RuntimeOptions(max_pending=2)) as s,
    ):

        async def hold() -> None:
            await s.submit(**chat(max_tokens=FOREVER))

        async with anyio.create_task_group() as tg:
            tg.start_soon(hold)
            tg.start_soon(hold)
            await anyio.wait_all_tasks_blocked()
            with pytest.raises(QueueFull) as info:
                await s.submit(**chat(max_tokens=5))
            tg.cancel_scope.cancel()
        stats = s.statistics()
    assert info.value.limit == 2
    assert (stats.counters.queue_full, stats.counters.cancelled) == (1, 2)
    assert stats.counters.outcomes == stats.counters.submitted == 3
    assert stats.engine.counters.submitted == 2  # the refused one never reached the core


async def test_leaving_with_an_error_closes_what_is_pending() -> None:
    outcome: list[BaseException] = []

    async def waiter(s: Scheduler) -> None:
        try:
            await s.submit(**chat(max_tokens=FOREVER))
        except SchedulerClosed as exc:
            outcome.append(exc)

    failed: list[BaseException] = []
    async with mock_client() as mock, anyio.create_task_group() as tg:
        try:
            async with Scheduler(mock.client) as s:
                tg.start_soon(waiter, s)
                await anyio.wait_all_tasks_blocked()
                raise RuntimeError("application failed")
        except* RuntimeError as group:
            failed.extend(group.exceptions)
    assert [str(e) for e in failed] == ["application failed"]
    assert len(outcome) == 1
    assert s.statistics().counters.closed == 1
    assert mock.stats().physics.active == 0  # its call was aborted


async def test_submit_outside_the_context_is_refused() -> None:
    async with mock_client() as mock:
        scheduler = Scheduler(mock.client)
        with pytest.raises(SchedulerClosed):
            await scheduler.submit(**chat())


@pytest.mark.wallclock
async def test_against_a_loopback_server() -> None:
    from mockprovider.launch import running_server

    with running_server("--time-scale", str(SCALE), "--rpm", "600") as url:
        client = openai.AsyncOpenAI(base_url=url, api_key="k")
        async with client, Scheduler(client, clock=ScaledClock(SCALE)) as s:
            lengths: list[int] = []

            async def call(i: int) -> None:
                resp = await s.client.chat.completions.create(
                    **chat(f"q{i}", max_tokens=5 + i), deadline=600
                )
                lengths.append(resp.usage.completion_tokens)

            async with anyio.create_task_group() as tg:
                for i in range(20):
                    tg.start_soon(call, i)
            stream = await s.submit(**chat(max_tokens=8), stream=True)
            streamed = [c async for c in stream]
            stats = s.statistics()
    assert sorted(lengths) == [5 + i for i in range(20)]
    assert len(streamed) >= 2
    assert stats.engine.counters.completed == 21
    assert stats.rate_limits is not None
    assert stats.rate_limits.limit_requests == 600


async def test_check_validates_like_submit_without_scheduling() -> None:
    async with mock_client() as mock, Scheduler(mock.client) as scheduler:
        assert scheduler.check(**chat(max_tokens=5)) == "chat"
        assert scheduler.check(model="mock-1", prompt="hi") == "completions"
        with pytest.raises(TypeError, match="unknown keyword"):
            scheduler.check(**chat(), colour="red")
        with pytest.raises(ValueError, match="exactly one of"):
            scheduler.check(model="mock-1")
        assert scheduler.statistics().counters.submitted == 0


async def test_pause_holds_queued_requests_until_resume() -> None:
    async with mock_client() as mock, Scheduler(mock.client) as scheduler:
        scheduler.pause()
        results: list[Any] = []

        async def one() -> None:
            results.append(await scheduler.submit(**chat(max_tokens=5)))

        async with anyio.create_task_group() as tg:
            tg.start_soon(one)
            await anyio.sleep(30)  # virtual: nothing is sent while paused
            stats = scheduler.statistics()
            assert stats.engine.held and stats.engine.counters.sent == 0
            assert stats.queued == {"interactive": 1, "batch": 0}
            scheduler.resume()
    assert len(results) == 1 and scheduler.statistics().engine.counters.sent == 1
    assert mock.recorder.attempts() == [pytest.approx(30.0, abs=1e-9)]


async def test_a_compressed_loop_clock_runs_the_deadlines_in_its_seconds() -> None:
    # AnyioClock(scale=10): 10 clock seconds per loop second; a 50 s deadline
    # in the queue passes after exactly 5 loop seconds.
    config = preset("adaptive_drr", max_inflight=1)
    async with mock_client(time_scale=10.0) as mock:
        async with Scheduler(mock.client, config=config, clock=AnyioClock(10.0)) as s:
            start = anyio.current_time()
            blocker = anyio.CancelScope()

            async def hold() -> None:
                with blocker:
                    await s.submit(**chat(max_tokens=FOREVER))

            async with anyio.create_task_group() as tg:
                tg.start_soon(hold)
                await anyio.wait_all_tasks_blocked()
                with pytest.raises(DeadlineExceeded) as info:
                    await s.submit(**chat(max_tokens=5), deadline=50.0)
                elapsed = anyio.current_time() - start
                blocker.cancel()
    assert info.value.phase == "queued"
    assert elapsed == pytest.approx(5.0, abs=1e-9)


def test_statistics_are_named_frozen_fields() -> None:
    assert {f.name for f in fields(RuntimeCounters)} == set(RuntimeTally.__slots__)
    counters = RuntimeTally().freeze()
    assert counters == RuntimeCounters()
    with pytest.raises(AttributeError):
        counters.succeeded = 1  # type: ignore[misc]


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [({"seed": 1.5}, "seed="), ({"seed": True}, "seed="), ({"max_pending": 0}, "max_pending=")],
)
def test_scheduler_arguments_are_validated(kwargs: dict[str, Any], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        Scheduler(_echo_client([]), options=RuntimeOptions(**kwargs))


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        (
            {"tenants": ()},
            r"^Scheduler\(\) no longer takes tenants=: pass it as "
            r"config=preset\('final_adrr_olc', tenants=\.\.\.\)$",
        ),
        (
            {"routing": "ewma", "retry": RetryPolicy()},
            r"^Scheduler\(\) no longer takes routing= or retry=: pass them as "
            r"config=preset\('final_adrr_olc', routing=\.\.\., retry=\.\.\.\)$",
        ),
        (
            {"seed": 1},
            r"^Scheduler\(\) no longer takes seed=: pass it as "
            r"options=RuntimeOptions\(seed=\.\.\.\)$",
        ),
        (
            {"tenants": (), "max_pending": 3},
            r"no longer takes tenants= or max_pending=: pass them as config=preset\("
            r"'final_adrr_olc', tenants=\.\.\.\) and options=RuntimeOptions\(max_pending=\.\.\.\)$",
        ),
        ({"bogus": 1}, r"unexpected keyword argument\(s\) \['bogus'\]"),
    ],
)
def test_a_removed_keyword_names_its_new_place(kwargs: dict[str, Any], match: str) -> None:
    with pytest.raises(TypeError, match=match):
        Scheduler(_echo_client([]), **kwargs)
