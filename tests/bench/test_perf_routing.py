"""``routing_cost`` and ``python -m bench decision-cost``'s routing table (issue 13).

Tiny runs: these check that every policy is timed and really routes, never how fast.
"""

from __future__ import annotations

import csv
import math
from pathlib import Path

import pytest

import bench.perf
from bench.__main__ import main
from bench.perf import routing_cost
from semisched.core.config import ROUTING_POLICY_NAMES

TIMINGS = [f"{what}_{stat}_us" for what in ("pick", "dispatch") for stat in ("p50", "p99", "mean")]


def test_every_policy_is_timed_and_picks_endpoints() -> None:
    rows = routing_cost(endpoints=4, queued=200, samples=50)
    assert [row["policy"] for row in rows] == list(ROUTING_POLICY_NAMES)
    for row in rows:
        for key in TIMINGS:
            value = row[key]
            assert isinstance(value, float) and math.isfinite(value) and value > 0, (row, key)
        assert (row["endpoints"], row["queued"]) == (4.0, 200.0)
        # The routing decisions choose endpoints, and more than one of them.
        assert float(row["routed"]) >= 0.9, row
        assert float(row["endpoints_used"]) >= 2, row


def test_decision_cost_writes_both_tables(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    real = bench.perf.decision_cost
    monkeypatch.setattr(  # two small queue lengths instead of 100 .. 100k
        bench.perf, "decision_cost", lambda samples: real(sizes=(100, 200), samples=samples)
    )
    args = ["decision-cost", "--out", str(tmp_path), "--samples", "20"]
    assert main([*args, "--endpoints", "3", "--queued", "50"]) == 0
    out = capsys.readouterr().out
    assert "dispatch p99 growth 1k -> 100k queued" in out  # the queue-length table, as before
    assert "routing, 3 endpoints, 50 queued" in out
    assert all(policy in out for policy in ROUTING_POLICY_NAMES)
    with (tmp_path / "decision_cost.csv").open() as fh:
        assert [row["queued"] for row in csv.DictReader(fh)] == ["100", "200"]
    with (tmp_path / "routing_cost.csv").open() as fh:
        routed = list(csv.DictReader(fh))
    assert [row["policy"] for row in routed] == list(ROUTING_POLICY_NAMES)
    assert {(row["endpoints"], row["queued"]) for row in routed} == {("3", "50")}


@pytest.mark.parametrize(("option", "value"), [("--endpoints", "0"), ("--queued", "-1")])
def test_decision_cost_refuses_bad_routing_sizes(
    option: str, value: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["decision-cost", "--out", str(tmp_path), option, value])
    assert exc.value.code == 2
    assert f"{option}={value} must be" in capsys.readouterr().err
    assert not list(tmp_path.iterdir())  # refused before anything ran
