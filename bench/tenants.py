"""``python -m bench tenants``: many tenants over one scheduler (the token pools of
"Token Management in Multi-Tenant AI Inference Platforms").

Simulated: the real core against the default physics (32 slots, 515 tokens/s
at a full batch) with a 32-request client budget (the slots: waiting happens
in the client's queue, where the tenant layer can order it). Each tenant sends
the paper's balanced mix (coarse priors, bucket deadlines) as its own Poisson
stream over the same ``SPAN_S`` seconds, at a load given as a fraction of the
provider's capacity. Scenarios (`SCENARIOS`):

``noisy``
    A, B, C, weights 1/1/1, each at 0.3 of capacity (0.9 in all); in the
    flood, A sends at 5x its share (1.5), B and C unchanged. Each policy's
    B/C short P95 in the flood is compared with its own no-flood run.
``entitlements``
    Three always-backlogged tenants (each alone at 1.2x capacity), weights
    5/3/2: served share vs entitlement and Jain's index over share/entitlement,
    counted on completions between 10% and 100% of the span (the warm-up and
    the drain after the last arrival are left out: nobody is backlogged then).
``classes``
    G (guaranteed, weight 3) at 0.6 of capacity beside S (best-effort,
    weight 1) flooding at 1.0: 1.6x overload. G's short P95 against G alone.

Policies (`POLICIES`): ``fifo`` (one FIFO client queue, nothing shed:
tenant-blind), ``static_quota`` (FIFO inside fixed per-tenant in-flight caps,
``floor(weight share * 32)``, never lent: LiteLLM's per-team limits),
``tenant_blind`` (semisched's three layers, ``final_adrr_olc``, with tenants
ignored), ``fair_share`` (the same three layers under the tenant layer: ours,
defaults) and ``fair_share_no_headroom`` (ours with ``headroom=0``: nothing
kept for the owners, so borrowers may fill the provider's batch).

Goodput is on-time output tokens per second of the arrival span. The
reference for every condition is the same jobs as one tenant through
semisched's default layers (``final_adrr_olc``, no tenant layer): ``goodput vs
one tenant`` is the ratio (the target "same load as one tenant"). ``throughput vs one
tenant`` is the same ratio for every output token served between 10% and 100%
of the span (late or not): capacity used, not wasted. A completed request's
tokens are spread over its time at the provider (send to end) when counting
what a window served, so a long answer counts where it was decoded.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path

from bench.experiments import ProgressReporter
from bench.report import aggregate, write_csv
from bench.tenants_report import tables_markdown, write_figure
from bench.workloads import CONGESTION, Regime, generate, mean_output_tokens
from mockprovider.physics import PhysicsParams
from predictors.priors import information_source
from semisched.core.config import (
    AllocationConfig,
    OrderingConfig,
    OverloadConfig,
    RoutingConfig,
    SchedulerConfig,
    preset,
)
from semisched.core.tenants.config import TenantConfig, TenantSpec
from semisched.sim.metrics import summarize
from semisched.sim.model import TraceRow
from semisched.sim.simulator import SimJob, Simulator

__all__ = [
    "POLICIES",
    "SCENARIOS",
    "Load",
    "TenantRun",
    "goodput",
    "load_jobs",
    "run_tenants",
    "scenario_jobs",
    "served_in",
    "tenant_of",
    "tenants",
    "tenants_config",
]

PHYSICS = PhysicsParams()
MAX_INFLIGHT = 32
#: One fixed client cap (no learned endpoint limit under it): the tenants share it.
FIXED = RoutingConfig(concurrency="fixed")
SPAN_S = 1200.0
MIX = "balanced"
#: The conditions compared (the scheduler's layers and tenant policy; module docstring).
POLICIES: tuple[str, ...] = (
    "fifo",
    "static_quota",
    "tenant_blind",
    "fair_share",
    "fair_share_no_headroom",
)


@dataclass(frozen=True, slots=True)
class Load:
    """One tenant's traffic: its spec and its load as a fraction of capacity."""

    spec: TenantSpec
    load: float


def _noisy(flood: bool) -> tuple[Load, ...]:
    return (
        Load(TenantSpec(name="A"), 1.5 if flood else 0.3),
        Load(TenantSpec(name="B"), 0.3),
        Load(TenantSpec(name="C"), 0.3),
    )


#: Scenario name -> its tenants' traffic (``noisy-base`` is the no-flood reference).
SCENARIOS: dict[str, tuple[Load, ...]] = {
    "noisy": _noisy(True),
    "noisy-base": _noisy(False),
    "entitlements": (
        Load(TenantSpec(name="w5", weight=5.0), 1.2),
        Load(TenantSpec(name="w3", weight=3.0), 1.2),
        Load(TenantSpec(name="w2", weight=2.0), 1.2),
    ),
    "classes": (
        Load(TenantSpec(name="G", weight=3.0, service="guaranteed"), 0.6),
        Load(TenantSpec(name="S", weight=1.0, service="best_effort"), 1.0),
    ),
    "classes-base": (Load(TenantSpec(name="G", weight=3.0, service="guaranteed"), 0.6),),
}


def _layers(policy: str) -> SchedulerConfig:
    if policy in ("fifo", "static_quota"):
        return SchedulerConfig(
            max_inflight=MAX_INFLIGHT,
            routing=FIXED,
            allocation=AllocationConfig(policy="fifo"),
            ordering=OrderingConfig(policy="fifo"),
            overload=OverloadConfig(policy="none"),
        )
    return preset("final_adrr_olc", max_inflight=MAX_INFLIGHT, routing=FIXED)


def tenants_config(policy: str, specs: Sequence[TenantSpec]) -> SchedulerConfig:
    """The scheduler of one run: ``policy``'s layers over the tenants ``specs``."""
    tenant_policy = {"tenant_blind": "fifo", "fair_share_no_headroom": "fair_share"}.get(
        policy, policy
    )
    headroom = 0.0 if policy == "fair_share_no_headroom" else TenantConfig().headroom
    tenants = TenantConfig(tenants=tuple(specs), policy=tenant_policy, headroom=headroom)
    return _layers(policy).with_(tenants=tenants)


def scenario_jobs(scenario: str, seed: int, span_s: float = SPAN_S) -> list[SimJob]:
    """Every tenant's jobs of ``scenario`` over ``span_s`` seconds of arrivals, merged in
    arrival order (ids ``TENANT-rNNNNN``)."""
    return load_jobs(SCENARIOS[scenario], seed, span_s)


def load_jobs(loads: Sequence[Load], seed: int, span_s: float = SPAN_S) -> list[SimJob]:
    """`scenario_jobs` of any tenants' ``loads``."""
    capacity = PHYSICS.capacity_tokens_per_s()
    source = information_source("coarse", seed=seed)
    jobs: list[SimJob] = []
    for index, load in enumerate(loads):
        rate = load.load * capacity / mean_output_tokens(MIX)
        n = max(1, round(rate * span_s))
        # generate() sets the rate from its regime's congestion: the capacity it is
        # given is scaled so that the rate is ``load`` of the real one.
        part = generate(
            Regime(MIX, "medium", n),
            seed * 1000 + index,
            source,
            PHYSICS,
            capacity_tokens_per_s=load.load * capacity / CONGESTION["medium"],
        )
        name = load.spec.name
        for job in part:
            request = replace(job.request, id=f"{name}-{job.request.id}", tenant=name)
            jobs.append(replace(job, request=request))
    jobs.sort(key=lambda j: j.request.arrival)
    return jobs


@dataclass(frozen=True, slots=True)
class TenantRun:
    """One simulated run: a scenario, a policy, a seed."""

    scenario: str
    policy: str
    seed: int
    span_s: float = SPAN_S


def tenant_of(row: TraceRow) -> str:
    return row.id.split("-", 1)[0]


def served_in(rows: Sequence[TraceRow], window: tuple[float, float]) -> dict[str, float]:
    """Output tokens each tenant was served inside ``window``: a completed request's
    tokens spread evenly over its time at the provider (send to end), so a long
    answer counts where it was decoded, not all at its end."""
    served: dict[str, float] = {}
    lo, hi = window
    for row in rows:
        if row.outcome != "completed" or row.end is None or row.first_send is None:
            continue
        start, end = row.first_send, row.end
        overlap = min(end, hi) - max(start, lo)
        if overlap <= 0.0:
            continue
        part = row.output_tokens * (overlap / (end - start) if end > start else 1.0)
        tenant = tenant_of(row)
        served[tenant] = served.get(tenant, 0.0) + part
    return served


def goodput(rows: Sequence[TraceRow], span: float) -> float:
    return sum(r.output_tokens for r in rows if r.met_deadline) / span


def run_tenants(run: TenantRun) -> list[dict[str, object]]:
    """Simulate one run (and its one-tenant twin); one row per tenant plus ``all``."""
    loads = SCENARIOS[run.scenario]
    specs = [load.spec for load in loads]
    jobs = scenario_jobs(run.scenario, run.seed, run.span_s)
    span = max(j.request.arrival for j in jobs)
    result = Simulator(tenants_config(run.policy, specs), PHYSICS).run(jobs)
    single_jobs = [replace(j, request=replace(j.request, tenant="")) for j in jobs]
    single = Simulator(_layers("fair_share"), PHYSICS).run(single_jobs)
    weight = {s.name: s.weight for s in specs if s.has_entitlement}
    total_weight = sum(weight.values())
    window = (0.1 * span, span)
    work = served_in(result.rows, window)
    served_total = sum(work.values())
    out: list[dict[str, object]] = []
    base = {"scenario": run.scenario, "condition": run.policy, "seed": run.seed}
    for spec in specs:
        mine = [r for r in result.rows if tenant_of(r) == spec.name]
        entitled = weight.get(spec.name, 0.0) / total_weight if total_weight else 0.0
        share = work.get(spec.name, 0.0) / served_total if served_total else 0.0
        out.append(
            {
                **base,
                "tenant": spec.name,
                **summarize(mine),
                "goodput_tps": goodput(mine, span),
                "entitlement": entitled,
                "share": share,
                "share_ratio": share / entitled if entitled else math.nan,
                "jain": math.nan,
                "one_tenant_goodput_tps": math.nan,
                "goodput_vs_one": math.nan,
                "throughput_vs_one": math.nan,
            }
        )
    ratios = [float(r["share_ratio"]) for r in out if not math.isnan(float(r["share_ratio"]))]  # type: ignore[arg-type]
    jain = (sum(ratios) ** 2) / (len(ratios) * sum(x * x for x in ratios)) if ratios else math.nan
    total_goodput = goodput(result.rows, span)
    one = goodput(single.rows, span)
    single_served = sum(served_in(single.rows, window).values())
    out.append(
        {
            **base,
            "tenant": "all",
            **summarize(result.rows),
            "goodput_tps": total_goodput,
            "entitlement": math.nan,
            "share": math.nan,
            "share_ratio": math.nan,
            "jain": jain,
            "one_tenant_goodput_tps": one,
            "goodput_vs_one": total_goodput / one if one else math.nan,
            "throughput_vs_one": served_total / single_served if single_served else math.nan,
        }
    )
    return out


EXTRA = (
    "goodput_tps",
    "entitlement",
    "share",
    "share_ratio",
    "jain",
    "one_tenant_goodput_tps",
    "goodput_vs_one",
    "throughput_vs_one",
)


def tenants(
    out: Path, *, seeds: int = 5, workers: int | None = None, span_s: float = SPAN_S
) -> Path:
    """Run every scenario x policy x seed; write runs.csv, summary.csv, tables.md, the figure."""
    runs = [TenantRun(s, p, k, span_s) for s in SCENARIOS for p in POLICIES for k in range(seeds)]
    out.mkdir(parents=True, exist_ok=True)
    progress = ProgressReporter()
    start = time.perf_counter()
    workers = workers or min(len(runs), os.cpu_count() or 1)
    rows: list[dict[str, object]] = []
    with ProcessPoolExecutor(max_workers=workers) as pool:
        for i, part in enumerate(pool.map(run_tenants, runs, chunksize=1), 1):
            rows.extend(part)
            progress(i, len(runs), time.perf_counter() - start)
    write_csv(out / "runs.csv", rows)
    summary = aggregate(rows, ("scenario", "condition", "tenant"), EXTRA)
    write_csv(out / "summary.csv", summary)
    preamble = (
        f"{seeds} seeds per cell; mean ± std over seeds. Default physics (32 slots), "
        f"client budget {MAX_INFLIGHT} in flight, the balanced mix with coarse priors, "
        f"arrivals over {span_s:.0f} s. Scenarios and conditions: `bench/tenants.py`'s "
        "docstring. Shares count output tokens served between 10% and 100% of the span."
    )
    scenarios = [s for s in SCENARIOS if not s.endswith("-base")]
    text = tables_markdown(summary, POLICIES, [*scenarios, "noisy-base", "classes-base"], preamble)
    (out / "tables.md").write_text(text)
    write_figure(summary, POLICIES, out / "tenants.png")
    return out
