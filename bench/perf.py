"""Speed benchmarks of the core and the simulator (reported, never asserted).

``decision-cost``
    Wall time of one scheduling decision with N requests queued, for N in
    100, 1k, 10k, 100k. A *dispatch decision* is ``Engine.completed`` on a
    full engine (``max_inflight=1``): it frees the one send opportunity and
    the allocation and ordering layers pick the next request (adaptive DRR +
    feasible-set ordering). An *admission decision* is ``Engine.submit`` with
    the full stack's overload control (severity, cost ladder) while the
    queue holds N. Each N keeps its queue length constant while measuring
    (one submit per completion). Target (issue 2): dispatch p99 <= 50 µs at
    10k and at most 2x growth from 1k to 100k.
``sim-speed``
    Simulated requests per wall second for the full stack against the
    default physics with ~100 requests in flight. Target: >= 20,000.
"""

from __future__ import annotations

import gc
import time
from dataclasses import replace

import numpy as np

from mockprovider.physics import PhysicsParams, profile
from predictors.base import PriorQuery
from predictors.priors import Coarse
from semisched.core.config import OverloadConfig, preset
from semisched.core.engine import Engine, Send
from semisched.core.request import Request
from semisched.sim import SimJob, simulate

__all__ = ["decision_cost", "sim_speed"]

_SIZES = np.array([40, 160, 640, 2400])


def _request(i: int, now: float, rng: np.random.Generator) -> Request:
    tokens = int(_SIZES[rng.integers(0, 4)] * rng.uniform(0.5, 1.5))
    prior = Coarse().prior(PriorQuery(request_id=str(i), true_output_tokens=tokens))
    klass = "interactive" if tokens <= 64 else "batch"
    deadline = now + float(rng.uniform(60.0, 3600.0))
    return Request(
        id=f"q{i}",
        klass=klass,
        prior=prior,
        input_tokens=float(rng.integers(32, 2048)),
        arrival=now,
        deadline=deadline,
    )


def _fill(engine: Engine, n: int, rng: np.random.Generator) -> tuple[int, str]:
    inflight = ""
    for i in range(n + 1):
        for action in engine.submit(_request(i, 0.0, rng), 0.0):
            if isinstance(action, Send):
                inflight = action.request.id
    return n + 1, inflight


def decision_cost(
    sizes: tuple[int, ...] = (100, 1_000, 10_000, 100_000), samples: int = 2_000, seed: int = 0
) -> list[dict[str, float]]:
    """Measure dispatch and admission decision latency per queue length."""
    rows: list[dict[str, float]] = []
    for n in sizes:
        rows.append(_decision_cost_at(n, samples, seed))
    return rows


def _decision_cost_at(n: int, samples: int, seed: int) -> dict[str, float]:
    # Like timeit, collect garbage before and not during the timed calls.
    gc.collect()
    gc.disable()
    try:
        return _measure(n, samples, seed)
    finally:
        gc.enable()


def _measure(n: int, samples: int, seed: int) -> dict[str, float]:
    if True:
        rng = np.random.default_rng(seed)
        engine = Engine(preset("adaptive_drr", max_inflight=1))
        next_id, inflight = _fill(engine, n, rng)
        now = 0.0
        dispatch = np.empty(samples)
        for k in range(samples):
            now += 0.001
            engine.submit(_request(next_id, now, rng), now)
            next_id += 1
            t0 = time.perf_counter_ns()
            actions = engine.completed(inflight, now, output_tokens=100)
            dispatch[k] = time.perf_counter_ns() - t0
            inflight = next(a.request.id for a in actions if isinstance(a, Send))
        # Admission: the full stack's overload control on a queue of n.
        rng = np.random.default_rng(seed)
        cfg = preset("final_adrr_olc", max_inflight=1)
        engine = Engine(replace(cfg, overload=OverloadConfig(policy="none")))
        _fill(engine, n, rng)
        engine = _with_overload(engine, cfg.overload)
        admission = np.empty(samples)
        for k in range(samples):
            now += 0.001
            request = _request(next_id + k, now, rng)
            t0 = time.perf_counter_ns()
            engine.submit(request, now)
            admission[k] = time.perf_counter_ns() - t0
            engine.cancel(request.id, now)
        return {
            "queued": float(n),
            "dispatch_p50_us": float(np.percentile(dispatch, 50)) / 1e3,
            "dispatch_p99_us": float(np.percentile(dispatch, 99)) / 1e3,
            "admission_p50_us": float(np.percentile(admission, 50)) / 1e3,
            "admission_p99_us": float(np.percentile(admission, 99)) / 1e3,
        }


def _with_overload(engine: Engine, cfg: OverloadConfig) -> Engine:
    """Switch a filled engine's overload layer (benchmark set-up only)."""
    from semisched.core.overload import OverloadController

    engine._overload = OverloadController(cfg)
    return engine


def sim_speed(requests: int = 20_000, inflight: int = 100, seed: int = 0) -> dict[str, float]:
    """Simulated requests per wall second at about ``inflight`` in flight."""
    phys: PhysicsParams = replace(profile("default"), slots=inflight)
    config = preset("final_adrr_olc", max_inflight=inflight)
    rng = np.random.default_rng(seed)
    outputs = rng.integers(8, 512, size=requests)
    mean_out = float(outputs.mean())
    # Offered load 1.0 keeps the client's in-flight budget busy.
    rate = phys.capacity_tokens_per_s() / mean_out
    arrivals = np.cumsum(rng.exponential(1.0 / rate, size=requests))
    source = Coarse()
    jobs = []
    for i in range(requests):
        out = int(outputs[i])
        rid = f"s{i}"
        prior = source.prior(PriorQuery(request_id=rid, true_output_tokens=out))
        request = Request(
            id=rid,
            klass="interactive" if prior.routing_bucket.value == "short" else "batch",
            prior=prior,
            input_tokens=256.0,
            arrival=float(arrivals[i]),
            deadline=float(arrivals[i]) + 3600.0,
        )
        jobs.append(SimJob(request=request, output_tokens=out, input_tokens=256))
    t0 = time.perf_counter()
    result = simulate(jobs, config, phys)
    wall = time.perf_counter() - t0
    sends = [r for r in result.rows if r.first_send is not None]
    busy = sum((r.end or 0.0) - (r.first_send or 0.0) for r in sends)
    return {
        "requests": float(requests),
        "wall_s": wall,
        "requests_per_s": requests / wall,
        "events_per_s": result.events / wall,
        "mean_inflight": busy / max(result.end_time, 1e-9),
    }
