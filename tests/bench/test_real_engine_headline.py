"""The headline and routing on the real engine, without an engine: the scaled workload
with paper-scale priors and deadlines, the strategies' caps, the simulated side, the rows,
the reports and the command line's errors."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import anyio
import pytest

from bench.__main__ import main
from bench.real_engine.compare import SCALE
from bench.real_engine.headline import (
    EXTRA_BODY,
    STRATEGIES,
    EngineJob,
    EngineLengthError,
    engine_jobs,
    fleet_capacity,
    metric_row,
    replay,
    scaled_prior,
    simulate_jobs,
    strategy_config,
)
from bench.real_engine.headline_report import (
    headline_markdown,
    ratio_rows,
    rewrite_markdown,
    write_rows,
)
from bench.real_engine.routing_engine import (
    FLEET,
    POOLS,
    SHORT_POOL_TOKENS,
    endpoint_shares,
    routing_config,
    routing_markdown,
    routing_summary,
    run_order,
    simulated_row,
)
from bench.workloads import DEADLINES_S
from mockprovider.physics import profile
from predictors.priors import COARSE_PRIORS, information_source
from semisched.core.buckets import Bucket

PHYSICS = profile("llama-cpp")


def _jobs(load: str = "high", requests: int = 400, seed: int = 3, capacity: float = 1.0):
    source = information_source("coarse", seed=seed)
    return engine_jobs(PHYSICS, source, load=load, requests=requests, seed=seed, vocab=8192,
                       capacity=capacity)  # fmt: skip


def test_priors_are_the_paper_buckets_in_engine_tokens() -> None:
    source = information_source("coarse")
    for tokens, bucket in ((16, Bucket.SHORT), (17, Bucket.MEDIUM), (256, Bucket.LONG),
                           (257, Bucket.XLONG)):  # fmt: skip
        prior = scaled_prior(source, "r", tokens)
        p50, p90 = COARSE_PRIORS[bucket]
        assert prior.routing_bucket is bucket
        assert (prior.p50, prior.p90) == pytest.approx((p50 / SCALE, p90 / SCALE))


def test_each_job_has_its_mix_buckets_prior_class_and_deadline() -> None:
    jobs, _ = _jobs()
    assert {j.bucket for j in jobs} == {"short", "medium", "long", "xlong"}
    for job in jobs:
        request = job.sim.request
        assert str(request.prior.routing_bucket) == job.bucket
        assert request.klass == ("interactive" if job.bucket == "short" else "batch")
        assert request.deadline - request.arrival == pytest.approx(DEADLINES_S[Bucket(job.bucket)])
        assert job.sim.output_tokens * SCALE in range(*_paper_range(job.bucket))
        assert job.sim.input_tokens == len(job.prompt) == request.input_tokens


def _paper_range(bucket: str) -> tuple[int, int]:
    from semisched.plan.mixes import OUTPUT_RANGES

    lo, hi = OUTPUT_RANGES[Bucket(bucket)]
    return lo - SCALE, hi + 1


def test_the_congestion_levels_and_a_fleets_capacity_set_the_rate() -> None:
    _, medium = _jobs("medium")
    _, high = _jobs("high")
    _, pair = _jobs("high", capacity=2.0)
    assert high / medium == pytest.approx(1.1 / 0.9)
    assert pair == pytest.approx(2 * high)
    with pytest.raises(ValueError, match="load='low'"):
        _jobs("low")


def test_a_fleets_capacity_counts_each_member_by_its_slots() -> None:
    fast, slow = PHYSICS, PHYSICS.__class__(**{**_fields(PHYSICS), "slots": 2})
    assert fleet_capacity(PHYSICS, [fast], requests=200, seed=0) == pytest.approx(1.0)
    assert fleet_capacity(PHYSICS, [fast, fast], requests=200, seed=0) == pytest.approx(2.0)
    both = fleet_capacity(PHYSICS, [fast, slow], requests=200, seed=0)
    assert 1.0 < both < 2.0


def _fields(physics: object) -> dict[str, object]:
    return {f.name: getattr(physics, f.name) for f in dataclasses.fields(physics)}  # type: ignore[arg-type]


def test_the_client_cap_is_the_engines_slots_except_for_direct_dispatch() -> None:
    caps = {s: strategy_config(s).max_inflight for s in STRATEGIES}
    assert caps == {"direct_naive": None, "quota_tiered": 8, "adaptive_drr": 8,
                    "final_adrr_olc": 8}  # fmt: skip
    assert routing_config("latency_ewma").max_inflight == 10
    assert routing_config("latency_ewma").routing.policy == "latency_ewma"
    with pytest.raises(ValueError, match="policy"):
        routing_config("fastest")


def test_the_simulated_side_reports_by_the_mix_bucket_and_the_stack_cuts_short_p95() -> None:
    jobs, _ = _jobs(requests=300, seed=0)
    rows = {}
    for strategy in ("direct_naive", "final_adrr_olc"):
        sim = simulate_jobs(jobs, strategy_config(strategy), PHYSICS, 0)
        assert {r.bucket for r in sim} == {"short", "medium", "long", "xlong"}
        rows[strategy] = metric_row(sim, strategy=strategy, mode="sim")
    assert rows["direct_naive"]["short_p95_ms"] > 2 * rows["final_adrr_olc"]["short_p95_ms"]
    assert set(rows["direct_naive"]) >= {"short_p95_ms", "global_p95_ms", "completion_rate",
                                         "satisfaction", "goodput_rps"}  # fmt: skip


def _row(strategy: str, mode: str, seed: int, short_s: float) -> dict[str, object]:
    return {"load": "high", "strategy": strategy, "mode": mode, "seed": seed,
            "short_p95_ms": short_s * 1000, "global_p95_ms": 9000.0, "completion_rate": 1.0,
            "satisfaction": 0.5, "goodput_rps": 1.0}  # fmt: skip


def test_the_report_takes_medians_over_seeds_and_the_naive_over_full_ratio() -> None:
    rows = [
        *(_row("direct_naive", "engine", s, x) for s, x in enumerate((30.0, 10.0, 20.0))),
        *(_row("final_adrr_olc", "engine", s, x) for s, x in enumerate((2.0, 4.0, 9.0))),
        *(_row("direct_naive", "sim", s, 12.0) for s in range(3)),
        *(_row("final_adrr_olc", "sim", s, 3.0) for s in range(3)),
    ]
    assert ratio_rows(rows) == [{"load": "high", "engine": 5.0, "sim": 4.0}]
    text = headline_markdown(rows)
    assert "| high | direct_naive | 20.00 / 12.00 | 9.00 / 9.00 |" in text
    assert "| high | 5.00 | 4.00 |" in text
    assert "seeds [0, 1, 2]" in text
    rated = [{**r, "rate_per_s": 1.8284, "requests": 40} for r in rows]
    assert "Arrivals per run: high: 1.83/s, 40 requests." in headline_markdown(rated)
    assert "quota_tiered" not in text  # a strategy that did not run has no row


def test_the_report_is_rewritten_from_the_csv_alone(tmp_path: Path) -> None:
    rows = [{**_row(strategy, mode, s, 2.0 + s), "rate_per_s": 1.5, "requests": 40}
            for strategy in ("direct_naive", "final_adrr_olc") for mode in ("engine", "sim")
            for s in range(2)]  # fmt: skip
    write_rows(tmp_path / "headline.csv", rows)
    assert main(["real-engine", "headline", "--from-csv", "--out", str(tmp_path)]) == 0
    assert (tmp_path / "headline.md").read_text() == headline_markdown(rows)
    with pytest.raises(FileNotFoundError):
        rewrite_markdown(tmp_path / "empty")


def test_a_missing_strategy_gives_no_ratio() -> None:
    rows = [_row("direct_naive", "engine", 0, 5.0), _row("direct_naive", "sim", 0, 5.0)]
    assert math.isnan(float(ratio_rows(rows)[0]["engine"]))  # type: ignore[arg-type]


def test_routing_reports_each_endpoints_share() -> None:
    stats = SimpleNamespace(
        engine=SimpleNamespace(
            endpoints=(
                SimpleNamespace(name="fast", completed=30),
                SimpleNamespace(name="slow", completed=10),
            )
        )
    )
    shares = endpoint_shares(stats, ["fast", "slow"])
    assert shares == {"share_fast": 0.75, "share_slow": 0.25}
    rows = [{"policy": "round_robin", "seed": s, "short_p95_ms": 1000.0 * (s + 1),
             "global_p95_ms": 5000.0, "completion_rate": 1.0, "satisfaction": 1.0, **shares}
            for s in range(3)]  # fmt: skip
    uncapped = [{**r, "caps": "none", "short_p95_ms": 9000.0} for r in rows]
    text = routing_markdown([*rows, *uncapped], ["fast", "slow"])
    assert "| slots | round_robin | 2.00 | 5.00 | 1.00 | 1.00 | 0.75 | 0.25 |" in text
    assert "| none | round_robin | 9.00 | 5.00 | 1.00 | 1.00 | 0.75 | 0.25 |" in text
    sims = [{**r, "sim_short_p95_ms": 500.0, "sim_global_p95_ms": 4000.0,
             "sim_completion_rate": 1.0, "sim_satisfaction": 0.5, "sim_share_fast": 0.5,
             "sim_share_slow": 0.5} for r in rows]  # fmt: skip
    text = routing_markdown(sims, ["fast", "slow"])
    assert "engine / sim" in text
    assert (
        "| slots | round_robin | 2.00 / 0.50 | 5.00 / 4.00 | 1.00 / 1.00 | 1.00 / 0.50 "
        "| 0.75 / 0.50 | 0.25 / 0.50 |"
    ) in text


def test_the_readme_summary_compares_each_capped_policy_with_round_robin() -> None:
    def row(policy: str, caps: str, seed: int, short: float) -> dict[str, object]:
        return {"policy": policy, "caps": caps, "seed": seed, "requests": 150,
                "short_p95_ms": short, "sim_short_p95_ms": short / 2, "global_p95_ms": 20_000.0,
                "sim_global_p95_ms": 10_000.0}  # fmt: skip

    rows = [row("round_robin", "slots", s, 2000.0) for s in range(3)]
    rows += [row("token_budget", "slots", s, 1000.0 + 500.0 * s) for s in range(3)]
    rows += [row("token_budget", "none", s, 9000.0) for s in range(3)]  # uncapped: left out
    text = routing_summary(rows)
    assert "| round_robin | 2.00 / 1.00 | 1.00 / 1.00 | 20.0 / 10.0 |" in text
    assert "| token_budget | 1.50 / 0.75 | 0.75 / 0.75 | 20.0 / 10.0 |" in text
    assert text.endswith("Medians over 3 seeds, 150 requests a run.")


def test_the_simulated_routing_run_keeps_large_requests_out_of_the_short_pool() -> None:
    members = {name: dataclasses.replace(PHYSICS, slots=slots) for name, slots in FLEET.items()}
    capacity = fleet_capacity(PHYSICS, list(members.values()), requests=60, seed=1)
    jobs, _ = _jobs(load="medium", requests=60, seed=1, capacity=capacity)
    assert POOLS == {"fast": "long", "slow": "short"}
    rows = {policy: simulated_row(jobs, routing_config(policy), members, 1, FLEET)
            for policy in ("round_robin", "token_budget")}  # fmt: skip
    for row in rows.values():
        assert row["sim_completion_rate"] == 1.0
        assert row["sim_share_fast"] + row["sim_share_slow"] == pytest.approx(1.0)  # type: ignore[operator]
    # Round robin sends the slow server its share whatever the size; the pools send it
    # small requests first, so it finishes more of them.
    assert rows["token_budget"]["sim_share_slow"] > rows["round_robin"]["sim_share_slow"]  # type: ignore[operator]
    assert routing_config("token_budget").routing.short_pool_tokens == SHORT_POOL_TOKENS


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["headline", "--seeds", "0"], "--seeds: 0 must be >= 1"),
        (["headline", "--requests", "many"], "--requests: 'many' is not an integer"),
        (["headline", "--loads", "medium,low"], "each load must be one of high, medium"),
        (["routing", "--load", "low"], "--load: invalid choice: 'low'"),
        (["routing", "--caps", "slots,some"], "each cap must be one of slots, learned, none"),
    ],
)
def test_bad_arguments_stop_before_any_engine_starts(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str], tmp_path
) -> None:
    with pytest.raises(SystemExit) as stop:
        main(["real-engine", *argv, "--out", str(tmp_path)])
    assert stop.value.code == 2
    assert message in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


class _Engine:
    """A scheduler stand-in: answers each call with ``usage.completion_tokens`` of
    ``max_tokens + short_by``, or rejects the calls whose prompt is one token long."""

    def __init__(self, short_by: int = 0) -> None:
        self.short_by = short_by
        self.calls: list[dict[str, Any]] = []

    async def submit(self, **call: Any) -> Any:
        from semisched import RequestRejected

        self.calls.append(call)
        if len(call["prompt"]) == 1:
            raise RequestRejected("shed", request_id="x", klass="batch", reason="load",
                                  bucket="xlong", severity=0.9, retry_after=None)  # fmt: skip
        tokens = call["max_tokens"] + self.short_by
        return SimpleNamespace(usage=SimpleNamespace(completion_tokens=tokens))


def _at_once(n: int) -> list[EngineJob]:
    jobs, _ = _jobs(requests=n, seed=1)
    moved = []
    for job in jobs:
        request = dataclasses.replace(job.sim.request, arrival=0.0, deadline=15.0)
        sim = dataclasses.replace(job.sim, request=request)
        moved.append(dataclasses.replace(job, sim=sim))
    return moved


def test_replay_sends_token_ids_with_the_length_and_records_each_outcome() -> None:
    jobs = _at_once(5)
    jobs[0] = dataclasses.replace(jobs[0], prompt=(7,))
    engine = _Engine()
    records = anyio.run(replay, engine, jobs)
    assert [r.outcome for r in records] == ["rejected"] + ["completed"] * 4
    assert [r.bucket for r in records] == [j.bucket for j in jobs]
    assert [r.deadline for r in records] == pytest.approx([15.0] * 5, abs=0.5)
    call = engine.calls[1]
    assert call["prompt"] == list(jobs[1].prompt)
    assert call["max_tokens"] == jobs[1].sim.output_tokens
    assert call["extra_body"] == EXTRA_BODY and EXTRA_BODY["ignore_eos"] is True
    assert call["prior"] == jobs[1].sim.request.prior


def test_replay_refuses_answers_of_another_length() -> None:
    with pytest.raises(EngineLengthError, match="5 answers of another length"):
        anyio.run(replay, _Engine(short_by=-1), _at_once(5))


def test_the_guide_shows_the_generated_report_once_it_exists(tmp_path) -> None:
    from bench.docs import DOCS, render_readme

    page = "<!-- bench:real-engine-headline -->\n<!-- /bench:real-engine-headline -->"
    assert "Not run yet: `python -m bench real-engine headline`" in render_readme(page, tmp_path)
    folder = tmp_path / DOCS / "real-engine"
    folder.mkdir(parents=True)
    rows = [_row(s, m, 0, x) for s, m, x in (("direct_naive", "engine", 6.0),
            ("final_adrr_olc", "engine", 2.0), ("direct_naive", "sim", 4.0),
            ("final_adrr_olc", "sim", 2.0))]  # fmt: skip
    (folder / "headline.md").write_text(headline_markdown(rows), encoding="utf-8")
    shown = render_readme(page, tmp_path)
    assert "| high | 3.00 | 2.00 |" in shown and "Not run yet" not in shown


def test_no_condition_always_runs_first_on_a_seeds_workload() -> None:
    caps, policies = ("slots", "learned"), ("round_robin", "token_budget")
    first, second = run_order(caps, policies, 0), run_order(caps, policies, 1)
    every = {(c, p) for c in caps for p in policies}
    assert set(first) == set(second) == every and len(first) == len(every)  # each once
    assert first[0] == ("slots", "round_robin") and second[0] == ("learned", "token_budget")
    for condition in every:  # over two seeds, each stands as early as late on average
        assert first.index(condition) + second.index(condition) == len(every) - 1
    assert run_order(caps, policies, 2) == first
