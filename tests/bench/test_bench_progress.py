"""The long ``python -m bench`` commands say how far they are, off a terminal one line at a
time (pytest's captured stderr is not a terminal): never minutes of silence, never one
line that grows with carriage returns. (``default-prior``'s progress is checked with its
one-cell run, in ``test_default_prior_bench.py``.)
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import bench.plan_report
from bench.plan import Case
from bench.sdk_perf import sdk_overhead


def test_sdk_overhead_says_what_it_measures_and_counts_its_throughput_runs(
    capsys: pytest.CaptureFixture[str],
) -> None:
    sdk_overhead(samples=5, calls=16, concurrency=4, repeats=1)
    err = capsys.readouterr().err
    assert "latency: 5 calls per condition, 7 conditions interleaved..." in err
    assert "throughput runs of 16 calls 7/7" in err


def test_bench_plan_progress_is_a_line_per_step_off_a_terminal(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def run_checks(cases: Any, *, workers: Any, progress: Any) -> list[Any]:
        for done in range(1, 4):
            progress(done, 3)
        return []

    monkeypatch.setattr("bench.plan.run_checks", run_checks)
    monkeypatch.setattr(bench.plan_report, "write_plan_report", lambda *a, **k: None)
    small = Case("balanced", 20.0, ("ttft_p99<=1",), 2_000)
    bench.plan_report.plan_benchmark(tmp_path, cases=[small])
    captured = capsys.readouterr()
    out = captured.out + captured.err
    assert "\r" not in out
    steps = [line.split()[:3] for line in out.splitlines() if "simulation checks" in line]
    assert steps == [["simulation", "checks", f"{i}/3"] for i in (1, 2, 3)]
