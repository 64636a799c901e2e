"""The evaluation suite: experiment definitions, outputs, and the claims check."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.__main__ import main
from bench.claims import check_claims, write_reproduction
from bench.runner import run_suite
from bench.suite import EXPERIMENTS, experiment


@pytest.mark.parametrize("exp", EXPERIMENTS, ids=lambda e: e.name)
def test_each_experiment_defines_distinct_seeded_runs(exp: object) -> None:
    specs = exp.specs(2)  # type: ignore[attr-defined]
    assert specs
    assert len(set(specs)) == len(specs)
    assert {s.seed for s in specs} == {0, 1}


def test_unknown_experiment_is_refused() -> None:
    with pytest.raises(ValueError, match="must be one of"):
        experiment("everything")


def test_run_suite_writes_runs_summaries_tables_and_figures(tmp_path: Path) -> None:
    chosen = [experiment("fair-queuing"), experiment("layerwise")]
    summaries = run_suite(chosen, tmp_path, seeds=1, workers=1)
    for name in ("fair-queuing", "layerwise"):
        folder = tmp_path / name
        for file in ("runs.csv", "summary.csv", "tables.md"):
            assert (folder / file).stat().st_size > 0
        pngs = list(folder.glob("*.png"))
        assert pngs
        assert all(p.read_bytes().startswith(b"\x89PNG") for p in pngs)
    tables = (tmp_path / "fair-queuing" / "tables.md").read_text()
    assert "Short-Priority" in tables
    assert "Relative to FIFO" in tables
    assert [r["condition"] for r in summaries["layerwise"]][:4] == [
        "direct_naive",
        "quota_tiered",
        "adaptive_drr",
        "final_adrr_olc",
    ]


def _row(regime: str, condition: str, **means: float) -> dict[str, object]:
    return {"regime": regime, "condition": condition,
            **{f"{k}_mean": v for k, v in means.items()}}  # fmt: skip


@pytest.mark.parametrize(("full", "drr", "holds"), [(4.2, 3.8, True), (3.5, 3.8, False)])
def test_overload_goodput_claim_follows_the_numbers(full: float, drr: float, holds: bool) -> None:
    summaries = {
        "main-comparison": [
            _row("balanced/high", "final_adrr_olc", goodput_rps=full, completion_rate=1.0,
                 satisfaction=1.0),
            _row("balanced/high", "adaptive_drr", goodput_rps=drr, completion_rate=1.0,
                 satisfaction=1.0),
        ]
    }  # fmt: skip
    claims = {c.number: c for c in check_claims(summaries)}
    assert claims[3].holds is holds
    assert claims[2].holds is True
    assert claims[1].holds is None  # its experiment did not run


def test_reproduction_lists_every_claim_with_a_verdict(tmp_path: Path) -> None:
    summaries = {"main-comparison": [
        _row("balanced/high", "final_adrr_olc", goodput_rps=1.0, completion_rate=0.9,
             satisfaction=0.9),
        _row("balanced/high", "adaptive_drr", goodput_rps=1.1, completion_rate=1.0,
             satisfaction=1.0),
    ]}  # fmt: skip
    text = write_reproduction(summaries, tmp_path).read_text()
    assert text.count("| **") == 9  # one verdict per claim
    assert "**does not hold**" in text
    assert "**not run**" in text
    assert "Claim 3 does not hold" in text


@pytest.mark.slow
def test_all_generates_the_reproduction_report(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The learned rung predicts 6k held-out prompts on first use (minutes on a CPU);
    # it has its own test. Here the suite runs the paper's four rungs.
    import bench.workloads

    monkeypatch.setattr(bench.workloads, "learned_available", lambda: False)
    assert main(["all", "--out", str(tmp_path), "--seeds", "1", "--workers", "2"]) == 0
    report = (tmp_path / "REPRODUCTION.md").read_text()
    assert report.count("| **") == 9  # every claim has a verdict
    assert "not run" not in report
    for exp in EXPERIMENTS:
        assert (tmp_path / exp.name / "summary.csv").exists()
    split = (tmp_path / "sharegpt-trace" / "tables.md").read_text()
    assert "Trace bucket split" in split
