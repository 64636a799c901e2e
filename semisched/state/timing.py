"""Round-trip times of a shared state's reservations: a bounded window and its percentiles."""

from __future__ import annotations

from collections import deque

__all__ = ["RoundTrips"]


class RoundTrips:
    """The last ``size`` round trips (seconds); percentiles in milliseconds."""

    def __init__(self, size: int = 4096) -> None:
        self._samples: deque[float] = deque(maxlen=size)

    def __len__(self) -> int:
        return len(self._samples)

    def add(self, seconds: float) -> None:
        """One round trip."""
        self._samples.append(seconds)

    def percentiles(self) -> tuple[float, float]:
        """``(p50, p99)`` in milliseconds (``0, 0`` before any sample; nearest rank)."""
        if not self._samples:
            return 0.0, 0.0
        ordered = sorted(self._samples)
        last = len(ordered) - 1
        return ordered[int(0.5 * last)] * 1000.0, ordered[int(0.99 * last)] * 1000.0
