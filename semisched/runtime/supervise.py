"""Supervision: an unexpected exception ends one request, never the scheduler.

The scheduler's tasks share one task group, and in a task group one task's
exception cancels all of them: a bug met while serving one request would stop
every request after it (and a gateway would answer 503 for good). The
`Supervisor` stands between them:

1. An unexpected exception in one request's work (its attempt, its answer, its
   stream's end, an action the engine returned for it) ends that request alone
   with [`InternalError`][semisched.errors.InternalError], chained to the exception; the
   dispatcher does that and counts it in ``counters.internal_errors``.
2. One in the scheduler's own work outside any request (its timer, a layer's
   background task) is survived: the timer polls again, the background task ends.
   It is counted in ``counters.task_errors``.
3. Either is logged once, at ERROR with its traceback, on the logger
   ``semisched.runtime``. A request's log line names its id and class, never its
   prompt or parameters.
4. Cancellation is never caught: it is how the scheduler closes.
5. Leaving the task group (`leave_group`), a lone error (the ``async with``
   block's own, or a bug or an interrupt in the scheduler's own tasks) comes out
   as itself, never wrapped in a group of one; several come out together as the
   group, so that none is lost.

What this module is not: it decides nothing about the request (the engine does,
told by the dispatcher) and restarts nothing.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from types import TracebackType
from typing import Any

from anyio.abc import TaskGroup

from semisched.runtime.stats import RuntimeTally

__all__ = ["Supervisor", "leave_group", "logger"]

logger = logging.getLogger("semisched.runtime")


class Supervisor:
    """Logs and counts what the scheduler survives (module rules).

    Args:
        tally: The runtime's counters, updated in place.
    """

    def __init__(self, tally: RuntimeTally) -> None:
        self.tally = tally

    def __repr__(self) -> str:
        return (f"<Supervisor internal_errors={self.tally.internal_errors} "
                f"task_errors={self.tally.task_errors}>")  # fmt: skip

    def request_failed(self, request_id: str, klass: str, exc: BaseException) -> None:
        """Rule 1: ``request_id`` ends with an internal error (the caller resolves it)."""
        self.tally.internal_errors += 1
        logger.error("request %s (class %s) failed inside semisched; it alone ends, the "
                     "scheduler goes on", request_id, klass, exc_info=exc)  # fmt: skip

    def task_failed(self, where: str, exc: BaseException) -> None:
        """Rule 2: the scheduler's own work ``where`` raised; it is survived."""
        self.tally.task_errors += 1
        logger.error("%s failed inside semisched; the scheduler goes on", where, exc_info=exc)

    def guarded(self, func: Callable[..., Awaitable[Any]], where: str) -> Callable[..., Any]:
        """``func`` as a task that cannot end the task group (rule 2; cancellation passes)."""

        async def run(*args: Any) -> None:
            try:
                await func(*args)
            except Exception as exc:
                self.task_failed(where, exc)

        return run


async def leave_group(
    tg: TaskGroup,
    exc_type: type[BaseException] | None,
    exc: BaseException | None,
    tb: TracebackType | None,
) -> BaseException | None:
    """Leave the task group; the one error of a group of one is returned, not raised
    (``Scheduler``'s rule: the caller meets it as itself). Several are raised as the group."""
    try:
        await tg.__aexit__(exc_type, exc, tb)
    except BaseExceptionGroup as group:
        if len(group.exceptions) != 1:
            raise
        return group.exceptions[0]
    return None
