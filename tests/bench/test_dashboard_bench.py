"""``python -m bench dashboard`` (bench.dashboard): a reduced run through the SDK and the HTTP
mock in virtual time, its PNG and CSV, and the PromQL stand-ins it computes them with."""

from __future__ import annotations

import csv
import math
from pathlib import Path
from typing import Any

import pytest

from bench.__main__ import main
from bench.dashboard import OUTCOMES, DashboardRun, dashboard, histogram_quantile

RUN = DashboardRun(requests=150, scrape_s=5.0, window_s=60.0)


@pytest.fixture(scope="module")
def written(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    out = tmp_path_factory.mktemp("dashboard")
    return out, dashboard(out, RUN)


def rows_of(out: Path) -> list[dict[str, float]]:
    """The CSV's rows (``bench.report.write_csv``: 6 significant digits, NaN as empty)."""
    with (out / "series.csv").open() as file:
        return [{k: float(v or "nan") for k, v in row.items()} for row in csv.DictReader(file)]


def test_writes_a_png_and_a_series_csv(written: tuple[Path, dict[str, Any]]) -> None:
    out, summary = written
    png = (out / "dashboard.png").read_bytes()
    assert png.startswith(b"\x89PNG\r\n\x1a\n") and len(png) > 50_000
    rows = rows_of(out)
    assert len(rows) == summary["scrapes"] >= 2
    assert [r["t_s"] for r in rows] == [k * RUN.scrape_s for k in range(len(rows))]
    for column in ("queue_wait_p95_s", "severity", "inflight", "provider_active",
                   "headroom[fleet]", "tenant_share[app]", "rate_per_s[completed]"):  # fmt: skip
        assert column in rows[0], column
    assert summary["wall_s"] < 60


def test_the_final_counts_are_what_the_callers_saw(written: tuple[Path, dict[str, Any]]) -> None:
    out, summary = written
    final = rows_of(out)[-1]
    assert final["count[submitted]"] == RUN.requests
    terminal = ("completed", "rejected", "expired", "failed", "cancelled")
    assert sum(final[f"count[{o}]"] for o in terminal) == RUN.requests
    for outcome in ("completed", "rejected", "expired", "failed"):
        assert final[f"count[{outcome}]"] == summary.get(f"callers_{outcome}", 0.0), outcome
    assert final["inflight"] == final["deferred"] == 0
    assert summary["peak_severity"] > 0.3  # the workload does overload the provider


def test_rates_are_the_counts_increase_over_the_window(
    written: tuple[Path, dict[str, Any]],
) -> None:
    rows = rows_of(written[0])
    steps = round(RUN.window_s / RUN.scrape_s)
    for name in ("submitted", *OUTCOMES):
        counts = [r[f"count[{name}]"] for r in rows]
        for i, row in enumerate(rows):
            base = counts[i - steps] if i >= steps else 0.0
            increase = row[f"rate_per_s[{name}]"] * RUN.window_s
            assert increase == pytest.approx(counts[i] - base, abs=1e-3)
        # Back-to-back windows add up to the count at their end.
        ends = list(range(steps, len(rows), steps))
        tiled = sum(rows[i][f"rate_per_s[{name}]"] * RUN.window_s for i in ends)
        assert tiled == pytest.approx(counts[ends[-1]] if ends else 0.0, abs=1e-2), name
    served = sum(r["provider_rate_per_s[200]"] for r in rows[steps::steps]) * RUN.window_s
    assert served <= rows[-1]["count[completed]"]


def test_histogram_quantile_interpolates_like_prometheus() -> None:
    buckets = [(1.0, 10.0), (2.0, 30.0), (5.0, 40.0), (math.inf, 40.0)]
    assert histogram_quantile(0.5, buckets) == pytest.approx(1.0 + 1.0 * (20 - 10) / 20)
    assert histogram_quantile(0.1, list(reversed(buckets))) == pytest.approx(0.4)
    assert histogram_quantile(0.99, [(1.0, 1.0), (math.inf, 5.0)]) == 1.0  # in +Inf
    assert math.isnan(histogram_quantile(0.5, [(1.0, 0.0), (math.inf, 0.0)]))
    assert math.isnan(histogram_quantile(0.5, []))


def test_the_run_checks_its_window() -> None:
    with pytest.raises(ValueError, match="multiple"):
        DashboardRun(scrape_s=7.0)
    with pytest.raises(SystemExit):
        main(["dashboard", "--scrape", "7", "--out", "unused"])
    with pytest.raises(SystemExit):
        main(["dashboard", "--regime", "nope/high", "--out", "unused"])
