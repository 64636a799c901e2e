"""``python -m bench plan``: the capacity planner's answers checked against the simulator.

Issue 17's evidence. For each workload the planner (`semisched.plan`)
sizes a one-pool fleet and the best two-pool split; the simulator then runs
the *same requests* (the planned sample, Poisson arrivals at the planned
rate) through the real core against the mock's physics:

- **per pool** (the queueing model's own claim): the requests the split
  sends to a pool, on that pool's units, each endpoint capped at its slots so
  the client holds the one queue (M/G/c); at the recommended size and one
  unit smaller. Analytic against simulated tail, per SLO.
- **the deployed fleet**: the recommended fleet as ``semisched plan
  --fleet-out`` writes it (``token_budget`` routing with its spillover), to
  say whether the SLOs hold as a user would run it.
- **a curve**: the one-pool tail at sizes around the recommendation, analytic
  and simulated (the P99-against-units figure).

The simulations themselves are `bench.plan_sim`'s, and so is why a simulated
tail is measured over the steady middle of the run only (`bench.plan_sim.STEADY`).

Workloads: Scheduling the Unschedulable's ``balanced`` and ``heavy`` mixes (`semisched.plan.mixes`)
and ShareGPT conversations (each request the whole conversation so far,
`predictors.conversations`). Two planner settings: the paper's
utilisation cap (``ϱ_max = 0.85``) and ``0.99``, where the SLO alone sizes
the fleet (the setting in which "one unit fewer misses the SLO" can be tested:
under the paper's cap, one unit fewer often still meets it, by design).

Nothing here is typed in: every number comes from the planner or a simulation.
"""

from __future__ import annotations

import hashlib
import os
import tomllib
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, replace
from functools import cache
from pathlib import Path

import numpy as np
import threadpoolctl  # type: ignore[import-untyped]

import semisched.compress.compressor as compress_module
from bench.plan_sim import measured, simulate_pool
from semisched.fleet.fleetfile import fleet_from_dict
from semisched.plan.fleetout import client_fleet_toml
from semisched.plan.planner import Plan, assign, make_plan, predict_pool
from semisched.plan.pools import PoolPlan
from semisched.plan.profile import UnitProfile, named_profile
from semisched.plan.slo import Slo, parse_slo
from semisched.plan.workload import Workload, mix_workload

__all__ = ["CASES", "SETTINGS", "Case", "PoolRun", "plan_case", "run_checks"]

#: Planner settings compared: name -> utilisation cap.
SETTINGS: dict[str, float] = {"paper cap 0.85": 0.85, "SLO-bound 0.99": 0.99}


@dataclass(frozen=True)
class Case:
    """One workload to plan and check."""

    name: str
    rate: float
    slos: tuple[str, ...]
    requests: int
    context_tokens: int = 32_768

    def profile(self) -> UnitProfile:
        """The mock's default speed, KV-bound at 16 sequences of ``context_tokens``."""
        return named_profile("default").with_(slots=16, context_tokens=self.context_tokens)


CASES: tuple[Case, ...] = (
    Case("balanced", 20.0, ("ttft_p99<=1", "interactive:e2e_p95<=4"), 40_000),
    Case("heavy", 10.0, ("ttft_p99<=1", "interactive:e2e_p95<=4"), 40_000),
    Case("sharegpt", 100.0, ("ttft_p99<=2", "e2e_p95<=60"), 80_000),
)


def sharegpt_picks(case: Case, seed: int = 0) -> np.ndarray:
    """Which ShareGPT requests (`predictors.conversations.conversation_requests`
    indices) a ShareGPT case draws, with replacement, among those that fit the context."""
    from predictors.conversations import conversation_requests

    data = conversation_requests()
    ok = np.flatnonzero(data.prompt_tokens + data.output_tokens <= case.context_tokens)
    return np.random.default_rng(seed).choice(ok, size=case.requests, replace=True)


@cache
def sample(case: Case, seed: int = 0) -> Workload:
    """The case's planned requests, with Poisson arrival times (one process-wide copy)."""
    rng = np.random.default_rng(seed)
    if case.name == "sharegpt":
        from predictors.conversations import conversation_requests

        data = conversation_requests()
        pick = sharegpt_picks(case, seed)
        rng = np.random.default_rng(seed + 1)
        prompt, output = data.prompt_tokens[pick], data.output_tokens[pick]
        classes = np.zeros(case.requests, dtype=np.int64)
        names: tuple[str, ...] = ("default",)
    else:
        mix = mix_workload(case.name, requests=case.requests, seed=seed)
        prompt, output = mix.prompt_tokens, mix.output_tokens
        classes, names = mix.classes, mix.class_names
    arrivals = np.cumsum(rng.exponential(1.0 / case.rate, size=case.requests))
    return Workload(
        prompt_tokens=np.asarray(prompt, dtype=np.int64),
        output_tokens=np.asarray(output, dtype=np.int64),
        reserve_tokens=np.asarray(output, dtype=np.int64),
        classes=classes,
        class_names=names,
        arrivals=arrivals,
        source=case.name,
    )


def plan_case(case: Case, cap: float) -> Plan:
    """The planner's answer for ``case`` under utilisation cap ``cap``."""
    slos = [parse_slo(s) for s in case.slos]
    return make_plan(
        sample(case), rate=case.rate, slos=slos, profile=case.profile(), max_utilisation=cap
    )


#: The compress-and-route setting: ShareGPT's plan at the paper's cap, redone at its
#: B_short with every borderline prompt's compression floor (`semisched.compress.compressor`).
CR_SETTING = "C&R at B_short*"
CR_GAMMA_MAX = 2.0


def _floors_file(case: Case, boundary: int) -> Path:
    from predictors.tokens import cache_dir

    code = hashlib.blake2b(Path(compress_module.__file__).read_bytes(), digest_size=4).hexdigest()
    return cache_dir() / "plan" / f"floors-{case.name}-{case.requests}-{boundary}-{code}.npy"


def _floor_chunk(indices: Sequence[int]) -> list[int]:
    from bench.plan_compress import o200k_counter
    from predictors.conversations import conversation_requests

    data = conversation_requests()
    compressor = compress_module.ExtractiveCompressor(o200k_counter())
    with threadpoolctl.threadpool_limits(1, "blas"):
        return [compressor.floor(data.messages(int(i))) for i in indices]


def compression_floors(case: Case, boundary: int, workers: int | None = None) -> np.ndarray:
    """Each sampled request's prompt after maximal compression (o200k tokens), for those in
    the widest band ``(B, 2B]``; others keep their prompt. Computed once, then cached."""
    path = _floors_file(case, boundary)
    if path.exists():
        return np.asarray(np.load(path), dtype=np.int64)
    work = sample(case)
    picks = sharegpt_picks(case)
    band = (work.route_tokens > boundary) & (work.route_tokens <= CR_GAMMA_MAX * boundary)
    wanted = np.unique(picks[band])
    chunks = np.array_split(wanted, max(1, 4 * (workers or os.cpu_count() or 1)))
    with ProcessPoolExecutor(max_workers=workers) as pool:
        found = [f for chunk in pool.map(_floor_chunk, chunks) for f in chunk]
    floor_of = dict(zip(wanted.tolist(), found, strict=True))
    floors = work.prompt_tokens.copy()
    for i in np.flatnonzero(band):
        floors[i] = min(int(floors[i]), floor_of[int(picks[i])])
    path.parent.mkdir(parents=True, exist_ok=True)
    np.save(path, floors)
    return floors


def cr_boundary(case: Case) -> int:
    """The B_short compress-and-route is planned at: the best split's without compression."""
    base = plan_case(case, SETTINGS["paper cap 0.85"])
    assert base.routed is not None
    return base.routed.boundary


def plan_for(case: Case, setting: str) -> tuple[Plan, Workload]:
    """The plan a setting makes for ``case`` and the workload it was made on."""
    if setting != CR_SETTING:
        return plan_case(case, SETTINGS[setting]), sample(case)
    boundary = cr_boundary(case)
    work = replace(sample(case), floor_tokens=np.load(_floors_file(case, boundary)))
    slos = [parse_slo(s) for s in case.slos]
    plan = make_plan(
        work, rate=case.rate, slos=slos, profile=case.profile(),
        max_utilisation=SETTINGS["paper cap 0.85"], boundaries=[boundary],
    )  # fmt: skip
    return plan, work


@dataclass(frozen=True)
class PoolRun:
    """One simulated pool (or fleet) and its analytic twin."""

    case: str
    setting: str
    pool: str  # "one", "short", "long" or "fleet"
    units: int
    delta: int  # units relative to the recommendation
    utilisation: float  # analytic
    p_wait: float  # analytic
    slo: str
    analytic_s: float
    simulated_s: float
    requests: int

    @property
    def error(self) -> float:
        """(analytic - simulated) / simulated."""
        return (self.analytic_s - self.simulated_s) / self.simulated_s


@dataclass(frozen=True)
class _Task:
    case: Case
    setting: str
    pool: str
    delta: int


def _pool_task(task: _Task) -> list[PoolRun]:
    """Simulate one pool of one case's plan at the recommended size + ``delta``."""
    case = task.case
    plan, workload = plan_for(case, task.setting)
    profile = case.profile()
    slos = plan.slos
    if task.pool in ("one", "curve"):
        target: PoolPlan = plan.one_pool
        idx, prompt, context = (
            np.arange(len(workload)),
            workload.prompt_tokens,
            profile.context_tokens,
        )
        pool_name: str | None = None
    else:
        split = plan.best
        assert split is not None and split.short is not None and split.long is not None
        short, prompt = assign(workload, split.boundary, split.gamma)
        if task.pool == "fleet":
            return _fleet_runs(task, plan, workload, short, prompt)
        is_short = task.pool == "short"
        target = split.short if is_short else split.long
        idx = np.flatnonzero(short if is_short else ~short)
        context = split.boundary if is_short else profile.context_tokens
        pool_name = None
    units = target.units + task.delta
    if units < 1:
        return []
    times = simulate_pool(workload, idx, prompt, [(pool_name, units, profile, context)])
    predicted = _predict(workload, idx, prompt, profile, context, units, slos, case.rate)
    runs = []
    for tail in predicted.tails:
        runs.append(
            PoolRun(
                case.name,
                task.setting,
                task.pool,
                units,
                task.delta,
                predicted.utilisation,
                predicted.p_wait,
                tail.slo.key(),
                tail.seconds,
                measured(workload, idx, times, tail.slo),
                len(idx),
            )
        )
    return runs


def _predict(
    workload: Workload,
    idx: np.ndarray,
    prompt: np.ndarray,
    profile: UnitProfile,
    context: int,
    units: int,
    slos: Sequence[Slo],
    rate: float,
) -> PoolPlan:
    """The planner's model of exactly these requests on ``units`` units."""
    sub = Workload(
        prompt_tokens=prompt[idx],
        output_tokens=workload.output_tokens[idx],
        reserve_tokens=workload.reserve_tokens[idx],
        classes=workload.classes[idx],
        class_names=workload.class_names,
    )
    share = len(idx) / len(workload)
    return predict_pool(
        sub, rate=rate * share, profile=profile, context_tokens=context, units=units, slos=slos
    )


def _fleet_runs(
    task: _Task, plan: Plan, workload: Workload, short: np.ndarray, prompt: np.ndarray
) -> list[PoolRun]:
    split = plan.best
    assert split is not None and split.short is not None and split.long is not None
    profile = task.case.profile()
    pools = [
        ("short", split.short.units, profile, split.boundary),
        ("long", split.long.units, profile, profile.context_tokens),
    ]
    idx = np.arange(len(workload))
    # The routing `semisched plan --fleet-out` writes: what a user deploys.
    fleet = fleet_from_dict(tomllib.loads(client_fleet_toml(plan)))
    times = simulate_pool(workload, idx, prompt, pools, fleet.routing)
    runs = []
    for pool, plan_pool, mask in (("short", split.short, short), ("long", split.long, ~short)):
        for tail in plan_pool.tails:
            got = measured(workload, idx[mask], {k: v[mask] for k, v in times.items()}, tail.slo)
            runs.append(
                PoolRun(
                    task.case.name,
                    task.setting,
                    f"fleet:{pool}",
                    plan_pool.units,
                    0,
                    plan_pool.utilisation,
                    plan_pool.p_wait,
                    tail.slo.key(),
                    tail.seconds,
                    got,
                    int(mask.sum()),
                )
            )
    spilled = float(np.mean(times["pool"][short] == "long")) if short.any() else 0.0
    runs.append(
        PoolRun(
            task.case.name,
            task.setting,
            "fleet:spill",
            0,
            0,
            0.0,
            0.0,
            "short requests run on the long pool",
            0.0,
            spilled,
            int(short.sum()),
        )
    )
    return runs


def tasks(cases: Sequence[Case]) -> list[_Task]:
    """Every simulation of the check."""
    out = []
    for case in cases:
        for setting in SETTINGS:
            for delta in (0, -1):
                out.append(_Task(case, setting, "one", delta))
            plan = plan_case(case, SETTINGS[setting])
            if plan.best is not None:
                for pool in ("short", "long"):
                    for delta in (0, -1):
                        out.append(_Task(case, setting, pool, delta))
                out.append(_Task(case, setting, "fleet", 0))
        for delta in (-3, -2, 1, 2):
            out.append(_Task(case, "SLO-bound 0.99", "curve", delta))
        if case.name == "sharegpt":
            for pool in ("short", "long"):
                for delta in (0, -1):
                    out.append(_Task(case, CR_SETTING, pool, delta))
            out.append(_Task(case, CR_SETTING, "fleet", 0))
    return out


def run_checks(
    cases: Sequence[Case] = CASES,
    *,
    workers: int | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> list[PoolRun]:
    """Run every check (in ``workers`` processes) and return the rows."""
    for case in cases:
        if case.name == "sharegpt":
            compression_floors(case, cr_boundary(case), workers)
    todo = tasks(cases)
    workers = workers or min(len(todo), os.cpu_count() or 1)
    rows: list[PoolRun] = []
    with ProcessPoolExecutor(max_workers=workers) as pool:
        for done, result in enumerate(pool.map(_pool_task, todo), start=1):
            rows.extend(result)
            if progress is not None:
                progress(done, len(todo))
    return rows
