"""Prior sources of the information ladder."""

from __future__ import annotations

import pytest

from predictors.base import PriorQuery, PriorSource
from predictors.priors import (
    NEUTRAL_P50,
    NEUTRAL_P90,
    ClassOnly,
    Coarse,
    NoInformation,
    Noisy,
    Oracle,
    information_source,
)
from semisched.core.buckets import Bucket


def q(tokens: int | None, rid: str = "r1") -> PriorQuery:
    return PriorQuery(request_id=rid, true_output_tokens=tokens)


@pytest.mark.parametrize(
    ("source", "tokens", "p50", "p90", "bucket"),
    [
        (NoInformation(), 40, NEUTRAL_P50, NEUTRAL_P90, Bucket.UNKNOWN),
        (NoInformation(), 3000, NEUTRAL_P50, NEUTRAL_P90, Bucket.UNKNOWN),
        (ClassOnly(), 40, NEUTRAL_P50, NEUTRAL_P90, Bucket.SHORT),
        (ClassOnly(), 3000, NEUTRAL_P50, NEUTRAL_P90, Bucket.XLONG),
        (Coarse(), 40, 32.0, 64.0, Bucket.SHORT),
        (Coarse(), 200, 128.0, 256.0, Bucket.MEDIUM),
        (Coarse(), 700, 512.0, 1024.0, Bucket.LONG),
        (Coarse(), 3000, 2048.0, 4096.0, Bucket.XLONG),
        (Oracle(), 700, 700.0, 700.0, Bucket.LONG),
    ],
)
def test_information_rungs(
    source: PriorSource, tokens: int, p50: float, p90: float, bucket: Bucket
) -> None:
    prior = source.prior(q(tokens))
    assert (prior.p50, prior.p90, prior.routing_bucket) == (p50, p90, bucket)


@pytest.mark.parametrize("source", [ClassOnly(), Coarse(), Oracle()])
def test_sources_that_need_the_truth_say_so(source: PriorSource) -> None:
    with pytest.raises(ValueError, match="true_output_tokens"):
        source.prior(q(None))


def test_no_information_needs_no_truth() -> None:
    assert NoInformation().prior(q(None)).routing_bucket is Bucket.UNKNOWN


@pytest.mark.parametrize("level", [0.1, 0.4, 0.6])
def test_noise_is_bounded_deterministic_and_keeps_routing(level: float) -> None:
    noisy = Noisy(Coarse(), level, seed=7)
    factors = []
    for i in range(300):
        query = q(700, rid=f"r{i}")
        prior = noisy.prior(query)
        assert prior == noisy.prior(query)
        assert prior.routing_bucket is Bucket.LONG
        factors.append(prior.p50 / 512.0)
        assert prior.p90 / 1024.0 == pytest.approx(factors[-1])
    assert min(factors) >= 1 - level
    assert max(factors) <= 1 + level
    # The draws spread over the interval rather than collapsing to a point.
    assert max(factors) - min(factors) > level
    other_seed = Noisy(Coarse(), level, seed=8)
    assert any(
        other_seed.prior(q(700, rid=f"r{i}")) != noisy.prior(q(700, rid=f"r{i}")) for i in range(10)
    )


def test_zero_noise_is_the_base_source() -> None:
    assert Noisy(Coarse(), 0.0).prior(q(700)) == Coarse().prior(q(700))


@pytest.mark.parametrize("level", [-0.1, 1.0, float("nan")])
def test_bad_noise_level(level: float) -> None:
    with pytest.raises(ValueError, match="level="):
        Noisy(Coarse(), level)


def test_information_source_by_name() -> None:
    assert information_source("oracle").name == "oracle"
    assert information_source("coarse", noise=0.2, seed=1).name == "coarse+noise0.2"
    with pytest.raises(ValueError, match="name='psychic'"):
        information_source("psychic")
