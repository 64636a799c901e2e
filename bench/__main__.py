"""python -m bench: the benchmark harness's command line.

Subcommands:
  quick           balanced/high, naive vs quota-tiered vs adaptive DRR vs full stack
  decision-cost   one scheduling decision at 100 .. 100k queued, and one routing
                  decision per policy at 16 endpoints (timing benchmark)
  sim-speed       simulated requests per wall second at ~100 in flight
  perf            decisions, simulator and routing against a baseline commit or
                  worktree, the two taking turns: one table of ratios
  sdk-overhead    latency and throughput the async SDK adds over the bare openai client
  all             every experiment of the paper's evaluation + REPRODUCTION.md
  live-check      one cell of an experiment, simulated and live, compared
  docs            regenerate docs/results/ and the generated tables of the README and guides
  NAME            one experiment: information-ladder, main-comparison,
                  overload-policies, fair-queuing, layerwise, sensitivity,
                  predictor-noise, sharegpt-trace; beyond the paper:
                  rate-limits (client budgets vs the provider's 429s), prior-levers
                  (how routing reads a prior's uncertainty)
  default-prior   the SDK's default prior under overload: 1,000 calls at ~10x capacity
  routing         routing policies over a heterogeneous fleet, simulated;
                  --live-check adds one regime through the SDK and the HTTP fleet mock
  shared-budget   N worker processes on one provider limit: shared Redis state vs a
                  static split vs uncoordinated (real processes, real Redis)
  tenants         tenants: noisy neighbour, entitlements, service classes,
                  simulated; --live-check adds the noisy neighbour through the SDK
  apis            the quick comparison's strategies over one key spent by chat, the
                  Responses API and embeddings (SDK and mock, virtual time)
  cost            semisched batch --tier realtime, batch and auto on one job with
                  deadlines: cost, makespan, deadlines met; a killed auto run resumed
  concurrency     learned per-endpoint concurrency limits vs the true slots told,
                  simulated, and how fast the limit follows a halving
  plan            the capacity planner: plans for the paper's mixes and ShareGPT,
                  analytic vs simulated tails at the planned size and one unit smaller,
                  compress-and-route
  gateway         what `semisched serve` costs and buys: added p50/p99 over calling the
                  upstream straight, requests/s and CPU per request of one gateway process;
                  a noisy neighbour through it; two replicas sharing one key via Redis
  gateway-faults  a fault campaign against a real `semisched serve` on loopback: a
                  disconnect storm, slow and hostile clients, memory, upstream faults,
                  SIGTERM under load (faults.md and faults.csv)
  gateway-priority
                  priority through a real `semisched serve` out of the box: a high-priority
                  trickle beside a low-priority flood at 1.5x capacity, marked or not,
                  on a fresh and a warm gateway process (results.md and results.json)
  real-engine     llama.cpp's llama-server built here: setup (build it and a random-weight
                  model), fit (the mock's llama-cpp profile), compare (mock vs engine)
  dashboard       an overload seen through the SDK's and the mock's Prometheus metrics:
                  Grafana-like panels (dashboard.png) and their series
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.experiments import quick
from bench.gateway_cli import COMMANDS as GATEWAY
from bench.timing_cli import COMMANDS as TIMING
from bench.timing_cli import UsageError, error
from bench.timing_cli import add_parsers as add_timing
from semisched.extras import MissingDependency, needs


def _parser() -> argparse.ArgumentParser:
    """Every subcommand and its options (a declarative table, hence its length)."""
    parser = argparse.ArgumentParser(
        prog="python -m bench",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = parser.add_subparsers(dest="command", required=True)
    q = sub.add_parser(
        "quick",
        help="balanced/high: naive, quota-tiered, adaptive DRR, full stack; mean ± std over seeds",
    )
    q.add_argument("--out", type=Path, default=Path("results/quick"), help="output folder")
    q.add_argument("--seeds", type=int, default=5, help="seeds per strategy (default 5)")
    q.add_argument("--workers", type=int, default=None, help="processes (default: all cores)")
    q.add_argument(
        "--live",
        action="store_true",
        help="also run through the real SDK and the HTTP mock on loopback (compressed time)",
    )
    q.add_argument(
        "--time-scale", type=float, default=25.0, help="live time compression (default 25)"
    )
    add_timing(sub)
    from bench.suite import BEYOND, EXPERIMENTS

    for name in ("all", *(e.name for e in (*EXPERIMENTS, *BEYOND))):
        e = sub.add_parser(name, help="the whole evaluation" if name == "all" else "one experiment")
        e.add_argument("--out", type=Path, default=Path("results"), help="output folder")
        e.add_argument("--seeds", type=int, default=5, help="seeds per cell (default 5)")
        e.add_argument("--workers", type=int, default=None, help="processes (default: all cores)")
        e.add_argument("--live", action="store_true", help="through the real SDK + HTTP mock")
        e.add_argument("--time-scale", type=float, default=25.0, help="live time compression")
        e.add_argument("--traces", action="store_true", help="also write per-request traces")
    lc = sub.add_parser("live-check", help="one experiment cell: simulator vs SDK + HTTP mock")
    lc.add_argument("experiment", help="experiment name, e.g. rate-limits")
    lc.add_argument("--regime", default="balanced/high", help="regime (default balanced/high)")
    lc.add_argument("--condition", required=True, help="the cell's condition label")
    lc.add_argument("--strategy", default="final_adrr_olc", help="strategy (final_adrr_olc)")
    lc.add_argument("--seeds", type=int, default=3, help="seeds (default 3)")
    lc.add_argument("--time-scale", type=float, default=25.0, help="live time compression")
    lc.add_argument("--tolerance", type=float, default=0.10, help="agreement bound (0.10)")
    lc.add_argument("--out", type=Path, default=Path("results/live-check"), help="output folder")
    dc = sub.add_parser("docs", help="regenerate docs/results/ and the README's and guides' tables")
    dc.add_argument("--seeds", type=int, default=5, help="seeds per cell (default 5)")
    dc.add_argument("--skip-live", action="store_true", help="keep the committed live check")
    dc.add_argument("--time-scale", type=float, default=25.0, help="live time compression")
    dc.add_argument("--render-only", action="store_true",
                    help="rerun nothing: re-render the tables from committed results")  # fmt: skip
    b = sub.add_parser("batch", help="semisched batch vs the fixed-rate recipe (benchmark)")
    b.add_argument("--out", type=Path, default=Path("results/batch"), help="output folder")
    b.add_argument(
        "--workload",
        choices=("sharegpt", "mixed"),
        default="sharegpt",
        help="held-out ShareGPT prompts (default), or mixed lengths where RPM and "
        "TPM both bind; one per run (each sets the defaults in parentheses below)",
    )
    b.add_argument("--requests", type=int, help="requests in the batch (600 | mixed 400)")
    b.add_argument("--rpm", type=int, help="provider limit = budgets (300 | mixed 100)")
    b.add_argument("--tpm", type=int, help="provider limit = budgets (150000 | mixed 40000)")
    b.add_argument("--repeats", type=int, default=2, help="runs per contender (2)")
    b.add_argument("--time-scale", type=float, help="time compression (20 | mixed 25)")
    b.add_argument(
        "--policies",
        help="comma-separated presets for the semisched rows; 'default' is semisched batch's "
        "default (default | mixed: default,batch_makespan)",
    )
    b.add_argument("--seed", type=int, default=0, help="workload sample seed (0)")
    dp = sub.add_parser(
        "default-prior",
        help="the SDK's default prior under overload: 1,000 calls at ~10x capacity",
    )
    dp.add_argument("--out", type=Path, default=Path("results/default-prior"), help="output folder")
    dp.add_argument("--seeds", type=int, default=3, help="seeds per cell (default 3)")
    dp.add_argument("--workers", type=int, default=None, help="processes (default: all cores)")
    dp.add_argument("--workloads", help="comma-separated: exact,bounded,sharegpt (default all)")
    rt = sub.add_parser("routing", help="routing policies over a heterogeneous fleet")
    rt.add_argument("--out", type=Path, default=Path("results/routing"), help="output folder")
    rt.add_argument("--seeds", type=int, default=5, help="seeds per cell (default 5)")
    rt.add_argument("--requests", type=int, default=600, help="requests per run (600)")
    rt.add_argument("--workers", type=int, default=None, help="processes (default: all cores)")
    rt.add_argument("--regimes", help="comma-separated regimes (default: balanced and heavy, "
                    "medium and high)")  # fmt: skip
    rt.add_argument("--live-check", action="store_true",
                    help="also run one regime through the SDK and the HTTP fleet mock")  # fmt: skip
    tn = sub.add_parser("tenants", help="tenants: noisy neighbour, entitlements, service "
                        "classes, simulated")  # fmt: skip
    tn.add_argument("--out", type=Path, default=Path("results/tenants"), help="output folder")
    tn.add_argument("--seeds", type=int, default=5, help="seeds per cell (default 5)")
    tn.add_argument("--workers", type=int, default=None, help="processes (default: all cores)")
    tn.add_argument("--live-check", action="store_true",
                    help="also the noisy neighbour through the SDK and the HTTP mock")  # fmt: skip
    from bench.concurrency_cli import add_parser as add_concurrency

    add_concurrency(sub)
    from bench.apis import add_parser as add_apis

    add_apis(sub)
    from bench.cost import add_parser as add_cost

    add_cost(sub)
    pl = sub.add_parser("plan", help="the capacity planner: plans, analytic vs "
                        "simulated tails, compress-and-route")  # fmt: skip
    pl.add_argument("--out", type=Path, default=Path("results/plan"), help="output folder")
    pl.add_argument("--workers", type=int, default=None, help="processes (default: all cores)")
    pl.add_argument("--cases", default=None,
                    help="comma-separated cases (default: balanced,heavy,sharegpt)")  # fmt: skip
    db = sub.add_parser("dashboard", help="an overload through the SDK's Prometheus metrics: "
                        "Grafana-like panels and series")  # fmt: skip
    db.add_argument("--out", type=Path, default=Path("results/dashboard"), help="output folder")
    db.add_argument("--regime", default="balanced/high", help="workload regime (balanced/high)")
    db.add_argument("--requests", type=int, default=600, help="requests (600)")
    db.add_argument("--seed", type=int, default=0, help="workload seed (0)")
    db.add_argument("--scrape", type=float, default=5.0,
                    help="virtual seconds between scrapes; divides 60 (5)")  # fmt: skip
    from bench.gateway_cli import add_parsers as add_gateway

    add_gateway(sub)
    from bench.real_engine.cli import add_parser as add_real_engine

    add_real_engine(sub)
    sb = sub.add_parser("shared-budget", help="N workers on one limit: shared vs static vs "
                        "uncoordinated")  # fmt: skip
    sb.add_argument("--out", type=Path, default=Path("results/shared-budget"), help="output folder")
    sb.add_argument("--workers", help="comma-separated worker counts (1,2,4,8)")
    sb.add_argument("--modes", help="comma-separated: shared,static,uncoordinated (all)")
    sb.add_argument("--requests", type=int, help="calls per run, split 2^-i (180)")
    sb.add_argument("--rpm", type=int, help="the mock's request limit (60)")
    sb.add_argument("--tpm", type=int, help="the mock's token limit (20000)")
    sb.add_argument("--time-scale", type=float, help="time compression (30)")
    sb.add_argument("--repeats", type=int, help="runs per configuration (2)")
    sb.add_argument("--seed", type=int, help="the first repeat's seed (0)")
    sb.add_argument("--margin", type=float, help="each budget's margin_s, virtual s (1)")
    sb.add_argument("--probe", type=int, help="round-trip probe reservations per process (300)")
    sb.add_argument("--faults", help="comma-separated store faults: kill,stop (both), or none")
    return parser


def _check_seeds(args: argparse.Namespace) -> None:
    if args.seeds < 1:
        error(f"--seeds={args.seeds} must be >= 1")


def _quick(args: argparse.Namespace) -> Path:
    _check_seeds(args)
    if not args.time_scale > 0:
        error(f"--time-scale={args.time_scale} must be > 0")
    quick(args.out, seeds=args.seeds, workers=args.workers, live=args.live,
          time_scale=args.time_scale)  # fmt: skip
    return Path(args.out) / "summary.csv"


def _experiments(args: argparse.Namespace) -> Path:
    from bench.runner import experiments_named, run_suite

    _check_seeds(args)
    summaries = run_suite(experiments_named([args.command]), args.out, seeds=args.seeds,
                          workers=args.workers, live=args.live, time_scale=args.time_scale,
                          traces=args.traces)  # fmt: skip
    if args.command != "all":
        return Path(args.out)
    from bench.claims import write_reproduction

    written = write_reproduction(summaries, args.out, live=args.live)
    print(written.read_text())
    return written


def _live_check(args: argparse.Namespace) -> Path:
    from bench.crosscheck import live_check

    if args.seeds < 1 or not args.time_scale > 0 or not args.tolerance > 0:
        error("--seeds, --time-scale and --tolerance must be > 0")
    try:
        live_check(args.experiment, args.out, regime=args.regime, condition=args.condition,
                   strategy=args.strategy, seeds=args.seeds, time_scale=args.time_scale,
                   tolerance=args.tolerance)  # fmt: skip
    except ValueError as exc:
        error(str(exc))
    return Path(args.out) / "live_check.md"


def _docs(args: argparse.Namespace) -> Path:
    from bench.docs import DOCS, build_docs

    _check_seeds(args)
    build_docs(Path.cwd(), seeds=args.seeds, live=not args.skip_live,
               time_scale=args.time_scale, run=not args.render_only)  # fmt: skip
    return DOCS


def _batch(args: argparse.Namespace) -> Path:
    from bench.batch_bench import WORKLOADS, batch_benchmark, contenders

    for name in ("requests", "rpm", "tpm"):
        if getattr(args, name) is not None and getattr(args, name) < 1:
            error(f"--{name}={getattr(args, name)} must be >= 1")
    if args.repeats < 1:
        error(f"--repeats={args.repeats} must be >= 1")
    if args.time_scale is not None and not args.time_scale > 0:
        error(f"--time-scale={args.time_scale} must be > 0")
    policies = None if args.policies is None else [p.strip() for p in args.policies.split(",")]
    try:
        contenders(WORKLOADS[args.workload], policies=policies)  # names checked before any run
    except ValueError as exc:
        error(f"--policies: {exc}")
    print(batch_benchmark(args.out, workload=args.workload, requests=args.requests,
                          rpm=args.rpm, tpm=args.tpm, time_scale=args.time_scale,
                          repeats=args.repeats, policies=policies, seed=args.seed))  # fmt: skip
    return Path(args.out) / "table.md"


def _default_prior(args: argparse.Namespace) -> Path:
    from bench.default_prior import WORKLOADS, default_prior

    _check_seeds(args)
    workloads = WORKLOADS if args.workloads is None else tuple(args.workloads.split(","))
    try:
        written = default_prior(args.out, seeds=args.seeds, workloads=workloads,
                                workers=args.workers)  # fmt: skip
    except ValueError as exc:
        error(f"--workloads: {exc}")
    print(written.read_text())
    return written


def _routing(args: argparse.Namespace) -> Path:
    from bench.routing import REGIMES, routing

    _check_seeds(args)
    regimes = REGIMES if args.regimes is None else tuple(args.regimes.split(","))
    try:
        written = routing(args.out, seeds=args.seeds, regimes=regimes, requests=args.requests,
                          workers=args.workers)  # fmt: skip
    except ValueError as exc:
        error(f"--regimes: {exc}")
    if args.live_check:
        from bench.routing_live import routing_live_check

        routing_live_check(written / "live-check")
        print((written / "live-check" / "tables.md").read_text())
    print((written / "tables.md").read_text())
    return written


def _tenants(args: argparse.Namespace) -> Path:
    from bench.tenants import tenants

    _check_seeds(args)
    written = tenants(args.out, seeds=args.seeds, workers=args.workers)
    if args.live_check:
        from bench.tenants_live import tenants_live_check

        tenants_live_check(written / "live-check")
        print((written / "live-check" / "tables.md").read_text())
    print((written / "tables.md").read_text())
    return written


def _apis(args: argparse.Namespace) -> Path:
    from bench.apis import run

    return run(args)


def _cost(args: argparse.Namespace) -> Path:
    from bench.cost import run

    return run(args)


def _concurrency(args: argparse.Namespace) -> Path:
    from bench.concurrency_cli import run

    return run(args)


def _plan(args: argparse.Namespace) -> Path:
    from bench.plan import CASES
    from bench.plan_report import plan_benchmark

    cases = CASES
    if args.cases:
        names = [n.strip() for n in args.cases.split(",")]
        unknown = sorted(set(names) - {c.name for c in CASES})
        if unknown:
            error(f"--cases: unknown {unknown}; known: {[c.name for c in CASES]}")
        cases = tuple(c for c in CASES if c.name in names)
    written = plan_benchmark(Path(args.out), cases=cases, workers=args.workers)
    print((written / "plans.md").read_text())
    print((written / "summary.md").read_text())
    return written


def _dashboard(args: argparse.Namespace) -> Path:
    from bench.dashboard import DashboardRun, dashboard
    from bench.workloads import regime

    try:
        regime(args.regime)
        run = DashboardRun(regime=args.regime, requests=args.requests, seed=args.seed,
                           scrape_s=args.scrape)  # fmt: skip
    except ValueError as exc:
        error(str(exc))
    summary = dashboard(args.out, run)
    for key, value in summary.items():
        print(f"{key:>24}  {value:10.3f}" if isinstance(value, float) else f"{key:>24}  {value}")
    return Path(args.out) / "dashboard.png"


def _shared_budget(args: argparse.Namespace) -> Path:
    from bench.shared_budget import SharedBudgetConfig, shared_budget, with_options

    def listed(text: str | None, kind: type[int] | type[str]) -> tuple[Any, ...] | None:
        return None if text is None else tuple(kind(x.strip()) for x in text.split(","))

    faults = () if args.faults == "none" else listed(args.faults, str)
    try:
        config = with_options(SharedBudgetConfig(), workers=listed(args.workers, int),
                              modes=listed(args.modes, str), requests=args.requests,
                              rpm=args.rpm, tpm=args.tpm, time_scale=args.time_scale,
                              repeats=args.repeats, seed=args.seed, margin_s=args.margin,
                              probe=args.probe, faults=faults)  # fmt: skip
    except ValueError as exc:
        error(str(exc))
    written = shared_budget(args.out, config)
    print(written.read_text())
    return written


def _real_engine(args: argparse.Namespace) -> Path:
    from bench.real_engine.cli import run

    return run(args)


_COMMANDS: dict[str, Callable[[argparse.Namespace], Path]] = {
    "quick": _quick,
    **TIMING,
    "live-check": _live_check,
    "docs": _docs,
    "batch": _batch,
    "default-prior": _default_prior,
    "routing": _routing,
    "shared-budget": _shared_budget,
    "tenants": _tenants,
    "concurrency": _concurrency,
    "apis": _apis,
    "cost": _cost,
    "plan": _plan,
    "dashboard": _dashboard,
    **GATEWAY,
    "real-engine": _real_engine,
}


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    start = time.perf_counter()
    handler = _COMMANDS.get(args.command, _experiments)  # the rest name experiments
    try:
        with needs(f"python -m bench {args.command}", extra="bench"):
            written = handler(args)
    except UsageError as exc:
        parser.error(str(exc))
    except MissingDependency as exc:
        parser.exit(2, f"{parser.prog}: {exc}\n")
    print(f"\nwrote {written} in {time.perf_counter() - start:.1f}s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
