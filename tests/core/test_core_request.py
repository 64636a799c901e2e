"""Prior and Request validation (rules 1-4 of semisched.core.request) and routing buckets."""

from __future__ import annotations

import math
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from semisched.core import Bucket, Prior, Request
from semisched.core.request import SHORT_PROBABILITY, Z90

GOOD_PRIOR = Prior(p50=100, p90=200)


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"p50": -1, "p90": 10}, "p50"),
        ({"p50": math.nan, "p90": 10}, "p50"),
        ({"p50": math.inf, "p90": math.inf}, "p50"),
        ({"p50": 100, "p90": 99}, "p90"),
        ({"p50": 100, "p90": math.inf}, "p90"),
        ({"p50": 100, "p90": math.nan}, "p90"),
    ],
)
def test_bad_prior_raises_naming_the_field(kwargs: dict[str, float], field: str) -> None:
    with pytest.raises(ValueError, match=rf"^{field}="):
        Prior(**kwargs)


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"id": ""}, "id"),
        ({"klass": ""}, "klass"),
        ({"input_tokens": -1}, "input_tokens"),
        ({"input_tokens": math.inf}, "input_tokens"),
        ({"input_tokens": math.nan}, "input_tokens"),
        ({"arrival": math.nan}, "arrival"),
        ({"arrival": -math.inf}, "arrival"),
        ({"arrival": 10.0, "deadline": 9.99}, "deadline"),
        ({"deadline": math.inf}, "deadline"),
        ({"deadline": math.nan}, "deadline"),
    ],
)
def test_bad_request_raises_naming_the_field(kwargs: dict[str, Any], field: str) -> None:
    fields: dict[str, Any] = {"id": "r1", "klass": "batch", "prior": GOOD_PRIOR, **kwargs}
    with pytest.raises(ValueError, match=rf"^{field}="):
        Request(**fields)


@pytest.mark.parametrize(
    "deadline", [None, 10.0, 10.5], ids=["no-deadline", "deadline-at-arrival", "later"]
)
def test_valid_deadlines_are_accepted(deadline: float | None) -> None:
    request = Request(id="r", klass="batch", prior=GOOD_PRIOR, arrival=10.0, deadline=deadline)
    assert request.deadline == deadline


@pytest.mark.parametrize(
    ("prior", "bucket"),
    [
        (Prior(p50=64, p90=5000), Bucket.SHORT),  # a median of 64 is short
        (Prior(p50=65, p90=65), Bucket.MEDIUM),  # no spread: the paper's p50 rule
        (Prior(p50=120, p90=600), Bucket.SHORT),  # P(<= 64) = 0.21 >= SHORT_PROBABILITY
        (Prior(p50=120, p90=200), Bucket.MEDIUM),  # P(<= 64) = 0.02
        (Prior(p50=300, p90=900), Bucket.LONG),
        (Prior(p50=2000, p90=4000), Bucket.XLONG),
        (Prior(p50=10, p90=20, bucket=Bucket.XLONG), Bucket.XLONG),  # class-only label wins
        (Prior(p50=300, p90=300, bucket=Bucket.UNKNOWN), Bucket.UNKNOWN),  # no information
    ],
)
def test_request_routing_bucket(prior: Prior, bucket: Bucket) -> None:
    assert prior.routing_bucket is bucket
    assert Request(id="r", klass="batch", prior=prior).bucket is bucket


@given(st.floats(1, 5000), st.floats(1, 20))
def test_a_prior_routes_short_exactly_when_it_likely_enough_is(p50: float, spread: float) -> None:
    prior = Prior(p50=p50, p90=p50 * spread)
    short = prior.short_probability >= SHORT_PROBABILITY or p50 <= 64
    assert (prior.routing_bucket is Bucket.SHORT) == short
    assert prior.quantile(Z90) == pytest.approx(prior.p90)
    assert prior.quantile(0.0) == p50


def test_short_probability_is_the_log_normal_fit_to_p50_and_p90() -> None:
    assert Prior(p50=64, p90=640).short_probability == pytest.approx(0.5)
    assert Prior(p50=640, p90=6400).short_probability == pytest.approx(0.1)  # z = -Z90
    assert Prior(p50=64, p90=64).short_probability == 1.0
    assert Prior(p50=65, p90=65).short_probability == 0.0


def test_scaled_prior_keeps_its_label_and_rejects_bad_factors() -> None:
    prior = Prior(p50=100, p90=200, bucket=Bucket.SHORT)
    scaled = prior.scaled(3.0)
    assert (scaled.p50, scaled.p90, scaled.bucket) == (300, 600, Bucket.SHORT)
    for factor in (-1.0, math.nan, math.inf):
        with pytest.raises(ValueError, match=r"^factor="):
            prior.scaled(factor)


def test_priors_and_requests_are_immutable() -> None:
    request = Request(id="r", klass="batch", prior=GOOD_PRIOR)
    with pytest.raises(AttributeError):
        request.deadline = 5.0  # type: ignore[misc]
    with pytest.raises(AttributeError):
        GOOD_PRIOR.p50 = 1.0  # type: ignore[misc]
