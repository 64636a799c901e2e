"""Token buckets (seed 004 §4.1): short <= 64 < medium <= 256 < long <= 1024 < xlong."""

from __future__ import annotations

import math

import pytest

from semisched.core import BUCKET_BOUNDS, SIZED_BUCKETS, Bucket, bucket_for_tokens


@pytest.mark.parametrize(
    ("tokens", "bucket"),
    [
        (0, Bucket.SHORT),
        (1, Bucket.SHORT),
        (64, Bucket.SHORT),
        (64.5, Bucket.MEDIUM),
        (65, Bucket.MEDIUM),
        (256, Bucket.MEDIUM),
        (257, Bucket.LONG),
        (1024, Bucket.LONG),
        (1025, Bucket.XLONG),
        (10**9, Bucket.XLONG),
    ],
)
def test_bucket_bounds(tokens: float, bucket: Bucket) -> None:
    assert bucket_for_tokens(tokens) is bucket


@pytest.mark.parametrize("tokens", [-1, -0.001, math.nan, math.inf, -math.inf])
def test_bad_token_counts_raise_naming_the_argument(tokens: float) -> None:
    with pytest.raises(ValueError, match=r"^output_tokens="):
        bucket_for_tokens(tokens)


def test_bounds_table_agrees_with_the_function_and_is_ordered() -> None:
    assert tuple(BUCKET_BOUNDS) == SIZED_BUCKETS
    previous_high = -1
    for bucket in SIZED_BUCKETS:
        low, high = BUCKET_BOUNDS[bucket]
        assert low == previous_high + 1  # contiguous, no gaps or overlaps
        assert bucket_for_tokens(low) is bucket
        if high is not None:
            assert bucket_for_tokens(high) is bucket
            previous_high = high
    assert Bucket.UNKNOWN not in SIZED_BUCKETS
