"""``Scheduler(endpoints=[...])``: routing, failover, drains and bad input over a fleet,
with the real openai client against in-process mock providers in virtual time."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from typing import Any

import anyio
import pytest
from runtime_kit import Mock, Scripted, chat, mock_client

from semisched import Endpoint, RequestRejected, Scheduler
from semisched.runtime.calls import scheduler_config

pytestmark = [
    pytest.mark.anyio,
    # openai's AsyncStream leaves its SSE generators open at [DONE]; trio closes them
    # and says so (see test_scheduler.py).
    pytest.mark.filterwarnings("ignore:Async generator 'openai._streaming.:ResourceWarning"),
    pytest.mark.filterwarnings(
        "ignore:Async generator 'httpx2._models.Response.aiter_bytes':ResourceWarning"
    ),
]


@asynccontextmanager
async def mocks(*configs: dict[str, Any]) -> AsyncIterator[list[Mock]]:
    async with AsyncExitStack() as stack:
        yield [await stack.enter_async_context(mock_client(**c)) for c in configs]


async def run_all(s: Scheduler, n: int, **kwargs: Any) -> list[Any]:
    out: list[Any] = [None] * n

    async def one(i: int) -> None:
        out[i] = await s.submit(**chat(max_tokens=5, **kwargs))

    async with anyio.create_task_group() as tg:
        for i in range(n):
            tg.start_soon(one, i)
    return out


def served(mock: Mock) -> int:
    return sum(1 for e in mock.recorder.log if e.status == 200)


async def test_round_robin_spreads_calls_over_the_fleet() -> None:
    async with mocks({}, {}, {}) as (a, b, c):
        fleet = [Endpoint("a", a.client), Endpoint("b", b.client), Endpoint("c", c.client)]
        async with Scheduler(
            endpoints=fleet, config=scheduler_config("final_adrr_olc", routing="round_robin")
        ) as s:
            await run_all(s, 9)
            stats = s.statistics()
    assert [served(m) for m in (a, b, c)] == [3, 3, 3]
    assert [(e.name, e.completed) for e in stats.engine.endpoints] == [
        ("a", 3),
        ("b", 3),
        ("c", 3),
    ]


async def test_a_model_map_renames_the_model_for_its_deployment() -> None:
    async with mocks({}) as (a,):
        fleet = [Endpoint("azure", a.client, model_map={"mock-1": "my-deployment"})]
        async with Scheduler(endpoints=fleet) as s:
            response = await s.submit(**chat(max_tokens=5))
    assert response.model == "my-deployment"  # the mock echoes the model it was asked for


async def test_a_failed_attempt_fails_over_to_another_endpoint_at_once() -> None:
    async with (
        mock_client(script=[Scripted(503)]) as a,
        mock_client() as b,
    ):
        fleet = [Endpoint("a", a.client), Endpoint("b", b.client)]
        async with Scheduler(
            endpoints=fleet, config=scheduler_config("final_adrr_olc", routing="round_robin")
        ) as s:
            await s.submit(**chat(max_tokens=5))
            stats = s.statistics()
    assert [e.status for e in a.recorder.log] == [503]
    assert [e.status for e in b.recorder.log] == [200]
    assert b.recorder.log[0].at == a.recorder.log[0].at  # no back-off: another endpoint
    assert stats.engine.counters.failovers == 1
    assert stats.counters.retries == 1


async def test_an_exhausted_quota_takes_the_endpoint_out_and_the_call_goes_elsewhere() -> None:
    async with mocks({"quota_tokens": 1}, {}) as (a, b):
        fleet = [Endpoint("a", a.client), Endpoint("b", b.client)]
        async with Scheduler(
            endpoints=fleet, config=scheduler_config("final_adrr_olc", routing="round_robin")
        ) as s:
            await s.submit(**chat(max_tokens=5))  # a serves it and spends its quota
            await run_all(s, 4)
            stats = s.statistics()
    first, *later = [e.status for e in a.recorder.log]
    assert first == 200 and later and set(later) == {429}  # those sent before the first 429
    assert served(b) == 4
    assert {e.name: e.state for e in stats.engine.endpoints}["a"] == "insufficient_quota"
    assert stats.counters.quota_exceeded == 0  # nobody saw the quota error


async def test_streaming_works_over_a_fleet() -> None:
    async with mocks({}, {}) as (a, b):
        fleet = [Endpoint("a", a.client), Endpoint("b", b.client)]
        async with Scheduler(
            endpoints=fleet, config=scheduler_config("final_adrr_olc", routing="round_robin")
        ) as s:
            texts = []
            for _ in range(2):
                stream = await s.submit(**chat(max_tokens=5), stream=True)
                chunks = [c async for c in stream]
                texts.append("".join(c.choices[0].delta.content or "" for c in chunks))
    assert all(texts) and served(a) == served(b) == 1


async def test_drain_and_remove_at_run_time() -> None:
    async with mocks({}, {}) as (a, b):
        fleet = [Endpoint("a", a.client), Endpoint("b", b.client)]
        async with Scheduler(
            endpoints=fleet, config=scheduler_config("final_adrr_olc", routing="round_robin")
        ) as s:
            s.drain_endpoint("a")
            await run_all(s, 3)
            s.remove_endpoint("a")
            assert s.endpoints == ("b",)
            s.add_endpoint(Endpoint("a2", a.client))
            await run_all(s, 2)
            s.drain_endpoint("b")
            s.drain_endpoint("a2")
            with pytest.raises(RequestRejected, match="no endpoint can take"):
                await s.submit(**chat(max_tokens=5))
    assert (served(a), served(b)) == (1, 4)


async def test_bad_fleets_and_unserved_models_fail_before_anything_is_sent() -> None:
    async with mocks({}) as (a,):
        with pytest.raises(ValueError, match="duplicate endpoint name 'x'"):
            Scheduler(endpoints=[Endpoint("x", a.client), Endpoint("x", a.client)])
        with pytest.raises(TypeError, match="exactly one of client and endpoints"):
            Scheduler(a.client, endpoints=[Endpoint("x", a.client)])
        with pytest.raises(TypeError, match="exactly one of client and endpoints"):
            Scheduler()
        with pytest.raises(ValueError, match="endpoints=\\[\\] must name"):
            Scheduler(endpoints=[])
        with pytest.raises(ValueError, match="rpm=0 must be"):
            Endpoint("x", a.client, rpm=0)
        with pytest.raises(TypeError, match="OpenAI-compatible client"):
            Endpoint("x", object())
        fleet = [Endpoint("x", a.client, model_map={"gpt-a": "dep-a"})]
        async with Scheduler(endpoints=fleet) as s:
            with pytest.raises(ValueError, match="model='mock-1' is served by no endpoint"):
                s.check(**chat())
            with pytest.raises(ValueError, match="x: gpt-a"):
                await s.submit(**chat())
    assert a.recorder.log == []
