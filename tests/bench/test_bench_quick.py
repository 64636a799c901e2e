"""The benchmark harness: workloads, aggregation and the ``quick`` main job."""

from __future__ import annotations

import csv
import math
from pathlib import Path

import numpy as np
import pytest

from bench.__main__ import main
from bench.report import aggregate, format_table
from bench.workloads import (
    CONGESTION,
    DEADLINES_S,
    MIXES,
    generate,
    mean_output_tokens,
    regime,
)
from mockprovider.physics import profile
from predictors.priors import Coarse
from semisched.core.buckets import SIZED_BUCKETS, bucket_for_tokens
from semisched.sim.metrics import METRIC_NAMES


@pytest.mark.parametrize("mix", sorted(MIXES))
def test_workload_follows_its_mix_load_and_deadlines(mix: str) -> None:
    phys = profile("default")
    jobs = generate(regime(f"{mix}/high", requests=4000), 11, Coarse(), phys)
    buckets = [bucket_for_tokens(j.output_tokens) for j in jobs]
    shares = [buckets.count(b) / len(jobs) for b in SIZED_BUCKETS]
    assert shares == pytest.approx(MIXES[mix], abs=0.03)
    for job, bucket in zip(jobs, buckets, strict=True):
        assert job.request.deadline == job.request.arrival + DEADLINES_S[bucket]
        assert job.request.klass == ("interactive" if bucket.value == "short" else "batch")
    arrivals = np.array([j.request.arrival for j in jobs])
    offered = sum(j.output_tokens for j in jobs) / arrivals[-1]
    load = offered / phys.capacity_tokens_per_s()
    assert load == pytest.approx(CONGESTION["high"], rel=0.08)
    assert mean_output_tokens(mix) > 0


@pytest.mark.parametrize("name", ["balanced", "balanced/extreme", "nope/high"])
def test_unknown_regimes_are_refused(name: str) -> None:
    with pytest.raises(ValueError, match="must be one of"):
        regime(name)


def test_aggregate_means_and_sample_std() -> None:
    runs: list[dict[str, object]] = []
    for seed, value in enumerate([1.0, 2.0, 4.0]):
        row: dict[str, object] = {"regime": "r", "strategy": "s", "seed": seed}
        row.update(dict.fromkeys(METRIC_NAMES, value))
        row["short_p95_ms"] = math.nan if seed == 0 else value
        runs.append(row)
    (summary,) = aggregate(runs, ("regime", "strategy"))
    assert summary["runs"] == 3
    assert summary["goodput_rps_mean"] == pytest.approx(7.0 / 3.0)
    assert summary["goodput_rps_std"] == pytest.approx(np.std([1.0, 2.0, 4.0], ddof=1))
    # NaN (metric undefined in a run) is left out, not averaged as zero.
    assert summary["short_p95_ms_mean"] == pytest.approx(3.0)
    assert "7.00 ± 0.00" not in format_table([summary], ("regime", "strategy"))


def test_quick_writes_the_summary_table(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["quick", "--out", str(tmp_path), "--seeds", "2", "--workers", "1"]) == 0
    with (tmp_path / "summary.csv").open() as fh:
        rows = list(csv.DictReader(fh))
    assert [r["strategy"] for r in rows] == [
        "direct_naive",
        "quota_tiered",
        "adaptive_drr",
        "final_adrr_olc",
    ]
    required = {
        "short_p95_ms_mean",
        "short_p95_ms_std",
        "global_p95_ms_mean",
        "completion_rate_mean",
        "satisfaction_mean",
        "goodput_rps_mean",
        "makespan_ms_mean",
        "rejects_mean",
        "defers_mean",
        "served_fraction_mean",
    }
    assert required <= set(rows[0])
    assert all(r["regime"] == "balanced/high" and r["runs"] == "2" for r in rows)
    with (tmp_path / "runs.csv").open() as fh:
        assert len(list(csv.DictReader(fh))) == 8
    printed = capsys.readouterr().out
    assert "final_adrr_olc" in printed
    assert "±" in printed


def test_quick_refuses_zero_seeds(tmp_path: Path) -> None:
    with pytest.raises(SystemExit):
        main(["quick", "--out", str(tmp_path), "--seeds", "0"])
