"""Online prior correction (:mod:`semisched.priors.calibration`): pure, no clock, no I/O."""

from __future__ import annotations

import math
import random

import pytest

from semisched.core import Prior
from semisched.core.buckets import Bucket
from semisched.priors.calibration import LengthCalibration


def _train(cal: LengthCalibration, rounds: int, truth: object, *, seed: int = 0) -> None:
    """``rounds`` answers: ``truth(rng) -> (prior, cap, actual)``."""
    rng = random.Random(seed)
    for _ in range(rounds):
        prior, cap, actual = truth(rng)  # type: ignore[operator]
        cal.observe(cal.adjust(prior, source="model", model="m", cap=cap), actual)


def test_cold_start_pools_the_source_and_the_cap_evenly() -> None:
    cal = LengthCalibration()
    prior = Prior(p50=60.0, p90=250.0)
    assert cal.adjust(prior, source="model", model="m", cap=None).prior == prior  # no 2nd opinion
    capped = cal.adjust(prior, source="model", model="m", cap=2000).prior
    # Equal weights: the geometric mean of 60 and the cap's own median 2000 * 250 / 550,
    # counted at r = 1 / 1.05 (caps are assumed to vary until the calls show otherwise).
    pooled = math.sqrt(60.0 * 2000 * 250 / 550)
    assert capped.p50 == pytest.approx(60.0 ** (1 - 1 / 1.05) * pooled ** (1 / 1.05))
    assert capped.p90 / capped.p50 == pytest.approx(250.0 / 60.0)  # the source's spread


def test_caps_that_predict_lengths_take_over() -> None:
    """The caller's caps are the sizes (a model knowing nothing says 60 for all)."""
    cal = LengthCalibration()
    caps = (16, 48, 200, 800, 2000)

    def truth(rng: random.Random) -> tuple[Prior, int, int]:
        cap = rng.choice(caps)
        return Prior(p50=60.0, p90=250.0), cap, cap

    _train(cal, 30, truth)
    prior = Prior(p50=60.0, p90=250.0)
    big = cal.adjust(prior, source="model", model="m", cap=2000).prior
    small = cal.adjust(prior, source="model", model="m", cap=16).prior
    assert big.routing_bucket is Bucket.XLONG
    assert small.routing_bucket is Bucket.SHORT
    key = cal.statistics().keys[0]
    assert key.heuristic_expert.weight > 0.9 and key.heuristic_expert.sigma < 0.05


def test_a_cap_on_every_call_stops_counting_once_the_answers_show_it_says_nothing() -> None:
    """``max_tokens=4096`` on every call; the model's medians are right up to noise."""
    cal = LengthCalibration()

    def truth(rng: random.Random) -> tuple[Prior, int, int]:
        median = rng.choice((20.0, 100.0, 300.0, 700.0))
        return Prior(p50=median, p90=2.5 * median), 4096, round(median * rng.lognormvariate(0, 0.4))

    _train(cal, 60, truth)
    short = cal.adjust(Prior(p50=20.0, p90=50.0), source="model", model="m", cap=4096).prior
    long = cal.adjust(Prior(p50=700.0, p90=1750.0), source="model", model="m", cap=4096).prior
    assert short.routing_bucket is Bucket.SHORT
    assert long.routing_bucket is Bucket.LONG
    assert cal.statistics().keys[0].heuristic_expert.weight < 0.2


def test_a_biased_source_is_corrected_where_the_caps_vary() -> None:
    cal = LengthCalibration()

    def truth(rng: random.Random) -> tuple[Prior, int, int]:
        actual = rng.randint(100, 400)
        return Prior(p50=actual / 2, p90=actual), rng.choice((1000, 2000, 4000, 8000)), actual

    _train(cal, 200, truth)
    corrected = cal.adjust(Prior(p50=100.0, p90=200.0), source="model", model="m", cap=4000)
    assert corrected.prior.p50 == pytest.approx(200.0, rel=0.1)
    key = cal.statistics().keys[0]
    assert key.source_expert.bias == pytest.approx(math.log(2), abs=0.1)
    assert key.observations == 200 and key.source_expert.weight > 0.9


def test_one_cap_on_every_call_leaves_the_source_as_it_is_and_shows_its_bias() -> None:
    cal = LengthCalibration()

    def truth(rng: random.Random) -> tuple[Prior, int, int]:
        actual = rng.randint(100, 400)
        return Prior(p50=actual / 2, p90=actual), 4096, actual

    _train(cal, 200, truth)
    prior = Prior(p50=100.0, p90=200.0)
    corrected = cal.adjust(prior, source="model", model="m", cap=4096).prior
    assert corrected.p50 == pytest.approx(100.0)  # r = V / (V + 0.05) = 0: one cap
    assert cal.statistics().keys[0].source_expert.bias == pytest.approx(math.log(2), abs=0.1)


def test_keys_are_per_source_model_and_cap_and_buckets_given_are_kept() -> None:
    cal = LengthCalibration()
    given = Prior(p50=250.0, p90=550.0, bucket=Bucket.UNKNOWN)
    for i in range(20):
        cap = (2000, 8000)[i % 2]
        cal.observe(cal.adjust(given, source="a", model="m1", cap=cap), 300)
        cal.observe(cal.adjust(given, source="a", model="m1", cap=None), 300)
    corrected = cal.adjust(given, source="a", model="m1", cap=8000).prior
    cold = cal.adjust(given, source="b", model="m1", cap=8000).prior
    assert corrected.bucket is Bucket.UNKNOWN and 250 <= corrected.p50 < cold.p50 / 2
    keys = cal.statistics().keys
    assert [(k.source, k.model, k.capped) for k in keys] == [
        ("a", "m1", False), ("a", "m1", True), ("b", "m1", True)
    ]  # fmt: skip
    uncapped = keys[0]  # scored, never applied: the source's bias is on view
    assert uncapped.observations == 20
    assert uncapped.source_expert.bias == pytest.approx(math.log(300 / 250))


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"beta": 1.0}, "^beta="),
        ({"beta": -0.1}, "^beta="),
        ({"pseudo_observations": 0}, "^pseudo"),
    ],
)
def test_bad_settings_are_refused(kwargs: dict[str, float], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        LengthCalibration(**kwargs)  # type: ignore[arg-type]


def test_bad_values_are_refused() -> None:
    cal = LengthCalibration()
    with pytest.raises(ValueError, match=r"^cap="):
        cal.adjust(Prior(p50=1.0, p90=2.0), source="s", model="m", cap=-1)
    calibrated = cal.adjust(Prior(p50=1.0, p90=2.0), source="s", model="m", cap=None)
    with pytest.raises(ValueError, match=r"^output_tokens="):
        cal.observe(calibrated, -5)
