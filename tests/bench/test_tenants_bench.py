"""``python -m bench tenants``: the simulated tenant matrix, its tables and figure (reduced)."""

from __future__ import annotations

from pathlib import Path

from bench.docs import render_readme
from bench.tenants import POLICIES, TenantRun, run_tenants, scenario_jobs, tenants


def _by_tenant(scenario: str, policy: str, span_s: float) -> dict[str, dict[str, object]]:
    return {str(r["tenant"]): r for r in run_tenants(TenantRun(scenario, policy, 0, span_s))}


def test_scenario_jobs_carry_their_tenant_and_rates_follow_the_loads() -> None:
    jobs = scenario_jobs("noisy", 0, span_s=300.0)
    counts = {t: sum(j.request.tenant == t for j in jobs) for t in "ABC"}
    assert all(j.request.id.startswith(j.request.tenant + "-") for j in jobs)
    assert 4.0 < counts["A"] / counts["B"] < 6.0  # 5x its share
    assert [j.request.arrival for j in jobs] == sorted(j.request.arrival for j in jobs)


def test_fair_share_holds_backlogged_tenants_near_their_weights_where_fifo_does_not() -> None:
    fair = _by_tenant("entitlements", "fair_share", 600.0)
    fifo = _by_tenant("entitlements", "fifo", 600.0)
    for tenant in ("w5", "w3", "w2"):
        assert abs(float(fair[tenant]["share_ratio"]) - 1.0) < 0.1, fair[tenant]  # type: ignore[arg-type]
    assert float(fifo["w2"]["share_ratio"]) > 1.3  # type: ignore[arg-type]
    assert float(fair["all"]["jain"]) > float(fifo["all"]["jain"])  # type: ignore[arg-type]


def test_the_flood_costs_the_light_tenants_less_under_fair_share_than_tenant_blind() -> None:
    def flood_ratio(policy: str) -> float:
        flood = _by_tenant("noisy", policy, 600.0)
        base = _by_tenant("noisy-base", policy, 600.0)
        return max(
            float(flood[t]["short_p95_ms"]) / float(base[t]["short_p95_ms"])  # type: ignore[arg-type]
            for t in ("B", "C")
        )

    assert flood_ratio("fair_share") < 0.6 * flood_ratio("tenant_blind")


def test_the_matrix_writes_tables_a_figure_and_the_readme_block(tmp_path: Path) -> None:
    out = tenants(tmp_path / "tenants", seeds=1, workers=2, span_s=120.0)
    text = (out / "tables.md").read_text()
    assert "## Headline" in text and all(f"| {p} |" in text for p in POLICIES)
    assert (out / "tenants.png").stat().st_size > 0
    root = tmp_path / "repo"
    (root / "docs" / "results").mkdir(parents=True)
    (root / "docs" / "results" / "tenants").symlink_to(out)
    block = render_readme("<!-- bench:tenants -->\n<!-- /bench:tenants -->", root)
    assert "| fair_share |" in block and "x /" in block
