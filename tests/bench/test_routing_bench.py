"""``python -m bench routing``: the matrix runs, names each policy, and loses nothing."""

from __future__ import annotations

import csv
from pathlib import Path

from bench.__main__ import main
from bench.routing import POLICIES, RoutingSpec, run_routing


def test_the_routing_matrix_writes_every_policy_and_a_figure(tmp_path: Path) -> None:
    out = tmp_path / "routing"
    assert main(["routing", "--out", str(out), "--seeds", "1", "--requests", "120",
                 "--regimes", "balanced/high", "--workers", "1"]) == 0  # fmt: skip
    with (out / "summary.csv").open() as fh:
        rows = list(csv.DictReader(fh))
    assert sorted({r["condition"] for r in rows}) == sorted(POLICIES)
    assert {r["caps"] for r in rows} == {"none", "32 per endpoint"}
    assert (out / "routing.png").stat().st_size > 10_000
    assert "## balanced/high, per-endpoint cap: none" in (out / "tables.md").read_text()


def test_the_outage_loses_no_request_and_failed_attempts_fail_over() -> None:
    row = run_routing(RoutingSpec("balanced/high", "round_robin", 0, 300))
    assert row["failed"] == 0.0
    assert float(row["failovers"]) > 0  # round robin keeps trying fast-a until its circuit opens
    assert float(row["completion_rate"]) > 0.9
    shares = [float(row[f"util_{name}"]) for name in ("fast-a", "fast-b", "slow")]  # type: ignore[arg-type]
    assert all(share > 0 for share in shares)
