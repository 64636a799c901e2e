"""An asyncio event loop on virtual time, stepped from synchronous code (the stateful tests).

:class:`VirtualLoop` is asyncio's selector loop whose clock is a number: when
nothing is ready, waiting for the next timer moves the clock to it at once
(trio's ``MockClock`` with autojump, for asyncio). anyio reads the loop's
``time()``, so the scheduler's deadlines, retries and timers all run on it.

Unlike ``trio.run``, the loop stays alive between calls: a hypothesis
``RuleBasedStateMachine`` runs one rule, then :meth:`VirtualLoop.settle` runs
every task until all of them wait (without moving the clock), then checks its
invariants, then the next rule. :meth:`VirtualLoop.advance` lets virtual time
pass.

Only for tests without sockets: a wait with nothing scheduled is a deadlock
and raises instead of blocking.
"""

from __future__ import annotations

import asyncio
import selectors
from collections.abc import Callable, Coroutine
from typing import Any


class _Selector(selectors.DefaultSelector):
    """Never blocks: a wait for the next timer moves the loop's clock there instead."""

    def __init__(self) -> None:
        super().__init__()
        self.loop: VirtualLoop | None = None

    def select(self, timeout: float | None = None) -> list[Any]:
        ready = super().select(0)  # the loop's own self-pipe only
        if ready or timeout == 0:
            return ready
        if timeout is None:
            raise RuntimeError("deadlock: every task waits and no timer is set")
        assert self.loop is not None
        self.loop.now += timeout
        return []


class VirtualLoop(asyncio.SelectorEventLoop):
    """asyncio's loop on a virtual clock (module docstring)."""

    def __init__(self) -> None:
        selector = _Selector()
        super().__init__(selector)
        selector.loop = self
        self.now = 0.0

    def time(self) -> float:
        return self.now

    def settle(self) -> None:
        """Run every ready task until all wait, without moving the clock."""
        for _ in range(10_000):
            self.run_until_complete(asyncio.sleep(0))
            if not self._ready:  # type: ignore[attr-defined]  # asyncio's run queue
                return
        raise RuntimeError("the loop never settles: a task spins")

    def advance(self, seconds: float) -> None:
        """Let ``seconds`` of virtual time pass, running what falls due."""
        self.run_until_complete(asyncio.sleep(seconds))
        self.settle()

    def call(self, func: Callable[[], Any]) -> Any:
        """Call ``func`` inside the loop (code that reads the loop's clock), then settle."""

        async def inside() -> Any:
            return func()

        return self.run(inside())

    def run(self, coro: Coroutine[Any, Any, Any]) -> Any:
        """Run ``coro`` to its end (virtual time passes as it waits), then settle."""
        result = self.run_until_complete(coro)
        self.settle()
        return result
