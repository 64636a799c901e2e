"""Tables and figures of ``python -m bench plan`` (from the plans and the simulation rows).

Files written to the output folder:

- ``plans.md`` / ``plans.csv``: each case's plan under each setting;
- ``checks.md`` / ``checks.csv``: analytic against simulated tails, per pool and size;
- ``summary.md``: the planner's targets, judged from the rows;
- ``p99_vs_units.png``: the one-pool tail against units, the model's curve and
  the simulated points;
- ``cost_vs_boundary.png``: the two-pool cost against ``B_short`` (γ = 1 and the
  best γ), with the one-pool cost for reference.

Numbers only ever come from the planner and the simulator.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
from matplotlib.axes import Axes

from bench.experiments import ProgressReporter
from bench.plan import (
    CASES,
    CR_SETTING,
    SETTINGS,
    Case,
    PoolRun,
    cr_boundary,
    plan_case,
    plan_for,
    sample,
)
from bench.report import write_csv
from semisched.plan.planner import Plan, predict_pool

__all__ = ["TOLERANCE", "plan_rows", "write_plan_report"]

#: The planner's target: the analytic tail within 15% of the simulated one.
TOLERANCE = 0.15


def plan_rows(
    plans: Mapping[tuple[str, str], Plan], timings: Mapping[str, float]
) -> list[dict[str, object]]:
    """One row per (case, setting): the one-pool and two-pool plans."""
    rows = []
    for (case, setting), plan in plans.items():
        best = plan.best
        row: dict[str, object] = {
            "case": case,
            "setting": setting,
            "rate": plan.rate,
            "slos": "; ".join(s.key() for s in plan.slos),
            "one_pool_units": plan.one_pool.units,
            "one_pool_bound": plan.one_pool.bound,
            "B_short": best.boundary if best else "",
            "gamma": best.gamma if best else "",
            "n_s": best.short.units if best and best.short else "",
            "short_slots": best.short.slots if best and best.short else "",
            "n_l": best.long.units if best and best.long else "",
            "long_slots": best.long.slots if best and best.long else "",
            "two_pool_units": best.units if best else "",
            "saving": plan.saving,
            "recommended": "two pools" if plan.two_pools_win else "one pool",
            "planning_ms_100k": timings.get(case, math.nan),
        }
        rows.append(row)
    return rows


def _check_rows(runs: Sequence[PoolRun]) -> list[dict[str, object]]:
    rows = []
    for r in runs:
        if r.pool == "fleet:spill":
            continue
        met = r.simulated_s <= float(r.slo.split("<=")[1])
        rows.append({
            "case": r.case, "setting": r.setting, "pool": r.pool, "units": r.units,
            "vs plan": f"{r.delta:+d}" if r.pool != "curve" else f"{r.delta:+d} (curve)",
            "rho": round(r.utilisation, 3), "P(wait)": f"{r.p_wait:.2g}", "slo": r.slo,
            "analytic_s": round(r.analytic_s, 3) if math.isfinite(r.analytic_s) else "unstable",
            "simulated_s": round(r.simulated_s, 3),
            "error": f"{100 * r.error:+.1f}%" if math.isfinite(r.analytic_s) else "",
            "sim meets SLO": "yes" if met else "no",
        })  # fmt: skip
    return rows


def summary_lines(runs: Sequence[PoolRun]) -> list[str]:
    """The planner's two targets, judged per (case, setting, pool)."""
    lines = ["# Targets", ""]
    at_plan = [r for r in runs if r.delta == 0 and r.pool in ("one", "short", "long")]
    worst = max(at_plan, key=lambda r: abs(r.error))
    within = sum(abs(r.error) <= TOLERANCE for r in at_plan)
    lines.append(
        f"- Analytic tail within {100 * TOLERANCE:.0f}% of simulated at the recommended size: "
        f"{within} of {len(at_plan)} (pool, SLO) pairs; worst {100 * worst.error:+.1f}% "
        f"({worst.case}, {worst.setting}, {worst.pool} pool, {worst.slo})."
    )
    smaller: dict[tuple[str, str, str], bool] = {}
    for r in runs:
        if r.delta == -1 and r.pool in ("one", "short", "long"):
            met = r.simulated_s <= float(r.slo.split("<=")[1])
            key = (r.case, r.setting, r.pool)
            smaller[key] = smaller.get(key, True) and met
    misses = sum(not ok for ok in smaller.values())
    lines.append(
        f"- One unit fewer misses an SLO in simulation: {misses} of {len(smaller)} pools; "
        "still meeting every SLO one unit smaller: "
        + (", ".join(f"{c} {s} {p}" for (c, s, p), ok in smaller.items() if ok) or "none")
        + "."
    )
    off = [r for r in runs if r.pool in ("one", "short", "long", "curve")]
    off = [r for r in off if math.isfinite(r.analytic_s) and abs(r.error) > TOLERANCE]
    if off:
        lines.append(
            "- Where Kimura's approximation is off by more than 15% (rho, P(wait), error):"
        )
        for r in off:
            lines.append(
                f"  - {r.case} {r.setting} {r.pool} {r.units} units, {r.slo}: "
                f"rho {r.utilisation:.3f}, P(wait) {r.p_wait:.2g}, analytic {r.analytic_s:.3g} s"
                f" vs simulated {r.simulated_s:.3g} s ({100 * r.error:+.0f}%)"
            )
    deployed = [r for r in runs if r.pool in ("fleet:short", "fleet:long")]
    missed = [r for r in deployed if r.simulated_s > float(r.slo.split("<=")[1])]
    lines.append(
        f"- Deployed fleets (the recommended split with the routing `--fleet-out` writes, "
        f"spillover on): {len(deployed) - len(missed)} of {len(deployed)} (pool, SLO) pairs "
        "meet the SLO in simulation"
        + "".join(
            f"; missed: {r.case} {r.setting} {r.pool.split(':')[1]} pool {r.slo} at "
            f"{r.simulated_s:.3g} s (analytic {r.analytic_s:.3g} s)"
            for r in missed
        )
        + "."
    )
    spills = [r for r in runs if r.pool == "fleet:spill"]
    for r in spills:
        lines.append(
            f"- Deployed fleet ({r.case}, {r.setting}): {100 * r.simulated_s:.1f}% of short "
            "requests spilled to the long pool."
        )
    return lines


def _curve_figure(runs: Sequence[PoolRun], cases: Sequence[Case], out: Path) -> None:
    cases = [c for c in cases if any(r.case == c.name and r.pool in ("one", "curve") for r in runs)]
    fig, axes = plt.subplots(1, len(cases), figsize=(4.2 * len(cases), 3.6), squeeze=False)
    for ax, case in zip(axes[0], cases, strict=True):
        _curve(ax, case, runs)
    fig.tight_layout()
    fig.savefig(out / "p99_vs_units.png", dpi=120)
    plt.close(fig)


def _curve(ax: Axes, case: Case, runs: Sequence[PoolRun]) -> None:
    mine = [r for r in runs if r.case == case.name and r.pool in ("one", "curve")]
    setting = (
        "SLO-bound 0.99" if any(r.setting == "SLO-bound 0.99" for r in mine) else mine[0].setting
    )
    plan = plan_case(case, SETTINGS[setting])
    slo = plan.slos[0]
    points = [r for r in mine if r.setting == setting and r.slo == slo.key()]
    low = min(r.units for r in points)
    high = max(r.units for r in points)
    work = sample(case)
    units = list(range(low, high + 1))
    model = [
        predict_pool(work, rate=case.rate, profile=case.profile(),
                     context_tokens=case.context_tokens, units=n, slos=[slo]).tails[0].seconds
        for n in units
    ]  # fmt: skip
    shown = [(n, m) for n, m in zip(units, model, strict=True) if math.isfinite(m)]
    ax.plot([n for n, _ in shown], [m for _, m in shown], "-", color="tab:blue", label="analytic")
    pts = sorted((r.units, r.simulated_s) for r in points)
    ax.plot([p[0] for p in pts], [p[1] for p in pts], "o", color="tab:orange", label="simulated")
    ax.axhline(slo.seconds, color="grey", linestyle="--", label=slo.label())
    ax.axvline(plan.one_pool.units, color="tab:green", linestyle=":", label="planned")
    values = [m for _, m in shown] + [p[1] for p in pts]
    if max(values) > 10 * min(values):
        ax.set_yscale("log")
    ax.set_xlabel("units (one pool)")
    ax.set_ylabel(f"P{100 * slo.quantile:g} {slo.metric.upper()} (s)")
    ax.set_title(f"{case.name}, {case.rate:g} req/s")
    ax.legend(fontsize=7)


def _cost_figure(plans: Mapping[tuple[str, str], Plan], out: Path) -> None:
    setting = "paper cap 0.85"
    names = [c for (c, s) in plans if s == setting]
    fig, axes = plt.subplots(1, len(names), figsize=(4.2 * len(names), 3.6), squeeze=False)
    for ax, name in zip(axes[0], names, strict=True):
        plan = plans[(name, setting)]
        cost = {s.boundary: s.cost_per_hour for s in plan.splits
                if not s.infeasible and s.gamma == 1.0}  # fmt: skip
        bs = sorted(cost)
        ax.plot(bs, [cost[b] for b in bs], "o-", label="two pools (γ = 1)")
        ax.axhline(plan.one_pool.cost_per_hour, color="grey", linestyle=":", label="one pool")
        cr = plans.get((name, CR_SETTING))
        if cr is not None and cr.best is not None:
            ax.plot([cr.best.boundary], [cr.best.cost_per_hour], "*", markersize=12,
                    color="tab:red", label=f"with C&R (γ* = {cr.best.gamma:.1f})")  # fmt: skip
        ax.set_xscale("log", base=2)
        ax.set_xlabel("B_short (tokens)")
        ax.set_ylabel("fleet cost (units/h)")
        ax.set_title(name)
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(out / "cost_vs_boundary.png", dpi=120)
    plt.close(fig)


def write_plan_report(
    out: Path,
    plans: Mapping[tuple[str, str], Plan],
    runs: Sequence[PoolRun],
    timings: Mapping[str, float],
    extra: Sequence[str] = (),
    cases: Sequence[Case] = CASES,
) -> None:
    """Write every table and figure of the module docstring to ``out`` (``cases``: the
    workloads the runs are of)."""
    out.mkdir(parents=True, exist_ok=True)
    plans_table = plan_rows(plans, timings)
    write_csv(out / "plans.csv", plans_table)
    checks = _check_rows(runs)
    write_csv(out / "checks.csv", checks)
    (out / "plans.md").write_text(_markdown(plans_table) + "\n", encoding="utf-8")
    (out / "checks.md").write_text(_markdown(checks) + "\n", encoding="utf-8")
    (out / "summary.md").write_text("\n".join([*summary_lines(runs), *extra]) + "\n",
                                    encoding="utf-8")  # fmt: skip
    _curve_figure(runs, cases, out)
    _cost_figure(plans, out)


def _markdown(rows: Sequence[Mapping[str, object]]) -> str:
    keys = list(rows[0])
    lines = ["| " + " | ".join(keys) + " |", "|" + "---|" * len(keys)]
    for row in rows:
        lines.append("| " + " | ".join(_cell(row[k]) for k in keys) + " |")
    return "\n".join(lines)


def _cell(value: object) -> str:
    if isinstance(value, float):
        return f"{value:.3g}" if abs(value) < 1000 else f"{value:,.0f}"
    return str(value)


def planning_timings(cases: Sequence[Case], requests: int = 100_000) -> dict[str, float]:
    """Milliseconds `make_plan` takes per case on a ``requests``-request workload
    (best of three; a timing benchmark, the target "under 1 s for 100k")."""
    import time

    from semisched.plan.planner import make_plan
    from semisched.plan.slo import parse_slo

    out = {}
    for case in cases:
        big = sample(Case(case.name, case.rate, case.slos, requests, case.context_tokens))
        slos = [parse_slo(s) for s in case.slos]
        best = math.inf
        for _ in range(3):
            started = time.perf_counter()
            make_plan(big, rate=case.rate, slos=slos, profile=case.profile(), compressibility=1.0)
            best = min(best, time.perf_counter() - started)
        out[case.name] = 1e3 * best
    return out


def plan_benchmark(out: Path, *, cases: Sequence[Case] = CASES, workers: int | None = None) -> Path:
    """``python -m bench plan``: plans, simulation checks, tables and figures in ``out``."""
    from bench.plan import run_checks

    plans = {(c.name, s): plan_case(c, cap) for c in cases for s, cap in SETTINGS.items()}
    timings = planning_timings(cases)

    report, start = ProgressReporter("simulation checks"), time.perf_counter()

    def progress(done: int, total: int) -> None:  # a bar on a terminal, else one line a step
        report(done, total, time.perf_counter() - start)

    runs = run_checks(cases, workers=workers, progress=progress)
    extra: list[str] = []
    for case in cases:
        if case.name == "sharegpt":
            plans[(case.name, CR_SETTING)] = plan_for(case, CR_SETTING)[0]
            extra += compress_and_route(case, plans[(case.name, CR_SETTING)], out / "compress")
    write_plan_report(out, plans, runs, timings, extra, cases)
    return out


def compress_and_route(case: Case, plan: Plan, out: Path) -> list[str]:
    """The compression study on ShareGPT (``out/compress.md``) and the summary lines of the
    compress-and-route plan."""
    from bench.plan_compress import compress_study, o200k_counter, write_compress_tables

    boundary = cr_boundary(case)
    rows = compress_study(
        boundaries=tuple(sorted({1024, 2048, 4096, boundary})), gammas=(1.5, 2.0),
        limit=None, count_tokens=o200k_counter(),
    )  # fmt: skip
    write_compress_tables(rows, out)
    routed, best, one = plan.routed, plan.best, plan.one_pool
    assert routed is not None and best is not None
    base = plan_case(case, SETTINGS["paper cap 0.85"])
    assert base.routed is not None
    p_c = best.compressed / best.beta if best.beta else float("nan")
    return [
        "",
        "# Compress-and-route (ShareGPT, per-request compression floors, o200k tokens)",
        "",
        f"- At B_short = {boundary:,}: γ* = {best.gamma:.1f}, β = {100 * best.beta:.1f}% of "
        f"requests in the band, {100 * best.compressed:.1f}% compressed into the short pool "
        f"(p_c = {p_c:.3f}).",
        f"- Units: one pool {one.units}; two pools without compression {base.routed.units} "
        f"(best B_short {base.routed.boundary:,}), {routed.units} at B_short {boundary:,}; "
        f"with compress-and-route {best.units} ({best.short.units if best.short else 0} short + "
        f"{best.long.units if best.long else 0} long): {routed.units - best.units} fewer than "
        f"without it at the same B_short, saving {100 * plan.saving:.1f}% against one pool.",
        f"- Compression study: {out.name}/compress.md.",
    ]
