"""The simulated provider's door: 429 windows, faults and capacity loss, decided by the core."""

from __future__ import annotations

import pytest

from bench.workloads import generate, regime
from mockprovider.gate import GateConfig
from mockprovider.physics import profile
from predictors.priors import Coarse
from semisched.core.config import BudgetConfig, preset
from semisched.core.lifecycle import RetryPolicy
from semisched.core.request import Prior, Request
from semisched.sim.simulator import Outcome, ProviderModel, SimJob, simulate

PHYS = profile("default")


def jobs(n: int, *, gap: float = 0.1, out: int = 40, deadline: float | None = None) -> list[SimJob]:
    return [
        SimJob(
            request=Request(
                id=f"j{i:03d}",
                klass="batch",
                prior=Prior(p50=float(out), p90=float(out)),
                input_tokens=20,
                arrival=i * gap,
                deadline=None if deadline is None else i * gap + deadline,
            ),
            output_tokens=out,
            input_tokens=20,
        )
        for i in range(n)
    ]


def rpm_limited(rpm: int, **gate: object) -> ProviderModel:
    return ProviderModel(gate=GateConfig(rpm=rpm, **gate))  # type: ignore[arg-type]


NO_OLC = preset("adaptive_drr")


def test_without_a_budget_a_burst_meets_429s_and_retries_until_it_is_served() -> None:
    result = simulate(jobs(30), NO_OLC.with_(retry=RetryPolicy(max_attempts=50)), PHYS,
                      rpm_limited(10))  # fmt: skip
    rows = result.rows
    assert all(r.outcome == Outcome.COMPLETED for r in rows)
    assert sum(r.throttled for r in rows) > 0
    assert result.engine.counters.throttled == sum(r.throttled for r in rows)
    assert result.engine.counters.retries == sum(r.attempts - 1 for r in rows)
    # The window lets 10 a minute through: the 30th answer comes after two more windows.
    assert max(r.end or 0.0 for r in rows) > 120.0


def test_a_budget_at_the_providers_limit_meets_no_429() -> None:
    config = NO_OLC.with_(budget=BudgetConfig(rpm=10))
    result = simulate(jobs(30), config, PHYS, rpm_limited(10))
    assert all(r.outcome == Outcome.COMPLETED for r in result.rows)
    assert sum(r.throttled for r in result.rows) == 0
    assert result.engine.counters.budget_waits > 0


def test_an_over_sized_budget_learns_the_limit_from_the_headers() -> None:
    config = NO_OLC.with_(budget=BudgetConfig(rpm=15), retry=RetryPolicy(max_attempts=20))
    result = simulate(jobs(60), config, PHYS, rpm_limited(10))
    assert all(r.outcome == Outcome.COMPLETED for r in result.rows)
    # The first answer's x-ratelimit-limit-requests (10) replaces the budget's 15.
    assert sum(r.throttled for r in result.rows) == 0
    assert result.engine.budget is not None and result.engine.budget.limit_requests == 10
    unbudgeted = simulate(jobs(60), NO_OLC.with_(retry=RetryPolicy(max_attempts=20)), PHYS,
                          rpm_limited(10))  # fmt: skip
    assert sum(r.throttled for r in unbudgeted.rows) > 100


def test_other_traffic_on_the_key_shows_in_the_headers_and_is_avoided() -> None:
    config = NO_OLC.with_(budget=BudgetConfig(rpm=30), retry=RetryPolicy(max_attempts=20))
    shared = ProviderModel(gate=GateConfig(rpm=30), other_traffic=1 / 3)
    result = simulate(jobs(60, gap=0.5), config, PHYS, shared)
    assert all(r.outcome == Outcome.COMPLETED for r in result.rows)
    assert sum(r.throttled for r in result.rows) <= 5  # the headers show the others' share
    # 20 a minute are left for this client: 60 requests take three windows, not two.
    assert max(r.end or 0.0 for r in result.rows) > 100.0


def test_quota_exhaustion_is_never_retried() -> None:
    provider = ProviderModel(gate=GateConfig(quota_tokens=500))
    result = simulate(jobs(20, gap=5.0), NO_OLC, PHYS, provider)
    outcomes = [r.outcome for r in result.rows]
    assert Outcome.COMPLETED in outcomes and Outcome.FAILED in outcomes
    failed = [r for r in result.rows if r.outcome == Outcome.FAILED]
    assert all(r.attempts == 1 for r in failed)
    assert result.engine.failures.quota_exhausted == len(failed)


@pytest.mark.parametrize(
    ("rates", "kind"),
    [
        ({"error_rate": 0.3}, "server_error"),
        ({"hang_rate": 0.3}, "timeout"),
        ({"drop_rate": 0.3}, "connection"),
    ],
)
def test_injected_faults_are_retried_and_counted_by_kind(
    rates: dict[str, float], kind: str
) -> None:
    provider = ProviderModel(gate=GateConfig(seed=3, **rates))  # type: ignore[arg-type]
    config = NO_OLC.with_(retry=RetryPolicy(max_attempts=10))
    result = simulate(jobs(40), config, PHYS, provider)
    assert all(r.outcome == Outcome.COMPLETED for r in result.rows)
    failures = result.engine.failures
    assert getattr(failures, kind) == failures.total > 0
    assert sum(r.failures for r in result.rows) == failures.total


def test_a_hang_costs_the_clients_timeout() -> None:
    phys = PHYS.__class__(timeout_s=30.0)
    provider = ProviderModel(gate=GateConfig(hang_rate=1.0))
    result = simulate(jobs(1), NO_OLC.with_(retry=RetryPolicy(max_attempts=2)), phys, provider)
    (row,) = result.rows
    assert row.outcome == Outcome.FAILED and row.attempts == 2
    assert row.end is not None and row.end >= 60.0


def test_no_retry_outlives_the_deadline() -> None:
    provider = ProviderModel(gate=GateConfig(error_rate=1.0))
    result = simulate(jobs(5, deadline=3.0), NO_OLC, PHYS, provider)
    assert {r.outcome for r in result.rows} == {Outcome.EXPIRED}
    assert all(r.end is not None and r.end <= r.arrival + 3.0 for r in result.rows)


def test_capacity_loss_slows_the_provider_down() -> None:
    work = generate(regime("balanced/medium", requests=200), 0, Coarse(), PHYS)
    full = simulate(work, NO_OLC, PHYS)
    half = simulate(work, NO_OLC, PHYS, ProviderModel(capacity_loss=(10.0, 0.25)))
    assert max(r.end or 0 for r in half.rows) > max(r.end or 0 for r in full.rows)


def test_the_same_seeds_give_the_same_trace_and_others_differ() -> None:
    def run(seed: int) -> str:
        provider = ProviderModel(gate=GateConfig(rpm=20, error_rate=0.2, seed=seed), seed=seed)
        return simulate(jobs(40), NO_OLC, PHYS, provider).trace_csv()

    assert run(1) == run(1)
    assert run(1) != run(2)


@pytest.mark.parametrize(
    ("changes", "match"),
    [
        ({"other_traffic": 1.0}, "other_traffic"),
        ({"capacity_loss": (1.0, 2.0)}, "capacity_loss"),
        ({"seed": True}, "seed"),
    ],
)
def test_a_bad_provider_model_is_refused(changes: dict[str, object], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        ProviderModel(**changes)  # type: ignore[arg-type]
