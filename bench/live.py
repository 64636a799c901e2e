"""Live runs: the real async SDK against the real HTTP mock on loopback, in compressed time.

A live run replays exactly the workload a simulated run uses (same regime,
seed and priors) through `semisched.Scheduler` and the openai client
into ``python -m mockprovider`` started as a child process, both running
``time_scale`` times faster than the wall. Each request tells the mock its
true output and prompt length through the ``x-mock-output-tokens`` /
``x-mock-input-tokens`` headers, the way the simulator hands them to the
physics. Differences from the simulator, on purpose:

- the scheduler lets a late call finish (``cancel_late=False``), matching the
  simulator's accounting; it retries by the config's ``RetryPolicy`` with the
  run's seed, as the simulator's engine does;
- the provider's gate (``RunSpec.provider``: RPM/TPM limits, fault rates,
  seeded by the run's seed) is the mock's command line; other traffic on the
  key (``RunSpec.other_traffic``) has no live counterpart and is refused;
- each prompt is filler of about 4 bytes per true prompt token, so the SDK's
  bytes-per-token estimate (what a client budget charges) sees what the
  simulator's requests carry; 429s and retries come from the core's counters;
- times are wall-clock measurements scaled to virtual seconds, so event-loop
  and HTTP latency (~1 ms wall = ``time_scale`` ms virtual) add noise. It
  compounds for strategies that queue at the client (every dispatch waits for
  a completion round trip): measured on one balanced/high adaptive-DRR run,
  short P95 was +24% over the simulator at 100x, +15% at 50x and +1% at 25x,
  hence the default of 25x;
- TTFT and send times are not observed per request (non-streaming calls), so
  the vLLM-style TTFT/service columns are empty in live rows.
"""

from __future__ import annotations

from collections.abc import Awaitable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import anyio
import openai

from bench.experiments import RunSpec, provider_model
from bench.workloads import generate, regime
from mockprovider.launch import running_server
from mockprovider.physics import profile
from predictors.priors import information_source
from semisched import DeadlineExceeded, RequestRejected, RuntimeOptions, Scheduler, SemischedError
from semisched.core.buckets import Bucket, bucket_for_tokens
from semisched.core.config import preset
from semisched.runtime.clock import ScaledClock
from semisched.sim.metrics import summarize
from semisched.sim.simulator import SimJob

__all__ = [
    "ID_HEADER",
    "LiveRecord",
    "live_run",
    "mock_arguments",
    "replay_jobs",
    "settle",
    "submit_job",
]


@dataclass(slots=True)
class LiveRecord:
    """One request of a live run, in the shape `semisched.sim.metrics.summarize` reads."""

    bucket: str
    arrival: float
    deadline: float | None
    output_tokens: int
    outcome: str = ""
    first_send: float | None = None
    first_token: float | None = None
    end: float | None = None
    defers: int = 0


async def settle(rec: LiveRecord, call: Awaitable[Any]) -> Any:
    """Await one scheduled ``call`` and write its outcome into ``rec`` (completed,
    rejected, expired, failed); its answer, ``None`` when the scheduler raised."""
    try:
        answer = await call
    except RequestRejected:
        rec.outcome = "rejected"
    except DeadlineExceeded:
        rec.outcome = "expired"
    except SemischedError:
        rec.outcome = "failed"
    else:
        rec.outcome = "completed"
        return answer
    return None


async def submit_job(
    scheduler: Scheduler,
    job: SimJob,
    rec: LiveRecord,
    deadline: float | None,
    headers: Mapping[str, str] | None = None,
) -> None:
    """Send one simulated job as a live call (its prompt length, prior, class, tenant,
    relative ``deadline`` and true lengths as the mock's hints) and record its outcome
    in ``rec``."""
    await settle(rec, scheduler.submit(
        model="mock-1",
        messages=[{"role": "user", "content": filler(job.input_tokens)}],
        prior=job.request.prior,
        klass=job.request.klass,
        deadline=deadline,
        tenant=job.request.tenant or None,
        extra_headers={
            "x-mock-output-tokens": str(job.output_tokens),
            "x-mock-input-tokens": str(job.input_tokens),
            **(headers or {}),
        },
    ))  # fmt: skip


#: The header a recording transport reads a request's id from (the mock ignores it).
ID_HEADER = "x-bench-request"


async def replay_jobs(
    scheduler: Scheduler, jobs: Sequence[SimJob]
) -> tuple[dict[str, LiveRecord], float]:
    """Submit each job at its arrival (seconds after the call) with `submit_job`
    and its id in `ID_HEADER`; return when all have an outcome. Each job's record
    (by request id; arrival, deadline and end relative to the start) and the start time."""
    records: dict[str, LiveRecord] = {}
    start = anyio.current_time()

    async def one(job: SimJob, rec: LiveRecord, relative: float | None) -> None:
        await submit_job(scheduler, job, rec, relative, {ID_HEADER: job.request.id})
        rec.end = anyio.current_time() - start

    async with anyio.create_task_group() as tg:
        for job in jobs:
            request = job.request
            await anyio.sleep_until(start + request.arrival)
            arrival = anyio.current_time() - start
            relative = None if request.deadline is None else request.deadline - request.arrival
            rec = records[request.id] = LiveRecord(
                bucket=str(bucket_for_tokens(job.output_tokens)),
                arrival=arrival,
                deadline=None if relative is None else arrival + relative,
                output_tokens=job.output_tokens,
            )
            tg.start_soon(one, job, rec, relative)
    return records, start


async def _replay(spec: RunSpec, base_url: str, time_scale: float) -> dict[str, object]:
    reg = regime(spec.regime, requests=spec.requests)
    phys = profile(spec.physics)
    source = information_source(spec.information, noise=spec.noise, seed=spec.seed)
    jobs = generate(reg, spec.seed, source, phys)
    clock = ScaledClock(time_scale)
    # The client's timeout is the physics' (what the simulator waits on a hung call).
    timeout = clock.to_wall(phys.timeout_s)
    client = openai.AsyncOpenAI(base_url=base_url, api_key="live-bench", timeout=timeout)
    config = preset(spec.strategy, **dict(spec.overrides))
    records: list[LiveRecord] = []
    scheduler = Scheduler(
        client,
        config=config,
        clock=clock,
        options=RuntimeOptions(seed=spec.seed, cancel_late=False),
    )
    async with client, scheduler:
        start = clock.now()

        async def one(job: Any) -> None:
            request = job.request
            rec = LiveRecord(
                bucket=str(bucket_for_tokens(job.output_tokens)),
                arrival=clock.now() - start,
                deadline=None,
                output_tokens=job.output_tokens,
            )
            relative = None if request.deadline is None else request.deadline - request.arrival
            rec.deadline = None if relative is None else rec.arrival + relative
            records.append(rec)
            await submit_job(scheduler, job, rec, relative)
            rec.end = clock.now() - start

        async with anyio.create_task_group() as tg:
            for job in jobs:
                delay = job.request.arrival - (clock.now() - start)
                if delay > 0:
                    await clock.sleep(delay)
                tg.start_soon(one, job)
        stats = scheduler.statistics()
    row: dict[str, object] = {
        "regime": spec.regime,
        "strategy": spec.strategy,
        "condition": spec.condition,
        "information": spec.information,
        "noise": spec.noise,
        "seed": spec.seed,
        "mode": "live",
    }
    row.update(summarize(records))
    # Deferrals are not visible per call; take them from the core's counters.
    row["defers"] = float(stats.engine.counters.deferrals)
    for bucket in Bucket:
        count = stats.engine.defers_by_bucket.of(bucket)
        if count:
            row[f"defers_{bucket}"] = float(count)
    row["infeasible_sends"] = stats.engine.counters.infeasible_sends
    # Per call only the outcome is visible; attempts come from the core's counters.
    row["throttled"] = float(stats.engine.counters.throttled)
    row["retries"] = float(stats.engine.counters.retries)
    return row


def filler(tokens: int) -> str:
    """About 4 UTF-8 bytes per token of English-like filler."""
    return ("lore " * (tokens + 1))[: max(1, 4 * tokens)]


def mock_arguments(spec: RunSpec, time_scale: float) -> list[str]:
    """The ``python -m mockprovider`` command line of ``spec``'s provider.

    Raises:
        ValueError: For a provider the HTTP mock cannot play (other traffic).
    """
    if spec.other_traffic:
        raise ValueError(
            f"other_traffic={spec.other_traffic!r}: the HTTP mock has no other clients; "
            "this run can only be simulated"
        )
    gate = provider_model(spec).gate
    args = ["--time-scale", str(time_scale), "--profile", spec.physics, "--seed", str(gate.seed)]
    for flag, value in (
        ("--rpm", gate.rpm),
        ("--tpm", gate.tpm),
        ("--quota-tokens", gate.quota_tokens),
        ("--error-rate", gate.error_rate or None),
        ("--hang-rate", gate.hang_rate or None),
        ("--drop-rate", gate.drop_rate or None),
    ):
        if value is not None:
            args += [flag, str(value)]
    if gate.rate_window != "sliding":
        args += ["--rate-window", gate.rate_window]
    return args


def live_run(spec: RunSpec, *, time_scale: float = 25.0) -> dict[str, object]:
    """Run one spec live: start a mock server, replay, stop the server."""
    with running_server(*mock_arguments(spec, time_scale)) as url:
        return anyio.run(_replay, spec, url, time_scale)
