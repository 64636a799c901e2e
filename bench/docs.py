"""The results the README shows: generated, committed, and re-rendered by one command.

``python -m bench docs`` runs the benchmarks whose numbers the README and the
docs site quote, writes their outputs under ``docs/results/`` (committed with the
code), and rewrites the generated blocks of every file in `RENDERED` (the
README and the guides) from those files. A block sits between
``<!-- bench:NAME -->`` and ``<!-- /bench:NAME -->``; nothing between the
markers is typed by hand, and a test checks that each of those files matches
what `render_readme` makes of the committed CSVs.

============  ====================================================  =========
block         from                                                  command
============  ====================================================  =========
quick         ``docs/results/quick/summary.csv``                    quick
rate-limits   ``docs/results/rate-limits/summary.csv``              rate-limits
live-check    ``docs/results/rate-limits/live-check/live_check.csv`` live-check
batch         ``docs/results/batch-mixed/table.md``                  batch
cost          ``docs/results/cost/tables.md``                        cost
default-prior ``docs/results/default-prior/summary.csv``             default-prior
routing       ``docs/results/routing/summary.csv``                   routing
shared-budget ``docs/results/shared-budget/summary.csv``             shared-budget
(faults)      ``docs/results/shared-budget/faults_summary.csv``      shared-budget
tenants       ``docs/results/tenants/summary.csv``                   tenants
plan          ``docs/results/plan/plans.csv``, ``checks.csv``        plan
gateway       ``docs/results/gateway/overhead.csv``                  gateway
(tenants)     ``docs/results/gateway/tenants.csv``                   gateway
(replicas)    ``docs/results/gateway/replicas.csv``                  gateway
(priority)    ``docs/results/gateway-priority/results.json``         gateway-priority
perf          ``docs/results/perf/perf.csv``                         perf
============  ====================================================  =========

The default-prior table is rerun by ``docs`` (three seeds, a few minutes), and so
are the routing, tenants and plan runs. ``docs --render-only`` reruns nothing and
re-renders the README and the guides from the committed results (after one benchmark alone,
e.g. ``python -m bench tenants --out docs/results/tenants --live-check``).
The shared-budget table is not (it runs real worker processes for about ten
minutes): ``python -m bench shared-budget --out docs/results/shared-budget
--margin 3`` regenerates it, then ``docs --render-only`` re-renders the pages.
The gateway's tables are not rerun by ``docs`` either (real server processes for
a few minutes, and timings that want a quiet machine): ``python -m bench gateway
--out docs/results/gateway``, then ``docs --render-only``.
Nor is the gateway's priority table (a dozen gateway processes, about fifteen minutes):
``python -m bench gateway-priority``, then ``docs --render-only``.
The perf table is not rerun by ``docs`` (it needs the baseline's tree and a quiet
machine): ``python -m bench perf --baseline 2e91dde --out docs/results/perf``, then
``docs --render-only``.
The batch table is not rerun by ``docs`` (it takes minutes of compressed real
time): ``python -m bench batch --workload mixed --repeats 3 --out
docs/results/batch-mixed`` regenerates it, then ``docs --render-only`` (or any
``docs`` run) re-renders the pages. Nor is the Batch API tier's table (real mock and
``semisched batch`` processes for a few minutes): ``python -m bench cost``, then
``docs --render-only``.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

from bench.docs_tables import DOCS, Row
from bench.docs_tables import read_rows as _read
from bench.docs_tables import table as _table
from bench.real_engine.docs_blocks import REAL_ENGINE_BLOCKS

__all__ = ["DOCS", "LIVE_CHECK", "RENDERED", "build_docs", "render_files", "render_readme"]

#: The cell of ``rate-limits`` that is cross-checked live.
LIVE_CHECK: dict[str, str] = {
    "regime": "balanced/high",
    "condition": "1.5x, headers ignored",
    "strategy": "final_adrr_olc",
}

#: The files whose generated blocks ``docs`` renders, relative to the repository root.
RENDERED: tuple[Path, ...] = (
    Path("README.md"),
    Path("docs/guides/app.md"),
    Path("docs/guides/batch.md"),
    Path("docs/guides/fleets.md"),
    Path("docs/guides/gateway.md"),
    Path("docs/development.md"),
    Path("docs/guides/plan.md"),
    Path("docs/guides/real-engine.md"),
    Path("docs/guides/research.md"),
    Path("docs/guides/shared-state.md"),
    Path("docs/guides/tenants.md"),
)


def _pm(row: Row, metric: str, digits: int) -> str:
    mean, std = float(row[f"{metric}_mean"]), float(row[f"{metric}_std"])
    return f"{mean:,.{digits}f} ± {std:,.{digits}f}"


def _quick(root: Path) -> str:
    rows = _read(root / DOCS / "quick" / "summary.csv")
    header = ("strategy", "short P95 (ms)", "global P95 (ms)", "CR", "satisfaction",
              "goodput (rps)")  # fmt: skip
    body = [
        (r["strategy"], _pm(r, "short_p95_ms", 0), _pm(r, "global_p95_ms", 0),
         _pm(r, "completion_rate", 3), _pm(r, "satisfaction", 3), _pm(r, "goodput_rps", 3))
        for r in rows
    ]  # fmt: skip
    return _table(header, body)


def _rate_limits(root: Path) -> str:
    rows = _read(root / DOCS / "rate-limits" / "summary.csv")
    picked = [
        r for r in rows if r["regime"] == "balanced/high" and r["strategy"] == "final_adrr_olc"
    ]
    header = ("client budget", "429s", "retries", "short P95 (ms)", "CR", "satisfaction",
              "failed")  # fmt: skip
    body = [
        (r["condition"], _pm(r, "throttled", 0), _pm(r, "retries", 0), _pm(r, "short_p95_ms", 0),
         _pm(r, "completion_rate", 3), _pm(r, "satisfaction", 3), _pm(r, "failed", 1))
        for r in picked
    ]  # fmt: skip
    return _table(header, body)


def _live_check(root: Path) -> str:
    rows = _read(root / DOCS / "rate-limits" / "live-check" / "live_check.csv")
    body = [
        (r["metric"], f"{float(r['sim']):,.4g}", f"{float(r['live']):,.4g}",
         f"{float(r['ratio']):.3f}")
        for r in rows
    ]  # fmt: skip
    return _table(("metric", "simulated", "live (SDK + HTTP mock)", "live / sim"), body)


def _default_prior(root: Path) -> str:
    """``docs/results/default-prior/summary.csv``: outcomes per workload and prior."""
    rows = _read(root / DOCS / "default-prior" / "summary.csv")
    header = ("workload", "prior", "completed", "rejected", "deadline misses",
              "short P95 (s)", "makespan (s)")  # fmt: skip
    body = [
        (r["workload"], r["condition"], _pm(r, "completed", 0), _pm(r, "rejected", 0),
         _pm(r, "deadline_exceeded", 0), _pm(r, "short_p95_s", 1), _pm(r, "makespan_s", 0))
        for r in rows
    ]  # fmt: skip
    return _table(header, body)


def _batch(root: Path) -> str:
    """The mixed-workload batch table (``docs/results/batch-mixed/table.md``), key columns."""
    text = (root / DOCS / "batch-mixed" / "table.md").read_text()
    rows = [
        [cell.strip() for cell in line.strip().strip("|").split("|")]
        for line in text.splitlines()
        if line.startswith("|") and not line.startswith("|---")
    ]
    header, body = rows[0], rows[1:]
    keep = [header.index(name) for name in BATCH_COLUMNS]
    return _table(BATCH_COLUMNS, [[row[i] for i in keep] for row in body])


def _cost(root: Path) -> str:
    """The Batch API tier's table (``docs/results/cost/tables.md``): its rows and verdict."""
    text = (root / DOCS / "cost" / "tables.md").read_text()
    rows = [line for line in text.splitlines() if line.startswith("|")]
    verdict = [line for line in text.splitlines() if line.startswith("The cheapest plan")]
    return "\n".join([*rows, "", *verdict])


def _seconds(row: Row, metric: str, digits: int) -> str:
    """A ``*_ms`` metric's mean ± std in seconds."""
    mean, std = float(row[f"{metric}_mean"]) / 1000, float(row[f"{metric}_std"]) / 1000
    return f"{mean:,.{digits}f} ± {std:,.{digits}f}"


def _routing(root: Path) -> str:
    """``docs/results/routing/summary.csv``: the high regimes, both cap settings."""
    rows = [r for r in _read(root / DOCS / "routing" / "summary.csv")
            if r["regime"].endswith("/high")]  # fmt: skip
    base = {(r["regime"], r["caps"]): float(r["short_p95_ms_mean"]) for r in rows
            if r["condition"] == "round_robin"}  # fmt: skip
    header = ("regime", "per-endpoint cap", "policy", "short P95 (s)", "vs round_robin",
              "global P95 (s)", "CR", "failovers", "lost (failed)")  # fmt: skip
    body = [
        (r["regime"], r["caps"], r["condition"], _seconds(r, "short_p95_ms", 1),
         f"{base[(r['regime'], r['caps'])] / float(r['short_p95_ms_mean']):.2f}x",
         f"{float(r['global_p95_ms_mean']) / 1000:,.0f}", _pm(r, "completion_rate", 3),
         _pm(r, "failovers", 0), _pm(r, "failed", 0))
        for r in rows
    ]  # fmt: skip
    return _table(header, body)


def _shared_budget(root: Path) -> str:
    """``docs/results/shared-budget/summary.csv``: N workers on one limit, by mode."""
    rows = _read(root / DOCS / "shared-budget" / "summary.csv")
    static = {r["workers"]: float(r["makespan_s_mean"]) for r in rows
              if r["condition"] == "static"}  # fmt: skip
    header = ("workers", "mode", "makespan (s)", "static / this", "429s", "limit used",
              "round trip p50 / p99 (ms)")  # fmt: skip
    body = []
    for r in rows:
        shared = r["condition"] == "shared"
        trip = (f"{float(r['probe_p50_ms_mean']):.2f} / {float(r['probe_p99_ms_mean']):.2f}"
                if shared else "")  # fmt: skip
        ratio = static[r["workers"]] / float(r["makespan_s_mean"])
        body.append((r["workers"], r["condition"], _pm(r, "makespan_s", 0), f"{ratio:.2f}x",
                     _pm(r, "provider_429s", 1), _pm(r, "util", 2), trip))  # fmt: skip
    return _table(header, body)


def _shared_budget_faults(root: Path) -> str:
    """``docs/results/shared-budget/faults_summary.csv`` (and ``faults.csv`` for each
    worker's fallback share and rejoin lines): Redis lost mid-run, by fault."""
    folder = root / DOCS / "shared-budget"
    runs = _read(folder / "faults.csv")
    header = ("fault", "runs", "429s", "sent before / while down / after", "lost",
              "makespan (s)", "fallback shares", "rejoined lines")  # fmt: skip
    body = []
    for r in _read(folder / "faults_summary.csv"):
        mine = [run for run in runs if run["condition"] == r["condition"]]
        split = " / ".join(_pm(r, f"{when}_429s", 1) for when in ("before", "down", "after"))
        body.append((r["condition"], r["runs"], _pm(r, "provider_429s", 1), split,
                     _pm(r, "lost", 0), _pm(r, "makespan_s", 0),
                     "; ".join(run["shares"] for run in mine),
                     "; ".join(run["rejoins"] for run in mine)))  # fmt: skip
    return _table(header, body)


def _gateway(root: Path) -> str:
    """``docs/results/gateway/overhead.csv``: straight to an instant upstream vs through the
    gateway, and what the gateway adds."""
    from bench.gateway_report import markdown, overhead_table

    return markdown(overhead_table(_read(root / DOCS / "gateway" / "overhead.csv")))


def _gateway_tenants(root: Path) -> str:
    """``docs/results/gateway/tenants.csv``: a noisy neighbour through the gateway."""
    from bench.gateway_report import markdown, tenants_table

    return markdown(tenants_table(_read(root / DOCS / "gateway" / "tenants.csv")))


def _gateway_replicas(root: Path) -> str:
    """``docs/results/gateway/replicas.csv``: two replicas on one key."""
    from bench.gateway_report import markdown, replicas_table

    return markdown(replicas_table(_read(root / DOCS / "gateway" / "replicas.csv")))


def _gateway_priority(root: Path) -> str:
    """``docs/results/gateway-priority/results.json``: a marked trickle beside a flood."""
    from bench.gateway_priority_report import priority_block

    return priority_block(root)


def _tenants(root: Path) -> str:
    """``docs/results/tenants/summary.csv``: issue 15's targets per condition."""
    from bench.tenants import POLICIES
    from bench.tenants_report import headline

    rows = headline(_read(root / DOCS / "tenants" / "summary.csv"), POLICIES)
    header = ("condition", "noisy neighbour: B / C short P95, flood vs none",
              "5/3/2 backlogged: share / entitlement", "Jain",
              "guaranteed short P95 beside best-effort vs alone",
              "goodput vs one tenant (noisy / 5/3/2 / classes)")  # fmt: skip
    body = [
        (str(r["condition"]), f"{r['noisy_b']:.2f}x / {r['noisy_c']:.2f}x",
         f"{r['w5']:.3f} / {r['w3']:.3f} / {r['w2']:.3f}", f"{r['jain']:.3f}",
         f"{r['guaranteed']:.2f}x",
         f"{r['goodput_noisy']:.3f} / {r['goodput_entitlements']:.3f} / "
         f"{r['goodput_classes']:.3f}")
        for r in rows
    ]  # fmt: skip
    return _table(header, body)


def _plan(root: Path) -> str:
    """``docs/results/plan/``: each workload's plan and how the simulator judged it."""
    plans = _read(root / DOCS / "plan" / "plans.csv")
    checks = _read(root / DOCS / "plan" / "checks.csv")
    header = ("workload", "req/s", "SLOs", "one pool", "two pools: short + long @ B_short (γ)",
              "saving", "worst model error at plan", "one unit fewer misses (sim)",
              "plan time, 100k req")  # fmt: skip
    body = []
    for r in plans:
        if r["setting"] == "SLO-bound 0.99":
            continue
        mine = [c for c in checks if c["case"] == r["case"] and c["setting"] == r["setting"]
                and c["pool"] in ("one", "short", "long")]  # fmt: skip
        at_plan = [c for c in mine if c["vs plan"] == "+0" and c["error"]]
        worst = max(at_plan, key=lambda c: abs(float(c["error"].rstrip("%"))))
        smaller: dict[str, bool] = {}
        for c in mine:
            if c["vs plan"] == "-1":
                smaller[c["pool"]] = smaller.get(c["pool"], False) or c["sim meets SLO"] == "no"
        split = "none feasible"
        if r["B_short"]:
            split = (f"{r['n_s']}x{r['short_slots']} + {r['n_l']}x{r['long_slots']} @ "
                     f"{int(r['B_short']):,} ({float(r['gamma']):.1f})")  # fmt: skip
        label = r["case"] + (" + C&R" if r["setting"].startswith("C&R") else "")
        timing = r["planning_ms_100k"]
        body.append((
            label, f"{float(r['rate']):g}", r["slos"].replace("<=", " ≤ "),
            r["one_pool_units"], split, f"{100 * float(r['saving']):.1f}%",
            f"{worst['error']} ({worst['pool']}, {worst['slo'].split('<=')[0]})",
            f"{sum(smaller.values())} of {len(smaller)} pools",
            f"{float(timing):.0f} ms" if timing and timing != "nan" else "",
        ))  # fmt: skip
    return _table(header, body)


#: Columns of the batch table the README shows.
BATCH_COLUMNS: tuple[str, ...] = ("scenario", "contender", "makespan s", "vs recipe", "x floor",
                                  "429s")  # fmt: skip


def _perf(root: Path) -> str:
    """``docs/results/perf/perf.csv``: this tree against the first wave's, alternating."""
    import json

    from bench.perf_compare import table

    folder = root / DOCS / "perf"
    meta = json.loads((folder / "perf.json").read_text())
    rows = []
    for r in _read(folder / "perf.csv"):
        rows.append({k: (None if v == "-" else float(v) if k in _PERF_NUMBERS else v)
                     for k, v in r.items()})  # fmt: skip
    commits = meta["commits"]
    counted = (" Instructions: one count per side by valgrind's cachegrind (the load does "
               "not move it)." if meta.get("instructions") else "")  # fmt: skip
    return (
        f"{table(rows)}\n\nBaseline {commits['baseline']}, current {commits['current']}; "
        f"{meta['rounds']} rounds each, alternating, medians; {meta['machine']['cpus']} CPUs "
        f"(load average {meta['load_average'][0]:.1f} at the end).{counted}"
    )


_PERF_NUMBERS = ("baseline", "current", "ratio")


_BLOCKS: dict[str, Callable[[Path], str]] = {
    "quick": _quick,
    "rate-limits": _rate_limits,
    "live-check": _live_check,
    "batch": _batch,
    "cost": _cost,
    "default-prior": _default_prior,
    "routing": _routing,
    "shared-budget": _shared_budget,
    "shared-budget-faults": _shared_budget_faults,
    "tenants": _tenants,
    "gateway": _gateway,
    "gateway-tenants": _gateway_tenants,
    "gateway-replicas": _gateway_replicas,
    "gateway-priority": _gateway_priority,
    "plan": _plan,
    **REAL_ENGINE_BLOCKS,
    "perf": _perf,
}


def render_readme(text: str, root: Path) -> str:
    """``text`` with every generated block re-rendered from the committed results under ``root``.

    Raises:
        ValueError: For a block name this module does not know.
    """

    def block(match: re.Match[str]) -> str:
        name = match.group(1)
        render = _BLOCKS.get(name)
        if render is None:
            raise ValueError(f"README block {name!r} must be one of {sorted(_BLOCKS)}")
        return f"<!-- bench:{name} -->\n{render(root)}\n<!-- /bench:{name} -->"

    return re.sub(r"<!-- bench:([\w-]+) -->\n.*?<!-- /bench:\1 -->", block, text, flags=re.S)


def render_files(root: Path) -> None:
    """Re-render the generated blocks of every file in `RENDERED` under ``root``."""
    for name in RENDERED:
        path = root / name
        path.write_text(render_readme(path.read_text(encoding="utf-8"), root), encoding="utf-8")


def build_docs(
    root: Path, *, seeds: int = 5, live: bool = True, time_scale: float = 25.0, run: bool = True
) -> None:
    """Run the benchmarks the docs quote into ``root/docs/results`` and re-render the
    files of `RENDERED` (``run=False``: only re-render them from the committed results)."""
    if not run:
        render_files(root)
        return
    from bench.crosscheck import live_check
    from bench.experiments import quick
    from bench.runner import run_suite
    from bench.suite import experiment

    out = root / DOCS
    quick(out / "quick", seeds=seeds)
    run_suite([experiment("rate-limits")], out, seeds=seeds)
    if live:
        live_check(
            "rate-limits",
            out / "rate-limits" / "live-check",
            regime=LIVE_CHECK["regime"],
            condition=LIVE_CHECK["condition"],
            strategy=LIVE_CHECK["strategy"],
            seeds=seeds,
            time_scale=time_scale,
        )
    from bench.default_prior import default_prior

    default_prior(out / "default-prior", seeds=min(seeds, 3))
    from bench.routing import routing

    routing(out / "routing", seeds=seeds)
    if live:
        from bench.routing_live import routing_live_check

        routing_live_check(out / "routing" / "live-check")
    from bench.tenants import tenants

    tenants(out / "tenants", seeds=seeds)
    if live:
        from bench.tenants_live import tenants_live_check

        tenants_live_check(out / "tenants" / "live-check")
    from bench.plan_report import plan_benchmark

    plan_benchmark(out / "plan")
    render_files(root)
