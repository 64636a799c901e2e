"""``Scheduler(state=...)``: schedulers that share one budget, and what happens when it is lost.

Virtual time, one in-process mock, two schedulers sharing an in-process
:class:`~semisched.state.local.LocalState` on the loop's clock (the Redis
backend's own tests, with a real server, are in ``tests/state``).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import anyio
import pytest
from runtime_kit import chat, mock_client

from semisched import Scheduler
from semisched.core import BudgetConfig, preset
from semisched.runtime.calls import scheduler_config
from semisched.state import Grant, LocalState, Scope, StateStats, StateUnavailable

pytestmark = pytest.mark.anyio


def shared_config(rpm: int) -> Any:
    return preset("batch_makespan", max_inflight=8, budget=BudgetConfig(rpm=rpm, margin_s=0.0))


async def run_both(a: Scheduler, b: Scheduler, n: int) -> None:
    async def one(s: Scheduler) -> None:
        await s.submit(**chat(max_tokens=5), deadline=600)

    async with anyio.create_task_group() as tg:
        for i in range(n):
            tg.start_soon(one, a if i % 3 else b)  # uneven: a gets two of three


async def test_two_schedulers_share_one_rpm_budget_without_a_429() -> None:
    state = LocalState(clock=anyio.current_time)
    # The provider allows 6 a minute; each scheduler alone would also allow itself 6.
    async with mock_client(rpm=6) as mock:
        a = Scheduler(mock.client, config=shared_config(6), state=state)
        b = Scheduler(mock.client, config=shared_config(6), state=state)
        async with a, b:
            start = anyio.current_time()
            await run_both(a, b, 18)
            elapsed = anyio.current_time() - start
            stats = (a.statistics(), b.statistics())
    assert mock.stats().counters.rate_limited == 0
    assert [e.status for e in mock.recorder.log].count(200) == 18
    assert 120.0 <= elapsed < 180.0  # 18 calls at 6 a minute: three windows, not one
    assert sum(s.engine.counters.refused for s in stats) > 0  # the shared budget said wait
    assert all(s.state is not None and s.state.backend == "local" for s in stats)


async def test_without_the_shared_state_the_two_storm_the_provider() -> None:
    async with mock_client(rpm=6) as mock:
        a = Scheduler(mock.client, config=shared_config(6))
        b = Scheduler(mock.client, config=shared_config(6))
        async with a, b:
            await run_both(a, b, 18)
    assert mock.stats().counters.rate_limited > 0  # the baseline the shared state removes


class Flaky(LocalState):
    """A LocalState that is unreachable while ``down`` (a lost Redis, in one process)."""

    def __init__(self) -> None:
        super().__init__(clock=anyio.current_time)
        self.down = False

    def _check(self) -> None:
        if self.down:
            raise StateUnavailable("flaky: connection refused (127.0.0.1:1)")

    async def open(self) -> None:
        self._check()

    async def reserve(self, request_id: str, tokens: float, scopes: Sequence[Scope]) -> Grant:
        self._check()
        return await super().reserve(request_id, tokens, scopes)

    async def release(self, request_id: str, scopes: Sequence[Scope]) -> None:
        self._check()
        await super().release(request_id, scopes)

    async def heartbeat(self) -> None:
        self._check()
        await super().heartbeat()

    async def workers(self) -> int:
        self._check()
        return 2  # another worker shares the namespace: the fallback takes half

    def statistics(self) -> StateStats:
        return super().statistics()


async def test_unreachable_at_start_is_a_clear_error() -> None:
    state = Flaky()
    state.down = True
    async with mock_client() as mock:
        with pytest.raises(StateUnavailable, match=r"127\.0\.0\.1:1"):
            async with Scheduler(mock.client, state=state):
                pass
    assert mock.recorder.log == []


async def test_losing_the_state_mid_run_falls_back_warns_once_and_rejoins(
    caplog: pytest.LogCaptureFixture,
) -> None:
    state = Flaky()
    caplog.set_level(logging.INFO, logger="semisched")
    async with mock_client(rpm=60) as mock:
        s = Scheduler(mock.client, config=shared_config(60), state=state)
        async with s:

            async def some(n: int) -> None:
                async with anyio.create_task_group() as tg:
                    for _ in range(n):
                        tg.start_soon(lambda: s.submit(**chat(max_tokens=5), deadline=600))

            await some(5)
            state.down = True
            await some(20)  # every one still answered, on this worker's half of the budget
            lost = s.statistics().state
            state.down = False
            await anyio.sleep(10.0)  # past the rejoin interval (5 s)
            await some(5)
            back = s.statistics().state
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "shared state lost" in warnings[0].getMessage()
    assert any("rejoined" in r.getMessage() for r in caplog.records)
    assert lost is not None and lost.backend == "local (fallback: local share)"
    assert lost.fallbacks == 1
    assert back is not None and back.backend == "local"
    assert [e.status for e in mock.recorder.log].count(200) == 30
    assert mock.stats().counters.rate_limited == 0


async def test_a_circuit_opened_by_one_scheduler_keeps_the_others_off_that_endpoint() -> None:
    from runtime_kit import Scripted

    from semisched import Endpoint

    state = LocalState(clock=anyio.current_time)
    async with mock_client(script=[Scripted(503)] * 50) as down, mock_client() as up:

        def fleet() -> list[Endpoint]:
            return [Endpoint("down", down.client), Endpoint("up", up.client)]

        first = Scheduler(
            endpoints=fleet(),
            state=state,
            config=scheduler_config("final_adrr_olc", routing="least_outstanding"),
        )
        second = Scheduler(
            endpoints=fleet(),
            state=state,
            config=scheduler_config("final_adrr_olc", routing="least_outstanding"),
        )
        async with first, second:
            for _ in range(8):  # five failures open first's circuit on "down"
                await first.submit(**chat(max_tokens=5))
            assert [e.circuit for e in first.statistics().engine.endpoints] == ["open", "closed"]
            sent_to_down = len(down.recorder.log)
            for _ in range(8):
                await second.submit(**chat(max_tokens=5))
            refused = second.statistics().engine.counters.refused
    assert len(down.recorder.log) == sent_to_down  # the second never tried "down"
    assert refused >= 1 and len([e for e in up.recorder.log if e.status == 200]) == 16


async def test_the_fallback_starts_with_what_this_worker_already_sent() -> None:
    from semisched.core import Engine
    from semisched.runtime.clock import AnyioClock
    from semisched.state.guard import SharedBudget

    engine = Engine(shared_config(4))  # 4 a minute for the namespace; 2 workers: 2 each
    backend = Flaky()
    guard = SharedBudget(backend, engine, AnyioClock())
    await guard.open()
    for i in range(2):
        grant, _ = await guard.reserve(f"r{i}", "default", 10)
        assert grant.ok
    backend.down = True
    grant, fleet_wide = await guard.reserve("r2", "default", 10)
    # Its share (2) is already spent by its own last two sends: it waits, not storms.
    assert guard.lost and not grant.ok and grant.reason == "rpm" and fleet_wide
