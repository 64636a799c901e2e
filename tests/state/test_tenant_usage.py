"""Tenants' usage shared through the state: on a real Redis (``conftest.py``), across schedulers.

The store's side (``add_usage`` on Redis: sums over workers, decay on the
server's clock, expiry) and the runtime's (:mod:`semisched.state.usage`): two
schedulers of one namespace, in one process as two processes would be, where
the second sends an idle tenant's request before a tenant the first one
served heavily; and a scheduler that loses Redis and goes on, choosing by its
own usage. The provider is an in-process transport that answers at once, or
holds one named call until the test lets it go: the order of sends is what the
tests read. Nothing sleeps or polls to let things settle; where a test waits for
the scheduler to have queued something, it waits until every task is blocked.
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import anyio
import httpx2
import openai
import pytest
import redis.asyncio

from semisched import Scheduler
from semisched.core import Engine, preset
from semisched.core.request import Prior, Request
from semisched.core.tenants.config import TenantConfig, TenantSpec
from semisched.runtime.calls import scheduler_config
from semisched.runtime.clock import AnyioClock
from semisched.state import LocalState
from semisched.state.base import StateBackend
from semisched.state.guard import SharedBudget
from semisched.state.redis import RedisState
from semisched.state.usage import FLUSH_S

pytestmark = [pytest.mark.anyio, pytest.mark.wallclock]

OUTPUT_TOKENS = 100
TENANTS = TenantConfig(tenants=(TenantSpec(name="a"), TenantSpec(name="b")))


# -- the provider -----------------------------------------------------------------------


class Provider(httpx2.AsyncBaseTransport):
    """Answers every chat call at once with ``OUTPUT_TOKENS`` tokens, except one it holds."""

    def __init__(self) -> None:
        self.sent: list[str] = []  # each call's message, in the order it arrived
        self.hold = ""  # the message of the call to hold until ``release`` is set
        self.holding = anyio.Event()
        self.release = anyio.Event()

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        body = json.loads(await request.aread())
        content = body["messages"][-1]["content"]
        self.sent.append(content)
        if content == self.hold:
            self.holding.set()
            await self.release.wait()
        answer = {
            "id": f"c{len(self.sent)}", "object": "chat.completion", "created": 0,
            "model": body["model"],
            "choices": [{"index": 0, "finish_reason": "stop",
                         "message": {"role": "assistant", "content": "ok"}}],
            "usage": {"prompt_tokens": 8, "completion_tokens": OUTPUT_TOKENS,
                      "total_tokens": 8 + OUTPUT_TOKENS},
        }  # fmt: skip
        return httpx2.Response(200, json=answer)


@asynccontextmanager
async def client_of(provider: Provider) -> AsyncIterator[openai.AsyncOpenAI]:
    async with httpx2.AsyncClient(transport=provider, base_url="http://fake") as http:
        yield openai.AsyncOpenAI(base_url="http://fake/v1", api_key="k", http_client=http)


def scheduler(client: Any, state: StateBackend | None, **kw: Any) -> Scheduler:
    config = preset("adaptive_drr", max_inflight=kw.pop("max_inflight", 1))
    return Scheduler(client, state=state, **kw, config=scheduler_config(config, tenants=TENANTS))


async def ask(s: Scheduler, content: str, tenant: str) -> None:
    await s.submit(model="m", messages=[{"role": "user", "content": content}],
                   max_tokens=OUTPUT_TOKENS, tenant=tenant)  # fmt: skip


def assert_decayed(value: float, expected: float, since: float, half_life_s: float = 60.0) -> None:
    """``value`` is ``expected`` decayed for at most the wall time since ``since``
    (``time.monotonic()``): exact bounds, however slow the machine."""
    floor = expected * 2.0 ** (-(time.monotonic() - since) / half_life_s)
    assert floor * (1 - 1e-9) - 1e-9 <= value <= expected * (1 + 1e-9) + 1e-9, (value, expected)


async def serve_heavily(url: str, namespace: str, tenant: str, n: int) -> float:
    """Another process's scheduler serves ``n`` calls of ``tenant``; the work it served."""
    provider = Provider()
    async with client_of(provider) as client:
        s = scheduler(client, RedisState(url, namespace=namespace), max_inflight=4)
        async with s:
            async with anyio.create_task_group() as tg:
                for i in range(n):
                    tg.start_soon(ask, s, f"{tenant}{i}", tenant)
        return s.statistics().engine.tenant(tenant).served_tokens


async def contest(s: Scheduler, provider: Provider, *, hold_for: str) -> list[str]:
    """With one call of ``hold_for`` in flight (``max_inflight=1``), queue one call of
    each tenant, let the held one finish: the order the three were sent in."""
    provider.hold, provider.holding, provider.release = "hold", anyio.Event(), anyio.Event()
    provider.sent.clear()
    async with anyio.create_task_group() as tg:
        tg.start_soon(ask, s, "hold", hold_for)
        await provider.holding.wait()
        tg.start_soon(ask, s, "from a", "a")
        tg.start_soon(ask, s, "from b", "b")
        await anyio.wait_all_tasks_blocked()  # both calls are queued behind the held one
        assert [t.queued for t in s.statistics().engine.tenants] == [1, 1]
        provider.release.set()
    return provider.sent


# -- the store --------------------------------------------------------------------------


@asynccontextmanager
async def inspector(url: str) -> AsyncIterator[redis.asyncio.Redis]:
    client = redis.asyncio.Redis.from_url(url, decode_responses=True)
    try:
        yield client
    finally:
        await client.aclose()


async def test_redis_usage_adds_up_over_workers_and_decays_on_the_server_clock(
    redis_url: str, namespace: str
) -> None:
    one = RedisState(redis_url, namespace=namespace)
    two = RedisState(redis_url, namespace=namespace)
    await one.open()
    await two.open()
    try:
        assert await one.add_usage({}, 60.0) == {}
        since = time.monotonic()
        assert_decayed((await one.add_usage({"a": 1000.0}, 60.0))["a"], 1000.0, since)
        found = await two.add_usage({"a": 500.0, "b": 100.0}, 60.0)
        assert set(found) == {"a", "b"}
        assert_decayed(found["a"], 1500.0, since)
        assert_decayed(found["b"], 100.0, since)
        async with inspector(redis_url) as client:
            usage, at = f"{namespace}:tenants:usage", f"{namespace}:tenants:at"
            assert set(await client.hkeys(usage)) == set(await client.hkeys(at)) == {"a", "b"}
            # The TTL is 32 half-lives (~32 min): an abandoned namespace goes by itself.
            assert 1900_000 < await client.pttl(usage) <= 1920_000
            # Stamp a one half-life (60 s) before the server's now: the next read halves it.
            stored = float(await client.hget(usage, "a") or 0)
            since = time.monotonic()
            seconds, micros = await client.time()
            now_us = int(seconds) * 1_000_000 + int(micros)
            await client.hset(at, "a", now_us - 60_000_000)
            await client.hset(at, "b", now_us - 60 * 64_000_000)  # 64 half-lives: nothing left
            found = await one.add_usage({}, 60.0)
            assert set(found) == {"a"}
            assert_decayed(found["a"], stored / 2, since)
            assert await client.hkeys(usage) == ["a"]  # b was forgotten
        assert one.statistics().usage_syncs == 3 and two.statistics().usage_syncs == 1
        with pytest.raises(ValueError, match="finite number >= 0"):
            await one.add_usage({"a": -1.0}, 60.0)
    finally:
        await one.close()
        await two.close()


# -- the schedulers ---------------------------------------------------------------------


@pytest.mark.parametrize("store", ["redis", "local"])
async def test_a_tenant_busy_in_another_process_waits_behind_an_idle_one(
    redis_url: str, namespace: str, store: str
) -> None:
    local = LocalState()

    def state() -> StateBackend:
        return RedisState(redis_url, namespace=namespace) if store == "redis" else local

    since = time.monotonic()
    if store == "redis":
        served = await serve_heavily(redis_url, namespace, "a", 20)
    else:
        provider = Provider()
        async with client_of(provider) as client:
            first = scheduler(client, state(), max_inflight=4)
            async with first:
                async with anyio.create_task_group() as tg:
                    for i in range(20):
                        tg.start_soon(ask, first, f"a{i}", "a")
            served = first.statistics().engine.tenant("a").served_tokens
    assert served >= 20 * OUTPUT_TOKENS

    provider = Provider()
    async with client_of(provider) as client:
        alone = scheduler(client, None)  # the same process without the shared state
        async with alone:
            assert await contest(alone, provider, hold_for="b") == ["hold", "from a", "from b"]
        second = scheduler(client, state())
        async with second:
            tenant_a = second.statistics().engine.tenant("a")  # before it sent anything
            assert_decayed(tenant_a.usage, served, since)
            # b's own call in flight counts too, but a's usage elsewhere is larger: b first.
            assert await contest(second, provider, hold_for="b") == ["hold", "from b", "from a"]
            stats = second.statistics()
    a, b = stats.engine.tenant("a"), stats.engine.tenant("b")
    assert a.completed == 1
    assert_decayed(a.usage, served + a.served_tokens, since)  # the fleet's and its own
    assert a.share > 0.8 and a.debt > 0.3 * (a.usage + b.usage) > 0 > b.debt
    assert stats.state is not None and stats.state.usage_syncs >= 1


class Later(AnyioClock):
    """The loop's clock, ``offset`` seconds ahead: the test moves the scheduler's time on."""

    offset = 0.0

    def now(self) -> float:
        return super().now() + self.offset


async def test_with_redis_down_the_scheduler_serves_on_and_chooses_by_its_own_usage(
    redis_servers: Callable[[], Any], namespace: str
) -> None:
    server = redis_servers()
    since = time.monotonic()
    served = await serve_heavily(server.url, namespace, "a", 20)
    provider, clock = Provider(), Later()
    async with client_of(provider) as client:
        s = scheduler(client, RedisState(server.url, namespace=namespace), clock=clock)
        async with s:
            assert_decayed(s.statistics().engine.tenant("a").usage, served, since)
            server.stop()
            # Still served; the usage it last saw from the others still counts (decaying).
            assert await contest(s, provider, hold_for="b") == ["hold", "from b", "from a"]
            lost = s.statistics().state
            clock.offset += 3600.0  # an hour (60 half-lives) later, Redis still down
            # The others' usage has decayed away: b's call in flight decides, a goes first.
            assert await contest(s, provider, hold_for="b") == ["hold", "from a", "from b"]
            stats = s.statistics()
    assert lost is not None and lost.backend == "redis (fallback: local share)"
    assert lost.fallbacks == 1
    assert stats.counters.succeeded == 6
    a = stats.engine.tenant("a")
    assert a.completed == 2 and a.usage < OUTPUT_TOKENS + 1  # its own only


async def test_sharing_stops_while_redis_is_down_and_what_was_served_meanwhile_joins_later(
    redis_servers: Callable[[], Any], namespace: str
) -> None:
    server = redis_servers()
    config = preset("adaptive_drr").with_(tenants=TENANTS)
    engine, clock = Engine(config), AnyioClock()
    guard = SharedBudget(RedisState(server.url, namespace=namespace), engine, clock, rejoin_s=0.05)
    usage = guard.track_usage(  # no shell: nothing to run
        engine,
        engine.config.tenants,
        engine.config.input_token_weight,
        clock.now,
        lambda actions: None,
    )
    assert usage is not None
    other = RedisState(server.url, namespace=namespace)
    await other.open()
    since = time.monotonic()
    await other.add_usage({"a": 1000.0}, 60.0)
    await guard.open()  # reads the fleet's usage before any send
    assert_decayed(engine.statistics().tenant("a").usage, 1000.0, since)

    def served(tenant: str, tokens: int) -> None:
        prior = Prior(p50=tokens, p90=tokens)
        request = Request(id=f"r-{tenant}", klass="batch", prior=prior, tenant=tenant)
        usage.served(request, tokens)

    server.stop()
    served("b", 300)
    await usage.sync()  # lost: no round trip, nothing observed, b's 300 kept
    assert guard.lost and guard.statistics().fallbacks == 1
    assert engine.statistics().tenant("b").usage == 0.0
    server.start()  # the same port, an empty store
    async with anyio.create_task_group() as tg:  # what the scheduler runs beside it
        tg.start_soon(guard.run_heartbeat, guard.backend.lease_ttl_s)
        with anyio.fail_after(10):
            while guard.lost:  # it rejoins in the background (every rejoin_s)
                await anyio.sleep(0.01)
        tg.cancel_scope.cancel()
    await usage.sync()  # b's 300 goes out
    assert not guard.lost
    found = await other.add_usage({}, 60.0)
    assert set(found) == {"b"}  # a's 1000 died with the old server
    assert_decayed(found["b"], 300.0, since)
    # This engine no longer counts a's 1000, and its own push is not "the others'".
    assert engine.statistics().tenant("a").usage == 0.0
    assert engine.statistics().tenant("b").usage == pytest.approx(0.0, abs=0.05)
    await other.close()
    await guard.close()


async def test_completions_share_their_usage_in_a_few_round_trips(
    redis_url: str, namespace: str
) -> None:
    provider = Provider()
    n = 300
    async with client_of(provider) as client:
        s = scheduler(client, RedisState(redis_url, namespace=namespace), max_inflight=16)
        start = time.monotonic()
        async with s:
            async with anyio.create_task_group() as tg:
                for i in range(n):
                    tg.start_soon(ask, s, f"x{i}", "ab"[i % 2])
        elapsed = time.monotonic() - start
        stats = s.statistics()
    assert stats.state is not None and stats.counters.succeeded == n
    syncs = stats.state.usage_syncs
    # One on open, one on close, and between them at most one per flush interval.
    assert syncs <= 3 + elapsed / FLUSH_S, (syncs, elapsed)
    assert syncs < n / 3, (syncs, elapsed)  # far fewer than one per completion
    async with inspector(redis_url) as client:
        stored = await client.hgetall(f"{namespace}:tenants:usage")
    assert set(stored) == {"a", "b"}
    for tenant in "ab":  # everything it served reached the store (decaying since)
        assert_decayed(float(stored[tenant]), stats.engine.tenant(tenant).served_tokens, start)
