"""``python -m bench concurrency``: a tiny matrix and halving write what a user reads."""

from __future__ import annotations

import csv
from pathlib import Path

from bench.__main__ import main
from bench.concurrency import CONDITIONS, Cell, fleet_slots, run_cell


def _rows(path: Path) -> list[dict[str, str]]:
    with path.open() as fh:
        return list(csv.DictReader(fh))


def test_the_tiny_matrix_writes_every_condition_its_ratios_and_the_figure(tmp_path: Path) -> None:
    out = tmp_path / "concurrency"
    assert main(["concurrency", "--out", str(out), "--seeds", "1", "--requests", "200",
                 "--sizes", "1", "--halving-requests", "400"]) == 0  # fmt: skip
    for name in ("runs.csv", "summary.csv", "convergence.csv", "tables.md"):
        assert (out / name).stat().st_size > 0, name
    summary = _rows(out / "summary.csv")
    assert [r["condition"] for r in summary] == list(CONDITIONS)
    assert {"short_p95_vs_caps", "goodput_vs_caps", "limit_mae"} <= set(summary[0])
    caps = next(r for r in summary if r["condition"] == "caps")
    assert float(caps["short_p95_vs_caps"]) == 1.0 and float(caps["limit_mae"]) == 0.0
    text = (out / "tables.md").read_text()
    assert "do not edit" in text and "python -m bench concurrency --seeds 1" in text
    assert all(f"| 1 | {c} |" in text for c in CONDITIONS)
    assert "## Convergence after a halving" in text and "16 slots" in text
    trace = _rows(out / "convergence.csv")
    assert trace[0]["rule"] == "" and {"limit.probe"} <= {r["rule"] for r in trace}
    assert (out / "convergence.png").stat().st_size > 10_000


def test_a_run_reports_each_endpoints_slots_and_final_limit() -> None:
    learned = run_cell(Cell(4, "learned", 0, 200))
    old = run_cell(Cell(4, "old32", 0, 200))
    assert learned["slots"] == " ".join(map(str, fleet_slots(4, 0)))
    assert len(str(learned["limits"]).split()) == 4 and "none" not in str(learned["limits"])
    assert old["limits"] == "none none none none"
