"""The runtime's loop clock: what anyio.current_time() says, on either backend."""

from __future__ import annotations

import anyio
import pytest

from semisched.runtime.clock import AnyioClock, loop_time

pytestmark = pytest.mark.anyio


async def test_under_trios_mock_clock_it_is_the_virtual_time() -> None:
    await anyio.sleep(600)  # ten virtual minutes, at once (autojump)
    assert loop_time() == anyio.current_time() >= 600
    assert AnyioClock(scale=2.0).now() == 2.0 * anyio.current_time()


@pytest.mark.wallclock
async def test_on_asyncio_it_is_the_loops_time() -> None:
    before = anyio.current_time()
    now = loop_time()
    assert before <= now <= anyio.current_time()
