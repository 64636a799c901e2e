"""``bench perf``: the table of ratios, and what it refuses."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from bench.perf_compare import baseline_tree, perf_compare, ratio_rows, table


def _round(dispatch: float, rps: float, **picks: float) -> dict[str, float]:
    return {"dispatch_p50_us": dispatch, "requests_per_s": rps,
            **{f"pick_p99_us.{k}": v for k, v in picks.items()}}  # fmt: skip


def test_ratios_are_medians_of_the_rounds_current_over_baseline() -> None:
    rows = ratio_rows(
        {
            "baseline": [_round(20.0, 10_000.0), _round(30.0, 12_000.0), _round(25.0, 10_000.0)],
            "current": [
                _round(10.0, 40_000.0, random=8.0),
                _round(50.0, 1.0, random=12.0),
                _round(12.5, 44_000.0, random=10.0),
            ],
        }
    )
    by = {r["measure"]: r for r in rows}
    dispatch = by["decision at 10k queued: dispatch p50 (µs)"]
    assert (dispatch["baseline"], dispatch["current"]) == (25.0, 12.5)
    assert dispatch["ratio"] == pytest.approx(0.5) and dispatch["better"] == "lower"
    sim = by["simulator: requests per wall second"]
    assert sim["ratio"] == pytest.approx(4.0) and sim["better"] == "higher"
    # A figure the baseline cannot measure (no fleets then) has no ratio.
    pick = by["routing pick p99 at 16 endpoints, random (µs)"]
    assert (pick["baseline"], pick["current"], pick["ratio"]) == (None, 10.0, None)
    admission = by["decision at 10k queued: admission p50 (µs)"]
    assert admission["current"] is None and admission["ratio"] is None
    printed = table(rows)
    assert "| simulator: requests per wall second | higher | 10,000 | 40,000 | 4 |" in printed


def test_a_baseline_that_is_neither_a_folder_nor_a_commit_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="baseline='no-such-commit' must be a folder or a commit"):
        with baseline_tree("no-such-commit", Path(__file__).resolve().parents[2]):
            pass
    with pytest.raises(ValueError, match="rounds=0 must be >= 1"):
        perf_compare(tmp_path, str(tmp_path), rounds=0)


def test_the_simulator_profile_names_our_functions_and_their_shares(tmp_path: Path) -> None:
    from bench.perf_profile import TOP, profile_rows, write_sim_profile

    rows = profile_rows(requests=300, top=8)
    assert len(rows) == 8
    shares = [float(str(r["share"])) for r in rows]
    assert shares == sorted(shares, reverse=True) and 0 < sum(shares) <= 1
    assert any(str(r["function"]).startswith("semisched/core/") for r in rows)
    text = write_sim_profile(tmp_path, requests=300).read_text()
    table = [line for line in text.splitlines() if line.startswith("| `")]
    assert len(table) == TOP and "| function | calls | own s |" in text


def test_instruction_counts_join_the_table_lower_is_better() -> None:
    rows = ratio_rows(
        {
            "baseline": [{"decision_instructions": 100_000.0, "sim_instructions": 300_000.0}],
            "current": [{"decision_instructions": 150_000.0, "sim_instructions": 390_000.0}],
        }
    )
    by = {r["measure"]: r for r in rows}
    decision = by["decision at 10k queued: instructions per arrival and dispatch"]
    assert decision["ratio"] == pytest.approx(1.5) and decision["better"] == "lower"
    assert by["simulator: instructions per request"]["ratio"] == pytest.approx(1.3)


def test_counting_refuses_an_unknown_figure_and_says_when_valgrind_is_missing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from bench import perf_count

    with pytest.raises(ValueError, match="figure='wall' must be one of"):
        perf_count.instructions_per_step(tmp_path, "wall", 10)
    with pytest.raises(ValueError, match="steps=0 must be >= 1"):
        perf_count.instructions_per_step(tmp_path, "sim_instructions", 0)
    monkeypatch.setattr(perf_count.shutil, "which", lambda name: None)
    with pytest.raises(RuntimeError, match="valgrind is not on PATH"):
        perf_count.instructions_per_step(tmp_path, "sim_instructions", 10)
    with pytest.raises(RuntimeError, match="needs valgrind"):
        perf_compare(tmp_path, str(tmp_path), instructions=True)


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("valgrind") is None, reason="counting needs valgrind")
def test_an_instruction_count_is_the_same_on_a_rerun() -> None:
    from bench.perf_count import instructions_per_step

    root = Path(__file__).resolve().parents[2]
    first, again = (instructions_per_step(root, "sim_instructions", 20) for _ in range(2))
    assert first > 10_000  # a simulated request runs the whole stack
    assert again == pytest.approx(first, rel=0.01)
