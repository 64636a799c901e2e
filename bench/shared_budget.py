"""Issue 14's benchmark: one provider budget, N worker processes: ``python -m bench shared-budget``.

For N in ``--workers`` (1, 2, 4, 8) and each mode, N processes
(`bench.shared_worker`, each a `Scheduler` over the openai
client) send to one ``python -m mockprovider`` with RPM/TPM limits, in compressed time:

- ``shared``: every worker reserves in the same Redis namespace (``state=``), each with
  the mock's full limits as its budget;
- ``static``: no shared state; each worker's budget is the limit divided by N (rounded
  down), and it ignores the provider's rate-limit headers (``adapt=False``: with them it
  would count the other workers' traffic against its own share, which is not a static
  split);
- ``uncoordinated``: no shared state; each worker's budget is the full limit (the
  library's defaults, headers followed).

Load: the same calls for every N and mode, `REQUESTS` in all (seeded per worker,
`bench.shared_worker.request_mix`: three calls in four with ``max_tokens`` 128, the
rest 1024, so both limits bind), split unevenly: worker i gets a share proportional to
2^-i (N=2: 2/3, 1/3; N=4: 8/15, 4/15, 2/15, 1/15; `skewed_counts`), and arrives at
a Poisson rate proportional to its share, all together at ``load`` times the limit's
request rate, so a queue forms at once and the limit, not the arrivals, sets the pace.
Policy ``batch_makespan`` (one class, longest first, nothing shed).

Per run, a fresh mock (fresh windows) and, for ``shared``, a fresh namespace on one
throwaway Redis (`bench.redis_server`). Reported (virtual seconds unless named):

- makespan: from the common start to the last call resolved;
- 429s: the mock's own ``rate_limited`` counter (the truth), and what the workers saw;
- utilisation while work was queued: at every instant when at least one call had
  arrived and not yet been admitted (a union over all workers), the mock's sliding
  60 s window (requests admitted, their token charges: prompt + ``max_tokens``) over
  the limit, averaged over those instants; ``util`` is the mean of the larger of the
  two. Admission times are the workers' HTTP send times of the calls answered 200;
- the Redis round trip of a reservation, p50/p99 over all workers' reservations, in
  wall milliseconds, as measured inside each worker's event loop (under time
  compression that loop does ``time_scale`` times the work per wall second of a
  real-time worker, and its queueing is part of the number); and, after each
  ``shared`` run, a probe: N processes reserving one at a time (5 ms apart) with no
  scheduler and no mock running, i.e. the shared state's own cost on loopback.

Then the store faults (``faults``), each on its own Redis, in ``shared`` mode:
``fault_workers`` workers of ``fault_calls`` calls each (equal shares, all at the full
limit), and 3 s (wall) after the mock's first request Redis is either ``kill``-ed
(``SIGKILL``) and restarted 1 s later on the same port (an empty store), or ``stop``-ped
(``SIGSTOP``) for 6 s and continued. Reported per fault: the mock's 429s; of the 429s
the workers saw, those sent while the store was down and those sent after it was back;
and what the table
above reports (``faults.csv``, ``faults_summary.csv``); and, from each worker's log,
the share its fallback warning named and its "rejoined" lines.

What this module is not: a simulation (everything is real processes on loopback), and
not tuned: the tables print what was measured.
"""

from __future__ import annotations

import json
import math
import re
import tempfile
import time
import urllib.request
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Final

import numpy as np

from bench.redis_server import RedisServer, running_redis
from bench.report import write_csv
from bench.shared_budget_report import FAULT_METRICS, draw, fault_table, summarize, tables
from bench.shared_launch import command, probe_command, worker_fleet
from mockprovider.launch import running_server

__all__ = [
    "FAULTS",
    "MODES",
    "SharedBudgetConfig",
    "measure",
    "run_fault",
    "shared_budget",
    "skewed_counts",
]

MODES: Final = ("shared", "static", "uncoordinated")
#: The mock's rate window, virtual seconds (its default).
WINDOW_S: Final = 60.0
#: The largest token charge of one call (prompt 64 + ``max_tokens`` 1024).
MAX_CHARGE: Final = 64 + 1024
#: Calls in one run, for every N and mode.
REQUESTS: Final = 180
#: The store faults: (wall seconds after the mock's first request, wall seconds down).
FAULTS: Final = {"kill": (3.0, 1.0), "stop": (3.0, 6.0)}


@dataclass(frozen=True, kw_only=True)
class SharedBudgetConfig:
    """One benchmark's settings.

    Attributes:
        workers: Worker counts to run.
        modes: Modes to run (`MODES`).
        requests: Calls per run, split by `skewed_counts`.
        rpm: The mock's request limit per virtual minute.
        tpm: The mock's token limit per virtual minute.
        time_scale: Virtual seconds per wall second (mock and workers).
        load: All workers' arrival rate over the limit's request rate.
        max_concurrency: Each worker's ``max_inflight`` (shared: the fleet's, in Redis).
        margin_s: The budget's ``margin_s`` (virtual seconds; the library's default 1).
        repeats: Runs per configuration (seeds ``seed``, ``seed + 1``, ...).
        seed: The first repeat's seed.
        probe: After each ``shared`` run, N probe processes make this many reservations
            each, one at a time, with nothing else running (0: no probe).
        faults: Store faults to run after the matrix (`FAULTS`), once per repeat.
        fault_workers: Workers of a fault run.
        fault_calls: Calls of each worker in a fault run.
    """

    workers: tuple[int, ...] = (1, 2, 4, 8)
    modes: tuple[str, ...] = MODES
    requests: int = REQUESTS
    rpm: int = 60
    tpm: int = 20_000
    time_scale: float = 30.0
    load: float = 8.0
    max_concurrency: int = 32
    margin_s: float = 1.0
    repeats: int = 2
    seed: int = 0
    probe: int = 300
    faults: tuple[str, ...] = tuple(FAULTS)
    fault_workers: int = 4
    fault_calls: int = 60

    def __post_init__(self) -> None:
        if any(f not in FAULTS for f in self.faults):
            raise ValueError(f"faults={self.faults!r} must be some of {tuple(FAULTS)}")
        if self.fault_workers < 1 or self.fault_calls < 1:
            raise ValueError(f"{self.fault_workers=} and {self.fault_calls=} must be >= 1")
        if not self.workers or any(n < 1 for n in self.workers):
            raise ValueError(f"workers={self.workers!r} must be counts >= 1")
        if not self.modes or any(m not in MODES for m in self.modes):
            raise ValueError(f"modes={self.modes!r} must be some of {MODES}")
        if self.requests < max(self.workers):
            raise ValueError(f"requests={self.requests} must be >= the most workers")
        for name in ("rpm", "tpm", "max_concurrency", "repeats"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name}={getattr(self, name)} must be >= 1")
        if self.probe < 0:
            raise ValueError(f"probe={self.probe} must be >= 0")
        if not (math.isfinite(self.margin_s) and self.margin_s >= 0):
            raise ValueError(f"margin_s={self.margin_s} must be a finite number >= 0")
        for name in ("time_scale", "load"):
            if not (math.isfinite(getattr(self, name)) and getattr(self, name) > 0):
                raise ValueError(f"{name}={getattr(self, name)} must be a finite number > 0")
        if "static" in self.modes and (
            self.rpm < max(self.workers) or self.tpm // max(self.workers) < MAX_CHARGE
        ):
            raise ValueError(
                f"rpm={self.rpm}, tpm={self.tpm}: a static share (limit / "
                f"{max(self.workers)}) must hold one request of {MAX_CHARGE} tokens"
            )


def skewed_counts(total: int, n: int) -> list[int]:
    """``total`` split over ``n`` workers in proportion to 2^-i (largest remainders); a
    worker that would get none takes one from the last of the largest counts.

    Raises:
        ValueError: ``total < n`` or ``n < 1``.
    """
    if n < 1 or total < n:
        raise ValueError(f"{total=} must be >= {n=} >= 1")
    weights = [2.0**-i for i in range(n)]
    exact = [total * w / sum(weights) for w in weights]
    counts = [math.floor(x) for x in exact]
    by_remainder = sorted(range(n), key=lambda i: exact[i] - counts[i], reverse=True)
    for i in by_remainder[: total - sum(counts)]:
        counts[i] += 1
    for empty in (i for i in range(n) if counts[i] == 0):
        counts[max(range(n), key=lambda i: (counts[i], i))] -= 1
        counts[empty] = 1
    return counts


# -- one run -----------------------------------------------------------------------------


def _commands(
    config: SharedBudgetConfig, mode: str, n: int, seed: int, url: str, redis_url: str
) -> list[list[str]]:
    counts = skewed_counts(config.requests, n)
    total_rate = config.load * config.rpm / WINDOW_S
    share = 1 if mode != "static" else n
    namespace = f"sb{uuid.uuid4().hex[:10]}"
    return [
        command(
            url,
            requests=count,
            rate=total_rate * count / config.requests,
            rpm=config.rpm // share,
            tpm=config.tpm // share,
            time_scale=config.time_scale,
            seed=seed * 1000 + i,
            max_concurrency=config.max_concurrency,
            state=redis_url if mode == "shared" else None,
            namespace=namespace,
            worker_id=f"{namespace}w{i}",
            margin=config.margin_s,
            adapt=mode != "static",
        )
        for i, count in enumerate(counts)
    ]


def mock_counters(url: str) -> dict[str, int]:
    """The mock's counters (``GET /v1/mock/stats``), plus ``rate_limited`` (all 429s)."""
    with urllib.request.urlopen(f"{url}/mock/stats") as response:
        counters: dict[str, int] = json.load(response)["counters"]
    counters["rate_limited"] = counters["rate_limited_requests"] + counters["rate_limited_tokens"]
    return counters


def run_once(
    config: SharedBudgetConfig, mode: str, n: int, seed: int, redis_url: str, logdir: Path
) -> dict[str, Any]:
    """One configuration once: a fresh mock, N workers started together; its measured row."""
    args = ("--time-scale", repr(config.time_scale), "--rpm", str(config.rpm),
            "--tpm", str(config.tpm), "--log-level", "warning")  # fmt: skip
    wall = time.perf_counter()
    with running_server(*args) as url:
        commands = _commands(config, mode, n, seed, url, redis_url)
        with worker_fleet(commands, logdir) as fleet:
            fleet.ready()
            fleet.go()
            results = fleet.results()
        counters = mock_counters(url)
    row = {"condition": mode, "workers": n, "seed": seed,
           **measure(results, counters, rpm=config.rpm, tpm=config.tpm),
           "wall_s": time.perf_counter() - wall}  # fmt: skip
    row["probe_p50_ms"] = row["probe_p99_ms"] = math.nan
    if mode == "shared" and config.probe:
        row["probe_p50_ms"], row["probe_p99_ms"] = probe(redis_url, n, config.probe, logdir)
    print(f"{mode:<14} N={n} seed {seed}: makespan {row['makespan_s']:.0f} s, "
          f"429s {row['provider_429s']}, util {row['util']:.2f}, "
          f"completed {row['completed']}/{row['requests']}, wall {row['wall_s']:.1f} s",
          flush=True)  # fmt: skip
    return row


def run_fault(config: SharedBudgetConfig, fault: str, seed: int, logdir: Path) -> dict[str, Any]:
    """One store fault (module docstring): a fresh mock and Redis, the workers started
    together, the fault injected by this process; its measured row."""
    after_s, down_s = FAULTS[fault]
    args = ("--time-scale", repr(config.time_scale), "--rpm", str(config.rpm),
            "--tpm", str(config.tpm), "--log-level", "warning")  # fmt: skip
    n, namespace, wall = config.fault_workers, f"sf{uuid.uuid4().hex[:10]}", time.perf_counter()
    rate = config.load * config.rpm / WINDOW_S / n
    with RedisServer(workdir=logdir) as server, running_server(*args) as url:
        commands = [command(url, requests=config.fault_calls, rate=rate, rpm=config.rpm,
                            tpm=config.tpm, time_scale=config.time_scale, seed=seed * 1000 + i,
                            max_concurrency=config.max_concurrency, state=server.url,
                            namespace=namespace, worker_id=f"{namespace}w{i}",
                            margin=config.margin_s) for i in range(n)]  # fmt: skip
        with worker_fleet(commands, logdir) as fleet:
            fleet.ready()
            fleet.go()
            while mock_counters(url)["requests"] < 1:
                time.sleep(0.01)  # polling a child process's counter
            time.sleep(after_s)
            down = time.time()
            server.kill() if fault == "kill" else server.suspend()
            time.sleep(down_s)
            server.start() if fault == "kill" else server.resume()
            up = time.time()
            results = fleet.results()
            logs = [log.read_text() for log in fleet.logs]
        counters = mock_counters(url)
    seen = [float(t) for r in results for t, status, _ in r["sends"] if status == 429]
    row = {"condition": fault, "workers": n, "seed": seed,
           **measure(results, counters, rpm=config.rpm, tpm=config.tpm),
           "wall_s": time.perf_counter() - wall,
           "before_429s": sum(t < down for t in seen),
           "down_429s": sum(down <= t < up for t in seen),
           "after_429s": sum(t >= up for t in seen),
           "tpm_429s": counters["rate_limited_tokens"],
           **fault_logs(logs)}  # fmt: skip
    print(f"fault {fault:<5} N={n} seed {seed}: 429s {row['provider_429s']} (before "
          f"{row['before_429s']}, down {row['down_429s']}, after {row['after_429s']}; tpm "
          f"{row['tpm_429s']}), completed {row['completed']}/{row['requests']}, lost "
          f"{row['lost']}, shares {row['shares']}, rejoins {row['rejoins']}",
          flush=True)  # fmt: skip
    return row


def fault_logs(logs: Sequence[str]) -> dict[str, Any]:
    """From the workers' stderr: each one's fallback share at its first loss (``1/N``) and
    how many "rejoined" lines it logged."""
    shares = [re.search(r"limit \(1/(\d+)\)", log) for log in logs]
    return {
        "shares": " ".join(f"1/{m.group(1)}" if m else "-" for m in shares),
        "rejoins": " ".join(str(log.count("rejoined namespace")) for log in logs),
    }


def probe(redis_url: str, n: int, count: int, logdir: Path) -> tuple[float, float]:
    """N probe processes at once, ``count`` reservations each, one at a time
    (`bench.shared_worker.run_probe`); the pooled (p50, p99) round trip, wall ms."""
    namespace = f"probe{uuid.uuid4().hex[:10]}"
    with worker_fleet([probe_command(redis_url, namespace, count)] * n, logdir) as fleet:
        fleet.ready()
        fleet.go()
        trips = [x for r in fleet.results() for x in r["round_trips_ms"]]
    return float(np.percentile(trips, 50)), float(np.percentile(trips, 99))


# -- measuring ---------------------------------------------------------------------------


def measure(
    results: Sequence[Mapping[str, Any]],
    counters: Mapping[str, int],
    *,
    rpm: int,
    tpm: int,
    step_s: float = 0.05,
) -> dict[str, Any]:
    """A run's row from the workers' JSON lines and the mock's counters (module docstring).

    ``step_s`` is the grid (virtual seconds) the utilisation is averaged on.
    """
    scale = float(results[0]["time_scale"])
    go = min(float(r["start"]) for r in results)

    def virtual(t: float) -> float:
        return (t - go) * scale

    admitted: list[tuple[float, int]] = []  # (time, token charge)
    queued: list[tuple[float, float]] = []
    for r in results:
        first_ok: dict[int, float] = {}
        for t, status, index in r["sends"]:
            if status == 200 and index >= 0:
                first_ok.setdefault(int(index), virtual(float(t)))
        for index, (arrived, charge, ended, _) in enumerate(r["calls"]):
            sent = first_ok.get(index)
            if sent is not None:
                admitted.append((sent, int(charge)))
            queued.append((virtual(float(arrived)), sent if sent is not None else virtual(ended)))
    end = max(virtual(float(r["end"])) for r in results)
    req_util, tok_util, util, queued_s = _utilisation(admitted, queued, end, rpm, tpm, step_s)
    trips = np.array([x for r in results for x in r["round_trips_ms"]], dtype=np.float64)
    states = [r["state"] for r in results if r["state"] is not None]
    requests = sum(int(r["requests"]) for r in results)
    completed = sum(int(r["completed"]) for r in results)
    failed = sum(sum(r["outcomes"].values()) for r in results)
    return {
        "requests": requests,
        "completed": completed,
        "failed": failed,
        "lost": requests - completed - failed,
        "makespan_s": end,
        "provider_429s": int(counters["rate_limited"]),
        "provider_requests": int(counters["requests"]),
        "provider_completed": int(counters["completed"]),
        "client_429s": sum(int(r["throttled"]) for r in results),
        "refused": sum(int(r["refused"]) for r in results),
        "req_util": req_util,
        "tok_util": tok_util,
        "util": util,
        "queued_s": queued_s,
        "rtt_p50_ms": float(np.percentile(trips, 50)) if trips.size else math.nan,
        "rtt_p99_ms": float(np.percentile(trips, 99)) if trips.size else math.nan,
        "reservations": int(trips.size),
        "fallbacks": sum(int(s["fallbacks"]) for s in states),
    }


def _utilisation(
    admitted: Sequence[tuple[float, int]],
    queued: Sequence[tuple[float, float]],
    end: float,
    rpm: int,
    tpm: int,
    step_s: float,
) -> tuple[float, float, float, float]:
    """(requests, tokens, the larger of the two) window occupancy over the limit, averaged
    over the grid instants when some call was queued; and how long that was."""
    grid = np.arange(0.0, end + step_s, step_s)
    if not admitted or grid.size == 0:
        return math.nan, math.nan, math.nan, 0.0
    depth = np.zeros(grid.size + 1)
    for start, stop in queued:
        a, b = np.searchsorted(grid, [start, stop], side="left")
        depth[a] += 1
        depth[b] -= 1
    mask = np.cumsum(depth)[:-1] > 0
    if not mask.any():
        return math.nan, math.nan, math.nan, 0.0
    ordered = sorted(admitted)
    times = np.array([t for t, _ in ordered])
    tokens = np.concatenate([[0.0], np.cumsum([c for _, c in ordered])])
    upper = np.searchsorted(times, grid, side="right")  # admitted at or before t
    lower = np.searchsorted(times, grid - WINDOW_S, side="right")  # ... and left the window
    requests_used = (upper - lower) / rpm
    tokens_used = (tokens[upper] - tokens[lower]) / tpm
    larger = np.maximum(requests_used, tokens_used)
    return (
        float(requests_used[mask].mean()),
        float(tokens_used[mask].mean()),
        float(larger[mask].mean()),
        float(mask.sum() * step_s),
    )


# -- the whole benchmark -----------------------------------------------------------------


def shared_budget(out: Path, config: SharedBudgetConfig | None = None) -> Path:
    """Run every configuration ``repeats`` times; write ``runs.csv``, ``summary.csv``,
    ``tables.md`` and ``makespan.png`` into ``out``; return the tables' path."""
    config = SharedBudgetConfig() if config is None else config
    out.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    runs: list[dict[str, Any]] = []
    faults: list[dict[str, Any]] = []
    with running_redis() as redis_url, tempfile.TemporaryDirectory() as logs:
        for repeat in range(config.repeats):
            seed = config.seed + repeat
            for n in config.workers:
                for mode in config.modes:
                    runs.append(run_once(config, mode, n, seed, redis_url, Path(logs)))
            for fault in config.faults:
                faults.append(run_fault(config, fault, seed, Path(logs)))
    summary = summarize(runs)
    write_csv(out / "runs.csv", runs)
    write_csv(out / "summary.csv", summary)
    if faults:
        write_csv(out / "faults.csv", faults)
        write_csv(out / "faults_summary.csv", summarize(faults, FAULT_METRICS))
    elapsed = time.perf_counter() - started
    written = out / "tables.md"
    written.write_text(tables(summary, config, elapsed_s=elapsed) + fault_table(faults, config))
    draw(summary, out / "makespan.png")
    return written


def with_options(config: SharedBudgetConfig, **changes: Any) -> SharedBudgetConfig:
    """``config`` with the options given (``None``: unchanged), validated again."""
    return replace(config, **{k: v for k, v in changes.items() if v is not None})
