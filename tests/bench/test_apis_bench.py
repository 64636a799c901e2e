"""``python -m bench apis``: strategies over one key spent by three APIs (a small run)."""

from __future__ import annotations

from pathlib import Path

from bench.apis import MIXES, apis, run_cell


def test_every_api_is_paced_by_the_budget_and_answered() -> None:
    row = run_cell("final_adrr_olc", "chat + responses + embeddings", 30)
    assert row.completed == row.calls == 30
    assert row.rate_limited == 0  # each API charged what it costs: no 429 at the limit


def test_the_tables_name_every_strategy_and_mix_and_say_whether_the_order_held(
    tmp_path: Path,
) -> None:
    out = apis(tmp_path, calls=12, strategies=("direct_naive", "final_adrr_olc"))
    rows = (out / "apis.csv").read_text().splitlines()
    assert len(rows) == 1 + 2 * len(MIXES)
    tables = (out / "tables.md").read_text()
    assert "keep their order across the mixes:" in tables
    assert "`direct_naive`" in tables and "`final_adrr_olc`" in tables
