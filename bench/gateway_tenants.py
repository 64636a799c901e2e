"""A noisy neighbour through ``semisched serve``: ``python -m bench gateway``'s ``tenants`` part.

Two tenants, Q (quiet) and F, each with its own gateway key, weights 1/1, send the
paper's balanced mix (coarse priors, bucket deadlines; `bench.tenants.load_jobs`)
as Poisson streams through one gateway process to the congestion-aware mock
(``python -m mockprovider``, default physics: 32 slots, its own FIFO beyond them) run
`TIME_SCALE` times faster than real time. Q sends `QUIET` of the provider's
capacity; F the same in ``base`` and five times that in ``flood`` (2.4x capacity in all).

Each request carries its hints as headers (``x-semisched-prior``, ``-class``,
``-deadline``, the deadline in wall seconds: the bucket's over the time scale) and its true
output length as ``max_tokens`` (the mock decodes that many). Conditions:

``fair_share``
    ``[tenants] policy = "fair_share"`` over the default layers, the mock's concurrency
    learned (nothing told: the defaults): the waiting happens in the gateway, where the
    tenant layer orders it.
``fair_share_told``
    The same, with the mock's slots told (the endpoint's ``max_concurrency``): what telling
    the concurrency buys over learning it.
``pass_through``
    No scheduling: ``direct_naive`` (FIFO, no overload control), every request sent at
    once (``max_inflight`` 4096): the waiting happens in the provider's FIFO, as behind a
    plain proxy. Deadlines still end a request (504) in both.

Per condition, scenario and tenant: requests, completed, short P95 (wall seconds from the
request's scheduled start; a short request not answered 200 counts as infinitely late),
deadline misses (not answered 200 within its deadline) and the statuses.
The headline is Q's short P95 in ``flood`` over its own in ``base``, per condition. Beside
it, the same ratio when the simulator runs the same jobs through the core with the same
scheduler config (`simulated_p95`): what the policy itself does with this traffic.
"""

from __future__ import annotations

import asyncio
import json
import math
import subprocess
import tempfile
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx2

from bench.gateway import GENERATOR, serve
from bench.live import filler
from bench.tenants import PHYSICS, Load, load_jobs, tenant_of
from mockprovider.launch import free_port, running_process
from semisched.core.buckets import Bucket, bucket_for_tokens
from semisched.core.tenants.config import TenantSpec
from semisched.gateway.configfile import load_config
from semisched.gateway.keys import key_hash
from semisched.sim.model import SimEndpoint
from semisched.sim.simulator import SimJob, Simulator

__all__ = ["CONDITIONS", "QUIET", "SCENARIOS", "Outcome", "gateway_file", "headers_for",
           "simulated_p95", "summarize", "tenant_rows"]  # fmt: skip

TIME_SCALE = 20.0
#: Q's load, a fraction of the provider's capacity (F's in ``base``; five times it in ``flood``).
QUIET = 0.4
SCENARIOS: dict[str, tuple[Load, ...]] = {
    "base": (Load(TenantSpec(name="Q"), QUIET), Load(TenantSpec(name="F"), QUIET)),
    "flood": (Load(TenantSpec(name="Q"), QUIET), Load(TenantSpec(name="F"), 5 * QUIET)),
}
CONDITIONS: tuple[str, ...] = ("fair_share", "fair_share_told", "pass_through")
KEYS = {"Q": "sk-bench-quiet", "F": "sk-bench-flood"}
SPAN_S = 600.0  # virtual seconds of arrivals: 30 s of wall time at TIME_SCALE


@dataclass(slots=True)
class Outcome:
    """One request as the client saw it (wall seconds from the run's start)."""

    tenant: str
    bucket: str
    deadline_s: float
    status: int = 0
    latency_s: float | None = None

    @property
    def met(self) -> bool:
        return self.status == 200 and self.latency_s is not None and \
            self.latency_s <= self.deadline_s


def gateway_file(folder: Path, condition: str, upstream: str) -> Path:
    """The gateway's TOML for ``condition`` (module docstring), in ``folder``.

    Raises:
        ValueError: An unknown condition.
    """
    if condition not in CONDITIONS:
        raise ValueError(f"condition={condition!r} must be one of {list(CONDITIONS)}")
    fair = condition.startswith("fair_share")
    lines = ["[gateway]", *([] if fair else ["max_inflight = 4096"]),
             f'preset = "{"final_adrr_olc" if fair else "direct_naive"}"', "max_pending = 100000",
             "[tenants]", f'policy = "{"fair_share" if fair else "fifo"}"']  # fmt: skip
    for name, key in KEYS.items():
        lines += ["[[tenant]]", f'name = "{name}"', f'key_sha256 = "{key_hash(key)}"']
    lines += ["[[endpoint]]", 'name = "mock"', f'base_url = "{upstream}"']
    if condition == "fair_share_told":
        lines.append(f"max_concurrency = {PHYSICS.slots}")
    path = folder / f"{condition}.toml"
    path.write_text("\n".join(lines) + "\n")
    return path


def headers_for(job: SimJob) -> dict[str, str]:
    """A job's gateway headers: its tenant's key and its hints (deadline in wall seconds)."""
    request = job.request
    headers = {"authorization": f"Bearer {KEYS[str(request.tenant)]}",
               "x-semisched-prior": f"{request.prior.p50:g},{request.prior.p90:g}",
               "x-semisched-class": request.klass}  # fmt: skip
    if request.deadline is not None:
        headers["x-semisched-deadline"] = f"{(request.deadline - request.arrival) / TIME_SCALE:.3f}"
    return headers


def _outcome(job: SimJob) -> Outcome:
    request = job.request
    deadline = (request.deadline or math.inf) - request.arrival
    return Outcome(str(request.tenant), str(bucket_for_tokens(job.output_tokens)),
                   deadline / TIME_SCALE)  # fmt: skip


def _body(job: SimJob) -> dict[str, Any]:
    return {"model": "mock-1", "max_tokens": job.output_tokens,
            "messages": [{"role": "user", "content": filler(job.input_tokens)}]}  # fmt: skip


def replay_node(base: str, jobs: Sequence[SimJob], node: str) -> list[Outcome]:
    """`replay` by the Node generator (``replay`` mode): thousands of requests
    waiting at once cost it little, where an asyncio/httpx2 client's pool slows down."""
    with tempfile.TemporaryDirectory() as scratch:
        path = Path(scratch) / "jobs.json"
        path.write_text(json.dumps([{"at_s": j.request.arrival / TIME_SCALE,
                                     "headers": headers_for(j), "body": _body(j)}
                                    for j in jobs]))  # fmt: skip
        spec = {"mode": "replay", "url": f"{base}/chat/completions", "file": str(path),
                "connections": 1_000_000}  # fmt: skip
        done = subprocess.run([node, str(GENERATOR), json.dumps(spec)], capture_output=True,
                              text=True, check=True)  # fmt: skip
    outcomes = []
    for job, (status, latency_ms) in zip(jobs, json.loads(done.stdout), strict=True):
        outcome = _outcome(job)
        outcome.status, outcome.latency_s = (status or -1), latency_ms / 1000
        outcomes.append(outcome)
    return outcomes


async def replay(base: str, jobs: Sequence[SimJob]) -> list[Outcome]:
    """Send each job at its arrival (over the time scale) and wait for every answer
    (asyncio and httpx2: the fallback without Node)."""
    outcomes: list[Outcome] = []
    limits = httpx2.Limits(max_connections=4096, max_keepalive_connections=256)
    async with httpx2.AsyncClient(limits=limits, timeout=120) as http:
        start = time.perf_counter()

        async def one(job: SimJob) -> None:
            request = job.request
            at = start + request.arrival / TIME_SCALE
            await asyncio.sleep(max(0.0, at - time.perf_counter()))
            outcome = _outcome(job)
            outcomes.append(outcome)
            try:
                response = await http.post(f"{base}/chat/completions", json=_body(job),
                                           headers=headers_for(job))  # fmt: skip
                outcome.status = response.status_code
            except httpx2.HTTPError:
                outcome.status = -1
            outcome.latency_s = time.perf_counter() - at

        await asyncio.gather(*(one(job) for job in jobs))
    return outcomes


def summarize(outcomes: Sequence[Outcome]) -> list[dict[str, Any]]:
    """Per tenant: requests, completed, short P95 s, deadline misses, statuses."""
    rows = []
    for tenant in sorted({o.tenant for o in outcomes}, reverse=True):  # Q first
        mine = [o for o in outcomes if o.tenant == tenant]
        short = sorted(_latency(o) for o in mine if o.bucket == "short")
        p95 = short[min(len(short) - 1, int(0.95 * len(short)))] if short else float("nan")
        statuses = Counter(o.status for o in mine)
        seen = " ".join(f"{k}:{v}" for k, v in sorted(statuses.items()))
        rows.append({"tenant": tenant, "requests": len(mine), "completed": statuses[200],
                     "short": len(short), "short_missed": sum(not o.met for o in mine
                                                            if o.bucket == "short"),
                     "short_p95_s": p95,
                     "deadline_misses": sum(not o.met for o in mine),
                     "statuses": seen})  # fmt: skip
    return rows


def _latency(outcome: Outcome) -> float:
    """Its latency if answered 200, else infinite (a short request refused or expired
    counts in the P95 as never answered, not as a fast one)."""
    ok = outcome.status == 200 and outcome.latency_s is not None
    return outcome.latency_s if ok and outcome.latency_s is not None else float("inf")


def tenant_rows(*, quick: bool = False, seed: int = 0,
                node: str | None = None) -> list[dict[str, Any]]:  # fmt: skip
    """Every condition and scenario (module docstring); ``quick``: a fifth of the span;
    ``node``: the Node generator sends (else asyncio and httpx2)."""
    span = SPAN_S / 5 if quick else SPAN_S
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as scratch:
        for condition in CONDITIONS:
            for scenario, loads in SCENARIOS.items():
                jobs = load_jobs(loads, seed, span)
                port = free_port()
                mock = ["-m", "mockprovider", "--port", str(port), "--time-scale",
                        str(TIME_SCALE), "--log-level", "warning"]  # fmt: skip
                with running_process(mock, port):
                    path = gateway_file(Path(scratch), condition, f"http://127.0.0.1:{port}/v1")
                    with serve(["--config", str(path)]) as (base, _):
                        outcomes = (replay_node(base, jobs, node) if node else
                                    asyncio.run(replay(base, jobs)))  # fmt: skip
                simulated = simulated_p95(path, jobs)
                for row in summarize(outcomes):
                    rows.append({"condition": condition, "scenario": scenario, **row,
                                 "sim_short_p95_s": simulated.get(row["tenant"], math.nan)})
    return _with_ratios(rows)


def simulated_p95(path: Path, jobs: Sequence[SimJob]) -> dict[str, float]:
    """Each tenant's short P95 when the simulator runs ``jobs`` through the core with the
    gateway file's own scheduler config and endpoints (a cap told included) over the
    mock's physics, in wall seconds (the reference: what the core alone does with this
    traffic, without HTTP, processes or a real clock)."""
    config = load_config(path)
    fleet = [SimEndpoint(spec=e.spec(), physics=PHYSICS) for e in config.fleet.endpoints]
    result = Simulator(config.scheduler_config(), fleet=fleet).run(list(jobs))
    by_tenant: dict[str, list[float]] = {}
    for row in result.rows:
        if bucket_for_tokens(row.output_tokens) is Bucket.SHORT:
            late = row.outcome != "completed" or row.end is None
            latency = math.inf if late or row.end is None else row.end - row.arrival
            by_tenant.setdefault(tenant_of(row), []).append(latency / TIME_SCALE)
    return {t: sorted(v)[min(len(v) - 1, int(0.95 * len(v)))] for t, v in by_tenant.items()}


def _with_ratios(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each flood row's short P95 over its own condition's ``base`` row (same tenant)."""
    base = {(r["condition"], r["tenant"]): r["short_p95_s"] for r in rows
            if r["scenario"] == "base"}  # fmt: skip
    sim = {(r["condition"], r["tenant"]): r["sim_short_p95_s"] for r in rows
           if r["scenario"] == "base"}  # fmt: skip
    for row in rows:
        key = (row["condition"], row["tenant"])
        row["p95_vs_base"] = _ratio(row["short_p95_s"], base.get(key))
        row["sim_p95_vs_base"] = _ratio(row["sim_short_p95_s"], sim.get(key))
    return rows


def _ratio(value: float, reference: float | None) -> float:
    if reference is None or not reference or math.isinf(reference):
        return math.nan
    return value / reference
