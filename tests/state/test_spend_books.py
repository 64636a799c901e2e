"""Spend caps' books: local and on a real Redis, the same rules (reserve all or none,
settle to the real cost, release on failure, calendar periods), and the fallback."""

from __future__ import annotations

import anyio
import pytest

from semisched.core.spend import SpendCap
from semisched.state.base import StateUnavailable
from semisched.state.redis import RedisState
from semisched.state.spend import LocalSpend, SpendGuard
from semisched.state.spend_redis import RedisSpend

pytestmark = pytest.mark.anyio

KEY_DAY = SpendCap(usd=1.0, per="day")
ACME_HOUR = SpendCap(usd=0.5, per="hour", tenant="acme")


async def _books_follow_the_rules(books: LocalSpend | RedisSpend) -> None:
    first = await books.reserve_spend("r1", 0.4, [KEY_DAY, ACME_HOUR])
    assert first.ok and len(first.keys) == 2
    # acme's hour holds 0.4 of 0.5: a 0.2 reservation passes it, and charges nothing anywhere
    refused = await books.reserve_spend("r2", 0.2, [KEY_DAY, ACME_HOUR])
    assert not refused.ok and refused.cap == ACME_HOUR
    assert refused.spent_usd == pytest.approx(0.4)
    assert refused.reset_at % 3600 == 0
    # another tenant spends from the key's day only: 0.4 + 0.5 fits in 1.0
    other = await books.reserve_spend("r3", 0.5, [KEY_DAY])
    assert other.ok
    # settling r1 at its real cost (0.1) frees room for acme and the key
    await books.settle_spend("r1", 0.1, first.keys)
    again = await books.reserve_spend("r2", 0.2, [KEY_DAY, ACME_HOUR])
    assert again.ok
    # releasing r3 (failed: 0) gives its 0.5 back to the key's day
    await books.settle_spend("r3", 0.0, other.keys)
    assert (await books.reserve_spend("r4", 0.6, [KEY_DAY])).ok
    # 0.1 + 0.2 + 0.6 = 0.9 held: 0.2 more would pass the key's 1.0
    full = await books.reserve_spend("r5", 0.2, [KEY_DAY])
    assert not full.ok and full.spent_usd == pytest.approx(0.9)
    assert full.reset_at % 86400 == 0
    # settling twice changes nothing the second time
    await books.settle_spend("r1", 5.0, first.keys)
    assert not (await books.reserve_spend("r6", 0.2, [KEY_DAY])).ok
    # a reservation whose answer was lost (a cancel) is released by its caps
    await books.release_spend("r4", [KEY_DAY])
    assert (await books.reserve_spend("r7", 0.6, [KEY_DAY])).ok
    await books.release_spend("r4", [KEY_DAY])  # again: nothing held, nothing changes
    assert not (await books.reserve_spend("r8", 0.2, [KEY_DAY])).ok


async def test_local_books_reserve_settle_and_release() -> None:
    await _books_follow_the_rules(LocalSpend())


async def test_redis_books_follow_the_same_rules(redis_url: str, namespace: str) -> None:
    state = RedisState(redis_url, namespace=namespace)
    await state.open()
    try:
        await _books_follow_the_rules(RedisSpend(state))
    finally:
        await state.close()


async def test_a_month_cap_resets_on_the_first_of_the_next_month(
    redis_url: str, namespace: str
) -> None:
    cap = SpendCap(usd=0.01, per="month")
    state = RedisState(redis_url, namespace=namespace)
    await state.open()
    try:
        await RedisSpend(state).reserve_spend("a", 0.01, [cap])
        refused = await RedisSpend(state).reserve_spend("b", 0.01, [cap])
    finally:
        await state.close()
    local = LocalSpend()
    assert not refused.ok
    assert refused.reset_at == cap.period(refused.reset_at - 1)[1]  # the script's month end
    await local.reserve_spend("a", 0.01, [cap])
    assert not (await local.reserve_spend("b", 0.01, [cap])).ok


async def test_many_workers_never_overspend_through_redis(redis_url: str, namespace: str) -> None:
    cap = SpendCap(usd=1.0, per="day")
    granted = 0

    async def worker(name: str) -> None:
        nonlocal granted
        state = RedisState(redis_url, namespace=namespace, worker=name)
        await state.open()
        books = RedisSpend(state)
        try:
            for i in range(30):
                if (await books.reserve_spend(f"r{i}", 0.05, [cap])).ok:
                    granted += 1
        finally:
            await state.close()

    async with anyio.create_task_group() as tg:
        for w in range(4):
            tg.start_soon(worker, f"w{w}")
    assert granted == 20  # exactly 1.0 / 0.05 of 120 attempts


class _Lost:
    """A shared store that answers until told it is lost."""

    def __init__(self) -> None:
        self.inner = LocalSpend()
        self.down = False
        self.recorded = 0.0

    async def reserve_spend(self, request_id, usd, caps):  # type: ignore[no-untyped-def]
        if self.down:
            raise StateUnavailable("down")
        return await self.inner.reserve_spend(request_id, usd, caps)

    async def settle_spend(self, request_id, usd, keys):  # type: ignore[no-untyped-def]
        if self.down:
            raise StateUnavailable("down")
        await self.inner.settle_spend(request_id, usd, keys)

    async def release_spend(self, request_id, caps):  # type: ignore[no-untyped-def]
        await self.inner.release_spend(request_id, caps)

    async def record_spend(self, usd, caps):  # type: ignore[no-untyped-def]
        if self.down:
            raise StateUnavailable("down")
        self.recorded += usd
        await self.inner.record_spend(usd, caps)


async def test_a_lost_store_leaves_each_worker_its_share_of_what_was_left() -> None:
    shared, wall = _Lost(), [1000.0]
    guard = SpendGuard(shared, workers=lambda: 2, wall=lambda: wall[0])
    assert (await guard.reserve_spend("a", 0.4, [KEY_DAY])).ok  # 0.6 left, shared by 2
    shared.down = True
    grants = [(await guard.reserve_spend(f"b{i}", 0.1, [KEY_DAY])).ok for i in range(5)]
    assert guard.lost and grants == [True, True, True, False, False]  # 0.3 = 0.6 / 2
    shared.down = False
    wall[0] += 10  # past the retry interval: rejoins and records what it spent alone
    assert (await guard.reserve_spend("c", 0.1, [KEY_DAY])).ok
    assert not guard.lost and shared.recorded == pytest.approx(0.3)
    assert shared.inner.spent(KEY_DAY) == pytest.approx(0.8)


async def test_a_real_redis_lost_and_back(redis_servers, namespace: str) -> None:  # type: ignore[no-untyped-def]
    """The fallback on a real server: stopped mid-run, each worker spends its share of
    what was left; started again (empty: no persistence), what it spent alone is
    recorded in the shared books, and only that: what the store held before is gone."""
    server = redis_servers()
    state = RedisState(server.url, namespace=namespace)
    await state.open()
    wall = [0.0]
    guard = SpendGuard(RedisSpend(state), workers=lambda: 1, wall=lambda: wall[0] + 1e9)
    try:
        assert (await guard.reserve_spend("a", 0.6, [KEY_DAY])).ok  # 0.4 left
        server.stop()
        alone = [(await guard.reserve_spend(f"b{i}", 0.1, [KEY_DAY])).ok for i in range(6)]
        assert guard.lost and alone == [True] * 4 + [False] * 2  # its share: all of 0.4
        server.start()
        wall[0] += 10
        again = await guard.reserve_spend("c", 0.1, [KEY_DAY])
        assert again.ok and not guard.lost
        assert dict(again.remaining_usd)["key:day"] == pytest.approx(0.5)  # 1 - 0.4 - 0.1
    finally:
        await state.close()
