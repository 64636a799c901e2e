"""Requests served by the mock app in virtual time (mockprovider.app, driver, responses):
exact physics latencies, faults, cancellations and the shared clock's baton.

Every test runs in virtual time (``conftest.py``, ``served.serve``): the expected latencies
come from running the pure physics by hand, and equal the observed ones to rounding.
"""

from __future__ import annotations

import json
import math
import random
from dataclasses import replace
from typing import Any

import anyio
import openai
import pytest
from served import (
    CLIENT_GENERATORS,
    DEFAULT,
    MESSAGES,
    asgi_scope,
    completion_times,
    lone_time,
    serve,
)

from mockprovider import MockConfig, create_app

pytestmark = [pytest.mark.anyio, CLIENT_GENERATORS]


# -- timing ---------------------------------------------------------------------------------


@pytest.mark.parametrize("time_scale", [1.0, 20.0])
async def test_lone_request_takes_exactly_the_physics_time(time_scale: float) -> None:
    expected = 101 * DEFAULT.iteration_ms(1) / 1000  # 1 prefill + 100 decode iterations
    assert lone_time(100) == pytest.approx(expected, rel=1e-12)
    async with serve(MockConfig(time_scale=time_scale)) as mock:
        latency = await mock.timed_chat(100)
        stats = await mock.stats()
    assert latency * time_scale == pytest.approx(expected, rel=1e-9)
    assert stats.virtual_time == pytest.approx(expected, rel=1e-9)


async def test_concurrent_requests_complete_in_length_order_at_the_physics_times() -> None:
    lengths = (300, 60, 200, 10, 120)
    finished: dict[int, float] = {}
    async with serve(MockConfig()) as mock:

        async def one(tokens: int) -> None:
            finished[tokens] = await mock.timed_chat(tokens)

        async with anyio.create_task_group() as tg:
            for tokens in lengths:
                tg.start_soon(one, tokens)
        stats = await mock.stats()
    expected = completion_times(DEFAULT, [(0.0, str(n), n) for n in lengths])
    assert list(finished) == sorted(lengths)
    for tokens, latency in finished.items():
        assert latency == pytest.approx(expected[str(tokens)], rel=1e-9)
    assert stats.physics.completed == 5
    assert stats.counters.completed == 5
    assert stats.counters.requests == 5


async def test_stream_sends_the_first_chunk_at_the_first_token() -> None:
    # At the ASGI level: httpx2.ASGITransport hands the client the body only once it is whole.
    app = create_app(MockConfig(), clock=anyio.current_time)
    body = {"model": "m", "messages": MESSAGES, "stream": True}
    incoming = [{"type": "http.request", "body": json.dumps(body).encode(), "more_body": False}]
    sent: list[tuple[float, dict[str, Any]]] = []

    async def receive() -> dict[str, Any]:
        if incoming:
            return incoming.pop()
        await anyio.sleep_forever()  # the client stays connected
        raise AssertionError("unreachable")

    async def send(message: dict[str, Any]) -> None:
        sent.append((anyio.current_time() - start, message))

    start = anyio.current_time()
    await app(asgi_scope("/v1/chat/completions", {"x-mock-output-tokens": "100"}), receive, send)
    first_token = 2 * DEFAULT.iteration_ms(1) / 1000  # the prefill, then one decode iteration
    times = [t for t, _ in sent]
    kinds = [m["type"] for _, m in sent]
    assert kinds == ["http.response.start"] + ["http.response.body"] * (len(sent) - 1)
    assert times[:2] == [pytest.approx(first_token, rel=1e-9)] * 2
    assert times[2:] == [pytest.approx(lone_time(100), rel=1e-9)] * (len(sent) - 2)
    assert sent[-1][1]["body"] == b"data: [DONE]\n\n"


async def test_capacity_loss_shows_in_stats() -> None:
    async with serve(MockConfig(capacity_loss=(1.0, 0.25))) as mock:
        before = await mock.stats()  # starts the virtual clock at 0
        await mock.chat(100)  # 1.89 virtual seconds: the loss at t=1 happens meanwhile
        after = await mock.stats()
    assert before.physics.slots == 32
    assert before.capacity_loss_applied_at is None
    assert after.physics.slots == 8
    assert after.capacity_loss_applied_at == 1.0
    assert after.virtual_time == pytest.approx(lone_time(100), rel=1e-9)


async def test_physics_timeout_is_a_504_or_a_stream_error() -> None:
    physics = replace(DEFAULT, timeout_s=1.0, slots=1)
    async with serve(MockConfig(physics=physics)) as mock:
        start = anyio.current_time()
        with pytest.raises(openai.InternalServerError) as info:
            await mock.chat(10_000)
        timed_out_after = anyio.current_time() - start
        assert info.value.status_code == 504
        assert info.value.code == "timeout"
        stream = await mock.stream(10_000)  # the first token comes, then the timeout
        first = await stream.__anext__()
        with pytest.raises(openai.APIError, match="timed out"):
            await stream.__anext__()
        stats = await mock.stats()
    assert timed_out_after == pytest.approx(1.0, rel=1e-9)
    assert stats.virtual_time == pytest.approx(2.0, rel=1e-9)
    assert first.choices[0].delta.content == "lorem"
    assert stats.counters.timeouts == 2
    assert stats.physics.timed_out == 2


# -- faults ---------------------------------------------------------------------------------


async def test_error_rate_one_answers_500_and_503() -> None:
    async with serve(MockConfig(error_rate=1.0)) as mock:
        statuses = []
        for _ in range(2):
            with pytest.raises(openai.InternalServerError) as info:
                await mock.chat(1)
            statuses.append(info.value.status_code)
            assert info.value.type == "server_error"
        stats = await mock.stats()
    assert statuses == [500, 503]
    assert stats.counters.faults_error == 2
    assert stats.physics.submitted == 0


async def test_a_forced_fault_still_consumes_its_seeded_draw() -> None:
    async def failures(force_none_at: int | None) -> list[bool]:
        out = []
        async with serve(MockConfig(error_rate=0.5, seed=0)) as mock:
            for i in range(8):
                hint = {"x-mock-fault": "none"} if i == force_none_at else {}
                response = await mock.http.post(
                    "/v1/chat/completions",
                    json={"model": "m", "messages": MESSAGES, "max_tokens": 1},
                    headers=hint,
                )
                out.append(response.status_code != 200)
        return out

    plain = await failures(None)
    forced_at = plain.index(True)
    forced = await failures(forced_at)
    assert not forced[forced_at]
    # Every other request meets the same fate: the forced one used up its draw.
    del plain[forced_at], forced[forced_at]
    assert forced == plain
    assert True in plain and False in plain


@pytest.mark.parametrize("stream", [False, True])
async def test_dropped_connection_is_an_api_connection_error(stream: bool) -> None:
    async with serve(MockConfig(drop_rate=1.0)) as mock:
        with pytest.raises(openai.APIConnectionError):
            # A long stream, so it cannot finish in the physics before the drop cancels it.
            await (mock.stream_all(20_000) if stream else mock.chat(50))
        stats = await mock.stats()
    assert stats.counters.faults_drop == 1
    assert stats.physics.active == 0
    assert stats.physics.queued == 0
    # A JSON drop happens after completion; a stream drops after its first chunk.
    assert stats.physics.cancelled == int(stream)
    assert stats.counters.completed == int(not stream)


async def test_hang_holds_no_slot_and_ends_when_the_client_gives_up() -> None:
    async with serve(MockConfig(hang_rate=1.0)) as mock:
        with anyio.move_on_after(3600) as scope:
            await mock.chat(1)
        stats = await mock.stats()
    assert scope.cancelled_caught
    assert stats.virtual_time == 3600.0  # hung for exactly as long as the client waited
    assert stats.counters.faults_hang == 1
    assert stats.physics.submitted == 0
    assert (stats.physics.active, stats.physics.queued) == (0, 0)


# -- outage windows -------------------------------------------------------------------------


async def test_an_outage_refuses_new_requests_until_its_end_and_lets_earlier_ones_finish() -> None:
    async with serve(MockConfig(outages=((1.0, 2.0),))) as mock:
        latencies: list[float] = []
        start = anyio.current_time()  # the first request comes now: virtual time 0

        async def through_the_outage() -> None:  # from t=0 to 1.89: admitted before it began
            latencies.append(await mock.timed_chat(100))

        async with anyio.create_task_group() as tg:
            tg.start_soon(through_the_outage)
            await anyio.sleep(1.0)  # exactly the window's start
            raw = await mock.http.post(
                "/v1/chat/completions", json={"model": "m", "messages": MESSAGES}
            )
            with pytest.raises(openai.InternalServerError) as info:
                await mock.chat(1)
        await anyio.sleep_until(start + 2.0)
        after = await mock.timed_chat(1)  # exactly the window's end: served again
        stats = await mock.stats()
    assert raw.status_code == 503
    error = raw.json()["error"]
    assert (error["type"], error["code"], error["param"]) == ("server_error", None, None)
    assert "outage window" in error["message"]
    assert "retry-after" not in raw.headers
    assert info.value.status_code == 503
    assert latencies == [pytest.approx(lone_time(100), rel=1e-9)]
    assert after == pytest.approx(lone_time(1), rel=1e-9)
    assert stats.virtual_time == pytest.approx(2.0 + lone_time(1), rel=1e-9)
    counters = stats.counters
    assert (counters.requests, counters.unavailable, counters.completed) == (4, 2, 2)
    assert stats.physics.submitted == 2


async def test_an_outage_leaves_the_seeded_fault_draws_outside_it_unchanged() -> None:
    async def statuses(config: MockConfig) -> list[int]:
        out = []
        async with serve(config) as mock:
            for i in range(11):
                if i in (4, 7):
                    await anyio.sleep(10.0)  # into the window [10, 20), then past it
                response = await mock.http.post(
                    "/v1/chat/completions",
                    json={"model": "m", "messages": MESSAGES, "max_tokens": 1},
                )
                out.append(response.status_code)
        return out

    plain = await statuses(MockConfig(error_rate=0.5, seed=0))
    gapped = await statuses(MockConfig(error_rate=0.5, seed=0, outages=((10.0, 20.0),)))
    assert gapped[4:7] == [503] * 3
    assert gapped[:4] + gapped[7:] == plain[:8]
    assert 200 in plain[:8] and 500 in plain[:8]


# -- cancellation and the shared clock ------------------------------------------------------


async def test_cancelled_calls_release_slots_and_queue_places() -> None:
    # One slot, three very long requests: one running, two queued, all given up by the client.
    config = MockConfig(physics=replace(DEFAULT, slots=1))
    async with serve(config) as mock:
        with anyio.move_on_after(0.3):
            async with anyio.create_task_group() as tg:
                for _ in range(3):
                    tg.start_soon(mock.chat, 100_000)
        stats = await mock.stats()
        assert stats.virtual_time == pytest.approx(0.3)
        assert stats.physics.submitted == 3
        assert stats.physics.cancelled == 3
        assert (stats.physics.active, stats.physics.queued) == (0, 0)
        assert stats.counters.client_cancelled == 3
        # The clock still runs afterwards, and the slot is free: a lone request's time.
        assert await mock.timed_chat(1) == pytest.approx(lone_time(1), rel=1e-9)


async def test_waiters_take_over_the_clock_when_the_driver_is_cancelled() -> None:
    async with serve(MockConfig()) as mock:
        latency: list[float] = []

        async def driver() -> None:  # first in: it drives the shared clock
            with anyio.move_on_after(0.4):
                await mock.chat(100_000)

        async def waiter() -> None:
            latency.append(await mock.timed_chat(40))

        with anyio.fail_after(10):  # a lost clock baton would stall the waiter
            async with anyio.create_task_group() as tg:
                tg.start_soon(driver)
                await anyio.sleep(0.001)  # the driver is in the physics, driving
                tg.start_soon(waiter)
        stats = await mock.stats()
    # Two in the batch until the driver gives up at 0.4, then the waiter alone.
    expected = completion_times(DEFAULT, [(0.0, "d", 100_000), (0.001, "w", 40)], [(0.4, "d")])
    assert latency == [pytest.approx(expected["w"] - 0.001, rel=1e-9)]
    assert latency[0] > lone_time(40)  # it shared the batch for a while
    assert stats.physics.cancelled == 1


async def test_many_calls_with_random_cancellations_never_stall_or_leak() -> None:
    rng = random.Random(4)
    config = MockConfig(physics=replace(DEFAULT, slots=4))
    finished: list[int] = []
    given_up: list[int] = []
    async with serve(config) as mock:

        async def one(i: int, tokens: int, give_up_s: float, stream: bool) -> None:
            with anyio.move_on_after(give_up_s) as scope:
                await (mock.stream_all(tokens) if stream else mock.chat(tokens))
                finished.append(i)
            if scope.cancelled_caught:
                given_up.append(i)

        with anyio.fail_after(600):  # a lost clock baton would stall here
            async with anyio.create_task_group() as tg:
                for i in range(40):
                    give_up = rng.choice([1.0, 5.0, math.inf, math.inf])
                    tg.start_soon(one, i, rng.randint(0, 200), give_up, rng.random() < 0.3)
        stats = await mock.stats()
        assert (await mock.chat(1)).usage is not None
    physics, counters = stats.physics, stats.counters
    assert (physics.active, physics.queued) == (0, 0)
    assert physics.submitted == counters.requests == 40  # no client overhead in virtual time
    assert len(finished) + len(given_up) == 40
    assert physics.completed == counters.completed == len(finished)
    assert physics.cancelled == counters.client_cancelled == len(given_up) > 0
