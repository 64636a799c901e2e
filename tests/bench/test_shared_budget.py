"""``python -m bench shared-budget``: its pure parts, and a tiny real run of every condition.

The run starts real processes (the mock, a Redis, the workers) in real time, so it is
marked ``wallclock``; it asserts what the outputs hold, never how fast anything was.
"""

from __future__ import annotations

import csv
import math
from pathlib import Path
from typing import Any

import pytest

from bench.__main__ import main
from bench.shared_budget import MODES, SharedBudgetConfig, measure, skewed_counts
from bench.shared_worker import request_mix


@pytest.mark.parametrize(
    ("total", "n", "counts"),
    [
        (180, 1, [180]),
        (180, 2, [120, 60]),
        (150, 4, [80, 40, 20, 10]),
        (180, 8, [90, 45, 23, 11, 6, 3, 1, 1]),
        (8, 8, [1] * 8),
        (9, 8, [2] + [1] * 7),
        (40, 8, [18, 10, 5, 3, 1, 1, 1, 1]),
        (10, 4, [5, 3, 1, 1]),
    ],
)
def test_the_skew_halves_each_share_and_keeps_the_total(
    total: int, n: int, counts: list[int]
) -> None:
    assert skewed_counts(total, n) == counts
    assert sum(counts) == total


def test_a_skew_needs_a_call_per_worker() -> None:
    with pytest.raises(ValueError, match="total"):
        skewed_counts(3, 4)


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"workers": ()}, "workers"),
        ({"modes": ("shared", "lucky")}, "modes"),
        ({"requests": 4}, "requests"),
        ({"time_scale": 0.0}, "time_scale"),
        ({"tpm": 4000}, "static share"),
        ({"probe": -1}, "probe"),
        ({"faults": ("flood",)}, "faults"),
    ],
)
def test_config_names_the_bad_field(changes: dict[str, Any], field: str) -> None:
    with pytest.raises(ValueError, match=field.split()[0]):
        SharedBudgetConfig(**changes)


def test_the_mix_is_seeded_and_charges_prompt_plus_cap() -> None:
    calls = request_mix(200, 4.0, seed=3)
    assert calls == request_mix(200, 4.0, seed=3) != request_mix(200, 4.0, seed=4)
    assert all(c.charge == c.prompt_tokens + c.max_tokens for c in calls)
    assert {c.max_tokens for c in calls} == {128, 1024}
    assert all(c.output_tokens <= c.max_tokens for c in calls)
    assert [c.arrival for c in calls] == sorted(c.arrival for c in calls)


def _worker(start: float, calls: list[list[Any]], sends: list[list[Any]]) -> dict[str, Any]:
    return {"time_scale": 1.0, "start": start, "end": max(c[2] for c in calls),
            "requests": len(calls), "completed": len(calls), "outcomes": {}, "throttled": 0,
            "refused": 0, "round_trips_ms": [], "state": None, "calls": calls,
            "sends": sends}  # fmt: skip


def test_utilisation_counts_only_the_queued_instants() -> None:
    """Two calls arrive at 0; the limit (1 per 60 s) lets one out at 0 and one at 60: the
    window is full all the time work waits, then the queue is empty (not counted)."""
    calls = [[0.0, 10, 1.0, "completed"], [0.0, 10, 61.0, "completed"]]
    sends = [[0.0, 200, 0], [30.0, 429, 1], [60.0, 200, 1]]
    row = measure([_worker(0.0, calls, sends)], {"rate_limited": 1, "requests": 3,
                  "completed": 2}, rpm=1, tpm=20, step_s=0.5)  # fmt: skip
    assert row["req_util"] == pytest.approx(1.0)
    assert row["tok_util"] == pytest.approx(0.5)
    assert row["util"] == pytest.approx(1.0)
    assert row["queued_s"] == pytest.approx(60.0)
    assert (row["makespan_s"], row["provider_429s"], row["lost"]) == (61.0, 1, 0)
    assert math.isnan(row["rtt_p99_ms"])


@pytest.mark.slow
@pytest.mark.wallclock
def test_a_tiny_run_writes_every_condition(tmp_path: Path) -> None:
    out = tmp_path / "sb"
    # No store faults: tests/state/test_multiprocess.py runs them.
    argv = ["shared-budget", "--out", str(out), "--workers", "1,2", "--requests", "12",
            "--repeats", "1", "--probe", "20", "--time-scale", "30",
            "--faults", "none"]  # fmt: skip
    assert main(argv) == 0
    with (out / "summary.csv").open() as handle:
        rows = list(csv.DictReader(handle))
    assert {(r["condition"], r["workers"]) for r in rows} == {
        (mode, n) for mode in MODES for n in ("1", "2")
    }
    for row in rows:
        assert float(row["completed_mean"]) + float(row["failed_mean"]) == 12
        assert float(row["lost_mean"]) == 0
        assert float(row["makespan_s_mean"]) > 0
        shared = row["condition"] == "shared"
        assert (row["rtt_p99_ms_mean"] != "") == shared
        assert (row["probe_p99_ms_mean"] != "") == shared
    with (out / "runs.csv").open() as handle:
        assert len(list(csv.DictReader(handle))) == 6
    tables = (out / "tables.md").read_text()
    assert "| 2 | static |" in tables and "## The benchmark's targets, as measured" in tables
    assert (out / "makespan.png").stat().st_size > 0
