"""Fitting the mock to the engine, on synthetic timings made from known constants: the fit
gives the constants back, and the mock with the fitted profile then takes what the
"engine" took (no engine, no build)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from bench.real_engine.calibrate import (
    CONTEXT_PROMPTS,
    DECODE_PROMPT,
    DECODE_TOKENS,
    PREFILL_LENGTHS,
    fit_engine,
    fit_line,
    plan_fit_crosscheck,
    profile_from_fit,
    read_calibration,
    write_calibration,
)
from bench.real_engine.client import Completion, Job
from bench.real_engine.compare import mock_latencies
from mockprovider.physics import PhysicsParams

W, H, P, OVERHEAD_MS, SLOTS, BATCH = 6.0, 1.5, 0.25, 40.0, 8, 512  # P: ms per prompt token


def _lone_s(prompt: int, output: int, k: float = 0.0) -> float:
    """An engine request alone: its prompt in steps of BATCH tokens, then its decode, each
    step paying ``k`` per token of context (the prompt and the tokens so far)."""
    steps = -(-prompt // BATCH) + output
    context = k * (prompt * steps + steps**2 / 2)
    return (OVERHEAD_MS + P * prompt + steps * (W + H) + context) / 1e3


def _engine(rng: np.random.Generator, k: float = 0.0) -> list[Completion]:
    """What an engine with the constants above reports, a little noisy (1%); with ``k``, its
    decode steps also pay ``k`` per token of context, and it runs the context sweep."""
    done = []
    for repeat in range(2):
        for n in (1, 2, 4, 6, 8):
            context = k * n * (DECODE_PROMPT + (DECODE_TOKENS - 1) / 2)
            it = (W + H * n + context) * rng.normal(1.0, 0.01)
            latency = (OVERHEAD_MS + P * DECODE_PROMPT * n + (1 + DECODE_TOKENS) * it) / 1e3
            done += [Completion(tag=f"decode/{n}/{repeat}", sent=0.0, end=latency,
                                prompt_tokens=DECODE_PROMPT, output_tokens=DECODE_TOKENS,
                                prompt_ms=P * DECODE_PROMPT * n, predicted_ms=it * DECODE_TOKENS,
                                predicted_n=DECODE_TOKENS) for _ in range(n)]  # fmt: skip
        for length in PREFILL_LENGTHS:
            prompt_ms = (W + H + P * length) * rng.normal(1.0, 0.01)
            done.append(Completion(tag=f"prefill/{length}/{repeat}", sent=0.0,
                                   end=_lone_s(length, 1), prompt_tokens=length, output_tokens=1,
                                   prompt_ms=prompt_ms, predicted_ms=0.0,
                                   predicted_n=0))  # fmt: skip
        for n in (1, SLOTS) if k else ():
            for prompt in CONTEXT_PROMPTS:
                mean_context = n * (prompt + (DECODE_TOKENS - 1) / 2)
                it = (W + H * n + k * mean_context) * rng.normal(1.0, 0.01)
                done += [Completion(tag=f"context/{n}/{repeat}", sent=0.0,
                                    end=_lone_s(prompt, DECODE_TOKENS, k), prompt_tokens=prompt,
                                    output_tokens=DECODE_TOKENS, prompt_ms=P * prompt * n,
                                    predicted_ms=it * DECODE_TOKENS,
                                    predicted_n=DECODE_TOKENS) for _ in range(n)]  # fmt: skip
    return done


K = 0.004  # ms per token of context


def test_the_context_sweep_gives_the_context_cost_back() -> None:
    fit = fit_engine(_engine(np.random.default_rng(5), k=K), SLOTS, BATCH)
    assert fit.context_ms_per_token == pytest.approx(K, rel=0.1)
    assert fit.base_iter_ms == pytest.approx(W, rel=0.1)
    assert fit.per_slot_ms == pytest.approx(H, rel=0.1)
    assert fit.overhead_ms == pytest.approx(OVERHEAD_MS, abs=8.0)
    profile = PhysicsParams(**profile_from_fit(fit))
    assert profile.context_ms_per_token == pytest.approx(K, rel=0.1)
    # without the context sweep (a calibration from before it) there is no context cost
    assert fit_engine(_engine(np.random.default_rng(5)), SLOTS, BATCH).context_ms_per_token == 0


def test_with_the_context_cost_the_mock_takes_what_a_long_request_took() -> None:
    done = _engine(np.random.default_rng(6), k=K)
    mock = PhysicsParams(**profile_from_fit(fit_engine(done, SLOTS, BATCH)))
    flat = PhysicsParams(**{**profile_from_fit(fit_engine(done, SLOTS, BATCH)),
                            "context_ms_per_token": 0.0})  # fmt: skip
    job = Job(arrival=0.0, prompt=tuple(range(2, 2 + 500)), max_tokens=1000, tag="long")
    truth = _lone_s(500, 1000, K)
    assert mock_latencies(mock, [job])[0] == pytest.approx(truth, rel=0.05)
    assert mock_latencies(flat, [job])[0] < 0.8 * truth  # what the mock missed before


def test_a_line_is_recovered_and_one_point_is_refused() -> None:
    assert fit_line([1, 2, 4], [7.5, 9.0, 12.0]) == pytest.approx((6.0, 1.5))
    with pytest.raises(ValueError, match="two or more"):
        fit_line([3, 3], [1, 2])


def test_the_fit_returns_the_engines_constants() -> None:
    fit = fit_engine(_engine(np.random.default_rng(0)), SLOTS, BATCH)
    assert fit.base_iter_ms == pytest.approx(W, rel=0.05)
    assert fit.per_slot_ms == pytest.approx(H, rel=0.05)
    assert fit.prefill_ms_per_token == pytest.approx(P, rel=0.03)
    assert fit.prefill_chunk == BATCH
    assert fit.overhead_ms == pytest.approx(OVERHEAD_MS, abs=5.0)
    assert fit.decode_r_squared > 0.95
    profile = PhysicsParams(**profile_from_fit(fit))
    assert profile.slots == SLOTS and profile.iteration_ms(4) == pytest.approx(W + 4 * H, rel=0.05)


def test_the_fitted_mock_takes_what_the_engine_took_alone() -> None:
    fit = fit_engine(_engine(np.random.default_rng(1)), SLOTS, BATCH)
    mock = PhysicsParams(**profile_from_fit(fit))
    jobs = [Job(arrival=0.0, prompt=tuple(range(2, 2 + p)), max_tokens=o, tag=f"j{p}")
            for p, o in ((40, 10), (300, 200), (500, 1))]  # fmt: skip
    for job in jobs:
        truth = _lone_s(len(job.prompt), job.max_tokens)
        assert mock_latencies(mock, [job])[0] == pytest.approx(truth, rel=0.05)


def test_a_sweep_at_one_concurrency_cannot_separate_w_from_h() -> None:
    only_lone = [c for c in _engine(np.random.default_rng(2)) if "/2/" not in c.tag and
                 not any(f"decode/{n}/" in c.tag for n in (2, 4, 6, 8))]  # fmt: skip
    with pytest.raises(ValueError, match="two or more"):
        fit_engine(only_lone, SLOTS, BATCH)


def test_plan_fit_on_the_same_client_times_agrees() -> None:
    done = _engine(np.random.default_rng(3))
    fit = fit_engine(done, SLOTS, BATCH)
    check = plan_fit_crosscheck(done, fit)
    assert check["base_iter_ms"] == pytest.approx(W, rel=0.15)
    assert check["per_slot_ms"] == pytest.approx(H, rel=0.15)
    assert check["observations"] == len(done)


def test_the_calibration_csv_round_trips(tmp_path: Path) -> None:
    done = _engine(np.random.default_rng(4))
    write_calibration(tmp_path, done)
    back = read_calibration(tmp_path / "calibration.csv")
    again, first = fit_engine(back, SLOTS, BATCH), fit_engine(done, SLOTS, BATCH)
    assert again.per_slot_ms == pytest.approx(first.per_slot_ms, rel=1e-3)
