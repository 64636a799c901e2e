"""The timing benchmarks of ``python -m bench``: their options and what each runs.

``decision-cost``, ``sim-speed``, ``perf`` (against a baseline) and
``sdk-overhead``; `bench.__main__` adds `add_parsers` to its
subcommands and dispatches to `COMMANDS`.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path
from typing import NoReturn

from bench.report import write_csv

__all__ = ["COMMANDS", "UsageError", "add_parsers", "error"]


class UsageError(Exception):
    """A bad option value; reported as argparse reports its own errors."""


def error(message: str) -> NoReturn:
    """Refuse an option value (``python -m bench`` prints it as a usage error)."""
    raise UsageError(message)


def add_parsers(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """The timing benchmarks' subcommands and options."""
    d = sub.add_parser(
        "decision-cost",
        help="decision latency vs queue length, and routing cost per policy (benchmark)",
    )
    d.add_argument("--out", type=Path, default=Path("results/perf"), help="output folder")
    d.add_argument("--samples", type=int, default=2000, help="decisions timed per size")
    d.add_argument("--endpoints", type=int, default=16, help="routing: endpoints (default 16)")
    d.add_argument("--queued", type=int, default=10_000, help="routing: queued (default 10000)")
    s = sub.add_parser("sim-speed", help="simulated requests per wall second (benchmark)")
    s.add_argument("--out", type=Path, default=Path("results/perf"), help="output folder")
    s.add_argument("--requests", type=int, default=20_000, help="requests to simulate")
    pf = sub.add_parser(
        "perf",
        help="decisions, simulator and routing against a baseline, alternating (benchmark)",
    )
    pf.add_argument("--baseline", required=True, help="a folder (worktree) or a commit")
    pf.add_argument("--out", type=Path, default=Path("results/perf-compare"), help="output folder")
    pf.add_argument("--rounds", type=int, default=2, help="rounds per side (default 2)")
    pf.add_argument("--samples", type=int, default=3000, help="decisions timed per measure")
    pf.add_argument("--requests", type=int, default=20_000, help="requests the simulator runs")
    pf.add_argument("--instructions", action="store_true",
                    help="also count each side's instructions per decision and per simulated "
                         "request with valgrind (one run per side; the machine's load does "
                         "not move a count)")  # fmt: skip
    o = sub.add_parser("sdk-overhead", help="what the SDK adds over bare AsyncOpenAI (benchmark)")
    o.add_argument("--out", type=Path, default=Path("results/perf"), help="output folder")
    o.add_argument("--samples", type=int, default=2000, help="latency iterations (2000)")
    o.add_argument("--calls", type=int, default=4000, help="calls per throughput run (4000)")
    o.add_argument("--repeats", type=int, default=3, help="throughput rounds (3)")
    o.add_argument("--priors", default="heuristic",
                   help="priors (heuristic: time the scheduler, not a model)")  # fmt: skip


def _perf_table(rows: list[dict[str, float]]) -> str:
    keys = list(rows[0])
    lines = ["  ".join(f"{k:>16}" for k in keys)]
    lines += ["  ".join(f"{row[k]:>16.1f}" for k in keys) for row in rows]
    return "\n".join(lines)


def _decision_cost(args: argparse.Namespace) -> Path:
    """The queue-length table (decision_cost.csv), then routing per policy (routing_cost.csv)."""
    from bench.perf import decision_cost, routing_cost

    if args.endpoints < 1:
        error(f"--endpoints={args.endpoints} must be >= 1")
    if args.queued < 0:
        error(f"--queued={args.queued} must be >= 0")
    rows = decision_cost(samples=args.samples)
    print(_perf_table(rows))
    ratio = rows[-1]["dispatch_p99_us"] / rows[1]["dispatch_p99_us"]
    print(f"dispatch p99 growth 1k -> 100k queued: {ratio:.2f}x")
    write_csv(Path(args.out) / "decision_cost.csv", rows)
    routed = routing_cost(endpoints=args.endpoints, queued=args.queued, samples=args.samples)
    print(f"\nrouting, {args.endpoints} endpoints, {args.queued} queued (µs; pick = Fleet.pick, "
          "dispatch = Engine.completed with routing)")  # fmt: skip
    keys = [k for k in routed[0] if k not in ("policy", "endpoints", "queued")]
    print(f"{'policy':>18}" + "".join(f"{k:>{len(k) + 2}}" for k in keys))
    for row in routed:
        print(f"{row['policy']:>18}" + "".join(f"{row[k]:>{len(k) + 2}.2f}" for k in keys))
    worst = max(routed, key=lambda row: float(row["pick_p99_us"]))
    met = sum(float(row["pick_p99_us"]) <= 20.0 for row in routed)
    print(f"pick p99 <= 20 µs (the target, set at 16 endpoints and 10k queued): "
          f"{met}/{len(routed)} policies in this run; worst {worst['policy']} "
          f"{float(worst['pick_p99_us']):.1f} µs")  # fmt: skip
    write_csv(Path(args.out) / "routing_cost.csv", routed)
    return Path(args.out)


def _sdk_overhead(args: argparse.Namespace) -> Path:
    from bench.sdk_perf import sdk_overhead, table

    for name, least in (("samples", 1), ("calls", 64), ("repeats", 1)):
        if getattr(args, name) < least:
            error(f"--{name}={getattr(args, name)} must be >= {least}")
    rows = sdk_overhead(samples=args.samples, calls=args.calls, repeats=args.repeats,
                        priors=args.priors)  # fmt: skip
    print(table(rows))
    written = Path(args.out) / "sdk_overhead.csv"
    write_csv(written, rows)
    return written


def _sim_speed(args: argparse.Namespace) -> Path:
    from bench.perf import sim_speed

    row = sim_speed(requests=args.requests)
    print(_perf_table([row]))
    written = Path(args.out) / "sim_speed.csv"
    write_csv(written, [row])
    return written


def _perf(args: argparse.Namespace) -> Path:
    from bench.perf_compare import perf_compare, table

    rows = perf_compare(
        Path(args.out), args.baseline, rounds=args.rounds, samples=args.samples,
        requests=args.requests, instructions=args.instructions,
    )  # fmt: skip
    print(table(rows))
    return Path(args.out) / "perf.csv"


COMMANDS: dict[str, Callable[[argparse.Namespace], Path]] = {
    "decision-cost": _decision_cost,
    "sim-speed": _sim_speed,
    "perf": _perf,
    "sdk-overhead": _sdk_overhead,
}
