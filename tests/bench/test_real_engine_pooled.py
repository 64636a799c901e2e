"""Learned against told, pooled over routing runs seed by seed (bench.real_engine.pooled)."""

from __future__ import annotations

import csv
import math
from pathlib import Path

import pytest

from bench.real_engine.pooled import pooled_markdown, pooled_rows

_FIELDS = ("policy", "caps", "seed", "short_p95_ms", "sim_short_p95_ms", "completion_rate")


def _run(folder: Path, name: str, rows: list[tuple[str, str, int, float, float, float]]) -> None:
    (folder / name).mkdir(parents=True)
    with (folder / name / "routing.csv").open("w", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(_FIELDS)
        writer.writerows(rows)


def test_each_seed_is_paired_with_itself_and_runs_are_pooled(tmp_path: Path) -> None:
    _run(tmp_path, "a", [
        ("rr", "slots", 0, 100.0, 50.0, 1.0), ("rr", "learned", 0, 200.0, 50.0, 1.0),
        ("rr", "slots", 1, 400.0, 50.0, 1.0), ("rr", "learned", 1, 200.0, 100.0, 1.0),
        ("rr", "slots", 2, 300.0, 50.0, 1.0),  # no learned run: no pair
    ])  # fmt: skip
    _run(tmp_path, "b", [  # seed 0 again: other requests' run, its own pair
        ("rr", "slots", 0, 100.0, 50.0, 1.0), ("rr", "learned", 0, 105.0, 50.0, 0.98),
    ])  # fmt: skip
    stats = {s.run: s for s in pooled_rows(tmp_path, ("a", "b", "missing"))}
    assert set(stats) == {"a", "b", "all"}
    a, pooled = stats["a"], stats["all"]
    assert a.pairs == 2 and a.geomean == pytest.approx(1.0)  # 2.0 and 0.5
    assert a.median == pytest.approx(1.25) and a.within == 0 and a.faster == 1
    assert a.sim_geomean == pytest.approx(math.sqrt(2.0)) and a.completed
    assert pooled.pairs == 3 and pooled.within == 1  # b's 1.05
    assert pooled.geomean == pytest.approx(1.05 ** (1 / 3))
    assert not pooled.completed and not stats["b"].completed  # a learned run lost a request


def test_the_tables_rows_and_what_shows_with_no_run(tmp_path: Path) -> None:
    assert pooled_markdown(tmp_path, ("a",)).startswith("Not run yet")
    _run(tmp_path, "a", [("rr", "slots", 0, 100.0, 50.0, 1.0),
                         ("rr", "learned", 0, 120.0, 50.0, 1.0)])  # fmt: skip
    whole = pooled_markdown(tmp_path, ("a",))
    assert "| `a` | rr | 1 | 1.20 |" in whole and "| all | rr | 1 | 1.20 |" in whole
    summary = pooled_markdown(tmp_path, ("a",), pooled_only=True)
    assert "| all | rr |" in summary and "`a`" not in summary


def test_the_achieved_load_is_shown_beside_the_intended(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    with (tmp_path / "a" / "routing.csv").open("w", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow((*_FIELDS, "achieved_load", "intended_load"))
        writer.writerow(("rr", "slots", 0, 100.0, 50.0, 1.0, 0.5, 1.1))
        writer.writerow(("rr", "learned", 0, 100.0, 50.0, 1.0, 0.6, 1.1))
    (stats,) = [s for s in pooled_rows(tmp_path, ("a",)) if s.run == "a"]
    assert stats.load == pytest.approx(0.55) and stats.intended == pytest.approx(1.1)
    assert "| 0.55 of 1.1 |" in pooled_markdown(tmp_path, ("a",))
