"""The async SDK end to end: real AsyncOpenAI client, in-process mock provider, compressed time."""

from __future__ import annotations

import json
import math
from typing import Any, ClassVar

import anyio
import httpx2
import openai
import pytest
from conftest import SCALE, chat, mock_client

from predictors.base import PriorQuery
from predictors.priors import Coarse
from semisched import (
    DeadlineExceeded,
    ProviderError,
    QuotaExceeded,
    RateLimited,
    RequestRejected,
    Scheduler,
    SchedulerClosed,
)
from semisched.clock import ScaledClock
from semisched.core import Prior, preset
from semisched.core.config import OverloadConfig
from semisched.runtime import RetryPolicy

pytestmark = pytest.mark.anyio


async def test_submit_returns_the_providers_own_response(clock: ScaledClock) -> None:
    async with mock_client() as (client, _), Scheduler(client, clock=clock) as scheduler:
        response = await scheduler.submit(**chat(max_tokens=40), deadline=60)
    assert isinstance(response, openai.types.chat.ChatCompletion)
    assert response.usage is not None
    assert response.usage.completion_tokens == 40
    stats = scheduler.statistics()
    assert stats.counters["succeeded"] == 1
    assert stats.engine.counters["completed"] == 1
    assert stats.pending == 0


async def test_drop_in_facade_and_completions_endpoint(clock: ScaledClock) -> None:
    async with mock_client() as (client, _), Scheduler(client, clock=clock) as scheduler:
        wrapped = scheduler.client
        chat_resp = await wrapped.chat.completions.create(**chat(max_tokens=5), klass="interactive")
        text_resp = await wrapped.completions.create(model="mock-1", prompt="once", max_tokens=7)
    assert chat_resp.choices[0].message.content
    assert isinstance(text_resp, openai.types.Completion)
    assert text_resp.usage is not None and text_resp.usage.completion_tokens == 7
    assert scheduler.statistics().engine.counters["sent"] == 2


async def test_scheduler_only_arguments_never_reach_the_provider(clock: ScaledClock) -> None:
    bodies: list[dict[str, Any]] = []

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
    client = openai.AsyncOpenAI(base_url="http://x/v1", api_key="k", http_client=http)
    async with Scheduler(client, clock=clock) as scheduler:
        await scheduler.submit(
            **chat(max_tokens=5), klass="batch", deadline=30, prior=(10, 20), temperature=0.1
        )
    (body,) = bodies
    assert body["temperature"] == 0.1
    assert not {"klass", "deadline", "prior"} & set(body)


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"bogus_arg": 1}, TypeError, "bogus_arg"),
        ({"deadline": -1.0}, ValueError, "deadline="),
        ({"deadline": math.nan}, ValueError, "deadline="),
        ({"deadline": math.inf}, ValueError, "deadline="),
        ({"messages": []}, ValueError, "messages"),
        ({"prior": (100, 50)}, ValueError, "p90="),
        ({"prior": "big"}, TypeError, "prior="),
        ({"klass": "vip"}, ValueError, "klass="),
        ({"stream": "yes"}, TypeError, "stream="),
        ({"model": ""}, ValueError, "model="),
    ],
)
async def test_bad_input_fails_before_anything_is_queued(
    clock: ScaledClock, kwargs: dict[str, Any], error: type[Exception], match: str
) -> None:
    async with mock_client() as (client, _), Scheduler(client, clock=clock) as scheduler:
        with pytest.raises(error, match=match):
            await scheduler.submit(**{**chat(), **kwargs})
        stats = scheduler.statistics()
    assert stats.counters["submitted"] == 0
    assert stats.engine.counters["submitted"] == 0


def _olc(**overload: float) -> Any:
    return preset("final_adrr_olc", max_inflight=2, overload=OverloadConfig(**overload))


#: Output tokens of a call that stays in flight until the test cancels it
#: (~1870 virtual seconds: about 9 wall seconds at SCALE).
FOREVER = 100_000


async def test_admit_defer_and_reject_end_to_end(clock: ScaledClock) -> None:
    # A full budget (load 1.0 * w_load 0.3) crosses these lowered thresholds:
    # long requests are deferred, xlong rejected, short requests admitted.
    config = _olc(
        defer_threshold=0.25, reject_xlong_threshold=0.28, reject_long_threshold=0.95, max_defers=2
    )
    async with mock_client() as (client, _), Scheduler(client, config=config, clock=clock) as s:
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
    assert stats.engine.defers_by_bucket.get("long", 0) >= 1
    assert "short" not in stats.engine.defers_by_bucket
    assert stats.engine.rejects_by_bucket == {"xlong": 1}
    assert stats.counters["rejected"] == 1


async def test_rate_limit_retry_after_is_honoured(clock: ScaledClock) -> None:
    # 2 requests per virtual minute: the third waits for the window, then succeeds.
    async with mock_client(rpm=2, rate_window="fixed") as (client, _):
        async with Scheduler(client, clock=clock) as s:
            start = clock.now()
            async with anyio.create_task_group() as tg:
                for _ in range(3):
                    tg.start_soon(lambda: s.submit(**chat(max_tokens=5), deadline=600))
            elapsed = clock.now() - start
            stats = s.statistics()
    assert stats.counters["succeeded"] == 3
    assert stats.counters["throttles"] >= 1
    assert stats.counters["retries"] >= 1
    assert stats.engine.counters["retries"] >= 1
    # The third call could only have been served after the minute rolled over.
    assert elapsed >= 55.0
    assert stats.rate_limits is not None and stats.rate_limits.limit_requests == 2


async def test_rate_limited_without_time_to_retry_raises_rate_limited(clock: ScaledClock) -> None:
    async with mock_client(rpm=1, rate_window="fixed") as (client, _):
        async with Scheduler(client, clock=clock) as s:
            await s.submit(**chat(max_tokens=5))
            with pytest.raises(RateLimited) as info:
                await s.submit(**chat(max_tokens=5), deadline=5)
    assert info.value.status_code == 429
    assert isinstance(info.value.__cause__, openai.RateLimitError)


async def test_insufficient_quota_is_not_retried(clock: ScaledClock) -> None:
    async with mock_client(quota_tokens=10) as (client, http):
        async with Scheduler(client, clock=clock) as s:
            await s.submit(**chat(max_tokens=20))  # uses up the quota
            with pytest.raises(QuotaExceeded) as info:
                await s.submit(**chat(max_tokens=20), deadline=600)
        served = (await http.get("/v1/mock/stats")).json()
    assert info.value.attempts == 1
    assert isinstance(info.value.__cause__, openai.RateLimitError)
    assert s.statistics().counters["retries"] == 0
    assert served["counters"]["insufficient_quota"] == 1


async def test_server_errors_are_retried_a_bounded_number_of_times(clock: ScaledClock) -> None:
    retry = RetryPolicy(max_attempts=3, base_delay_s=0.5, seed=1)
    async with mock_client(error_rate=1.0) as (client, http):
        async with Scheduler(client, clock=clock, retry=retry) as s:
            with pytest.raises(ProviderError) as info:
                await s.submit(**chat(max_tokens=5), deadline=600)
        served = (await http.get("/v1/mock/stats")).json()
    assert info.value.attempts == 3
    assert info.value.status_code in (500, 503)
    assert isinstance(info.value.__cause__, openai.InternalServerError | openai.APIStatusError)
    assert served["counters"]["requests"] == 3


async def test_streaming_hides_the_usage_chunk_it_added(clock: ScaledClock) -> None:
    async with mock_client() as (client, _), Scheduler(client, clock=clock) as s:
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
    assert stats.engine.counters["completed"] == 2
    assert stats.open_streams == 0


async def test_a_stream_that_ends_without_usage_still_completes(clock: ScaledClock) -> None:
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

    async with Scheduler(Client(), clock=clock) as s:
        stream = await s.submit(**chat(), stream=True)
        assert len([c async for c in stream]) == 3
    assert s.statistics().engine.counters["completed"] == 1


async def test_cancelling_a_queued_request_removes_it(clock: ScaledClock) -> None:
    config = preset("adaptive_drr", max_inflight=1)
    async with mock_client() as (client, _), Scheduler(client, config=config, clock=clock) as s:
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
        stats = s.statistics()
    assert stats.counters["cancelled"] == 2
    assert stats.engine.counters["cancelled"] == 2
    assert stats.engine.counters["sent"] == 1  # the queued one was never sent
    assert stats.pending == 0


async def test_cancelling_an_in_flight_request_aborts_the_call(clock: ScaledClock) -> None:
    config = preset("adaptive_drr", max_inflight=1)
    async with mock_client() as (client, http), Scheduler(client, config=config, clock=clock) as s:
        caller = anyio.CancelScope()

        async def long_call() -> None:
            with caller:
                await s.submit(**chat(max_tokens=FOREVER))

        async with anyio.create_task_group() as tg:
            tg.start_soon(long_call)
            await anyio.wait_all_tasks_blocked()
            assert s.statistics().inflight == 1
            caller.cancel()
        assert s.statistics().inflight == 0
        # The freed send opportunity serves the next request at once.
        quick = await s.submit(**chat(max_tokens=3))
        mock_stats = (await http.get("/v1/mock/stats")).json()
    assert quick.usage is not None
    assert s.statistics().engine.counters["cancelled"] == 1
    assert mock_stats["physics"]["active"] == 0
    assert mock_stats["physics"]["queued"] == 0


async def test_deadline_expiry_in_queue_and_in_flight(clock: ScaledClock) -> None:
    config = preset("adaptive_drr", max_inflight=1)
    async with mock_client() as (client, _), Scheduler(client, config=config, clock=clock) as s:
        outcomes: list[DeadlineExceeded] = []

        async def call(tokens: int, deadline: float) -> None:
            try:
                await s.submit(**chat(max_tokens=tokens), deadline=deadline)
            except DeadlineExceeded as exc:
                outcomes.append(exc)

        async with anyio.create_task_group() as tg:
            tg.start_soon(call, FOREVER, 120.0)  # aborted in flight at its deadline
            await anyio.wait_all_tasks_blocked()
            tg.start_soon(call, 10, 2.0)  # waits behind it and expires in the queue
        stats = s.statistics()
    assert [e.phase for e in outcomes] == ["queued", "in_flight"]
    assert stats.counters["deadline_exceeded"] == 2
    assert stats.inflight == 0 and stats.pending == 0


async def test_a_thousand_concurrent_submits_each_resolve_once(clock: ScaledClock) -> None:
    config = preset("final_adrr_olc", max_inflight=64)
    async with mock_client() as (client, _), Scheduler(client, config=config, clock=clock) as s:
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
    assert engine["submitted"] == 1000
    assert engine["completed"] + engine["rejected"] == 1000
    assert outcomes.count("ok") == engine["completed"]
    assert stats.pending == 0 and stats.inflight == 0


async def test_provider_losing_half_its_capacity_mid_run(clock: ScaledClock) -> None:
    physics = preset("final_adrr_olc")
    async with mock_client(capacity_loss=(2.0, 0.5)) as (client, http):
        async with Scheduler(client, config=physics, clock=clock) as s:
            served = 0

            async def call(i: int) -> None:
                nonlocal served
                await s.submit(**chat(max_tokens=20 + i), deadline=3600, prior=(64, 128))
                served += 1

            async with anyio.create_task_group() as tg:
                for i in range(80):
                    tg.start_soon(call, i)
        mock_stats = (await http.get("/v1/mock/stats")).json()
    assert served == 80
    assert mock_stats["physics"]["slots"] == 16


async def test_a_slow_model_backed_source_falls_back_without_stalling(
    clock: ScaledClock,
) -> None:
    import time

    class SlowModel:
        name = "slow"
        batches: ClassVar[list[int]] = []

        def prior(self, query: PriorQuery) -> Prior:
            return self.prior_batch([query])[0]

        def prior_batch(self, queries: list[PriorQuery]) -> list[Prior]:
            self.batches.append(len(queries))
            time.sleep(0.2)  # a blocking model in a worker thread, not on the loop
            return [Prior(p50=30, p90=60) for _ in queries]

    source = SlowModel()
    async with mock_client() as (client, _):
        async with Scheduler(client, clock=clock, priors=source, prior_timeout_s=0.02) as s:
            async with anyio.create_task_group() as tg:
                for _ in range(5):
                    tg.start_soon(lambda: s.submit(**chat(max_tokens=5)))
            stats = s.statistics()
    assert stats.counters["prior_fallbacks"] == 5
    assert stats.counters["succeeded"] == 5
    assert max(source.batches) > 1  # micro-batched


async def test_a_fast_model_backed_source_is_used(clock: ScaledClock) -> None:
    class Fast:
        name = "fast"

        def prior(self, query: PriorQuery) -> Prior:
            return Prior(p50=3000, p90=4000)

        def prior_batch(self, queries: list[PriorQuery]) -> list[Prior]:
            return [self.prior(q) for q in queries]

    async with mock_client() as (client, _):
        async with Scheduler(client, clock=clock, priors=Fast(), prior_timeout_s=5.0) as s:
            await s.submit(**chat(max_tokens=5))
            stats = s.statistics()
    assert stats.counters["prior_fallbacks"] == 0
    assert stats.engine.counters["submitted"] == 1
    assert Coarse().name == "coarse"


async def test_prompt_token_estimate_calibrates_from_usage(clock: ScaledClock) -> None:
    async with mock_client() as (client, _), Scheduler(client, clock=clock) as s:
        for _ in range(3):
            await s.submit(**chat("word " * 200, max_tokens=1))
        ratio = s.statistics().estimator
    (key,) = ratio
    mean, _, n = ratio[key]
    assert key == "mock-1/prose"
    assert n == 3
    assert mean == pytest.approx(4.0, rel=0.05)  # the mock counts bytes / 4


async def test_submit_outside_the_context_is_refused(clock: ScaledClock) -> None:
    async with mock_client() as (client, _):
        scheduler = Scheduler(client, clock=clock)
        with pytest.raises(SchedulerClosed):
            await scheduler.submit(**chat())


def test_scale_constant_is_shared() -> None:
    assert SCALE > 1


async def test_against_a_loopback_server(clock: ScaledClock) -> None:
    from mockprovider.launch import running_server

    with running_server("--time-scale", str(SCALE), "--rpm", "600") as url:
        client = openai.AsyncOpenAI(base_url=url, api_key="k")
        async with client, Scheduler(client, clock=clock) as s:
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
    assert stats.engine.counters["completed"] == 21
    assert stats.rate_limits is not None
    assert stats.rate_limits.limit_requests == 600


async def test_check_validates_like_submit_without_scheduling(clock: ScaledClock) -> None:
    async with mock_client() as (client, _), Scheduler(client, clock=clock) as scheduler:
        assert scheduler.check(**chat(max_tokens=5)) == "chat"
        assert scheduler.check(model="mock-1", prompt="hi") == "completions"
        with pytest.raises(TypeError, match="unknown keyword"):
            scheduler.check(**chat(), colour="red")
        with pytest.raises(ValueError, match="exactly one of"):
            scheduler.check(model="mock-1")
        assert scheduler.statistics().counters["submitted"] == 0


async def test_pause_holds_queued_requests_until_resume(clock: ScaledClock) -> None:
    async with mock_client() as (client, _), Scheduler(client, clock=clock) as scheduler:
        scheduler.pause()
        results: list[Any] = []

        async def one() -> None:
            results.append(await scheduler.submit(**chat(max_tokens=5)))

        async with anyio.create_task_group() as tg:
            tg.start_soon(one)
            await anyio.wait_all_tasks_blocked()
            stats = scheduler.statistics()
            assert stats.engine.held and stats.engine.counters["sent"] == 0
            assert stats.queued == {"interactive": 1, "batch": 0}
            scheduler.resume()
    assert len(results) == 1 and scheduler.statistics().engine.counters["sent"] == 1
