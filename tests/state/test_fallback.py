"""Losing the shared state and rejoining it: four workers together, in virtual time.

Four :class:`~semisched.state.guard.SharedBudget` guards share one in-process store
(:class:`Store`: a :class:`~semisched.state.local.LocalState` behind per-worker
views that report the registered workers, as Redis does, and that can be down,
or restarted empty). Everything runs on the loop's clock (trio's autojumping
``MockClock``), so the timeline is exact: every assertion is about the sends the
guards admitted, and no scheduling jitter reaches it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any

import anyio
import pytest

from semisched.core import BudgetConfig, Engine, preset
from semisched.runtime.clock import AnyioClock
from semisched.state import Grant, LocalState, Scope, StateStats, StateUnavailable
from semisched.state.guard import SharedBudget

pytestmark = pytest.mark.anyio

LIMIT = 60  # requests a window, for the whole namespace
WINDOW = 60.0  # the budget's window (margin 0): wall seconds on the loop's clock


@pytest.fixture
def anyio_backend() -> Any:
    """Virtual time (this folder's conftest runs real sockets on asyncio; these need none)."""
    import trio.testing

    return ("trio", {"clock": trio.testing.MockClock(autojump_threshold=0)})


class Store:
    """One store the workers share: up or down, and restarted empty on demand."""

    def __init__(self) -> None:
        self.down = False
        self.restart()

    def restart(self) -> None:
        self.state = LocalState(clock=anyio.current_time, lease_ttl_s=30.0)
        self.registered: set[str] = set()

    def view(self, worker: str) -> View:
        return View(self, worker)


class View:
    """One worker's connection to the :class:`Store` (a ``StateBackend``)."""

    namespace = "fleet-test"
    lease_ttl_s = 30.0

    def __init__(self, store: Store, worker: str) -> None:
        self.store = store
        self.worker = worker
        self.heartbeat_s = 0.0  # how long a heartbeat takes (the rejoin test)

    def _up(self) -> LocalState:
        if self.store.down:
            raise StateUnavailable("store down (127.0.0.1:1)")
        return self.store.state

    def _id(self, request_id: str) -> str:
        return f"{self.worker}-{request_id}"

    async def open(self) -> None:
        self._up()
        self.store.registered.add(self.worker)

    async def close(self) -> None:
        self.store.registered.discard(self.worker)

    async def reserve(self, request_id: str, tokens: float, scopes: Sequence[Scope]) -> Grant:
        grant = await self._up().reserve(self._id(request_id), tokens, scopes)
        return dataclasses.replace(grant, workers=len(self.store.registered))

    async def settle(self, request_id: str, tokens: float, scopes: Sequence[Scope]) -> None:
        await self._up().settle(self._id(request_id), tokens, scopes)

    async def release(self, request_id: str, scopes: Sequence[Scope]) -> None:
        await self._up().release(self._id(request_id), scopes)

    async def heartbeat(self) -> None:
        await anyio.sleep(self.heartbeat_s)
        self._up()
        self.store.registered.add(self.worker)

    async def record(self, scope: Scope, sends: Sequence[tuple[str, float, float]]) -> int:
        return await self._up().record(scope, [(self._id(r), a, t) for r, a, t in sends])

    async def pause(self, scope: Scope, seconds: float) -> None:
        await self._up().pause(scope, seconds)

    async def workers(self) -> int:
        self._up()
        return max(1, len(self.store.registered))

    async def add_usage(self, tokens: Mapping[str, float], half_life_s: float) -> dict[str, float]:
        return await self._up().add_usage(tokens, half_life_s)

    def statistics(self) -> StateStats:
        return self.store.state.statistics()


@contextlib.asynccontextmanager
async def heartbeats(*guards: SharedBudget) -> AsyncIterator[None]:
    """Each guard's heartbeat task (what a scheduler runs beside it), which also rejoins."""
    async with anyio.create_task_group() as tg:
        for g in guards:
            tg.start_soon(g.run_heartbeat, View.lease_ttl_s)
        yield
        tg.cancel_scope.cancel()


def guard(view: View, rejoin_s: float = 0.5) -> SharedBudget:
    config = preset("batch_makespan", max_inflight=1000,
                    budget=BudgetConfig(rpm=LIMIT, margin_s=0.0))  # fmt: skip
    return SharedBudget(view, Engine(config), AnyioClock(), rejoin_s=rejoin_s, seed=0,
                        wall=anyio.current_time)  # fmt: skip


class Fleet:
    """Four workers on one store, opened one after the other (so at opening each saw
    one more worker than the last); every send a guard admits is logged."""

    def __init__(self, store: Store, rejoin_s: float = 0.5) -> None:
        self.views = [store.view(f"w{i}") for i in range(4)]
        self.guards = [guard(v, rejoin_s) for v in self.views]
        self.sent: list[float] = []
        self.ids = 0

    async def open(self) -> None:
        for g in self.guards:
            await g.open()

    async def attempt(self, i: int) -> bool:
        self.ids += 1
        grant, _ = await self.guards[i].reserve(f"r{self.ids}", "default", 10.0)
        if grant.ok:
            self.sent.append(anyio.current_time())
            await self.guards[i].release(f"r{self.ids}", "default")
        return grant.ok

    async def run(self, seconds: float, tries: Sequence[int], step: float = 0.25) -> None:
        """Every ``step`` for ``seconds``, worker i tries ``tries[i]`` sends."""
        end = anyio.current_time() + seconds
        while anyio.current_time() < end:
            for i, n in enumerate(tries):
                for _ in range(n):
                    await self.attempt(i)
            await anyio.sleep(step)

    def most_in_a_window(self) -> int:
        """The most sends admitted in any window (``(t - WINDOW, t]``)."""
        times = sorted(self.sent)
        first, most = 0, 0
        for last, t in enumerate(times):
            while times[first] <= t - WINDOW:
                first += 1
            most = max(most, last - first + 1)
        return most


async def test_four_workers_on_their_fallbacks_stay_within_the_limit_together() -> None:
    store = Store()
    fleet = Fleet(store)
    await fleet.open()  # each saw 1, 2, 3, 4 workers at opening
    await fleet.run(WINDOW, tries=[4, 1, 1, 1])  # a skewed, full window: w0 sent the most
    assert fleet.most_in_a_window() == LIMIT
    store.down = True
    await fleet.run(3 * WINDOW, tries=[1, 1, 1, 1])  # everyone wants more than its share
    assert fleet.most_in_a_window() <= LIMIT
    assert all(g.lost for g in fleet.guards)
    assert [g.statistics().workers for g in fleet.guards] == [4, 4, 4, 4]  # they agree
    sent_down = len([t for t in fleet.sent if t >= WINDOW])
    assert sent_down >= 2 * LIMIT - 8  # and the fallback still sends (about its share)


@pytest.mark.parametrize("outage", ["stopped", "restarted empty"])
async def test_after_a_rejoin_the_shared_window_counts_what_the_fallback_sent(
    outage: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="semisched")
    store = Store()
    fleet = Fleet(store, rejoin_s=2.0)
    await fleet.open()
    async with heartbeats(*fleet.guards):
        await fleet.run(WINDOW, tries=[4, 1, 1, 1])
        store.down = True
        await fleet.run(WINDOW / 2, tries=[1, 1, 1, 1])  # the fallback sends its shares
        store.down = False
        if outage == "restarted empty":
            store.restart()
        await fleet.run(3 * WINDOW, tries=[4, 4, 4, 4])  # back: everyone rejoins and pushes
    assert not any(g.lost for g in fleet.guards)
    assert fleet.most_in_a_window() <= LIMIT  # no window admitted more than the limit
    rejoined = [r for r in caplog.records if "rejoined" in r.getMessage()]
    assert len(rejoined) == 4  # one line per worker and rejoin


async def test_no_call_waits_on_a_lost_store_and_one_rejoin_logs_one_line(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="semisched")
    store = Store()
    view = store.view("w0")
    view.heartbeat_s = 0.05  # the rejoin's round trip: callers arrive during it
    budget = guard(view, rejoin_s=1.0)
    await budget.open()
    store.down = True
    await budget.reserve("lost", "default", 1.0)
    assert budget.lost
    store.down = False
    waited: list[float] = []

    async def caller(i: int) -> None:
        await anyio.sleep(i * 0.01)  # spread over the rejoin's round trip
        started = anyio.current_time()
        grant, _ = await budget.reserve(f"c{i}", "default", 1.0)
        assert grant.ok
        waited.append(anyio.current_time() - started)

    async with heartbeats(budget):
        await anyio.sleep(1.0 - 0.1)
        async with anyio.create_task_group() as tg:
            for i in range(33):
                tg.start_soon(caller, i)
    rejoined = [r for r in caplog.records if "rejoined" in r.getMessage()]
    assert len(rejoined) == 1
    assert not budget.lost and waited == [0.0] * 33  # the heartbeat's task rejoined, alone


async def test_workers_that_never_lost_the_store_find_the_fallback_sends_in_it() -> None:
    """A store frozen for less than a call's timeouts: only the worker that called it then
    (w0) falls back. The others go on in the shared window once it answers, and must find
    w0's fallback sends recorded there before they fill it."""
    store = Store()
    fleet = Fleet(store)
    await fleet.open()
    async with heartbeats(*fleet.guards):  # every View.lease_ttl_s / 3 = 10 s
        await fleet.run(1.0, tries=[1, 1, 1, 1])  # everyone has seen the four workers
        store.down = True
        await fleet.run(5.0, tries=[2, 0, 0, 0])  # only w0 calls while it is down
        assert [g.lost for g in fleet.guards] == [True, False, False, False]
        store.down = False
        await anyio.sleep(1.0)
        await fleet.run(WINDOW, tries=[0, 20, 20, 20])  # the others want the whole window
        assert not fleet.guards[0].lost
    assert fleet.most_in_a_window() == LIMIT  # full, and not over


async def test_leases_released_while_lost_are_returned_on_rejoining() -> None:
    store = Store()
    config = preset("batch_makespan", max_inflight=2, budget=BudgetConfig(rpm=LIMIT))
    budget = SharedBudget(store.view("w0"), Engine(config), AnyioClock(), rejoin_s=1.0,
                          wall=anyio.current_time)  # fmt: skip
    await budget.open()
    for request_id in ("r1", "r2"):  # both leases of the fleet's two, taken in the store
        assert (await budget.reserve(request_id, "default", 1.0))[0].ok
    store.down = True
    for request_id in ("r1", "r2"):  # the calls end while the store is down
        await budget.release(request_id, "default")
    assert budget.lost
    store.down = False
    async with heartbeats(budget):
        await anyio.sleep(1.5)
    # Rejoined: both leases were returned; the store would renew them (heartbeats) for ever.
    grant, _ = await budget.reserve("r3", "default", 1.0)
    assert not budget.lost and grant.ok


@pytest.mark.parametrize("rejoin_s", [0.0, -1.0, float("nan"), float("inf")])
def test_a_rejoin_interval_must_be_a_positive_number(rejoin_s: float) -> None:
    with pytest.raises(ValueError, match="rejoin_s"):
        guard(Store().view("w0"), rejoin_s=rejoin_s)
