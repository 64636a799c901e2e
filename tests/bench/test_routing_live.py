"""``bench.routing_live``: one routing cell simulated and replayed via the SDK and fleet mock."""

from __future__ import annotations

import csv
from pathlib import Path

from bench.routing import NAMES
from bench.routing_live import routing_live_check

REQUESTS = 60


def test_live_replay_serves_every_job_where_the_simulator_does(tmp_path: Path) -> None:
    table = routing_live_check(
        tmp_path, seed=0, policies=("round_robin",), requests=REQUESTS, caps=(32,)
    )
    with (tmp_path / "summary.csv").open() as fh:
        rows = {r["mode"]: r for r in csv.DictReader(fh)}
    sim, live = rows["sim"], rows["live"]

    def num(row: dict[str, str], key: str) -> float:
        return float(row[key])

    # Every job reached exactly one outcome in both runs, and (nearly) all completed.
    for row in (sim, live):
        outcomes = sum(num(row, k) for k in ("rejects", "expired", "failed"))
        completed = sum(num(row, f"completed_{n}") for n in NAMES)
        assert num(row, "submitted") == REQUESTS
        assert completed + outcomes == REQUESTS
    assert num(live, "unresolved") == 0
    assert num(sim, "completion_rate") >= 0.95
    assert abs(num(live, "completion_rate") - num(sim, "completion_rate")) <= 0.05
    # Round robin spreads the work: each endpoint served about what it served simulated,
    # and what the client saw served is what the mock says it served.
    for name in NAMES:
        simulated, replayed = num(sim, f"completed_{name}"), num(live, f"completed_{name}")
        assert replayed >= 1, f"nothing was served by {name}"
        assert abs(replayed - simulated) <= max(3.0, 0.5 * simulated), name
        assert replayed == num(live, f"mock_completed_{name}"), name
    # The outage was played at the simulator's time: fast-a refused work, and it failed over.
    assert abs(num(live, "mock_origin_lag_s")) < 1e-6
    assert num(live, "mock_503_fast-a") > 0 and num(live, "failovers") > 0
    assert 0.5 <= num(live, "short_p95_ms") / num(sim, "short_p95_ms") <= 2.0
    assert "| 32 per endpoint | round_robin |" in table.read_text()
