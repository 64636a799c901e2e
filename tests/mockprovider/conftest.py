"""Async tests of the mock provider run in virtual time: trio with an autojumping ``MockClock``.

An app built with ``create_app(config, clock=anyio.current_time)`` then waits only on the mock
clock: physics times are exact and a test sleeps minutes in microseconds. Tests that need real
time (a real server on 127.0.0.1, a subprocess) are marked ``wallclock`` and run on asyncio.
"""

from __future__ import annotations

from typing import Any

import pytest
import trio.testing


@pytest.fixture
def anyio_backend(request: pytest.FixtureRequest) -> Any:
    if request.node.get_closest_marker("wallclock") is not None:
        return "asyncio"
    return ("trio", {"clock": trio.testing.MockClock(autojump_threshold=0)})
