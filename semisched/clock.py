"""Clocks for the async runtime: real time, or compressed time for tests and live benchmarks.

The core never reads a clock; the runtime asks one of these for ``now`` and
sleeps through it. A :class:`ScaledClock` runs ``scale`` times faster than the
wall: deadlines, backoffs and the mock provider's physics are all expressed in
its (virtual) seconds, so a 10-minute scenario can run in a few wall seconds.
"""

from __future__ import annotations

import math
import time
from typing import Protocol

import anyio

__all__ = ["Clock", "MonotonicClock", "ScaledClock"]


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


class MonotonicClock:
    """Real time from :func:`time.monotonic`."""

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
