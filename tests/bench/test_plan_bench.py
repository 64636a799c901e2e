"""``python -m bench plan``'s machinery on a small case: a plan, its simulated check, the report."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from bench.plan import SETTINGS, Case, PoolRun, _pool_task, _Task, plan_case, sample
from bench.plan_report import summary_lines, write_plan_report
from bench.plan_sim import measured

SMALL = Case("balanced", 20.0, ("ttft_p99<=1", "interactive:e2e_p95<=4"), 6_000)


def test_the_planned_pool_is_simulated_with_the_same_requests_and_compared() -> None:
    rows = _pool_task(_Task(SMALL, "paper cap 0.85", "one", 0))
    plan = plan_case(SMALL, SETTINGS["paper cap 0.85"])
    assert [r.slo for r in rows] == [s.key() for s in plan.slos]
    for row in rows:
        assert row.units == plan.one_pool.units and row.requests == 6_000
        assert np.isfinite(row.analytic_s) and row.simulated_s > 0
        assert abs(row.error) < 0.2  # the model and the simulator agree at the planned size


def test_simulated_tails_leave_out_the_runs_start_and_end() -> None:
    work = sample(SMALL)
    idx = np.arange(len(work))
    early = np.where(np.arange(len(work)) < len(work) // 10, 100.0, 1.0)  # slow first tenth
    times = {"ttft": early, "e2e": early}
    slo = plan_case(SMALL, 0.85).slos[0]
    assert measured(work, idx, times, slo) == 1.0  # the empty fleet's start is not the plan


def test_the_report_judges_the_targets_and_writes_its_files(tmp_path: Path) -> None:
    plan = plan_case(SMALL, 0.85)
    runs = [
        PoolRun("balanced", "paper cap 0.85", "one", 10, 0, 0.8, 0.01, "ttft_p99<=1", 0.5, 0.45, 9),
        PoolRun("balanced", "paper cap 0.85", "one", 9, -1, 0.95, 0.3, "ttft_p99<=1", 3.0, 1.5, 9),
        PoolRun("balanced", "paper cap 0.85", "curve", 11, 1, 0.7, 0.0, "ttft_p99<=1", 0.4, 0.4, 9),
    ]
    lines = "\n".join(summary_lines(runs))
    assert "1 of 1 (pool, SLO) pairs" in lines  # within 15% at the plan (-10%... +11%)
    assert "One unit fewer misses an SLO in simulation: 1 of 1 pools" in lines
    assert "analytic 3 s vs simulated 1.5 s (+100%)" in lines  # Kimura off, said where
    plans = {("balanced", "paper cap 0.85"): plan}
    write_plan_report(tmp_path, plans, runs, {"balanced": 5.0}, cases=[SMALL])
    for name in ("plans.md", "plans.csv", "checks.md", "checks.csv", "summary.md",
                 "p99_vs_units.png", "cost_vs_boundary.png"):  # fmt: skip
        assert (tmp_path / name).stat().st_size > 0
