"""``python -m bench gateway``'s pieces on tiny inputs: the load generators, the overhead
rows, the noisy neighbour's files, headers and tallies, the replicas' file, the summary.

Nothing here asserts a timing: only counts, files and what a table says."""

from __future__ import annotations

import math
import shutil
from pathlib import Path

import pytest

from bench.gateway import cpu_seconds, instant_upstream, load, overhead_rows
from bench.gateway_replicas import gateway_file as replica_file
from bench.gateway_report import summary
from bench.gateway_tenants import (
    KEYS,
    SCENARIOS,
    TIME_SCALE,
    Outcome,
    gateway_file,
    headers_for,
    replay_node,
    simulated_p95,
    summarize,
)
from bench.report import write_csv
from bench.tenants import PHYSICS, load_jobs
from semisched.gateway.configfile import load_config
from semisched.gateway.keys import KeyTable, bearer_key

NODE = shutil.which("node")


@pytest.mark.wallclock
@pytest.mark.parametrize("generator", ["node", "python"])
def test_each_load_generator_counts_every_answer(generator: str) -> None:
    if generator == "node" and NODE is None:
        pytest.skip("node is not installed")
    node = NODE if generator == "node" else None
    with instant_upstream() as (base, pid):
        closed = load(base, {"mode": "closed", "connections": 3, "requests": 30}, node)
        opened = load(base, {"mode": "open", "rate": 100, "seconds": 0.2}, node)
        assert cpu_seconds(pid) is not None
    assert (closed["requests"], closed["errors"]) == (30, 0)
    assert (opened["requests"], opened["errors"]) == (20, 0)
    assert 0 < closed["p50_ms"] <= closed["p99_ms"]


@pytest.mark.wallclock
def test_the_overhead_rows_compare_both_paths_at_each_rate() -> None:
    rows = overhead_rows(rates=(50.0,), seconds=0.2, connections=2, requests=20, rounds=1,
                         node=NODE)  # fmt: skip
    assert [(r["path"], r["rate"]) for r in rows] == [("straight", 50.0), ("gateway", 50.0)]
    through = rows[1]
    assert through["errors"] == 0
    assert through["added_p50_ms"] == pytest.approx(through["p50_ms"] - rows[0]["p50_ms"])
    assert through["cpu_ms_per_request"] > 0  # the gateway process's own CPU, read from /proc


@pytest.mark.wallclock
def test_the_node_replay_answers_every_job_in_order() -> None:
    if NODE is None:
        pytest.skip("node is not installed")
    jobs = load_jobs(SCENARIOS["base"], seed=0, span_s=20.0)  # a second of wall time
    with instant_upstream() as (base, _):
        outcomes = replay_node(base, jobs, NODE)
    assert [o.tenant for o in outcomes] == [str(j.request.tenant) for j in jobs]
    assert all(o.status == 200 and o.latency_s is not None for o in outcomes)


def test_each_condition_file_holds_its_scheduling(tmp_path: Path) -> None:
    fair = load_config(gateway_file(tmp_path, "fair_share", "http://127.0.0.1:9/v1"))
    plain = load_config(gateway_file(tmp_path, "pass_through", "http://127.0.0.1:9/v1"))
    assert fair.scheduler_config().tenants.policy == "fair_share"
    # nothing told of the mock's slots: the defaults learn its concurrency
    assert fair.scheduler_config().max_inflight is None
    assert fair.scheduler_config().routing.concurrency == "learned"
    told = load_config(gateway_file(tmp_path, "fair_share_told", "http://127.0.0.1:9/v1"))
    assert told.scheduler_config().tenants.policy == "fair_share"
    (endpoint,) = told.fleet.endpoints  # the mock's slots told, the rest as fair_share
    assert endpoint.max_concurrency == PHYSICS.slots
    assert told.scheduler_config() == fair.scheduler_config()
    assert plain.scheduler_config().tenants.policy == "fifo"
    assert plain.scheduler_config().overload.policy == "none"
    assert plain.scheduler_config().max_inflight == 4096
    with pytest.raises(ValueError, match="condition"):
        gateway_file(tmp_path, "no_such", "http://127.0.0.1:9/v1")


def test_a_job_is_sent_with_its_tenants_key_and_its_hints(tmp_path: Path) -> None:
    config = load_config(gateway_file(tmp_path, "fair_share", "http://127.0.0.1:9/v1"))
    keys = KeyTable(config.keys)
    jobs = load_jobs(SCENARIOS["flood"], seed=0, span_s=30.0)
    assert {j.request.tenant for j in jobs} == set(KEYS)
    for job in jobs[:20]:
        headers = headers_for(job)
        assert keys.tenant_for(bearer_key(headers["authorization"])) == job.request.tenant
        relative = (job.request.deadline or 0) - job.request.arrival
        assert float(headers["x-semisched-deadline"]) == pytest.approx(relative / TIME_SCALE,
                                                                       abs=1e-3)  # fmt: skip
        p50, p90 = (float(x) for x in headers["x-semisched-prior"].split(","))
        assert p50 <= p90


def test_a_short_request_not_answered_counts_as_never_in_the_p95() -> None:
    outcomes = [Outcome("Q", "short", 1.0, 200, 0.1) for _ in range(18)]
    outcomes += [Outcome("Q", "short", 1.0, 504, 1.0), Outcome("Q", "short", 1.0, 429, 0.01)]
    outcomes += [Outcome("F", "long", 5.0, 200, 6.0)]  # answered after its deadline
    q, f = summarize(outcomes)
    assert (q["tenant"], q["requests"], q["completed"], q["short_missed"]) == ("Q", 20, 18, 2)
    assert math.isinf(q["short_p95_s"])  # 2 of 20 never answered: beyond the 95th
    assert q["deadline_misses"] == 2 and q["statuses"] == "200:18 429:1 504:1"
    assert f["deadline_misses"] == 1 and math.isnan(f["short_p95_s"])


def test_the_simulated_reference_runs_the_gateway_files_config(tmp_path: Path) -> None:
    jobs = load_jobs(SCENARIOS["flood"], seed=0, span_s=60.0)
    p95 = simulated_p95(gateway_file(tmp_path, "fair_share", "http://127.0.0.1:9/v1"), jobs)
    assert set(p95) == set(KEYS)
    assert all(0 < v < math.inf for v in p95.values())
    # the cap told reaches the simulated endpoint too: fewer in flight, other tails
    told = simulated_p95(gateway_file(tmp_path, "fair_share_told", "http://127.0.0.1:9/v1"), jobs)
    assert told != p95


def test_the_replicas_file_gives_each_the_whole_budget_in_wall_seconds(tmp_path: Path) -> None:
    config = load_config(replica_file(tmp_path, "http://127.0.0.1:9/v1", rpm=60))
    budget = config.scheduler_config().budget
    assert budget is not None and budget.rpm == 60 and budget.window_s == 6.0
    assert not budget.adapt  # the mock's headers must not teach a replica the real limit


def test_the_summary_renders_every_part_found(tmp_path: Path) -> None:
    write_csv(tmp_path / "overhead.csv", [
        {"path": "straight", "rate": 500, "p50_ms": 1.0, "p99_ms": 2.0, "errors": 0,
         "requests_per_s": 900, "cpu_ms_per_request": 0.2, "added_p50_ms": "",
         "added_p99_ms": ""},
        {"path": "gateway", "rate": 500, "p50_ms": 2.5, "p99_ms": 6.0, "errors": 0,
         "requests_per_s": 400, "cpu_ms_per_request": 1.25, "added_p50_ms": 1.5,
         "added_p99_ms": 4.0}])  # fmt: skip
    write_csv(tmp_path / "tenants.csv", [
        {"condition": "pass_through", "scenario": "flood", "tenant": "Q", "requests": 10,
         "short": 4, "short_missed": 3, "short_p95_s": math.inf, "p95_vs_base": math.inf,
         "sim_p95_vs_base": 9.0, "deadline_misses": 7, "statuses": "200:3 504:7"}])  # fmt: skip
    write_csv(tmp_path / "replicas.csv", [
        {"condition": "separate", "replicas": 2, "rpm": 60, "window_s": 6.0, "requests": 120,
         "statuses": "200:120", "upstream_429s": 57, "makespan_s": 20.0}])  # fmt: skip
    text = summary(tmp_path, generator="node")
    assert "adds 1.50 ms at p50 and 4.00 ms at p99" in text
    assert "| gateway | 500 | 2.50 | 6.00 | 1.50 / 4.00 | 400 | 1.250 | 800 | 0 |" in text
    assert "| pass_through | flood | Q | 10 | ∞ | ∞x | 9.00x | 3 of 4 | 7 | 200:3 504:7 |" in text
    assert "separate state: 57 upstream 429s" in text
