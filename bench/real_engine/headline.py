"""The paper's quick comparison on the real engine: ``python -m bench real-engine headline``.

The four strategies of ``bench quick`` (``direct_naive``, ``quota_tiered``,
``adaptive_drr``, ``final_adrr_olc``) schedule one seeded workload each through the real
SDK (`semisched.Scheduler` over ``openai.AsyncOpenAI``) into one llama-server
(``--parallel 8``), in real time, and the simulator runs the same jobs with the same
configs against the engine's profile (a fit of this engine on this machine, or with
``--profile committed`` the committed ``llama-cpp`` profile: `.profiles`): one engine
row and one sim row per strategy, load and seed.

The workload is `bench.real_engine.compare.workload`'s (the balanced mix with output
lengths divided by `SCALE`, prompts of 32-512 tokens,
Poisson arrivals at a share of the fitted capacity), at the congestion levels of
`bench.workloads.CONGESTION` (``medium`` 0.9, ``high`` 1.1). Everything else is the
quick comparison's, read at the paper's scale:

- priors come from its information source (``coarse``), asked about the paper-scale length
  (the engine's tokens times ``SCALE``, which falls in the same bucket of the mix), and
  divided by ``SCALE``: the scheduler's token estimates are the engine's tokens, its routing
  bucket (the class and the overload ladder's rung) the paper's;
- deadlines are the regime's, by that bucket (short 15 s ... xlong 360 s), relative to arrival;
- metrics (`semisched.sim.metrics.summarize`) group by that bucket, on both sides.

Load. A request's *work* is the seconds of a full batch it takes in the profile
(`demand_s`); the *capacity* is the profile's (one engine:
1; a fleet: `fleet_capacity`, in the profile's units). The *intended load* is the
congestion level, the offered work per second of arrivals over the capacity (arrivals at
``load * capacity / mean work``). The *achieved load* (`achieved_load`) is the same
offered work over the time the engine actually took, its first arrival to its last answer
(the run's makespan), over the capacity. Below 1 an engine that keeps up achieves a little
less than intended (the makespan adds the last answers' drain); one that falls behind
(saturated, or slower than the profile) stretches the makespan and achieves less; the
simulator's achieved load, in the same units, is what an engine exactly as the profile
would achieve.

What the SDK is told of the engine: the strategies that keep a client queue send at most
`PARALLEL` requests at once (``max_inflight=8``, the server's slots: what a user who
started the server with ``--parallel 8`` would set; more would queue inside the server,
where the client can no longer order them), a fixed cap (``concurrency="fixed"``: no
learned limit under it). ``direct_naive`` sends on arrival, as in the paper. Each
request is ``POST /v1/completions`` with the prompt as token ids, its length as
``max_tokens`` and ``ignore_eos`` through ``extra_body``; late answers are kept
(``cancel_late=False``), as the simulator counts them.

What it is not: the engine shares a 2-core machine (``headline_run.json`` records the load
average), so its rows move with the neighbours' load; the sim rows are what the mock
predicts for the same jobs, not a measurement.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import anyio

from bench.live import LiveRecord, settle
from bench.real_engine.compare import SCALE, workload
from bench.workloads import CONGESTION, DEADLINES_S, klass_for
from mockprovider.gate import GateConfig
from mockprovider.physics import PhysicsParams
from predictors.base import PriorQuery, PriorSource
from semisched.core.buckets import Bucket
from semisched.core.config import SchedulerConfig, preset
from semisched.core.request import Prior, Request
from semisched.sim.metrics import summarize
from semisched.sim.simulator import ProviderModel, SimJob, simulate

__all__ = [
    "INFORMATION",
    "METRICS",
    "PARALLEL",
    "STRATEGIES",
    "EngineJob",
    "EngineLengthError",
    "achieved_load",
    "engine_jobs",
    "engine_run",
    "fleet_capacity",
    "metric_row",
    "offered_work_s",
    "replay",
    "scaled_prior",
    "simulate_jobs",
    "strategy_config",
]

STRATEGIES = ("direct_naive", "quota_tiered", "adaptive_drr", "final_adrr_olc")
#: The quick comparison's information level (``RunSpec.information``'s default).
INFORMATION = "coarse"
#: The engine's slots (``--parallel``) and the client's concurrency cap.
PARALLEL = 8
#: The columns of `semisched.sim.metrics.summarize` each row keeps.
METRICS = (
    "short_p95_ms",
    "global_p95_ms",
    "completion_rate",
    "satisfaction",
    "goodput_rps",
    "rejects",
    "expired",
    "makespan_ms",
)


@dataclass(frozen=True, slots=True)
class EngineJob:
    """One request: the simulator's job (engine-scale lengths, paper-scale prior bucket),
    its token-id prompt and its bucket of the mix."""

    sim: SimJob
    prompt: tuple[int, ...]
    bucket: str


def scaled_prior(source: PriorSource, request_id: str, tokens: int) -> Prior:
    """``source``'s prior for a request of ``tokens * SCALE`` paper tokens, in engine tokens:
    p50 and p90 divided by ``SCALE`` (at least 1), the paper's routing bucket kept."""
    paper = source.prior(PriorQuery(request_id=request_id, true_output_tokens=tokens * SCALE))
    bucket = paper.bucket if paper.bucket is not None else paper.routing_bucket
    p50 = max(1.0, paper.p50 / SCALE)
    return Prior(p50=p50, p90=max(p50, paper.p90 / SCALE), bucket=bucket)


def engine_jobs(
    physics: PhysicsParams,
    source: PriorSource,
    *,
    load: str,
    requests: int,
    seed: int,
    vocab: int,
    capacity: float = 1.0,
) -> tuple[list[EngineJob], float]:
    """The seeded workload at congestion ``load`` (``medium``, ``high``) and its rate (/s).

    ``capacity``: the capacity the load is relative to, in units of ``physics``' own (a
    fleet's: `fleet_capacity`).

    Raises:
        ValueError: An unknown ``load``, or ``requests < 1``.
    """
    if load not in CONGESTION:
        raise ValueError(f"load={load!r} must be one of {sorted(CONGESTION)}")
    offered = CONGESTION[load] * capacity
    work = workload(physics, requests=requests, load=offered, seed=seed, vocab=vocab)
    jobs = []
    for job, bucket in zip(work.jobs, work.buckets, strict=True):
        prior = scaled_prior(source, job.tag, job.max_tokens)
        request = Request(
            id=job.tag,
            klass=klass_for(prior.routing_bucket),
            prior=prior,
            input_tokens=float(len(job.prompt)),
            arrival=job.arrival,
            deadline=job.arrival + DEADLINES_S[Bucket(bucket)],
        )
        sim = SimJob(request=request, output_tokens=job.max_tokens, input_tokens=len(job.prompt))
        jobs.append(EngineJob(sim=sim, prompt=job.prompt, bucket=bucket))
    return jobs, work.rate


def fleet_capacity(
    physics: PhysicsParams, fleet: Sequence[PhysicsParams], *, requests: int, seed: int
) -> float:
    """The capacity of ``fleet`` for the seeded workload, in units of ``physics``' own: the
    sum over its endpoints of ``physics``' mean demand per request over theirs
    (`demand_s`)."""
    import numpy as np

    from bench.real_engine.compare import demand_s

    work = workload(physics, requests=requests, load=1.0, seed=seed, vocab=3)
    prompts = [len(j.prompt) for j in work.jobs]
    outputs = [j.max_tokens for j in work.jobs]
    own = float(np.mean(demand_s(physics, prompts, outputs)))
    return sum(own / float(np.mean(demand_s(p, prompts, outputs))) for p in fleet)


def strategy_config(strategy: str, parallel: int = PARALLEL) -> SchedulerConfig:
    """The strategy's preset, its client-side cap fixed at the engine's slots (module
    docstring); ``direct_naive`` (direct dispatch: no client queue) keeps none."""
    base = preset(strategy)
    if strategy == "direct_naive":
        return base
    routing = replace(base.routing, concurrency="fixed")
    return base.with_(max_inflight=parallel, routing=routing)


def offered_work_s(physics: PhysicsParams, jobs: Sequence[EngineJob]) -> float:
    """The jobs' work: the sum of the seconds of a full batch each takes in ``physics``
    (`demand_s`; module docstring)."""
    from bench.real_engine.compare import demand_s

    prompts = [j.sim.input_tokens for j in jobs]
    outputs = [j.sim.output_tokens for j in jobs]
    return float(sum(demand_s(physics, prompts, outputs))) if jobs else 0.0


def achieved_load(work_s: float, capacity: float, makespan_ms: float) -> float:
    """The offered work ``work_s`` over the time the run took (``makespan_ms``: its first
    arrival to its last answer), over ``capacity``: the load in the intended load's units
    (module docstring); ``nan`` without a makespan."""
    seconds = float(makespan_ms) / 1000.0
    if not (math.isfinite(seconds) and seconds > 0 and capacity > 0):
        return math.nan
    return work_s / seconds / capacity


def metric_row(records: Sequence[Any], **keys: object) -> dict[str, object]:
    """``keys`` and the `METRICS` of ``records`` (read by ``summarize``)."""
    summary = summarize(records)
    return {**keys, **{name: summary[name] for name in METRICS}}


def simulate_jobs(
    jobs: Sequence[EngineJob], config: SchedulerConfig, physics: PhysicsParams, seed: int
) -> list[Any]:
    """The simulator's per-request rows of ``jobs``, grouped by the mix's bucket."""
    provider = ProviderModel(gate=GateConfig(seed=seed), seed=seed)
    result = simulate([j.sim for j in jobs], config, physics, provider)
    bucket = {j.sim.request.id: j.bucket for j in jobs}
    for row in result.rows:
        row.bucket = bucket[row.id]
    return list(result.rows)


class EngineLengthError(RuntimeError):
    """The engine answered another number of output tokens than ``max_tokens`` asked."""


#: What every call sends besides the prompt and ``max_tokens`` (`.client`'s body).
EXTRA_BODY = {"ignore_eos": True, "temperature": 0.0, "cache_prompt": False}


async def _one(
    scheduler: Any, job: EngineJob, rec: LiveRecord, relative: float | None, stream: bool
) -> int:
    """Submit ``job`` (streamed: read to its end); record its outcome in ``rec``; the
    output tokens the answer reports (``-1`` without an answer)."""
    request = job.sim.request
    streaming: dict[str, Any] = (
        {"stream": True, "stream_options": {"include_usage": True}} if stream else {}
    )
    answer = await settle(rec, scheduler.submit(
        model="engine",
        prompt=list(job.prompt),
        max_tokens=job.sim.output_tokens,
        prior=request.prior,
        klass=request.klass,
        deadline=relative,
        extra_body=EXTRA_BODY,
        **streaming,
    ))  # fmt: skip
    if stream and answer is not None:
        usage = None
        try:
            async for chunk in answer:
                usage = getattr(chunk, "usage", None) or usage
        except Exception:
            rec.outcome = "failed"
            return -1
        return int(getattr(usage, "completion_tokens", -1) or -1)
    usage = getattr(answer, "usage", None)
    return int(getattr(usage, "completion_tokens", -1) or -1)


async def replay(
    scheduler: Any, jobs: Sequence[EngineJob], *, stream: bool = False
) -> list[LiveRecord]:
    """Submit each job at its arrival (seconds after the call) through ``scheduler`` (a
    running `semisched.Scheduler`); every job's record once all have an outcome.

    Raises:
        EngineLengthError: A completed answer reports another output length than asked
            (``max_tokens`` with ``ignore_eos`` did not hold): no row measures the workload.
    """
    records: list[LiveRecord] = []
    wrong: list[tuple[str, int, int]] = []
    start = anyio.current_time()

    async def one(job: EngineJob, rec: LiveRecord, relative: float | None) -> None:
        answered = await _one(scheduler, job, rec, relative, stream)
        rec.end = anyio.current_time() - start
        if rec.outcome == "completed" and answered != job.sim.output_tokens:
            wrong.append((job.sim.request.id, job.sim.output_tokens, answered))

    async with anyio.create_task_group() as group:
        for job in jobs:
            request = job.sim.request
            await anyio.sleep_until(start + request.arrival)
            arrival = anyio.current_time() - start
            relative = None if request.deadline is None else request.deadline - request.arrival
            rec = LiveRecord(
                bucket=job.bucket,
                arrival=arrival,
                deadline=None if relative is None else arrival + relative,
                output_tokens=job.sim.output_tokens,
            )
            records.append(rec)
            group.start_soon(one, job, rec, relative)
    if wrong:
        raise EngineLengthError(f"{len(wrong)} answers of another length (id, asked, got): "
                                f"{wrong[:5]}")  # fmt: skip
    return records


async def engine_run(
    base_urls: Mapping[str, str],
    jobs: Sequence[EngineJob],
    config: SchedulerConfig,
    seed: int,
    slots: Mapping[str, int] | None = None,
    pools: Mapping[str, str] | None = None,
    *,
    stream: bool = False,
) -> tuple[list[LiveRecord], Any]:
    """``jobs`` through a fresh Scheduler over the servers ``base_urls`` (name -> URL): the
    records and the scheduler's last statistics. One server is the scheduler's one client;
    several are one `semisched.Endpoint` each, at most ``slots[name]`` in flight, in
    ``token_budget`` pool ``pools[name]``. ``stream``: every call streamed and read to its
    end (the scheduler then sees each answer's first token, as the simulator does)."""
    import openai

    from semisched import Endpoint, RuntimeOptions, Scheduler

    clients = {name: openai.AsyncOpenAI(base_url=url, api_key="engine", timeout=900.0)
               for name, url in base_urls.items()}  # fmt: skip
    options = RuntimeOptions(seed=seed, cancel_late=False)
    # Every call carries its prior: no length model to load (it would compete for the CPU).
    common: dict[str, Any] = {"config": config, "options": options, "priors": "heuristic"}
    if len(clients) == 1:
        scheduler = Scheduler(next(iter(clients.values())), **common)
    else:
        caps, pool = slots or {}, pools or {}
        endpoints = [Endpoint(name, client, learn_limits=False, max_concurrency=caps.get(name),
                              pool=pool.get(name))
                     for name, client in clients.items()]  # fmt: skip
        scheduler = Scheduler(endpoints=endpoints, **common)
    try:
        async with scheduler:
            records = await replay(scheduler, jobs, stream=stream)
            stats = scheduler.statistics()
    finally:
        for client in clients.values():
            await client.close()
    return records, stats


def median(values: Sequence[float]) -> float:
    """The median of the finite ``values`` (``nan`` for none)."""
    finite = sorted(v for v in values if isinstance(v, int | float) and math.isfinite(v))
    if not finite:
        return math.nan
    mid = len(finite) // 2
    return finite[mid] if len(finite) % 2 else (finite[mid - 1] + finite[mid]) / 2.0
