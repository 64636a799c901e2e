"""The step probe's reading of streamed token times (no engine: synthetic streams)."""

from __future__ import annotations

import pytest

from bench.__main__ import main
from bench.real_engine.steps import (
    CASES,
    FLUSH,
    PREFILL_CASE,
    PRELUDES,
    Stream,
    decode_step_ms,
    mock_step_ms,
    prefill_stall_ms,
    rows_of,
    run_order,
)
from mockprovider.physics import PhysicsParams

PHYSICS = PhysicsParams(slots=8, base_iter_ms=3.0, per_slot_ms=2.0, prefill_ms_per_token=1.0,
                        context_ms_per_token=0.01)  # fmt: skip


def _stream(prompt: int, first_s: float, tokens: int, step_ms: float, delay: float = 0.0
            ) -> Stream:  # fmt: skip
    return Stream(prompt, tokens, delay, tuple(first_s + i * step_ms / 1000 for i in range(tokens)))


def test_the_step_is_read_only_while_every_stream_decodes() -> None:
    # Two streams, 10 ms a step; the second starts late and ends early: before and after
    # its window the first one runs alone at 5 ms, which must not count.
    alone = [0.1 + i * 0.005 for i in range(100)]  # 0.1 .. 0.595 s
    together = [0.6 + i * 0.010 for i in range(100)]  # 0.6 .. 1.59 s
    after = [1.595 + i * 0.005 for i in range(50)]
    first = Stream(32, 250, 0.0, tuple(alone + together + after))
    second = _stream(32, 0.6, 100, 10.0)
    step, window = decode_step_ms([first, second])
    assert step == pytest.approx(10.0)
    assert window == pytest.approx(0.99)


def test_streams_that_never_overlap_have_no_step() -> None:
    with pytest.raises(ValueError, match="never decode together"):
        decode_step_ms([_stream(32, 0.0, 10, 5.0), _stream(32, 1.0, 10, 5.0)])


def test_the_mock_step_sums_the_contexts_held_at_the_window_middle() -> None:
    # Two streams of 100 and 1,000 prompt tokens, 10 ms a step, together from 0 to 1 s:
    # at 0.5 s each holds its prompt, its first token and 50 more.
    streams = [_stream(100, 0.0, 101, 10.0), _stream(1000, 0.0, 101, 10.0)]
    held = (100 + 1 + 50) + (1000 + 1 + 50)
    assert mock_step_ms(PHYSICS, streams, 10.0) == pytest.approx(3.0 + 2.0 * 2 + 0.01 * held)


def test_the_prefill_stall_is_the_decoders_longest_gap_after_the_arrival() -> None:
    before = [i * 0.01 for i in range(100)]  # a gap of 600 ms when the prompt arrives at 1.0 s
    stalled = Stream(32, 150, 0.0, (*before, 1.59, *(1.6 + i * 0.01 for i in range(50))))
    late = Stream(512, 10, 1.0, tuple(1.6 + i * 0.01 for i in range(10)))
    assert prefill_stall_ms([stalled], late) == pytest.approx(600.0)
    row = rows_of(PREFILL_CASE, 0, [stalled, _stream(32, 0.0, 200, 10.0), late], PHYSICS)
    assert row["engine_ms"] == pytest.approx(600.0)
    assert float(row["mock_ms"]) > PHYSICS.prefill_ms_per_token * 512  # the step rides on it


def test_every_case_has_streams_that_can_overlap() -> None:
    for name, specs in CASES.items():
        assert specs, name
        assert all(p >= 1 and out >= 2 and delay >= 0 for p, out, delay in specs), name


def test_steps_is_a_real_engine_step(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["real-engine", "steps", "--help"])
    assert exc.value.code == 0
    text = capsys.readouterr().out
    assert "--repeats" in text and "--fit" in text


def test_a_stream_sent_in_a_few_chunks_has_no_step() -> None:
    coalesced = Stream(1536, 384, 0.0, (2.1, 2.2, 5.8))
    with pytest.raises(ValueError, match="384 tokens came in 3 chunks"):
        decode_step_ms([coalesced])


def test_every_case_starts_on_flushed_slots_and_its_prelude_runs_just_before_it() -> None:
    # What an earlier case leaves in an idle slot slows the next one down: each measured
    # case follows a flush with one request per slot, then its own prelude, if any.
    order = run_order(parallel=6)
    measured = [name for name, _ in order if name is not None]
    assert measured == list(CASES)
    for i, (name, specs) in enumerate(order):
        if name is None:
            continue
        before = order[i - 1 - (name in PRELUDES)]
        assert before == (None, (FLUSH,) * 6)
        if name in PRELUDES:
            assert order[i - 1] == (None, PRELUDES[name])
        assert specs == CASES[name]
    assert PRELUDES, "the idle-cache case has a prelude"
