"""The ``semisched batch`` tests run in virtual time: trio with an autojumping ``MockClock``.

The in-process mock provider is built with ``clock=anyio.current_time`` and
the batch run uses its default clock (the event loop's), so both wait only on
the mock clock and a job of several virtual minutes takes milliseconds. Tests
that need real time (a subprocess, a real server, a compressed wall clock)
are marked ``wallclock`` and run on asyncio.

One wrinkle (as in ``tests/runtime``): on a client's first requests openai
detects the platform in a worker thread (``asyncify(get_platform)``), and an
autojumping ``MockClock`` may jump to the next timer while that thread runs,
so calls in flight would see their deadline pass. The autouse fixture
``_platform_inline`` runs that detection inline instead.
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
