"""Live cross-check of the noisy neighbour: the simulator against the SDK and the HTTP mock.

For `bench.tenants`' ``noisy`` scenario (A floods at 5x its share beside B and C) and
its no-flood reference ``noisy-base``, one seed, per condition (``fair_share``,
``tenant_blind``, ``fifo``), the same jobs (`bench.tenants.scenario_jobs`) run twice:

- *sim*: the real core in the discrete-event simulator with
  `bench.tenants.tenants_config`, as `bench.tenants.run_tenants` runs it (at
  full size the two must agree, a guard against building different runs);
- *live*: the real SDK (`semisched.Scheduler` with the same config over one
  ``openai.AsyncOpenAI``) against the real HTTP mock (`mockprovider.app.create_app`
  with `bench.tenants.PHYSICS`, no limits, no faults) through ``httpx2.ASGITransport``,
  in virtual time on trio's autojumping ``MockClock``: twenty minutes of traffic in seconds.

Each job is submitted at its arrival with ``tenant=`` its tenant, its prior, class and
deadline, a filler prompt of ~4 bytes per true prompt token and its true lengths as the
mock's hints, as `bench.live` does; late answers are kept (``cancel_late=False``) and
priors are not calibrated, as simulated. A recording transport under the openai client
notes each HTTP attempt: the first is the request's first send, from which (to its end) a
completed request's output tokens are spread when counting what a window served
(`bench.tenants.served_in`'s definition).

Per scenario, condition, source (sim, live) and tenant: `semisched.sim.metrics.summarize`,
goodput (on-time output tokens per second of the arrival span), the share of output tokens
served between 10% and 100% of the span, the core's own per-tenant counts
(`semisched.TenantStats`), and on ``noisy`` rows the headline: the tenant's short
P95 over its own in ``noisy-base`` (same condition, same source).

What it is not: no timing benchmark (wall time only shows the cost), one seed, no real
time, so no HTTP or event-loop latency. What differs is the runtime's own nondeterminism:
answers due at one virtual instant reach the SDK in the order trio runs their tasks, which
it shuffles on purpose, so a live run can drift from the simulator's (which breaks ties by a
fixed sequence) and from its own previous run; under overload a different tie order picks
different victims, so per-tenant rejects and tails move more than totals. Poisson arrivals
make such ties rare: measured on seed 0 at full size, every request's outcome, first send
and end agreed with the simulator's (to ~1e-11 s of float rounding), which the last table
reports per run (``outcomes_differ``, ``max_time_gap_s``).
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

import anyio
import httpx2
import openai

from bench.experiments import ProgressReporter
from bench.live import replay_jobs
from bench.report import write_csv
from bench.routing_live import Recorder
from bench.tenants import (
    PHYSICS,
    SCENARIOS,
    TenantRun,
    goodput,
    run_tenants,
    scenario_jobs,
    served_in,
    tenant_of,
    tenants_config,
)
from mockprovider.app import MockConfig, create_app
from mockprovider.virtual import inline_platform_lookup
from semisched import RuntimeOptions, Scheduler
from semisched.core.stats import EngineStats
from semisched.core.tenants.config import TenantSpec
from semisched.sim.metrics import summarize
from semisched.sim.model import TraceRow
from semisched.sim.simulator import SimJob, Simulator

__all__ = ["CONDITIONS", "live_rows", "sim_rows", "tenants_live_check"]

#: The conditions replayed (``bench.tenants.POLICIES`` names).
CONDITIONS: tuple[str, ...] = ("fair_share", "tenant_blind", "fifo")
#: The scenarios replayed: the flood and its no-flood reference.
PAIR: tuple[str, str] = ("noisy", "noisy-base")
#: Keys checked against ``run_tenants`` at full size.
_GUARDED = ("submitted", "short_p95_ms", "completion_rate", "rejects", "goodput_tps", "share")
_BASE = "http://mock"


def _jobs(scenario: str, seed: int, span_s: float | None) -> list[SimJob]:
    """``scenario``'s jobs, those arriving after ``span_s`` left out (``None``: all)."""
    jobs = scenario_jobs(scenario, seed)
    return jobs if span_s is None else [j for j in jobs if j.request.arrival <= span_s]


def _specs(scenario: str) -> list[TenantSpec]:
    return [load.spec for load in SCENARIOS[scenario]]


def _rows(
    rows: Sequence[TraceRow],
    engine: EngineStats,
    specs: Sequence[TenantSpec],
    span: float,
    head: Mapping[str, object],
) -> list[dict[str, object]]:
    """One row per tenant plus ``all``: ``run_tenants``' metrics (``summarize``, goodput,
    share in [0.1 span, span]) and the core's own counts of the tenant."""
    work = served_in(rows, (0.1 * span, span))
    total = sum(work.values())
    out: list[dict[str, object]] = []
    for name in [*(s.name for s in specs), "all"]:
        mine = rows if name == "all" else [r for r in rows if tenant_of(r) == name]
        row: dict[str, object] = {**head, "tenant": name, **summarize(mine)}
        row["completed"] = float(sum(r.outcome == "completed" for r in mine))
        row["goodput_tps"] = goodput(mine, span)
        row["share"] = math.nan if name == "all" else work.get(name, 0.0) / total if total else 0.0
        tenants = engine.tenants if name == "all" else [engine.tenant(name)]
        for key in ("completed", "rejected", "expired"):
            row[f"core_{key}"] = float(sum(getattr(t, key) for t in tenants))
        out.append(row)
    return out


def _same(a: object, b: object) -> bool:
    if isinstance(a, float) and isinstance(b, float):
        return (math.isnan(a) and math.isnan(b)) or math.isclose(a, b, rel_tol=1e-9)
    return a == b


def sim_rows(
    scenario: str, condition: str, seed: int = 0, span_s: float | None = None
) -> list[dict[str, object]]:
    """The simulated cell, one row per tenant plus ``all`` (``source="sim"``).

    Raises:
        RuntimeError: At full size (``span_s=None``), the rows disagree with
            `bench.tenants.run_tenants`' (the two no longer build the same run).
    """
    return _simulate(scenario, condition, seed, span_s)[0]


def _simulate(
    scenario: str, condition: str, seed: int, span_s: float | None
) -> tuple[list[dict[str, object]], Sequence[TraceRow]]:
    jobs, specs = _jobs(scenario, seed, span_s), _specs(scenario)
    span = max(j.request.arrival for j in jobs)
    result = Simulator(tenants_config(condition, specs), PHYSICS).run(jobs)
    head = {"scenario": scenario, "condition": condition, "seed": seed, "source": "sim"}
    out = _rows(result.rows, result.engine, specs, span, head)
    if span_s is None:
        reference = {str(r["tenant"]): r for r in run_tenants(TenantRun(scenario, condition, seed))}
        for row in out:
            ref = reference[str(row["tenant"])]
            differ = [k for k in _GUARDED if not _same(row[k], ref[k])]
            if differ:
                raise RuntimeError(
                    f"bench.tenants_live's run of {scenario}/{condition} differs from "
                    f"run_tenants' for tenant {row['tenant']}: {', '.join(differ)}"
                )
    return out, result.rows


# -- the live run ------------------------------------------------------------------------------


async def _replay(
    jobs: Sequence[SimJob], specs: Sequence[TenantSpec], condition: str, seed: int
) -> tuple[list[TraceRow], EngineStats, int]:
    """Replay ``jobs``; their trace rows (live times), the core's stats, the mock's completions."""
    app = create_app(MockConfig(physics=PHYSICS, seed=seed), clock=anyio.current_time)
    recorder = Recorder(httpx2.ASGITransport(app=app), anyio.current_time)
    async with httpx2.AsyncClient(transport=recorder, base_url=_BASE) as http:
        client = openai.AsyncOpenAI(
            base_url=f"{_BASE}/v1", api_key="tenants-live", http_client=http
        )
        scheduler = Scheduler(
            client,
            config=tenants_config(condition, specs),
            priors="heuristic",
            options=RuntimeOptions(calibration=False, seed=seed, cancel_late=False),
        )
        async with scheduler:
            records, start = await replay_jobs(scheduler, jobs)
            stats = scheduler.statistics()
    for attempt in recorder.attempts:
        send = attempt.time - start
        rec = records[attempt.request]
        rec.first_send = send if rec.first_send is None else min(rec.first_send, send)
    rows = []
    for job in jobs:
        rec = records[job.request.id]
        rows.append(TraceRow(id=job.request.id, klass=job.request.klass or "", bucket=rec.bucket,
                             routing_bucket="", arrival=rec.arrival, deadline=rec.deadline,
                             output_tokens=rec.output_tokens, outcome=rec.outcome,
                             first_send=rec.first_send, end=rec.end))  # fmt: skip
    return rows, stats.engine, app.state.mock_stats().counters.completed


def live_rows(
    scenario: str, condition: str, seed: int = 0, span_s: float | None = None
) -> list[dict[str, object]]:
    """Replay the cell through the SDK and the HTTP mock in virtual time (``source="live"``).

    The ``all`` row adds ``unresolved`` (jobs with no outcome), ``mock_completed`` (what
    the mock says it answered) and ``wall_s``.
    """
    return _live(scenario, condition, seed, span_s)[0]


def _live(
    scenario: str, condition: str, seed: int, span_s: float | None
) -> tuple[list[dict[str, object]], list[TraceRow]]:
    import trio
    import trio.testing

    jobs, specs = _jobs(scenario, seed, span_s), _specs(scenario)
    jobs.sort(key=lambda j: (j.request.arrival, j.request.id))
    span = max(j.request.arrival for j in jobs)
    started = time.perf_counter()
    with inline_platform_lookup():
        rows, engine, mock_completed = trio.run(
            _replay,
            jobs,
            specs,
            condition,
            seed,
            clock=trio.testing.MockClock(autojump_threshold=0),
        )
    wall = time.perf_counter() - started
    head = {"scenario": scenario, "condition": condition, "seed": seed, "source": "live"}
    out = _rows(rows, engine, specs, span, head)
    out[-1].update(unresolved=float(sum(not r.outcome for r in rows)),
                   mock_completed=float(mock_completed), wall_s=wall)  # fmt: skip
    return out, rows


def _agreement(sim: Sequence[TraceRow], live: Sequence[TraceRow]) -> dict[str, float]:
    """Request by request: how many outcomes differ, and the largest gap (s) between the
    two runs' first sends or ends where both have one."""
    other = {r.id: r for r in sim}
    gaps = [0.0]
    for row in live:
        twin = other[row.id]
        for a, b in ((row.first_send, twin.first_send), (row.end, twin.end)):
            if a is not None and b is not None:
                gaps.append(abs(a - b))
    differ = sum(row.outcome != other[row.id].outcome for row in live)
    return {"outcomes_differ": float(differ), "max_time_gap_s": max(gaps)}


# -- the report --------------------------------------------------------------------------------


def _num(row: Mapping[str, object] | None, key: str) -> float:
    value = math.nan if row is None else row.get(key, math.nan)
    return float(value) if isinstance(value, int | float) else math.nan


def _fmt(value: float, fmt: str) -> str:
    return "n/a" if math.isnan(value) else format(value, fmt)


def _pair(
    sim: Mapping[str, object], live: Mapping[str, object], key: str, fmt: str, scale: float = 1.0
) -> str:
    return " / ".join(_fmt(_num(row, key) / scale, fmt) for row in (sim, live))


def _ratio(sim: Mapping[str, object], live: Mapping[str, object], key: str) -> str:
    a, b = _num(sim, key), _num(live, key)
    return "n/a" if not a or math.isnan(a) or math.isnan(b) else f"{b / a:.2f}"


def _headline(rows: list[dict[str, object]]) -> None:
    """Add ``short_p95_vs_base`` to each ``noisy`` row: over the same tenant, condition and
    source in ``noisy-base``."""
    flood, base = PAIR
    index = {(r["scenario"], r["condition"], r["source"], r["tenant"]): r for r in rows}
    for row in rows:
        if row["scenario"] == flood:
            ref = index.get((base, row["condition"], row["source"], row["tenant"]))
            below = _num(ref, "short_p95_ms")
            row["short_p95_vs_base"] = _num(row, "short_p95_ms") / below if below else math.nan


def _markdown(rows: Sequence[dict[str, object]], seed: int, span_s: float | None) -> str:
    by = {(r["scenario"], r["condition"], r["tenant"], r["source"]): r for r in rows}
    cells = list(dict.fromkeys((r["scenario"], r["condition"], r["tenant"]) for r in rows))
    conditions = list(dict.fromkeys(str(r["condition"]) for r in rows))
    size = "the full span" if span_s is None else f"arrivals up to {span_s:.0f} s"
    header = ["scenario", "condition", "tenant", "submitted", "short P95 s", "live/sim",
              "CR", "rejects", "expired", "share", "goodput tok/s", "live/sim"]  # fmt: skip
    lines = [
        f"# Tenants live cross-check: noisy neighbour, seed {seed}, {size}",
        "",
        "Each cell is *simulated / live*: the same jobs through the simulator and through the "
        "SDK (`Scheduler(config=tenants_config(...))`, `submit(..., tenant=)`) against the "
        "HTTP mock, both in virtual time. CR: completion rate. Share: the tenant's part of the "
        "output tokens served between 10% and 100% of the span. Goodput: on-time output "
        "tokens per second of the span. Generated by "
        "`bench.tenants_live.tenants_live_check`; do not edit.",
        "",
        "| " + " | ".join(header) + " |",
        "|---" * len(header) + "|",
    ]
    for scenario, condition, tenant in cells:
        sim, live = (
            by[(scenario, condition, tenant, "sim")],
            by[(scenario, condition, tenant, "live")],
        )
        lines.append("| " + " | ".join([
            str(scenario), str(condition), str(tenant), _pair(sim, live, "submitted", ".0f"),
            _pair(sim, live, "short_p95_ms", ".2f", 1e3), _ratio(sim, live, "short_p95_ms"),
            _pair(sim, live, "completion_rate", ".3f"), _pair(sim, live, "rejects", ".0f"),
            _pair(sim, live, "expired", ".0f"), _pair(sim, live, "share", ".3f"),
            _pair(sim, live, "goodput_tps", ".1f"), _ratio(sim, live, "goodput_tps"),
        ]) + " |")  # fmt: skip
    lines += [
        "",
        "The headline: each tenant's short P95 under the flood over its own without it "
        "(same condition, same source), *simulated / live*:",
        "",
        "| condition | A | B | C |",
        "|---|---|---|---|",
    ]
    for condition in conditions:
        keys = [(PAIR[0], condition, t) for t in ("A", "B", "C")]
        if all((*k, "sim") in by for k in keys):
            pairs = [
                _pair(by[(*k, "sim")], by[(*k, "live")], "short_p95_vs_base", ".2f") for k in keys
            ]
            lines.append(f"| {condition} | " + " | ".join(pairs) + " |")
    lines += ["", "Live runs: jobs left without an outcome, the mock's completions against the "
              "SDK's, request by request against the simulator (outcomes that differ, the "
              "largest gap between first sends or ends, s), and the wall time of each (s):", "",
              "| scenario | condition | unresolved | completed (mock / SDK) | outcomes differ "
              "| max time gap | wall |", "|---|---|---|---|---|---|---|"]  # fmt: skip
    for scenario, condition, tenant in cells:
        if tenant == "all":
            live = by[(scenario, condition, tenant, "live")]
            done = [
                f"{_num(live, 'unresolved'):.0f}",
                f"{_num(live, 'mock_completed'):.0f} / {_num(live, 'completed'):.0f}",
                f"{_num(live, 'outcomes_differ'):.0f}",
                f"{_num(live, 'max_time_gap_s'):.2g}",
                f"{_num(live, 'wall_s'):.1f}",
            ]
            lines.append(f"| {scenario} | {condition} | " + " | ".join(done) + " |")
    return "\n".join(lines) + "\n"


def tenants_live_check(
    out_dir: Path,
    *,
    seed: int = 0,
    conditions: Sequence[str] = CONDITIONS,
    span_s: float | None = None,
) -> None:
    """Simulate and replay the noisy neighbour (``noisy`` and ``noisy-base``) per condition;
    write ``runs.csv`` (one row per scenario, condition, source and tenant) and ``tables.md``.

    Args:
        out_dir: The folder written (created if missing).
        seed: Workload seed.
        conditions: Conditions (`bench.tenants.POLICIES` names), one cell each.
        span_s: Replay only the arrivals up to this many seconds (a smaller, faster check;
            the simulated side is cut the same way). ``None``: the full span, and the
            simulated rows are checked against `bench.tenants.run_tenants`'.
    """
    rows: list[dict[str, object]] = []
    cells = [(scenario, condition) for scenario in PAIR for condition in conditions]
    report, start = ProgressReporter("live-check cells"), time.perf_counter()
    for done, (scenario, condition) in enumerate(cells, 1):
        sim, sim_trace = _simulate(scenario, condition, seed, span_s)
        live, live_trace = _live(scenario, condition, seed, span_s)
        live[-1].update(_agreement(sim_trace, live_trace))
        rows += sim + live
        report(done, len(cells), time.perf_counter() - start)
    _headline(rows)
    out_dir.mkdir(parents=True, exist_ok=True)
    write_csv(out_dir / "runs.csv", rows)
    (out_dir / "tables.md").write_text(_markdown(rows, seed, span_s))
