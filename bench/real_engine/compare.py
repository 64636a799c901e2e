"""Mock vs engine, same workload: ``python -m bench real-engine compare``.

One seeded, open-loop workload goes to llama-server and, in virtual time, to the mock's
physics with the ``llama-cpp`` profile fitted to that server (`.calibrate`). No
scheduler sits in between: every request is sent at its arrival time, so what differs is
the provider alone.

The workload is the ``balanced`` mix (50/25/15/10 short/medium/long/xlong) scaled to the
engine's speed: each bucket's output range divided by `SCALE` (short 2-16 tokens,
medium 17-64, long 65-256, xlong 257-1024), prompts uniform in 32-512 tokens, Poisson
arrivals at ``load`` over the mean seconds of a full batch a request takes in the fitted
profile (`demand_s`: its decode iterations and its prompt, which on a CPU engine is
a large share of the work).

Load: ``load`` is the *intended load*, the offered work (each request's `demand_s`)
per second of arrivals over the fitted capacity; the *achieved load*
(`achieved_load`) is the same offered work over the time
each side took, first arrival to last answer (`.headline`'s definitions). The profile
is, unless ``--fit`` names one, a fit of this engine on this machine, made first when there
is none (`.profiles`; ``--profile committed``: ``OUT/fit.json`` as it is).

Written: ``compare.csv`` (per bucket and overall: P50/P95/P99 latency of each side and
their ratio, engine over mock; the completion time of the whole run, with the intended
load and each side's achieved load),
``compare_requests.csv`` (every request on both sides) and ``compare_run.json`` (the
run's rate, wall time and the machine's load average before and after).

What it is not: a scheduler benchmark (``bench quick`` is); the mock side runs the physics
directly (`mockprovider.physics.ProviderPhysics`), not its HTTP server, so the
client's own jitter is on the engine's side only.
"""

from __future__ import annotations

import csv
import json
import math
import os
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from bench.real_engine.client import Job, prompt_ids
from mockprovider.physics import COMPLETED, PhysicsParams, ProviderPhysics
from semisched.plan.mixes import MIXES, OUTPUT_RANGES

__all__ = [
    "SCALE",
    "Workload",
    "bucket_table",
    "mock_latencies",
    "run_loads",
    "workload",
    "write_rows",
]

#: Output lengths of the balanced mix divided by this (the engine is a 2-core CPU).
SCALE = 4
PROMPTS = (32, 512)
_BUCKETS = ("short", "medium", "long", "xlong")
_QUANTILES = (50, 95, 99)


@dataclass(frozen=True, slots=True)
class Workload:
    """The jobs and, for each, its bucket (index into the mix)."""

    jobs: tuple[Job, ...]
    buckets: tuple[str, ...]
    rate: float


def scaled_ranges() -> list[tuple[int, int]]:
    """Each bucket's output range of the balanced mix, divided by `SCALE`."""
    return [
        (max(1, math.ceil(lo / SCALE)), max(1, hi // SCALE)) for lo, hi in OUTPUT_RANGES.values()
    ]


def demand_s(physics: PhysicsParams, prompts: Any, outputs: Any) -> Any:
    """Seconds of a full batch each request takes: its share of the iterations it holds a
    slot for (``i = ceil(L_in / C) + L_out``, each ``t_iter(slots) / slots``) plus what its
    prompt and its context add to the whole batch's iterations (``P * L_in``, and
    ``K * (L_in * i + i^2 / 2)``: its context grows by a token an iteration)."""
    prompts = np.asarray(prompts)
    iters = -(-prompts // physics.prefill_chunk) + np.asarray(outputs)
    share = physics.iteration_ms(physics.slots) / physics.slots
    context = physics.context_ms(prompts, iters)
    return (iters * share + physics.prefill_ms_per_token * prompts + context) / 1000.0


def workload(
    physics: PhysicsParams, *, requests: int, load: float, seed: int, vocab: int
) -> Workload:
    """The seeded workload (module docstring) for a provider of ``physics``."""
    if requests < 1 or not load > 0:
        raise ValueError(f"requests={requests} must be >= 1 and load={load} > 0")
    rng = np.random.default_rng(seed)
    ranges = scaled_ranges()
    shares = MIXES["balanced"]
    picks = rng.choice(len(ranges), size=requests, p=shares)
    outputs = [int(rng.integers(ranges[b][0], ranges[b][1] + 1)) for b in picks]
    prompts = rng.integers(PROMPTS[0], PROMPTS[1] + 1, size=requests)
    rate = load / float(np.mean(demand_s(physics, prompts, outputs)))
    arrivals = np.cumsum(rng.exponential(1.0 / rate, size=requests))
    jobs = tuple(
        Job(arrival=float(arrivals[i]), prompt=prompt_ids(rng, int(prompts[i]), vocab),
            max_tokens=outputs[i], tag=f"r{i:04d}")
        for i in range(requests)
    )  # fmt: skip
    return Workload(jobs, tuple(_BUCKETS[b] for b in picks), rate)


def mock_latencies(physics: PhysicsParams, jobs: Sequence[Job]) -> list[float]:
    """Each job's latency (s) on the mock's physics, sent at its arrival."""
    provider = ProviderPhysics(physics)
    end: dict[str, float] = {}
    for job in sorted(jobs, key=lambda j: j.arrival):
        for code, rid, when, *_ in provider.drain(job.arrival):
            if code == COMPLETED:
                end[rid] = when
        provider.submit(job.arrival, job.tag, len(job.prompt), job.max_tokens)
    while (t := provider.next_event_time()) is not None:
        for code, rid, when, *_ in provider.drain(t):
            if code == COMPLETED:
                end[rid] = when
    return [end[job.tag] - job.arrival for job in jobs]


def _row(name: str, engine: Sequence[float], mock: Sequence[float]) -> dict[str, object]:
    row: dict[str, object] = {"bucket": name, "requests": len(engine)}
    for q in _QUANTILES:
        e, m = float(np.percentile(engine, q)), float(np.percentile(mock, q))
        row |= {f"engine_p{q}_s": round(e, 3), f"mock_p{q}_s": round(m, 3),
                f"ratio_p{q}": round(e / m, 3) if m > 0 else math.nan}  # fmt: skip
    return row


def bucket_table(
    buckets: Sequence[str],
    engine: Sequence[float],
    mock: Sequence[float],
    completion: tuple[float, float],
) -> list[dict[str, object]]:
    """Per-bucket and overall percentiles of both sides, their ratios, and the completion
    time (``completion``: engine, mock) as the last row."""
    rows = []
    for name in (*_BUCKETS, "all"):
        idx = [i for i, b in enumerate(buckets) if name in (b, "all")]
        if idx:
            rows.append(_row(name, [engine[i] for i in idx], [mock[i] for i in idx]))
    e, m = completion
    rows.append({"bucket": "completion_time", "requests": len(buckets), "engine_p50_s": round(e, 3),
                 "mock_p50_s": round(m, 3), "ratio_p50": round(e / m, 3)})  # fmt: skip
    return rows


def write_rows(path: Path, rows: Sequence[Mapping[str, object]]) -> None:
    """``rows`` as csv, the columns in first-seen order (values as ``str()`` writes them:
    the real-engine reports read them back at full precision)."""
    keys = list(dict.fromkeys(k for row in rows for k in row))
    with open(path, "w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=keys)
        writer.writeheader()
        writer.writerows(rows)


def fitted_physics(path: Path) -> PhysicsParams:
    """The profile in ``path`` (a ``fit.json`` as ``fit`` writes it)."""
    data = json.loads(path.read_text(encoding="utf-8"))
    return PhysicsParams(**data["profile"])


def _load_average() -> list[float]:
    """The machine's 1, 5 and 15 minute load averages (the engine shares the CPU)."""
    return [round(x, 2) for x in os.getloadavg()]


def compare_main(
    out: Path, *, fit: Path, parallel: int, requests: int, load: float, seed: int
) -> Path:
    """Run the workload on both sides (the mock with the profile in ``fit``) and write the
    files (module docstring)."""
    from tokenizers import Tokenizer

    from bench.real_engine.client import run_jobs
    from bench.real_engine.launcher import LlamaServer, ServerOptions
    from bench.real_engine.setup import EnginePaths

    physics = fitted_physics(fit)
    if physics.slots != parallel:
        raise ValueError(f"parallel={parallel} must equal the fitted profile's {physics.slots}")
    paths = EnginePaths.default()
    vocab = Tokenizer.from_file(str(paths.tokenizer)).get_vocab_size()
    work = workload(physics, requests=requests, load=load, seed=seed, vocab=vocab)
    print(f"{requests} requests at {work.rate:.2f}/s (load {load})", flush=True)
    mock = mock_latencies(physics, work.jobs)
    before, started = _load_average(), time.perf_counter()
    with LlamaServer(
        ServerOptions(binary=paths.server, model=paths.gguf, parallel=parallel)
    ) as srv:
        run_jobs(srv.base_url, [Job(arrival=0.0, prompt=(5, 6, 7), max_tokens=8)])  # warm-up
        done = {c.tag: c for c in run_jobs(srv.base_url, work.jobs)}
    run = {"requests": requests, "load": load, "seed": seed, "rate_per_s": round(work.rate, 4),
           "wall_s": round(time.perf_counter() - started, 1), "load_average_before": before,
           "load_average_after": _load_average(), "cores": os.cpu_count(),
           "fit": str(fit).replace(str(Path.home()), "~")}  # fmt: skip
    engine = [done[j.tag].end - j.arrival for j in work.jobs]
    ends = [j.arrival + x for j, x in zip(work.jobs, engine, strict=True)]
    mock_ends = [j.arrival + x for j, x in zip(work.jobs, mock, strict=True)]
    rows = bucket_table(work.buckets, engine, mock, (max(ends), max(mock_ends)))
    loads = run_loads(physics, work, load, (max(ends), max(mock_ends)))
    rows[-1].update(loads)
    run.update(loads)
    write_rows(out / "compare.csv", rows)
    write_rows(out / "compare_requests.csv", [
        {"id": j.tag, "bucket": b, "arrival_s": round(j.arrival, 4), "prompt_tokens": len(j.prompt),
         "output_tokens": j.max_tokens, "engine_latency_s": round(e, 4),
         "engine_send_lag_s": round(done[j.tag].sent - j.arrival, 4),
         "mock_latency_s": round(m, 4)}
        for j, b, e, m in zip(work.jobs, work.buckets, engine, mock, strict=True)
    ])  # fmt: skip
    (out / "compare_run.json").write_text(json.dumps(run, indent=2) + "\n", encoding="utf-8")
    for row in rows:
        print(row)
    return out / "compare.csv"


def run_loads(
    physics: PhysicsParams, work: Workload, load: float, ends: tuple[float, float]
) -> dict[str, float]:
    """The intended load and each side's achieved load (module docstring); ``ends``: when
    the engine's and the mock's last answers came."""
    from bench.real_engine.headline import achieved_load

    offered = float(np.sum(demand_s(physics, [len(j.prompt) for j in work.jobs],
                                    [j.max_tokens for j in work.jobs])))  # fmt: skip
    first = min(j.arrival for j in work.jobs)
    engine, mock = ((end - first) * 1000.0 for end in ends)
    return {"intended_load": load,
            "engine_achieved_load": round(achieved_load(offered, 1.0, engine), 4),
            "mock_achieved_load": round(achieved_load(offered, 1.0, mock), 4)}  # fmt: skip
