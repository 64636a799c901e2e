"""Token buckets: the coarse size classes every layer reasons in.

Scheduling the Unschedulable §4.1 fixes four buckets on *output* tokens:

    short   <=   64
    medium   65 .. 256
    long    257 .. 1024
    xlong   > 1024

``UNKNOWN`` is the routing bucket of a request whose size the client cannot
infer at all (the paper's "no-information blind" rung, §4.4). It is never the
*true* bucket of a finished request; metrics always use the true bucket.

This module holds data and two pure functions; it decides nothing.
"""

from __future__ import annotations

import enum
import math

__all__ = ["BUCKET_BOUNDS", "SIZED_BUCKETS", "Bucket", "bucket_for_tokens"]


class Bucket(enum.Enum):
    """A coarse output-size class (Scheduling the Unschedulable §4.1)."""

    SHORT = "short"
    MEDIUM = "medium"
    LONG = "long"
    XLONG = "xlong"
    UNKNOWN = "unknown"

    # Members are singletons compared by identity, so identity hashing agrees with equality;
    # Enum's default hashes the name in Python code, on every dict lookup (a hot path here).
    __hash__ = object.__hash__

    def __str__(self) -> str:
        return self._value_  # what .value returns, without Enum's property (hot in traces)


#: Inclusive (low, high) output-token bounds per sized bucket; ``None`` = unbounded.
BUCKET_BOUNDS: dict[Bucket, tuple[int, int | None]] = {
    Bucket.SHORT: (0, 64),
    Bucket.MEDIUM: (65, 256),
    Bucket.LONG: (257, 1024),
    Bucket.XLONG: (1025, None),
}

#: The four buckets a real request can fall into, smallest first.
SIZED_BUCKETS: tuple[Bucket, ...] = (Bucket.SHORT, Bucket.MEDIUM, Bucket.LONG, Bucket.XLONG)


def bucket_for_tokens(output_tokens: float) -> Bucket:
    """Return the bucket an output length falls into.

    Args:
        output_tokens: Output length in tokens (a prior's p50 or a true count).

    Raises:
        ValueError: If ``output_tokens`` is negative or not finite.
    """
    if not output_tokens >= 0 or output_tokens == math.inf:
        raise ValueError(f"{output_tokens=} must be a finite number >= 0")
    short, medium, long, xlong = SIZED_BUCKETS  # a tuple: Enum member lookups are slow
    if output_tokens <= 64:
        return short
    if output_tokens <= 256:
        return medium
    if output_tokens <= 1024:
        return long
    return xlong
