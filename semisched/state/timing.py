"""Time in the shared state: round-trip percentiles, and sums that halve with a half-life."""

from __future__ import annotations

import math
from collections import deque

__all__ = ["Decaying", "RoundTrips"]


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


class Decaying:
    """Named sums that halve every ``half_life_s``: ``x`` added at ``t`` counts
    ``x * 2**(-(now - t) / half_life_s)`` at ``now``. Each name keeps its value at
    its last update; a time before that counts as that time (no growth)."""

    __slots__ = ("_values", "half_life_s")

    def __init__(self, half_life_s: float) -> None:
        if isinstance(half_life_s, bool) or not (math.isfinite(half_life_s) and half_life_s > 0):
            raise ValueError(f"{half_life_s=} must be a finite number > 0")
        self.half_life_s = float(half_life_s)
        self._values: dict[str, tuple[float, float]] = {}  # name -> (value, at)

    def __repr__(self) -> str:
        return f"<Decaying half_life_s={self.half_life_s} names={sorted(self._values)}>"

    def __bool__(self) -> bool:
        return bool(self._values)

    def value(self, name: str, now: float) -> float:
        """``name``'s sum at ``now`` (0 when never added)."""
        found = self._values.get(name)
        if found is None:
            return 0.0
        value, at = found
        return float(value * 2.0 ** (-max(0.0, now - at) / self.half_life_s))

    def values(self, now: float) -> dict[str, float]:
        """Every name's sum at ``now``."""
        return {name: self.value(name, now) for name in self._values}

    def add(self, name: str, amount: float, now: float) -> float:
        """Add ``amount`` at ``now`` (negative: take away, never below 0); the new sum."""
        value = max(0.0, self.value(name, now) + amount)
        self._values[name] = (value, max(now, self._values.get(name, (0.0, now))[1]))
        return value

    def cap(self, name: str, ceiling: float, now: float) -> None:
        """Lower ``name``'s sum at ``now`` to ``ceiling`` when above it."""
        if self.value(name, now) > ceiling:
            self._values[name] = (max(0.0, ceiling), now)

    def pop_all(self, now: float) -> dict[str, float]:
        """Every name's sum at ``now``, leaving none."""
        found = self.values(now)
        self._values.clear()
        return found

    def prune(self, now: float, below: float) -> None:
        """Forget names whose sum at ``now`` is under ``below``."""
        for name in [n for n in self._values if self.value(n, now) < below]:
            del self._values[name]
