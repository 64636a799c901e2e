"""``python -m bench cost``: the job it builds, the cheapest plan, the table; and the whole
run at ``--quick`` sizes (real processes: the mock and ``semisched batch``).

Nothing here asserts a timing or a cost target: only counts, rows and what a table says."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from bench.cost import QUICK, CostRow, _table, cheapest_plan_usd, cost_bench, write_input


def test_the_job_has_its_share_of_urgent_lines(tmp_path: Path) -> None:
    urgent = write_input(tmp_path / "in.jsonl", QUICK)
    assert len(urgent) == QUICK.lines and sum(urgent) == round(QUICK.lines * QUICK.urgent_share)
    lines = [json.loads(x) for x in (tmp_path / "in.jsonl").read_text().splitlines()]
    due = {line["body"]["metadata"]["deadline_s"] for line in lines}
    assert due == {str(QUICK.urgent_s), str(QUICK.relaxed_s)}


def test_the_cheapest_plan_discounts_only_the_relaxed_lines(tmp_path: Path) -> None:
    usage = {"prompt_tokens": 1_000_000, "completion_tokens": 0}
    answer = {"response": {"body": {"usage": usage}}, "error": None}
    (tmp_path / "out.jsonl").write_text(
        "".join(json.dumps({**answer, "custom_id": f"line-{i}"}) + "\n" for i in range(10))
    )
    cfg = QUICK.__class__(lines=10, price_input=1.0, price_output=1.0)
    assert cheapest_plan_usd([tmp_path], cfg) == pytest.approx(3 * 1.0 + 7 * 0.5)


def test_the_table_has_a_row_per_strategy() -> None:
    rows = [
        CostRow("realtime", 2.0, 100.0, 10, 0, 10, 0),
        CostRow("batch", 1.0, 4000.0, 7, 3, 0, 10),
        CostRow("auto", 1.3, 4000.0, 10, 0, 3, 7),
        CostRow("auto, killed and resumed", 1.3, 4500.0, 0, 0, 3, 7, 0, 0),
    ]
    text = "\n".join(_table(rows, 1.3, QUICK, "python -m bench cost --quick"))
    for name in ("realtime", "batch", "auto", "auto, killed and resumed"):
        assert f"| {name} |" in text
    assert "`auto` costs 1.000 x that and met 10 of 10 deadlines" in text


@pytest.mark.slow  # real processes for about 25 s
@pytest.mark.wallclock
@pytest.mark.timeout(300)
def test_the_quick_run_writes_a_row_per_strategy_and_bills_no_line_twice(tmp_path: Path) -> None:
    out = cost_bench(tmp_path, QUICK, argv="python -m bench cost --quick")
    rows = list(csv.DictReader((out / "cost.csv").read_text().splitlines()))
    names = [row["strategy"] for row in rows]
    assert names == ["realtime", "batch", "auto", "auto, killed and resumed", "cheapest plan"]
    killed = rows[3]
    assert killed["billed_twice"] == "0" and killed["lost"] == "0"
    assert int(rows[1]["batch_lines"]) == QUICK.lines
    assert int(rows[0]["realtime_lines"]) == QUICK.lines
    tables = (out / "tables.md").read_text()
    assert tables.count("\n| ") == 5  # the header and the four rows
