"""Every example runs against the mock provider and shows what it promises (real subprocesses)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
pytestmark = pytest.mark.wallclock


def run(name: str) -> str:
    done = subprocess.run(
        [sys.executable, str(EXAMPLES / name)], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


def test_every_example_has_a_test() -> None:
    tested = set(re.findall(r'run\("(\w+\.py)"\)', Path(__file__).read_text()))
    assert {p.name for p in EXAMPLES.glob("*.py")} == tested


def test_fleet_routing_rides_out_the_outage() -> None:
    out = run("fleet_routing.py")
    assert "outcomes {'completed': 360}" in out  # nothing lost to fast-a's outage
    table = re.findall(r"^(fast-a|fast-b|slow) +(\d+) +(\d+) +(\d+) +\d+ +(\d+) ", out, flags=re.M)
    rows = {name: [int(n) for n in counts] for name, *counts in table}  # sent done failed failovers
    assert sorted(rows) == ["fast-a", "fast-b", "slow"]
    assert all(done > 0 for _, done, _, _ in rows.values())  # every endpoint served calls
    _, _, failed, failovers = rows["fast-a"]
    assert failed > 0  # the outage answered 503s ...
    assert failovers == failed  # ... and each of those calls went on to another endpoint at once
    assert rows["slow"][2] == 0  # a healthy endpoint fails nothing


def test_mixed_workload_serves_both_classes() -> None:
    out = run("mixed_workload.py")
    assert "interactive  {'completed': 40}" in out
    assert "batch        {'completed': 40}" in out


def test_rate_limits_a_budget_avoids_the_429_storm() -> None:
    out = run("rate_limits.py")
    lines = dict(re.findall(r"^(no budget|budget = limit)\s+(.*)$", out, flags=re.M))
    assert set(lines) == {"no budget", "budget = limit"}
    throttled = {k: int(re.search(r"429s (\d+)", v).group(1)) for k, v in lines.items()}  # type: ignore[union-attr]
    assert throttled["no budget"] > 10 * max(1, throttled["budget = limit"])
    # Paced, with its 5xx answers retried, the budgeted run loses nothing; the storm may
    # exhaust some requests' attempts (RateLimited), which is its point.
    assert "'completed': 60}" in lines["budget = limit"]


def test_virtual_time_runs_ten_minutes_in_seconds() -> None:
    out = run("virtual_time.py")
    assert "outcomes {'completed': 1200}" in out
    assert "429s 0, retries 0" in out  # paced to the provider's 120 RPM
    virtual = float(re.search(r"virtual time ([\d.]+) s", out).group(1))  # type: ignore[union-attr]
    assert 600.0 <= virtual < 700.0  # 1200 arrivals, 0.5 s apart, then the last answers


def test_shared_budget_keeps_three_processes_under_one_limit() -> None:
    out = run("shared_budget.py")
    alone = re.search(r"^each alone\s+completed (\d+)/90, 429s (\d+)", out, flags=re.M)
    shared = re.search(r"^shared through Redis\s+completed (\d+)/90, 429s (\d+)", out, flags=re.M)
    assert alone is not None and shared is not None, out
    assert shared.group(1) == "90" and shared.group(2) == "0"  # together, under the limit
    assert int(alone.group(2)) > 0  # alone, each at the whole limit: the storm it prevents


#: A row of examples/tenants.py's tables: name, completed, rejected, short p50, short p95.
TENANT_ROW = re.compile(
    r"^  (checkout|search|backfill) .* (\d+) +(\d+) +([\d.]+|-)(?: s)? +([\d.]+|-)(?: s)?$", re.M
)


def test_tenants_fair_share_shields_the_guaranteed_tenant_from_the_flood() -> None:
    out = run("tenants.py")
    runs = re.split(r"^policy (\w+):", out, flags=re.M)[1:]
    tables = dict(zip(runs[::2], runs[1::2], strict=True))
    assert set(tables) == {"fifo", "fair_share"}
    rows = {
        policy: {
            name: (int(done), int(rejected), p50, p95)
            for name, done, rejected, p50, p95 in TENANT_ROW.findall(text)
        }
        for policy, text in tables.items()
    }
    for policy in ("fifo", "fair_share"):
        assert sorted(rows[policy]) == ["backfill", "checkout", "search"]
        assert rows[policy]["checkout"][:2] == (120, 0)  # every checkout call, none shed
        assert rows[policy]["backfill"][0] > 0  # the flood still gets the surplus
    fifo, fair = rows["fifo"]["checkout"], rows["fair_share"]["checkout"]
    # Behind the whole flood under fifo; ahead of it under fair_share.
    assert float(fair[2]) * 20 < float(fifo[2])  # p50
    assert float(fair[3]) * 5 < float(fifo[3])  # p95
