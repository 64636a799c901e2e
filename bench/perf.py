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

    The same subcommand also times routing (`routing_cost`): for each
    routing policy, on a heterogeneous fleet (16 endpoints, 10k queued by
    default), the routing decision alone (``Fleet.pick`` on the request the
    engine sends next) and the whole dispatch decision with routing
    (``Engine.completed`` freeing one endpoint's slot, then allocation,
    ordering and routing of the next request). Target (issue 13): a routing
    decision costs p99 <= 20 µs with 16 endpoints and 10k queued.
``sim-speed``
    Simulated requests per wall second for the full stack against the
    default physics with ~100 requests in flight. Target: >= 20,000.
"""

from __future__ import annotations

import gc
import heapq
import time
from dataclasses import replace

import numpy as np

from mockprovider.physics import PhysicsParams, profile
from predictors.base import PriorQuery
from predictors.priors import Coarse
from semisched.core.config import (
    ROUTING_POLICY_NAMES,
    BudgetConfig,
    OverloadConfig,
    RoutingConfig,
    SchedulerConfig,
    preset,
)
from semisched.core.engine import Action, Engine, Send
from semisched.core.fleet.endpoint import EndpointSpec, EndpointState
from semisched.core.fleet.fleet import NoRoute, WaitUntil
from semisched.core.queue import Entry
from semisched.core.request import Request
from semisched.sim.simulator import SimJob, simulate

__all__ = ["decision_cost", "routing_cost", "sim_speed"]

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

    engine._admission.overload = OverloadController(cfg)
    return engine


# -- routing cost (issue 13) -----------------------------------------------------------

#: Per-token decode seconds of a fast endpoint (Scheduling the Unschedulable Table 1:
#: 18.7 ms/token alone).
_FAST_S_PER_TOKEN = 0.0187


def _fleet_specs(n: int) -> tuple[list[EndpointSpec], list[tuple[float, float]]]:
    """``n`` varied endpoints and their (intercept s, s per token) physics.

    Cycles of different lengths mix the traits: concurrency caps 4..32, every
    sixth endpoint behind its own RPM budget, Token-Budget-Aware Pool Routing's short and long pools
    on half of them, a heavier weight on every seventh, and every third
    endpoint decoding at half speed (so the learned speeds differ).
    """
    specs: list[EndpointSpec] = []
    physics: list[tuple[float, float]] = []
    for i in range(n):
        specs.append(
            EndpointSpec(
                name=f"ep{i}",
                max_concurrency=(8, 4, 16, 8, 32)[i % 5],
                budget=BudgetConfig(rpm=600) if i % 6 == 1 else None,
                pool=("short", None, "long", None)[i % 4],
                weight=2.0 if i % 7 == 3 else 1.0,
            )
        )
        slow = i % 3 == 2
        physics.append((0.4 + 0.1 * (i % 4), _FAST_S_PER_TOKEN * (2.0 if slow else 1.0)))
    return specs, physics


def _routed_request(i: int, now: float, rng: np.random.Generator) -> tuple[Request, int]:
    """A request of the benchmark mix and its true output length.

    Like ``_request``, but with deadlines beyond the run (nothing expires while
    timing) and ``max_tokens`` on half the calls (``token_budget`` reads it).
    """
    tokens = int(_SIZES[rng.integers(0, 4)] * rng.uniform(0.5, 1.5))
    prior = Coarse().prior(PriorQuery(request_id=str(i), true_output_tokens=tokens))
    capped = bool(rng.integers(0, 2))
    request = Request(
        id=f"r{i}",
        klass="interactive" if tokens <= 64 else "batch",
        prior=prior,
        input_tokens=float(rng.integers(32, 2048)),
        arrival=now,
        deadline=now + float(rng.uniform(3600.0, 7200.0)),
        max_output_tokens=int(tokens * 1.5) + 16 if capped else None,
    )
    return request, tokens


class _FleetRun:
    """One engine over a varied fleet, driven by a tiny physics model (benchmark only).

    Every in-flight request finishes at its send time plus its endpoint's
    intercept plus its true tokens at the endpoint's speed (±10 %); each step
    answers the earliest one and submits one new request, so the queue length
    holds. It reaches into the engine's private ``_fleet`` (to time
    ``Fleet.pick`` in place); a benchmark may, the product must not.
    """

    def __init__(self, policy: str, endpoints: int, queued: int, seed: int) -> None:
        self.rng = np.random.default_rng(seed)
        specs, self.physics = _fleet_specs(endpoints)
        self.index = {spec.name: i for i, spec in enumerate(specs)}
        capacity = sum(spec.max_concurrency or 0 for spec in specs)
        room = max(2, endpoints // 2)  # slots left free: most endpoints busy, some with room
        self.inflight = capacity - room
        # token_budget: a threshold inside this mix's totals, so both pools see work.
        routing = RoutingConfig(policy=policy, short_pool_tokens=2048.0)
        config = preset("adaptive_drr", max_inflight=capacity - room, routing=routing)
        self.engine = Engine(config, endpoints=specs)
        self.now = 0.0
        self.next_id = 0
        self.tokens: dict[str, int] = {}
        self.finishes: list[tuple[float, int, str]] = []
        for _ in range(self.inflight + queued):
            self._submit()

    def _submit(self) -> None:
        request, tokens = _routed_request(self.next_id, self.now, self.rng)
        self.next_id += 1
        self.tokens[request.id] = tokens
        self._sent(self.engine.submit(request, self.now))

    def _sent(self, actions: list[Action]) -> None:
        for action in actions:
            if isinstance(action, Send):
                intercept, s_per_token = self.physics[self.index[action.endpoint]]
                tokens = self.tokens[action.request.id]
                latency = intercept + tokens * s_per_token * float(self.rng.uniform(0.9, 1.1))
                heapq.heappush(self.finishes, (self.now + latency, self.next_id, action.request.id))
                self.next_id += 1

    def step(self, timed: bool) -> int:
        """Answer the earliest in-flight request; the ns ``Engine.completed`` took."""
        engine = self.engine
        wake = engine.next_wakeup()  # a budget refill the fleet waits for (deadlines lie beyond)
        while wake is not None and self.now < wake < self.finishes[0][0]:
            self.now = wake
            self._sent(engine.poll(wake))
            wake = engine.next_wakeup()
        finish, _, rid = heapq.heappop(self.finishes)
        self.now = max(self.now, finish)
        self._submit()
        tokens = self.tokens.pop(rid)
        t0 = time.perf_counter_ns()
        actions = engine.completed(rid, self.now, output_tokens=tokens)
        elapsed = time.perf_counter_ns() - t0
        self._sent(actions)
        return elapsed if timed else 0


def routing_cost(
    endpoints: int = 16, queued: int = 10_000, samples: int = 2000, seed: int = 0
) -> list[dict[str, float | str]]:
    """Measure the routing decision and the dispatch decision with routing, per policy.

    For each policy of `ROUTING_POLICY_NAMES`, an
    engine routes over ``endpoints`` varied endpoints (`_fleet_specs`)
    with ``queued`` requests waiting and the fleet full but for a few slots.
    After a warm-up (every endpoint has answered and learned its speed), two
    runs from the same seed (so the same decisions) time ``samples`` steps:
    the first ``Engine.completed`` (one slot freed, then allocation,
    ordering and routing of the next request), the second each
    ``Fleet.pick`` that the dispatch makes.

    Args:
        endpoints: Endpoints in the fleet.
        queued: Requests kept waiting.
        samples: Dispatch decisions timed per policy.
        seed: Seed of the workload and the physics jitter.

    Returns:
        One row per policy: ``policy``, ``endpoints``, ``queued``, the p50, p99
        and mean µs of ``pick`` and of ``dispatch``, ``routed`` (the share of
        picks that chose an endpoint) and ``endpoints_used`` (distinct
        endpoints chosen while timing).
    """
    rows: list[dict[str, float | str]] = []
    for policy in ROUTING_POLICY_NAMES:
        dispatch, _ = _routing_pass(policy, endpoints, queued, samples, seed, time_picks=False)
        _, picks = _routing_pass(policy, endpoints, queued, samples, seed, time_picks=True)
        chosen = [name for _, name in picks if name is not None]
        rows.append(
            {
                "policy": policy,
                "endpoints": float(endpoints),
                "queued": float(queued),
                **_percentiles("pick", np.array([ns for ns, _ in picks], dtype=float)),
                **_percentiles("dispatch", dispatch),
                "routed": len(chosen) / max(len(picks), 1),
                "endpoints_used": float(len(set(chosen))),
            }
        )
    return rows


def _routing_pass(
    policy: str, endpoints: int, queued: int, samples: int, seed: int, *, time_picks: bool
) -> tuple[np.ndarray, list[tuple[int, str | None]]]:
    """``samples`` dispatch decisions after a warm-up: their ns (``time_picks`` off), or
    the ns and choice of each ``Fleet.pick`` they made (on)."""
    run = _FleetRun(policy, endpoints, queued, seed)
    for _ in range(2 * run.inflight):  # warm-up: every endpoint answers, speeds are learned
        run.step(timed=False)
    picks: list[tuple[int, str | None]] = []
    if time_picks:
        fleet = run.engine._fleet  # private: the benchmark times the routing decision in place
        real_pick = fleet.pick

        def timed_pick(entry: Entry, now: float) -> EndpointState | NoRoute | WaitUntil:
            t0 = time.perf_counter_ns()
            chosen = real_pick(entry, now)
            name = chosen.name if isinstance(chosen, EndpointState) else None
            picks.append((time.perf_counter_ns() - t0, name))
            return chosen

        fleet.pick = timed_pick  # type: ignore[method-assign]  # timed in place
    # Like timeit, collect garbage before and not during the timed calls.
    gc.collect()
    gc.disable()
    try:
        dispatch = np.array([run.step(timed=not time_picks) for _ in range(samples)], dtype=float)
    finally:
        gc.enable()
    return dispatch, picks


def _percentiles(prefix: str, ns: np.ndarray) -> dict[str, float]:
    return {
        f"{prefix}_p50_us": float(np.percentile(ns, 50)) / 1e3,
        f"{prefix}_p99_us": float(np.percentile(ns, 99)) / 1e3,
        f"{prefix}_mean_us": float(ns.mean()) / 1e3,
    }


def sim_speed(requests: int = 20_000, inflight: int = 100, seed: int = 0) -> dict[str, float]:
    """Simulated requests per wall second at about ``inflight`` in flight."""
    jobs, config, phys = sim_workload(requests, inflight, seed)
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


def sim_workload(
    requests: int = 20_000, inflight: int = 100, seed: int = 0
) -> tuple[list[SimJob], SchedulerConfig, PhysicsParams]:
    """`sim_speed`'s jobs, config and physics: the full stack at about ``inflight``
    in flight, offered load 1.0."""
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
    return jobs, config, phys
