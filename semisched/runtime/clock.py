"""Clocks for the async runtime: the event loop's time, real time, or compressed time.

The core never reads a clock; the runtime asks one of these for ``now`` and
sleeps through it.

- `AnyioClock` (the scheduler's default) reads the running event
  loop's clock (`anyio.current_time`). On asyncio that is
  `time.monotonic`; under trio's ``MockClock`` it is virtual time, so a
  test sleeps minutes in microseconds (``autojump_threshold=0``) and every
  timer fires exactly on time. ``scale`` compresses it like `ScaledClock`.
- `MonotonicClock` reads `time.monotonic` directly.
- `ScaledClock` runs ``scale`` times faster than the wall: deadlines,
  backoffs and the mock provider's physics are all expressed in its (virtual)
  seconds, so a 10-minute scenario runs in a few wall seconds against a real
  server (live benchmarks).

What this module is not: no scheduling, and no clock of its own making
(sleeps go through `anyio.sleep`, so cancellation works as usual).
"""

from __future__ import annotations

import asyncio
import math
import time
from typing import Protocol

import anyio

__all__ = ["AnyioClock", "Clock", "MonotonicClock", "ScaledClock", "loop_time"]


def loop_time() -> float:
    """`anyio.current_time`: the running event loop's clock, read without anyio's
    library lookup on asyncio (0.1 µs, not 2; the runtime reads it several times a
    request). Elsewhere (trio, its ``MockClock``) anyio asks the running library."""
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:
        return anyio.current_time()
    return loop.time()


class Clock(Protocol):
    """A source of ``now`` in seconds and a way to sleep in the same unit."""

    def now(self) -> float:
        """Current time in this clock's seconds (monotonic)."""
        ...

    async def sleep(self, seconds: float) -> None:
        """Sleep ``seconds`` of this clock's time."""
        ...

    def to_wall(self, seconds: float) -> float:
        """Convert a duration in this clock's seconds to wall seconds."""
        ...


class AnyioClock:
    """The running event loop's clock (`anyio.current_time`), times ``scale``.

    ``now()`` and ``sleep()`` must be called from inside the event loop. With
    ``scale=1`` (the default) a clock second is a loop second; with trio's
    ``MockClock`` both are virtual.
    """

    def __init__(self, scale: float = 1.0) -> None:
        if isinstance(scale, bool) or not (math.isfinite(scale) and scale > 0):
            raise ValueError(f"{scale=} must be a finite number > 0")
        self.scale = float(scale)

    def now(self) -> float:
        return loop_time() * self.scale

    async def sleep(self, seconds: float) -> None:
        await anyio.sleep(max(0.0, seconds) / self.scale)

    def to_wall(self, seconds: float) -> float:
        return seconds / self.scale

    def __repr__(self) -> str:
        return f"AnyioClock(scale={self.scale!r})"


class MonotonicClock:
    """Real time from `time.monotonic`."""

    def now(self) -> float:
        return time.monotonic()

    async def sleep(self, seconds: float) -> None:
        await anyio.sleep(max(0.0, seconds))

    def to_wall(self, seconds: float) -> float:
        return seconds

    def __repr__(self) -> str:
        return "MonotonicClock()"


class ScaledClock:
    """Time running ``scale`` times faster than the wall (``scale=100``: 1 s wall = 100 s)."""

    def __init__(self, scale: float) -> None:
        if not (math.isfinite(scale) and scale > 0):
            raise ValueError(f"{scale=} must be a finite number > 0")
        self.scale = scale
        self._origin = time.monotonic()

    def now(self) -> float:
        return (time.monotonic() - self._origin) * self.scale

    async def sleep(self, seconds: float) -> None:
        await anyio.sleep(max(0.0, seconds) / self.scale)

    def to_wall(self, seconds: float) -> float:
        return seconds / self.scale

    def __repr__(self) -> str:
        return f"ScaledClock(scale={self.scale!r})"
