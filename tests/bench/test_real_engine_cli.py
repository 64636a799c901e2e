"""``python -m bench real-engine``'s Ctrl-C: it leaves the run at once (no engine)."""

from __future__ import annotations

import contextlib
import os
import signal
import threading

import anyio
import pytest

from bench.real_engine.cli import interruptible


@pytest.mark.skipif(threading.current_thread() is not threading.main_thread(),
                    reason="signal handlers live in the main thread")  # fmt: skip
def test_ctrl_c_leaves_a_run_whose_task_absorbs_the_cancellation() -> None:
    # asyncio turns Ctrl-C into a cancellation of the main task; a run that absorbs it
    # (as `steps` did) kept going, and so did its engine.
    async def stubborn() -> str:
        os.kill(os.getpid(), signal.SIGINT)
        for _ in range(100):
            with contextlib.suppress(BaseException):  # absorbing it is the point
                await anyio.sleep(0.01)
        return "finished"

    before = signal.getsignal(signal.SIGINT)
    reached = []
    with pytest.raises(KeyboardInterrupt), interruptible():
        reached.append(anyio.run(stubborn, backend="asyncio"))
    assert reached == []  # it never returned
    assert signal.getsignal(signal.SIGINT) is before  # the handler is given back
