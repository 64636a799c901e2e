"""Fixtures of the runtime tests: virtual time, and openai's platform lookup on the loop.

Async tests run in virtual time: trio with an autojumping ``MockClock``. The
scheduler's default clock (:class:`~semisched.clock.AnyioClock`) and the mock
(``create_app(..., clock=anyio.current_time)``) both read the loop's clock, so
physics, deadlines, back-offs and ``retry-after`` waits are exact and a test
sleeps minutes in microseconds. Tests that need real time (a real server on
127.0.0.1, a subprocess) are marked ``wallclock`` and run on asyncio.

The helpers (the mock client, :class:`Recorder`, scripted failures) are in
``runtime_kit.py``: test modules import them from there, never from
``conftest`` (another folder's ``conftest`` may hold that module name).

One wrinkle: on a client's first request openai detects the platform in a worker
thread (``asyncify(get_platform)``), and an autojumping ``MockClock`` may jump to
the next timer while that thread runs, so the first attempt would leave late.
The autouse fixture ``_platform_inline`` runs that detection inline instead.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import pytest
import trio.testing


@pytest.fixture
def anyio_backend(request: pytest.FixtureRequest) -> Any:
    if request.node.get_closest_marker("wallclock") is not None:
        return "asyncio"
    return ("trio", {"clock": trio.testing.MockClock(autojump_threshold=0)})


@pytest.fixture(autouse=True)
def _platform_inline(monkeypatch: pytest.MonkeyPatch) -> None:
    """Detect openai's platform on the loop, not in a thread (module docstring)."""
    from openai import _base_client

    def inline(function: Callable[..., Any]) -> Callable[..., Awaitable[Any]]:
        async def call(*args: Any, **kwargs: Any) -> Any:
            return function(*args, **kwargs)

        return call

    monkeypatch.setattr(_base_client, "asyncify", inline)
