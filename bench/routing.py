"""``python -m bench routing``: which endpoint of a heterogeneous fleet each send goes to.

Issue 13's evidence, simulated: the real core (its routing layer included)
against one physics and one door per endpoint (`semisched.sim.simulator.Simulator`
with ``fleet=``). The fleet:

=========  ==========================  ==========================================
endpoint   physics                     door
=========  ==========================  ==========================================
``fast-a`` default (515 tokens/s full)  down (503 at once) for the middle 20% of
                                        the arrivals' span; short pool
``fast-b`` default                     a tight 40 RPM the client is not told
                                        (it learns it from 429s); long pool
``slow``   half speed (W, H doubled)   long pool
=========  ==========================  ==========================================

The workload is the paper's (``bench.workloads``: balanced and heavy mixes,
coarse priors, bucket deadlines) with the offered load relative to the
*fleet's* nominal capacity (1,288 tokens/s; medium 0.9, high 1.1). Every
policy runs the same jobs through ``final_adrr_olc`` with a 96-request
client budget, twice: with no per-endpoint cap (the router alone decides how
much each endpoint gets, as with LiteLLM's Router; a request beyond an
endpoint's 32 slots waits in its hidden queue) and with 32 per endpoint (the
slots: the client itself keeps every provider queue empty). ``token_budget``
splits pools at 2,560 estimated tokens (prompts here are up to 2,048 tokens:
the threshold separates by output size). ``random`` is LiteLLM's default
(simple-shuffle); ``latency_ewma`` its latency-based routing;
``least_outstanding`` its least-busy.

Per run: short and global P95, completion rate, goodput, failovers, 429s,
requests lost to failures, and each endpoint's utilisation (decode tokens it
served over its full-batch capacity times the run's makespan).
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from bench.experiments import ProgressReporter
from bench.report import aggregate, format_table, write_csv
from bench.workloads import generate, regime
from mockprovider.gate import GateConfig
from mockprovider.physics import PhysicsParams
from predictors.priors import information_source
from semisched.core.config import (
    ROUTING_POLICY_NAMES,
    BudgetConfig,
    RoutingConfig,
    SchedulerConfig,
    preset,
)
from semisched.core.fleet.endpoint import EndpointSpec
from semisched.sim.metrics import summarize
from semisched.sim.simulator import ProviderModel, SimEndpoint, SimJob, Simulator

__all__ = [
    "POLICIES",
    "REGIMES",
    "RoutingSpec",
    "fleet_for",
    "routing",
    "routing_config",
    "routing_jobs",
    "run_routing",
]

#: The policies compared, the baseline first.
POLICIES: tuple[str, ...] = (
    "random",
    "round_robin",
    "least_outstanding",
    "latency_ewma",
    "anticipated_load",
    "token_budget",
)
#: Left out: ``cost`` routes by price among the endpoints that meet a deadline (a fleet of
#: unpriced endpoints routes as ``anticipated_load``); ``python -m bench cost`` measures it.
assert set(POLICIES) == set(ROUTING_POLICY_NAMES) - {"cost"}

REGIMES: tuple[str, ...] = ("balanced/medium", "balanced/high", "heavy/medium", "heavy/high")
FAST = PhysicsParams()
SLOW = PhysicsParams(base_iter_ms=FAST.base_iter_ms * 2, per_slot_ms=FAST.per_slot_ms * 2)
NAMES: tuple[str, ...] = ("fast-a", "fast-b", "slow")
TIGHT_RPM = 40
#: Per-endpoint client caps compared: none (the router alone decides how much
#: each endpoint gets, as LiteLLM's Router does) and the physics' 32 slots.
CAPS: tuple[int | None, ...] = (None, 32)
MAX_INFLIGHT = 96
SHORT_POOL_TOKENS = 2560.0
OUTAGE = (0.4, 0.6)  # of the arrivals' span


def fleet_capacity() -> float:
    """Nominal decode tokens per second of the fleet at full batches."""
    return 2 * FAST.capacity_tokens_per_s() + SLOW.capacity_tokens_per_s()


def _spec(name: str, pool: str, cap: int | None) -> EndpointSpec:
    # As semisched.Endpoint builds it: a budget that adopts the advertised limits.
    return EndpointSpec(name=name, max_concurrency=cap, pool=pool, budget=BudgetConfig())


def caps_label(cap: int | None) -> str:
    """The ``caps`` column: ``none`` or ``N per endpoint``."""
    return "none" if cap is None else f"{cap} per endpoint"


def fleet_for(jobs: Sequence[SimJob], seed: int, cap: int | None = None) -> list[SimEndpoint]:
    """The fleet of the module docstring, its outage placed on these jobs' arrivals."""
    span = max(j.request.arrival for j in jobs)
    outage = ((OUTAGE[0] * span, OUTAGE[1] * span),)
    return [
        SimEndpoint(
            spec=_spec("fast-a", "short", cap),
            physics=FAST,
            provider=ProviderModel(gate=GateConfig(outages=outage, seed=seed), seed=seed),
        ),
        SimEndpoint(
            spec=_spec("fast-b", "long", cap),
            physics=FAST,
            provider=ProviderModel(gate=GateConfig(rpm=TIGHT_RPM, seed=seed), seed=seed),
        ),
        SimEndpoint(
            spec=_spec("slow", "long", cap),
            physics=SLOW,
            provider=ProviderModel(gate=GateConfig(seed=seed), seed=seed),
        ),
    ]


@dataclass(frozen=True, slots=True)
class RoutingSpec:
    """One simulated run: a regime, a routing policy, a seed, the per-endpoint cap."""

    regime: str
    policy: str
    seed: int
    requests: int = 600
    cap: int | None = None


def routing_jobs(spec: RoutingSpec) -> list[SimJob]:
    """The workload of ``spec``: its regime at a load relative to the fleet's capacity."""
    reg = regime(spec.regime, requests=spec.requests)
    source = information_source("coarse", seed=spec.seed)
    return generate(reg, spec.seed, source, FAST, capacity_tokens_per_s=fleet_capacity())


def routing_config(policy: str) -> SchedulerConfig:
    """The scheduler every run uses, routing by ``policy``."""
    return preset(
        "final_adrr_olc",
        max_inflight=MAX_INFLIGHT,
        routing=RoutingConfig(policy=policy, short_pool_tokens=SHORT_POOL_TOKENS),
    )


def run_routing(spec: RoutingSpec) -> dict[str, object]:
    """Simulate one run and return its metrics."""
    jobs = routing_jobs(spec)
    config = routing_config(spec.policy)
    sim = Simulator(config, fleet=fleet_for(jobs, spec.seed, spec.cap))
    result = sim.run(jobs)
    row: dict[str, object] = {
        "regime": spec.regime,
        "caps": caps_label(spec.cap),
        "condition": spec.policy,
        "seed": spec.seed,
    }
    row.update(summarize(result.rows))
    counters = result.engine.counters
    row["failovers"] = float(counters.failovers)
    row["throttled"] = float(counters.throttled)
    row["retries"] = float(counters.retries)
    makespan = float(row["makespan_ms"]) / 1000.0  # type: ignore[arg-type]
    for name, physics in zip(NAMES, (FAST, FAST, SLOW), strict=True):
        served = sum(
            r.output_tokens for r in result.rows if r.outcome == "completed" and r.endpoint == name
        )
        capacity = physics.capacity_tokens_per_s() * makespan
        row[f"util_{name}"] = served / capacity if capacity > 0 else 0.0
        row[f"short_share_{name}"] = sum(
            1 for r in result.rows if r.bucket == "short" and r.endpoint == name
        ) / max(1, sum(1 for r in result.rows if r.bucket == "short"))
    return row


#: Per-run numbers beyond `semisched.sim.metrics.summarize`'s.
EXTRA: tuple[str, ...] = (
    "failovers",
    *(f"util_{n}" for n in NAMES),
    *(f"short_share_{n}" for n in NAMES),
)
COLUMNS: tuple[tuple[str, str, int], ...] = (
    ("short P95 ms", "short_p95_ms", 0),
    ("global P95 ms", "global_p95_ms", 0),
    ("CR", "completion_rate", 3),
    ("satisfaction", "satisfaction", 3),
    ("goodput rps", "goodput_rps", 3),
    ("failovers", "failovers", 1),
    ("429s", "throttled", 1),
    ("failed", "failed", 1),
    ("expired", "expired", 1),
    ("rejects", "rejects", 1),
    ("util fast-a", "util_fast-a", 2),
    ("util fast-b", "util_fast-b", 2),
    ("util slow", "util_slow", 2),
    ("shorts on slow", "short_share_slow", 2),
)


def routing(
    out: Path,
    *,
    seeds: int = 5,
    regimes: Sequence[str] = REGIMES,
    policies: Sequence[str] = POLICIES,
    requests: int = 600,
    workers: int | None = None,
) -> Path:
    """Run the matrix; write ``runs.csv``, ``summary.csv``, ``tables.md``, the figure."""
    specs = [
        RoutingSpec(r, p, s, requests, cap)
        for r in regimes
        for cap in CAPS
        for p in policies
        for s in range(seeds)
    ]
    out.mkdir(parents=True, exist_ok=True)
    progress = ProgressReporter()
    start = time.perf_counter()
    workers = workers or min(len(specs), os.cpu_count() or 1)
    rows: list[dict[str, object]] = []
    if workers <= 1:
        for i, spec in enumerate(specs, 1):
            rows.append(run_routing(spec))
            progress(i, len(specs), time.perf_counter() - start)
    else:
        with ProcessPoolExecutor(max_workers=workers) as pool:
            for i, row in enumerate(pool.map(run_routing, specs, chunksize=1), 1):
                rows.append(row)
                progress(i, len(specs), time.perf_counter() - start)
    write_csv(out / "runs.csv", rows)
    summary = aggregate(rows, ("regime", "caps", "condition"), EXTRA)
    write_csv(out / "summary.csv", summary)
    lines = [
        "# Routing across a heterogeneous fleet (`python -m bench routing`)",
        "",
        f"{seeds} seeds x {requests} requests per run; mean ± std over seeds. "
        "Fleet: fast-a (outage in the middle 20%), fast-b (40 RPM, unannounced), "
        "slow (half speed). Utilisation: decode tokens served / (full-batch capacity x "
        "makespan). Client budget 96 in flight; per-endpoint caps: none (the router "
        "alone decides each endpoint's share) or 32 (the physics' slots).",
        "",
    ]
    for reg in regimes:
        for cap in CAPS:
            lines += [f"## {reg}, per-endpoint cap: {caps_label(cap)}", ""]
            rows_here = [s for s in summary if s["regime"] == reg and s["caps"] == caps_label(cap)]
            lines.append(format_table(rows_here, ("condition",), COLUMNS, markdown=True))
            lines.append("")
    (out / "tables.md").write_text("\n".join(lines))
    _figure(summary, regimes, policies, out / "routing.png")
    return out


def _figure(
    summary: Sequence[dict[str, object]],
    regimes: Sequence[str],
    policies: Sequence[str],
    path: Path,
) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 3.8))
    width = 0.8 / len(policies)
    main = [s for s in summary if s["caps"] == caps_label(None)]
    for ax, metric, title in (
        (axes[0], "short_p95_ms", "short P95 (s)"),
        (axes[1], "global_p95_ms", "global P95 (s)"),
    ):
        for i, policy in enumerate(policies):
            values, errors = [], []
            for reg in regimes:
                row = next(s for s in main if s["regime"] == reg and s["condition"] == policy)
                values.append(float(row[f"{metric}_mean"]) / 1000.0)  # type: ignore[arg-type]
                errors.append(float(row[f"{metric}_std"]) / 1000.0)  # type: ignore[arg-type]
            xs = [k + (i - (len(policies) - 1) / 2) * width for k in range(len(regimes))]
            ax.bar(xs, values, width, yerr=errors, label=policy, capsize=2)
        ax.set_xticks(range(len(regimes)), list(regimes))
        ax.set_title(title)
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=len(policies), fontsize=8)
    ax.set_yscale("log")
    axes[0].set_yscale("log")
    fig.suptitle(
        "Routing a heterogeneous fleet (one endpoint down 20%, one RPM-limited, one slow; "
        "no per-endpoint caps)",
        fontsize=9,
    )
    fig.tight_layout(rect=(0, 0.07, 1, 1))
    fig.savefig(path, dpi=110)
    plt.close(fig)
