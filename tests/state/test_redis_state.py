"""RedisState against a real Redis server (``conftest.py``): exact budgets, leases, pauses, errors.

Every test gets a fresh namespace on the session's server; the restart test
has a server of its own. Workers are separate :class:`RedisState` instances
with their own worker ids, as separate processes would be; one test kills a
real subprocess with ``SIGKILL``. Only the lease-TTL tests wait in real time,
and they poll with a bounded deadline rather than sleep a fixed time.
"""

from __future__ import annotations

import math
import os
import random
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, Protocol

import anyio
import pytest
import redis.asyncio

from semisched.state.base import Grant, Scope, StateBackend, StateForgotten, StateUnavailable
from semisched.state.redis import RedisState

pytestmark = [pytest.mark.anyio, pytest.mark.wallclock]

ROOT = Path(__file__).resolve().parents[2]
SECRET = "hunter2-s3cret"


class Server(Protocol):
    url: str
    port: int

    def start(self) -> None: ...
    def stop(self) -> str: ...


@asynccontextmanager
async def opened(
    url: str, namespace: str, n: int = 1, **kw: Any
) -> AsyncIterator[list[RedisState]]:
    """``n`` open workers of one namespace, closed afterwards."""
    states: list[RedisState] = []
    try:
        for _ in range(n):
            state = RedisState(url, namespace=namespace, **kw)
            await state.open()
            states.append(state)
        yield states
    finally:
        for state in states:
            await state.close()


@asynccontextmanager
async def inspector(url: str) -> AsyncIterator[redis.asyncio.Redis]:
    """A plain client that reads the keys the backend wrote."""
    client = redis.asyncio.Redis.from_url(url, decode_responses=True)
    try:
        yield client
    finally:
        await client.aclose()


async def server_us(client: redis.asyncio.Redis) -> int:
    seconds, micros = await client.time()
    return int(seconds) * 1_000_000 + int(micros)


async def eventually(probe: Callable[[], Awaitable[bool]], within_s: float) -> float:
    """Poll ``probe`` until true; the seconds it took. Fails after ``within_s``."""
    start = time.monotonic()
    while not await probe():
        if time.monotonic() - start > within_s:
            pytest.fail(f"not within {within_s} s")
        await anyio.sleep(0.02)
    return time.monotonic() - start


async def ledger(
    client: redis.asyncio.Redis, namespace: str, key: str
) -> tuple[int, dict[str, int], set[str]]:
    """A scope's running total, its hash's members and its charge set's members."""
    tokens = await client.hgetall(f"{namespace}:scope:{key}:tokens")
    total = int(tokens.pop("total", 0))
    charged = set(await client.zrange(f"{namespace}:scope:{key}:charges", 0, -1))
    return total, {m: int(v) for m, v in tokens.items()}, charged


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def test_it_is_a_state_backend(redis_url: str, namespace: str) -> None:
    async with opened(redis_url, namespace) as (state,):
        assert isinstance(state, StateBackend)
        assert state.statistics().backend == "redis"
        assert "open=True" in repr(state)


async def test_rpm_is_exact_under_eight_concurrent_workers(redis_url: str, namespace: str) -> None:
    scope = Scope(key="fleet", rpm=50)
    grants: list[Grant] = []
    async with opened(redis_url, namespace, 8) as workers:

        async def send(state: RedisState, i: int) -> None:
            grants.append(await state.reserve(f"r{i}", 1, [scope]))

        async with anyio.create_task_group() as tg:
            for state in workers:
                for i in range(20):
                    tg.start_soon(send, state, i)
        refused = [g for g in grants if not g.ok]
        assert len(grants) - len(refused) == 50
        assert all(g.reason == "rpm" and g.scope == "fleet" and 0 < g.wait_s <= 60 for g in refused)
        assert sum(w.statistics().refusals for w in workers) == len(refused) == 110
        async with inspector(redis_url) as client:
            assert await client.zcard(f"{namespace}:scope:fleet:charges") == 50


async def test_tpm_is_exact_under_concurrency_and_too_big_is_never(
    redis_url: str, namespace: str
) -> None:
    scope = Scope(key="fleet", tpm=1000)
    grants: list[Grant] = []
    async with opened(redis_url, namespace, 8) as workers:

        async def send(state: RedisState, i: int) -> None:
            grants.append(await state.reserve(f"r{i}", 30, [scope]))

        async with anyio.create_task_group() as tg:
            for state in workers:
                for i in range(10):
                    tg.start_soon(send, state, i)
        assert sum(g.ok for g in grants) == 33  # 33 * 30 = 990 <= 1000 < 34 * 30
        assert {(g.reason, g.scope) for g in grants if not g.ok} == {("tpm", "fleet")}
        assert all(g.wait_s > 0 for g in grants if not g.ok)
        async with inspector(redis_url) as client:
            assert (await ledger(client, namespace, "fleet"))[0] == 990_000
            never = await workers[0].reserve("big", 1000.5, [Scope(key="other", tpm=1000)])
            assert never == Grant(ok=False, wait_s=math.inf, scope="other", reason="never")
            assert await client.exists(f"{namespace}:scope:other:charges") == 0
            assert (await workers[0].reserve("all", 1000, [Scope(key="other", tpm=1000)])).ok


async def test_waits_are_exact_on_the_server_clock(redis_url: str, namespace: str) -> None:
    window = 60_000_000
    async with opened(redis_url, namespace) as (state,), inspector(redis_url) as client:
        charges = f"{namespace}:scope:{{}}:charges"
        member = f"{state.worker}:{{}}"
        by_count = Scope(key="rpm", rpm=2)
        assert (await state.reserve("a", 0, [by_count])).ok
        assert (await state.reserve("b", 0, [by_count])).ok
        before, grant, after = (
            await server_us(client),
            await state.reserve("c", 0, [by_count]),
            await server_us(client),
        )
        oldest = int(await client.zscore(charges.format("rpm"), member.format("a")))
        assert (grant.ok, grant.reason) == (False, "rpm")
        assert oldest + window - after <= round(grant.wait_s * 1e6) <= oldest + window - before

        by_tokens = Scope(key="tpm", tpm=1000)
        for rid in "abc":
            assert (await state.reserve(rid, 300, [by_tokens])).ok
        # 900 charged; 500 more needs 400 to leave: "a" (300) is not enough, "a" and "b" are.
        before, grant, after = (
            await server_us(client),
            await state.reserve("d", 500, [by_tokens]),
            await server_us(client),
        )
        second = int(await client.zscore(charges.format("tpm"), member.format("b")))
        assert (grant.ok, grant.reason) == (False, "tpm")
        assert second + window - after <= round(grant.wait_s * 1e6) <= second + window - before


async def test_settle_replaces_the_charge_and_the_budget_follows(
    redis_url: str, namespace: str
) -> None:
    scope = Scope(key="fleet", tpm=1000)
    async with opened(redis_url, namespace) as (state,), inspector(redis_url) as client:
        assert (await state.reserve("r", 100, [scope])).ok
        assert not (await state.reserve("s", 960, [scope])).ok
        await state.settle("r", 40, [scope])
        await state.settle("unknown", 500, [scope])  # nothing charged: nothing to settle
        assert (await ledger(client, namespace, "fleet"))[0] == 40_000
        assert (await state.reserve("s", 960, [scope])).ok


async def test_a_retry_is_charged_again_and_settle_reaches_the_latest(
    redis_url: str, namespace: str
) -> None:
    scope = Scope(key="fleet", rpm=10, max_concurrency=1)
    async with opened(redis_url, namespace) as (state,), inspector(redis_url) as client:
        assert (await state.reserve("r", 100, [scope])).ok
        assert (await state.reserve("r", 100, [scope])).ok  # its own lease: no second slot needed
        await state.settle("r", 50, [scope])
        total, members, charged = await ledger(client, namespace, "fleet")
        assert (total, len(charged), members[f"{state.worker}:r"]) == (150_000, 2, 50_000)
        assert await client.zcard(f"{namespace}:scope:fleet:leases") == 1


@pytest.mark.parametrize("seed", [1, 2])
async def test_the_running_total_never_drifts(redis_url: str, namespace: str, seed: int) -> None:
    """Reserves (with retries), settles and releases across many short windows: the total always
    equals the sum of the live charges, and each charge holds what was last reserved or settled."""
    rng = random.Random(seed)
    # Short windows (charges expire while it runs) that two or three reservations fill, so
    # that refusals happen even when a loaded machine takes a while over each step.
    scope = Scope(key="fleet", rpm=40, tpm=2_000, window_s=0.2)
    async with opened(redis_url, namespace, 4) as workers, inspector(redis_url) as client:
        expected: dict[str, int] = {}

        async def check(exact: bool = True) -> None:
            total, members, charged = await ledger(client, namespace, "fleet")
            assert total == sum(members.values())
            assert set(members) == charged
            for member, value in members.items():
                if exact and "#" not in member:  # a retry's earlier charge is "<member>#<time>"
                    assert value == expected[member]

        async def step(state: RedisState) -> None:
            rid, tokens = f"r{rng.randrange(30)}", round(rng.uniform(0, 900), 3)
            member = f"{state.worker}:{rid}"
            op = rng.random()
            if op < 0.6:
                if (await state.reserve(rid, tokens, [scope])).ok:
                    expected[member] = round(tokens * 1000)
            elif op < 0.9:
                await state.settle(rid, tokens, [scope])
                expected[member] = round(tokens * 1000)  # checked only where still charged
            else:
                await state.release(rid, [scope])

        for i in range(1000):  # one at a time: each charge is checked against its model
            await step(rng.choice(workers))
            if i % 50 == 0:
                await check()
        await check()

        async def run(state: RedisState) -> None:
            for _ in range(100):
                await step(state)

        async with anyio.create_task_group() as tg:  # all at once: the sums still agree
            for state in workers:
                tg.start_soon(run, state)
        await check(exact=False)
        assert sum(w.statistics().refusals for w in workers) > 0

        async def purged() -> bool:
            await workers[0].settle("none", 0, [scope])  # a settle purges the window
            return await ledger(client, namespace, "fleet") == (0, {}, set())

        await eventually(purged, within_s=3.0)


async def test_a_reservation_reports_the_workers_and_what_each_window_holds(
    redis_url: str, namespace: str
) -> None:
    fleet, east = Scope(key="fleet", rpm=2), Scope(key="endpoint:east", tpm=1000)
    async with opened(redis_url, namespace, n=3) as (a, b, _):
        granted = await a.reserve("r1", 300, [fleet, east])
        assert granted.ok and granted.workers == 3
        assert granted.used == (("fleet", 1, 300.0), ("endpoint:east", 1, 300.0))
        assert (await b.reserve("r2", 200, [fleet])).ok
        refused = await b.reserve("r3", 1, [fleet])
        assert not refused.ok and refused.used == (("fleet", 2, 500.0),)  # as it was


async def test_recorded_sends_count_at_their_times_and_once(redis_url: str, namespace: str) -> None:
    scope = Scope(key="fleet", rpm=3, window_s=60.0)
    async with opened(redis_url, namespace) as (state,):
        sends = [("f1", 10.0, 100.0), ("f2", 0.5, 50.0), ("old", 61.0, 1.0)]
        assert await state.record(scope, sends) == 2  # one left the window long ago
        assert await state.record(scope, sends) == 0  # recorded already: counted once
        assert (await state.reserve("r", 1, [scope])).ok
        refused = await state.reserve("s", 1, [scope])
        # Full until f1 leaves: it was charged 10 s ago, so in 50 s, not 60.
        assert not refused.ok and 49.0 < refused.wait_s <= 50.0
        assert refused.used == (("fleet", 3, 151.0),)


async def test_concurrency_leases_and_release(redis_url: str, namespace: str) -> None:
    scope = Scope(key="fleet", max_concurrency=3)
    async with opened(redis_url, namespace, 2) as (a, b):
        assert all([(await a.reserve(r, 1, [scope])).ok for r in ("r1", "r2", "r3")])
        grant = await b.reserve("r4", 1, [scope])
        assert (grant.ok, grant.reason, grant.scope) == (False, "concurrency", "fleet")
        assert 0 < grant.wait_s <= 1.0
        await a.release("r2", [scope])
        assert a.leases_held == 2
        assert (await b.reserve("r4", 1, [scope])).ok
        assert not (await b.reserve("r5", 1, [scope])).ok
        assert await b.workers() == 2
        await a.close()  # returns its leases and its registration at once
        assert (await b.reserve("r5", 1, [scope])).ok
        assert await b.workers() == 1


async def test_leases_of_a_silent_worker_expire_and_heartbeats_keep_them(
    redis_url: str, namespace: str
) -> None:
    scope = Scope(key="fleet", max_concurrency=2)
    ttl = 0.3
    async with (
        opened(redis_url, namespace, lease_ttl_s=ttl) as (a,),
        opened(redis_url, namespace) as (b,),
    ):
        assert (await a.reserve("r1", 1, [scope])).ok and (await a.reserve("r2", 1, [scope])).ok
        assert await b.workers() == 2
        # A heartbeating worker keeps its leases for several TTLs.
        deadline = time.monotonic() + 4 * ttl
        while time.monotonic() < deadline:
            await a.heartbeat()
            grant = await b.reserve("x", 1, [scope])
            assert (grant.ok, grant.reason) == (False, "concurrency") and grant.wait_s <= ttl
            await anyio.sleep(ttl / 4)
        # Then it falls silent (a hung or killed process): its capacity comes back.
        took = await eventually(lambda: ok(b.reserve("x", 1, [scope])), within_s=ttl + 2.0)
        assert took <= ttl + 2.0
        assert await b.workers() == 1  # its registration expired too
        with pytest.raises(StateForgotten):  # too late: it is told it was forgotten,
            await a.heartbeat()  # and an expired lease is not resurrected
        async with inspector(redis_url) as client:
            assert await client.zcard(f"{namespace}:scope:fleet:leases") == 1  # b's "x"
        assert await b.workers() == 2  # but a registers again


async def ok(grant: Awaitable[Grant]) -> bool:
    return (await grant).ok


CHILD = """
import asyncio, sys
from semisched.state.base import Scope
from semisched.state.redis import RedisState

async def main():
    state = RedisState(sys.argv[1], namespace=sys.argv[2], lease_ttl_s=float(sys.argv[3]))
    await state.open()
    for rid in ("k1", "k2"):
        assert (await state.reserve(rid, 1, [Scope(key="fleet", max_concurrency=2)])).ok
    print("held", flush=True)
    while True:
        await state.heartbeat()
        await asyncio.sleep(0.05)

asyncio.run(main())
"""


async def test_kill_9_of_a_worker_returns_its_leases_within_the_ttl(
    redis_url: str, namespace: str
) -> None:
    scope, ttl = Scope(key="fleet", max_concurrency=2), 0.5
    command = [sys.executable, "-c", CHILD, redis_url, namespace, str(ttl)]
    with subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, text=True) as child:
        try:
            assert child.stdout is not None
            with anyio.fail_after(30):
                line = await anyio.to_thread.run_sync(child.stdout.readline, abandon_on_cancel=True)
                assert line.strip() == "held"
            async with opened(redis_url, namespace) as (state,):
                assert (await state.reserve("x", 1, [scope])).reason == "concurrency"
                assert await state.workers() == 2
                os.kill(child.pid, signal.SIGKILL)
                assert await anyio.to_thread.run_sync(child.wait) == -signal.SIGKILL
                took = await eventually(
                    lambda: ok(state.reserve("x", 1, [scope])), within_s=ttl + 2.0
                )
                assert took <= ttl + 2.0
                assert await state.workers() == 1
        finally:
            if child.poll() is None:
                child.kill()


async def test_a_pause_holds_every_worker(redis_url: str, namespace: str) -> None:
    scope, other = Scope(key="endpoint:east"), Scope(key="endpoint:west")
    async with opened(redis_url, namespace, 2) as (a, b), inspector(redis_url) as client:
        await a.pause(scope, 5.0)
        await b.pause(scope, 1.0)  # a shorter pause never shortens one
        for state in (a, b):
            grant = await state.reserve("r", 1, [scope])
            assert (grant.ok, grant.reason, grant.scope) == (False, "paused", "endpoint:east")
            assert 4.5 < grant.wait_s <= 5.0
        assert (await b.reserve("r", 1, [other])).ok
        assert 4000 < await client.pttl(f"{namespace}:scope:endpoint:east:pause") <= 5000
        with pytest.raises(ValueError, match="seconds"):
            await a.pause(scope, -1)


async def test_a_refusal_charges_no_scope(redis_url: str, namespace: str) -> None:
    fleet = Scope(key="fleet", rpm=100, tpm=10_000, max_concurrency=10)
    endpoint = Scope(key="endpoint:east", rpm=1)
    async with opened(redis_url, namespace) as (state,), inspector(redis_url) as client:
        assert (await state.reserve("r1", 10, [fleet, endpoint])).ok
        grant = await state.reserve("r2", 10, [fleet, endpoint])
        assert (grant.ok, grant.reason, grant.scope) == (False, "rpm", "endpoint:east")
        total, _, charged = await ledger(client, namespace, "fleet")
        assert (total, len(charged)) == (10_000, 1)
        assert await client.zcard(f"{namespace}:scope:fleet:leases") == 1
        # The refusal names the scope with the longest wait.
        await state.pause(fleet, 1.0)
        assert (await state.reserve("r2", 10, [fleet, endpoint])).scope == "endpoint:east"
        await state.pause(fleet, 120.0)
        grant = await state.reserve("r2", 10, [fleet, endpoint])
        assert (grant.reason, grant.scope) == ("paused", "fleet") and grant.wait_s > 60


async def test_namespaces_never_interact(redis_url: str, namespace: str) -> None:
    scope, other = Scope(key="fleet", rpm=1), f"{namespace}b"
    async with opened(redis_url, namespace, 2) as (a, _), opened(redis_url, other) as (b,):
        assert (await a.reserve("r", 1, [scope])).ok
        assert not (await a.reserve("s", 1, [scope])).ok
        assert (await b.reserve("r", 1, [scope])).ok
        assert (await a.workers(), await b.workers()) == (2, 1)
        async with inspector(redis_url) as client:
            mine = {k async for k in client.scan_iter(f"{namespace}:*")}
            theirs = {k async for k in client.scan_iter(f"{other}:*")}
            assert mine and theirs and not mine & theirs
            keys = mine | theirs
            assert all([await client.pttl(k) > 0 for k in keys])  # all expire by themselves
            assert 60_000 < await client.pttl(f"{namespace}:scope:fleet:charges") <= 70_000


async def test_open_on_a_closed_port_fails_fast_without_the_password() -> None:
    port = closed_port()
    state = RedisState(f"redis://user:{SECRET}@127.0.0.1:{port}/0")
    assert SECRET not in repr(state) and "user:***@" in repr(state)
    start = time.monotonic()
    with pytest.raises(StateUnavailable) as caught:
        await state.open()
    assert time.monotonic() - start < 3.0
    assert f"127.0.0.1:{port}" in str(caught.value)
    assert SECRET not in str(caught.value) and SECRET not in repr(caught.value.__cause__)


def test_urls_are_checked_and_masked() -> None:
    with pytest.raises(ValueError, match="redis://, rediss:// or unix://") as caught:
        RedisState(f"http://user:{SECRET}@host/0")
    assert SECRET not in str(caught.value)
    assert SECRET not in repr(RedisState(f"unix:///tmp/r.sock?db=0&password={SECRET}"))
    assert SECRET not in repr(RedisState(f"rediss://:{SECRET}@host:6380/1"))
    with pytest.raises(ValueError, match="namespace"):
        RedisState("redis://h", namespace="a:b")


async def test_calls_before_open_are_misuse() -> None:
    state = RedisState("redis://127.0.0.1:1/0")
    with pytest.raises(RuntimeError, match="not open"):
        await state.reserve("r", 1, [Scope(key="fleet")])


async def test_a_server_restart_is_unavailable_then_rejoined(
    redis_servers: Callable[[], Server],
) -> None:
    server = redis_servers()
    scope = Scope(key="fleet", rpm=100, max_concurrency=5)
    state = RedisState(server.url, namespace="restart")
    await state.open()
    try:
        assert (await state.reserve("r1", 1, [scope])).ok
        server.stop()
        calls: list[Callable[[], Awaitable[object]]] = [
            lambda: state.reserve("r2", 1, [scope]),
            lambda: state.settle("r1", 2, [scope]),
            lambda: state.release("r1", [scope]),
            state.heartbeat,
            lambda: state.pause(scope, 1.0),
            state.workers,
        ]
        for call in calls:
            with pytest.raises(StateUnavailable, match=re.escape(f"127.0.0.1:{server.port}")):
                await call()
        server.start()  # same port, empty state
        # An empty store is not taken for an idle one: the worker hears that it was
        # forgotten, from a reservation (nothing charged) or from the heartbeat that
        # registers it again; then it reserves there again.
        with pytest.raises(StateForgotten, match="forgot this worker"):
            await state.reserve("r2", 1, [scope])
        with pytest.raises(StateForgotten, match="forgot this worker"):
            await state.heartbeat()
        await state.heartbeat()
        assert (await state.reserve("r2", 1, [scope])).ok
        assert await state.workers() == 1
    finally:
        await state.close()


async def test_reserve_round_trip_on_loopback(redis_url: str, namespace: str) -> None:
    """Reports the p50/p99 of a reservation in two limited scopes (not asserted: a measurement)."""
    scopes = [Scope(key="fleet", rpm=10**6, tpm=10**9, max_concurrency=100),
              Scope(key="endpoint:east", rpm=10**6, tpm=10**9, max_concurrency=100)]  # fmt: skip
    async with opened(redis_url, namespace) as (state,):
        for i in range(2000):
            assert (await state.reserve(f"r{i}", 500, scopes)).ok
            await state.release(f"r{i}", scopes)
        stats = state.statistics()
    assert (stats.reservations, stats.refusals) == (2000, 0)
    assert 0 < stats.round_trip_p50_ms <= stats.round_trip_p99_ms
    print(f"\nreserve round trip (loopback, 2 scopes): p50 {stats.round_trip_p50_ms:.3f} ms, "
          f"p99 {stats.round_trip_p99_ms:.3f} ms")  # fmt: skip
