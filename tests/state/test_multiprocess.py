"""Several real worker processes share one budget through a real Redis.

Each worker is ``python -m bench.shared_worker``: a :class:`~semisched.Scheduler` over
the openai client, sending to one ``python -m mockprovider`` in compressed time and
reserving every send in the session's throwaway Redis (``conftest.py``). The workers
start together (``WorkerFleet.go``) and each prints its counts as one JSON line; the
mock's own counters are the truth about 429s and completions.

The time compression is modest (10x) and the budgets keep a margin of 10 virtual
seconds (1 s of wall time): a call the shared window admitted reaches the mock
up to a second later on a loaded two-core machine (two CPU hogs beside the test),
and the provider still counts it inside a window the budget already paid for. A
429 here is the budget's fault, not the machine's. Outcomes are asserted exactly;
times only with generous bounds (no utilisation: that measures the machine).

The store faults are the benchmark's (:func:`bench.shared_budget.run_fault`): Redis
killed 3 s after the first send and restarted 1 s later, empty; or stopped
(``SIGSTOP``) for 6 s. Four workers of 40 calls each on a 60-RPM key: the
run lasts about 16 wall seconds, so the workers send on after the store is back.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Protocol, cast

import pytest
import redis

from bench.shared_budget import SharedBudgetConfig, measure, mock_counters, run_fault, skewed_counts
from bench.shared_launch import command, worker_fleet
from mockprovider.launch import running_server

pytestmark = pytest.mark.wallclock  # real processes, a real server, real signals

SCALE = 10.0
MARGIN = 10.0


class Server(Protocol):
    url: str

    def start(self) -> None: ...
    def stop(self) -> str: ...


def _mock(rpm: int | None = None) -> Any:
    limits = () if rpm is None else ("--rpm", str(rpm), "--tpm", str(10**8))
    return running_server("--time-scale", repr(SCALE), "--log-level", "warning", *limits)


def _workers(
    url: str,
    counts: Sequence[int],
    *,
    rpm: int,
    state: str,
    namespace: str,
    rate_per_call: float,
    **options: Any,
) -> list[list[str]]:
    """One command per worker: ``counts[i]`` calls at a rate proportional to them."""
    return [
        command(
            url,
            requests=count,
            rate=rate_per_call * count,
            rpm=rpm,
            tpm=10**8,
            time_scale=SCALE,
            seed=i,
            state=state,
            namespace=namespace,
            worker_id=f"{namespace}w{i}",
            margin=MARGIN,
            **options,
        )
        for i, count in enumerate(counts)
    ]


def _resolved_once(results: Sequence[dict[str, Any]]) -> None:
    """Every call of every worker ended in exactly one outcome."""
    for r in results:
        outcomes = [call[3] for call in r["calls"]]
        assert len(outcomes) == r["requests"] and all(outcomes)
        assert r["completed"] + sum(r["outcomes"].values()) == r["requests"]


@pytest.mark.slow
def test_four_skewed_workers_share_the_limit_without_a_429(
    redis_url: str, namespace: str, tmp_path: Path
) -> None:
    rpm, counts = 60, skewed_counts(150, 4)  # 80, 40, 20, 10: 2.5 windows of work
    with _mock(rpm) as url:
        # All arrive within ~20 virtual s (8x the limit's rate): the limit is the bottleneck.
        commands = _workers(url, counts, rpm=rpm, state=redis_url, namespace=namespace,
                            rate_per_call=8 * rpm / 60 / sum(counts))  # fmt: skip
        with worker_fleet(commands, tmp_path) as fleet:
            fleet.ready()
            fleet.go()
            results = fleet.results(timeout_s=90)
        counters = mock_counters(url)
    _resolved_once(results)
    row = measure(results, counters, rpm=rpm, tpm=10**8)
    assert counters["rate_limited"] == 0
    assert row["completed"] == counters["completed"] == 150
    assert row["refused"] > 0  # the shared budget, not luck, kept them under the limit
    # 150 calls at 60 per 70 s window: 2.5 windows (175 s) shared; a static split of 15
    # each would keep the busiest worker (80 calls) at it for 5.3 windows (373 s).
    assert row["makespan_s"] < 300.0, row
    assert all(r["state"]["backend"] == "redis" and r["state"]["fallbacks"] == 0 for r in results)
    assert max(r["state"]["workers"] for r in results) == 4


def _live_leases(client: redis.Redis, namespace: str, worker: str) -> list[float]:
    """Expiry (server µs) of the leases ``worker`` still holds in the fleet scope."""
    seconds, micros = client.time()
    now = int(seconds) * 1_000_000 + int(micros)
    key = f"{namespace}:scope:fleet:leases"
    held = cast(list[tuple[str, float]], client.zrangebyscore(key, f"({now}", "+inf",
                                                              withscores=True))  # fmt: skip
    return [score for member, score in held if member.startswith(f"{worker}:")]


def test_kill_9_of_a_worker_returns_its_leases_and_the_others_finish(
    redis_url: str, namespace: str, tmp_path: Path
) -> None:
    ttl = 1.0  # wall seconds; heartbeats every third of it
    counts = [60, 12, 12]  # the victim first, with most of the work
    with _mock() as url, redis.Redis.from_url(redis_url, decode_responses=True) as client:
        # Concurrency (4 leases, shared) is the only limit: the victim holds most of them.
        commands = _workers(url, counts, rpm=10**5, state=redis_url, namespace=namespace,
                            rate_per_call=2.0, max_concurrency=4, lease_ttl=ttl)  # fmt: skip
        victim = f"{namespace}w0"
        with worker_fleet(commands, tmp_path) as fleet:
            fleet.ready()
            fleet.go()
            deadline = time.monotonic() + 20
            while len(_live_leases(client, namespace, victim)) < 2:
                assert time.monotonic() < deadline, "the victim never held two leases"
                time.sleep(0.005)
            fleet.kill(0)
            killed = time.monotonic()
            while _live_leases(client, namespace, victim):
                assert time.monotonic() - killed <= ttl + 1.0, "leases outlived their TTL"
                time.sleep(0.01)
            returned = time.monotonic() - killed
            results = fleet.results(timeout_s=60, skip=[0])
        assert not _live_registration(client, namespace, victim)  # renewed with its leases
    survivors = results[1:]
    _resolved_once(survivors)
    assert [r["completed"] for r in survivors] == counts[1:]
    assert all(r["state"]["fallbacks"] == 0 for r in survivors)
    assert returned <= ttl + 1.0


def _live_registration(client: redis.Redis, namespace: str, worker: str) -> bool:
    seconds, micros = client.time()
    expiry = client.zscore(f"{namespace}:workers", worker)
    return expiry is not None and expiry > int(seconds) * 1_000_000 + int(micros)


@pytest.mark.slow
def test_redis_lost_mid_run_and_back_every_call_resolves_once(
    redis_servers: Callable[[], Server], tmp_path: Path
) -> None:
    server, namespace = redis_servers(), f"t{uuid.uuid4().hex[:12]}"
    rpm, counts = 60, [60, 40, 20]
    with _mock(rpm) as url:
        commands = _workers(url, counts, rpm=rpm, state=server.url, namespace=namespace,
                            rate_per_call=8 * rpm / 60 / sum(counts),
                            lease_ttl=1.5)  # fmt: skip
        with worker_fleet(commands, tmp_path) as fleet:
            fleet.ready()
            fleet.go()
            deadline = time.monotonic() + 20
            while mock_counters(url)["requests"] < rpm:  # the window is spent, work is queued
                assert time.monotonic() < deadline, "the first window never filled"
                time.sleep(0.05)
            server.stop()
            time.sleep(1.5)  # three heartbeats (every 0.5 s): every worker notices the loss
            server.start()  # the same port, an empty store
            results = fleet.results(timeout_s=90)
        counters = mock_counters(url)
    _resolved_once(results)
    completed = sum(r["completed"] for r in results)
    assert completed == counters["completed"]  # none answered twice, none lost on the way
    assert completed + sum(sum(r["outcomes"].values()) for r in results) == sum(counts)
    assert all(r["state"]["fallbacks"] >= 1 for r in results), [r["state"] for r in results]


@pytest.mark.slow
@pytest.mark.parametrize("fault", ["kill", "stop"])
def test_redis_killed_or_stopped_mid_run_costs_no_429_and_no_call(
    fault: str, tmp_path: Path
) -> None:
    """Every worker falls back on the same share (1/4), rejoins once per loss (one line),
    and the provider answers no 429: neither while the workers run on their fallbacks
    nor after they rejoin (their fallback sends are recorded in the shared window)."""
    config = SharedBudgetConfig(rpm=60, tpm=10**8, time_scale=SCALE, margin_s=MARGIN,
                                fault_workers=4, fault_calls=40)  # fmt: skip
    row = run_fault(config, fault, seed=0, logdir=tmp_path)
    assert row["provider_429s"] == 0, row
    assert row["completed"] == row["provider_completed"] == 160 and row["lost"] == 0
    # Every worker that needed the store while it was lost fell back on the same share; one
    # that sent nothing then (it waited out a refusal, say) shows "-" and never fell back.
    shares = str(row["shares"]).split()
    assert len(shares) == 4 and set(shares) <= {"1/4", "-"} and "1/4" in shares, row
    assert all(int(n) <= 1 for n in str(row["rejoins"]).split()), row  # one line per rejoin
    assert 1 <= int(row["fallbacks"]) <= 4, row
