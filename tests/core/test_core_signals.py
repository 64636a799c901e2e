"""Client-observable signals: provider load, queue pressure, tail latency, severity."""

from __future__ import annotations

import pytest

from semisched.core import OverloadConfig, SignalsConfig
from semisched.core.signals import Signals, SignalSnapshot

WEIGHTS = OverloadConfig()


def snap(
    signals: Signals,
    *,
    inflight: int = 0,
    max_inflight: int | None = 10,
    queued: float = 0.0,
    weights: OverloadConfig = WEIGHTS,
) -> SignalSnapshot:
    return signals.snapshot(
        inflight=inflight, max_inflight=max_inflight, queued_tokens=queued, weights=weights
    )


def test_fresh_signals_are_calm() -> None:
    s = snap(Signals(SignalsConfig()))
    assert (s.provider_load, s.queue_pressure, s.tail_latency_ratio, s.severity) == (0, 0, 0, 0)


@pytest.mark.parametrize(
    ("inflight", "max_inflight", "load"),
    [(0, 10, 0.0), (5, 10, 0.5), (10, 10, 1.0), (25, 10, 1.0), (50, None, 0.0)],
)
def test_provider_load_is_inflight_over_budget(
    inflight: int, max_inflight: int | None, load: float
) -> None:
    s = snap(Signals(SignalsConfig()), inflight=inflight, max_inflight=max_inflight)
    assert s.provider_load == pytest.approx(load)


def test_queue_pressure_grows_with_queued_tokens_and_saturates() -> None:
    signals = Signals(SignalsConfig(initial_s_per_token=0.01, queue_ref_s=60.0))
    pressures = [snap(signals, queued=q).queue_pressure for q in (0, 1e3, 1e4, 6e4, 1e6)]
    # drain time = tokens * 0.01 s / 10 lanes, over 60 s
    assert pressures == pytest.approx([0.0, 1 / 60, 10 / 60, 1.0, 1.0])


def test_tail_signal_rises_when_recent_per_token_latency_exceeds_the_best() -> None:
    signals = Signals(SignalsConfig(tail_window=20, tail_quantile=0.9, tail_ratio_full=4.0))
    for _ in range(10):
        signals.record_completion(latency_s=1.0, output_tokens=100)  # 10 ms/token
    assert signals.tail_signal() == 0.0
    for _ in range(10):
        signals.record_completion(latency_s=2.5, output_tokens=100)  # 25 ms/token: 2.5x best
    assert signals.tail_signal() == pytest.approx(0.5)  # (2.5 - 1) / (4 - 1)
    for _ in range(20):
        signals.record_completion(latency_s=8.0, output_tokens=100)  # 8x best: full stress
    assert signals.tail_signal() == 1.0
    for _ in range(20):
        signals.record_completion(latency_s=1.0, output_tokens=100)  # congestion clears
    assert signals.tail_signal() == 0.0


def test_throttle_pushes_the_tail_signal_to_full_and_decays() -> None:
    signals = Signals(SignalsConfig(ewma_alpha=0.5))
    signals.record_throttle()
    assert snap(signals).tail_latency_ratio == 1.0
    signals.record_completion(latency_s=1.0, output_tokens=100)
    assert snap(signals).tail_latency_ratio == pytest.approx(0.5)
    for _ in range(20):
        signals.record_completion(latency_s=1.0, output_tokens=100)
    assert snap(signals).tail_latency_ratio < 0.01


@pytest.mark.parametrize(
    ("headroom", "tail"),
    [(1.0, 0.0), (0.2, 0.0), (0.1, 0.5), (0.05, 0.75), (0.0, 1.0), (-0.5, 1.0)],
)
def test_rate_limit_headroom_below_the_low_mark_counts_as_tail_pressure(
    headroom: float, tail: float
) -> None:
    signals = Signals(SignalsConfig(headroom_low=0.2))
    signals.record_headroom(headroom)
    assert snap(signals).tail_latency_ratio == pytest.approx(tail)
    signals.record_headroom(1.0)  # the window refilled
    assert snap(signals).tail_latency_ratio == 0.0


def test_non_finite_headroom_raises() -> None:
    with pytest.raises(ValueError, match=r"^fraction="):
        Signals(SignalsConfig()).record_headroom(float("nan"))


def test_latency_estimate_follows_observed_completions() -> None:
    signals = Signals(SignalsConfig(ewma_alpha=1.0, initial_s_per_token=0.02))
    assert signals.estimate_latency(100) == pytest.approx(2.0)
    signals.record_completion(latency_s=5.0, output_tokens=100)
    assert signals.estimate_latency(100) == pytest.approx(5.0)
    assert signals.estimate_latency(0) == pytest.approx(0.05)  # at least one token


@pytest.mark.parametrize(
    "weights",
    [
        OverloadConfig(),
        OverloadConfig(w_load=1.0, w_queue=1.0, w_tail=1.0),
        OverloadConfig(w_load=5.0, w_queue=0.0, w_tail=0.0),
        OverloadConfig(w_load=0.0, w_queue=0.0, w_tail=0.0),
    ],
)
@pytest.mark.parametrize("stressed", [False, True])
def test_severity_stays_in_unit_interval(weights: OverloadConfig, stressed: bool) -> None:
    signals = Signals(SignalsConfig())
    if stressed:
        signals.record_throttle()
    s = snap(
        signals, inflight=10 if stressed else 0, queued=1e9 if stressed else 0, weights=weights
    )
    for value in (s.provider_load, s.queue_pressure, s.tail_latency_ratio, s.severity):
        assert 0.0 <= value <= 1.0
    expected = min(1.0, weights.w_load + weights.w_queue + weights.w_tail) if stressed else 0.0
    assert s.severity == pytest.approx(expected)


@pytest.mark.parametrize(("latency", "tokens"), [(-1.0, 10), (float("nan"), 10), (1.0, -1)])
def test_bad_observations_raise(latency: float, tokens: int) -> None:
    with pytest.raises(ValueError, match=r"latency_s=|output_tokens="):
        Signals(SignalsConfig()).record_completion(latency, tokens)
