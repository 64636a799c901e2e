"""``bench.tenants_live``: the noisy neighbour simulated and replayed via the SDK and the mock."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from bench.tenants import scenario_jobs
from bench.tenants_live import tenants_live_check

#: Arrivals replayed (s): the first quarter of the span, ~780 requests under the flood.
SPAN_S = 300.0
TENANTS = ("A", "B", "C")


@pytest.mark.slow
def test_fair_share_keeps_the_flood_off_b_and_c_live_as_simulated(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    tenants_live_check(tmp_path, conditions=("fair_share", "tenant_blind"), span_s=SPAN_S)
    err = capsys.readouterr().err  # the cells as they finish, not minutes of silence
    assert [line.split()[2] for line in err.splitlines() if "live-check cells" in line] == [
        "1/4",
        "2/4",
        "3/4",
        "4/4",
    ]
    with (tmp_path / "runs.csv").open() as fh:
        rows = {
            (r["scenario"], r["condition"], r["source"], r["tenant"]): r for r in csv.DictReader(fh)
        }

    def num(scenario: str, condition: str, source: str, tenant: str, key: str) -> float:
        return float(rows[(scenario, condition, source, tenant)][key])

    for scenario in ("noisy", "noisy-base"):
        jobs = [j for j in scenario_jobs(scenario, 0) if j.request.arrival <= SPAN_S]
        for condition in ("fair_share", "tenant_blind"):
            # Every job reached exactly one outcome live, counted under its own tenant,
            # and the SDK's per-tenant statistics agree with what the callers saw.
            assert num(scenario, condition, "live", "all", "unresolved") == 0
            for tenant in (*TENANTS, "all"):
                mine = [j for j in jobs if tenant in ("all", j.request.tenant)]
                row = rows[(scenario, condition, "live", tenant)]
                outcomes = sum(float(row[k]) for k in ("completed", "rejects", "expired", "failed"))
                assert float(row["submitted"]) == len(mine) == outcomes, (scenario, condition)
                for key in ("completed", "rejected", "expired"):
                    column = "rejects" if key == "rejected" else key
                    assert float(row[f"core_{key}"]) == float(row[column]), (tenant, key)
            # Request by request, live is the simulated run up to trio's tie order.
            assert num(scenario, condition, "live", "all", "outcomes_differ") <= 0.05 * len(jobs)
            completed = num(scenario, condition, "live", "all", "completed")
            assert num(scenario, condition, "live", "all", "mock_completed") == completed
            # Live follows the simulator (trio's tie order may shuffle a few requests).
            for tenant in TENANTS:
                sim = num(scenario, condition, "sim", tenant, "completion_rate")
                live = num(scenario, condition, "live", tenant, "completion_rate")
                assert abs(live - sim) <= 0.05, (scenario, condition, tenant)
                sim_p95 = num(scenario, condition, "sim", tenant, "short_p95_ms")
                live_p95 = num(scenario, condition, "live", tenant, "short_p95_ms")
                assert 0.5 <= live_p95 / sim_p95 <= 2.0, (scenario, condition, tenant)

    for source in ("sim", "live"):
        for tenant in ("B", "C"):
            fair = num("noisy", "fair_share", source, tenant, "short_p95_vs_base")
            blind = num("noisy", "tenant_blind", source, tenant, "short_p95_vs_base")
            # With the tenant layer, B and C barely notice A's flood; without it their
            # short tail grows several times over, and they lose work to A.
            assert fair <= 2.5, (source, tenant, fair)
            assert blind >= 1.5 * fair, (source, tenant, fair, blind)
            assert num("noisy", "fair_share", source, tenant, "completion_rate") >= 0.99
            assert num("noisy", "tenant_blind", source, tenant, "completion_rate") < 0.95
            assert num("noisy", "fair_share", source, tenant, "share") > num(
                "noisy", "tenant_blind", source, tenant, "share"
            )
    table = (tmp_path / "tables.md").read_text()
    assert "| noisy | fair_share | B |" in table
    assert "| tenant_blind |" in table
