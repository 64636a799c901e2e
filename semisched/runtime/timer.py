"""The runtime's one timer: poll the engine at the times its ``Wake`` actions name.

The engine keeps every timer of its own (deadlines, deferrals, retries, rate
budgets) and asks for a poll at the earliest with `Wake`.
`Timer` holds that one time and, in a task of the scheduler's, sleeps
until it and then polls.

Rules:

1. One time is held, the earliest asked for; an earlier ``arm`` wakes the task.
2. A time closer than a nanosecond of wall time is due: polling then cannot be
   early by more than float rounding, and a loop clock cannot spin on a sub-ulp sleep.
3. After each poll it re-arms from the engine's own next timer: the engine reports
   a timer once, and one reported while an earlier one was held was dropped.
4. A poll that raises is logged and survived (`semisched.runtime.supervise`);
   the next try waits a second of the clock, so a broken poll cannot spin.

What this module is not: it decides nothing and executes no action (the
dispatcher does, given the poll's actions).
"""

from __future__ import annotations

from collections.abc import Callable

import anyio

from semisched.core.actions import Action
from semisched.runtime.clock import Clock
from semisched.runtime.supervise import Supervisor

__all__ = ["Timer"]

#: Rule 2: wall seconds within which a time is due.
_DUE_WALL_S = 1e-9


class Timer:
    """Polls the engine at the earliest time asked for (module rules).

    Args:
        clock: The scheduler's clock.
        now: The dispatcher's now (never earlier than a time given to the engine).
        poll: Polls the engine at a time and executes its actions.
        next_wakeup: The engine's own next timer.
        supervisor: Logs and counts a poll that raised.
    """

    def __init__(
        self,
        clock: Clock,
        now: Callable[[], float],
        poll: Callable[[float], list[Action]],
        execute: Callable[[list[Action]], None],
        next_wakeup: Callable[[], float | None],
        supervisor: Supervisor,
    ) -> None:
        self.clock = clock
        self.now = now
        self.poll = poll
        self.execute = execute
        self.next_wakeup = next_wakeup
        self.supervisor = supervisor
        self.at: float | None = None
        self._changed = anyio.Event()

    def __repr__(self) -> str:
        return f"<Timer at={self.at}>"

    def arm(self, at: float) -> None:
        """Poll at ``at`` unless an earlier time is held (rule 1)."""
        if self.at is None or at < self.at:
            self.at = at
            self._changed.set()

    async def run(self) -> None:
        """Sleep to each time held and poll then (the scheduler's task)."""
        to_wall = self.clock.to_wall
        while True:
            changed = self._changed
            wake = self.at
            if wake is None:
                await changed.wait()
            else:
                delay = to_wall(wake - self.now())
                if delay > _DUE_WALL_S:
                    with anyio.move_on_after(delay):
                        await changed.wait()
            if changed.is_set():
                self._changed = anyio.Event()
            wake = self.at
            if wake is None or to_wall(wake - self.now()) > _DUE_WALL_S:
                continue
            self.at = None
            try:
                actions = self.poll(wake)
            except Exception as exc:  # rule 4
                self.supervisor.task_failed("the scheduler's timer", exc)
                await anyio.sleep(to_wall(1.0))
                continue
            self.execute(actions)
            upcoming = self.next_wakeup()  # rule 3
            if upcoming is not None and (self.at is None or upcoming < self.at):
                self.at = upcoming
