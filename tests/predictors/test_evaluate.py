"""Evaluation metrics and baselines of the length predictor (synthetic data)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

pytest.importorskip("scipy")

from predictors.data import Pair
from predictors.evaluate import fit_baselines, metrics, repeated_prompt_floor


def test_metrics_on_known_predictions() -> None:
    truth = np.array([10.0, 100.0, 300.0, 2000.0])
    p50 = np.array([30.0, 160.0, 290.0, 1000.0])
    p90 = np.array([40.0, 90.0, 400.0, 3000.0])
    m = metrics(truth, p50, p90)
    assert m["MAE"] == pytest.approx((20 + 60 + 10 + 1000) / 4)
    assert m["Acc-25"] == 0.5
    assert m["Acc-50"] == 0.5
    assert m["Acc-100"] == 0.75
    assert m["bucket acc"] == 0.75  # short, medium, long match; 1000 is long, not xlong
    assert m["p90 coverage"] == 0.75
    assert m["Kendall tau"] == pytest.approx(1.0)


def _pair(i: int, prompt_words: int, prev: int | None, response: int) -> Pair:
    return Pair(
        conversation_id=f"c{i}",
        turn=0,
        prompt=" ".join(["w"] * prompt_words),
        context="",
        previous_response_tokens=prev,
        response="",
        response_tokens=response,
    )


def test_the_previous_answer_baseline_uses_the_previous_answer() -> None:
    rng = np.random.default_rng(0)
    pairs, tokens = [], []
    for i in range(400):
        prev = int(rng.integers(20, 800))
        pairs.append(_pair(i, 5, prev, max(1, int(prev * rng.uniform(0.8, 1.2)))))
        tokens.append(5.0)
    baselines = {b.name: b for b in fit_baselines(pairs, np.array(tokens))}
    truth = np.array([p.response_tokens for p in pairs], dtype=float)
    maes = {}
    for name, base in baselines.items():
        p50, p90 = base.predict(pairs, np.array(tokens))
        assert (p90 >= p50 - 1e-9).all()
        maes[name] = float(np.abs(p50 - truth).mean())
    assert maes["prompt + previous answer"] < 0.5 * maes["global median"]
    assert maes["prompt-length regression"] == pytest.approx(maes["global median"], rel=0.2)


def test_repeated_prompt_floor_is_the_spread_around_each_repeated_prompts_median() -> None:
    pairs = [_pair(i, 2, None, r) for i, r in enumerate([10, 20, 90, 100, 110])]  # "w w" x5
    pairs.append(_pair(9, 3, None, 500))  # a one-off prompt: not counted
    floor = repeated_prompt_floor(pairs, min_count=5)
    assert floor["groups"] == 1
    assert floor["pairs"] == 5
    assert floor["share"] == pytest.approx(5 / 6)
    assert floor["floor_mae"] == pytest.approx((80 + 70 + 0 + 10 + 20) / 5)
    # case and whitespace are folded: "W  w" is the same prompt
    folded = [*pairs[:4], _pair(5, 0, None, 110)]
    folded[-1] = dataclasses.replace(folded[-1], prompt="W  w")
    assert repeated_prompt_floor(folded, min_count=5)["groups"] == 1
