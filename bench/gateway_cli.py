"""``python -m bench gateway``, ``gateway-faults`` and ``gateway-priority``: their flags,
and the runs they ask for (the benchmarks of ``semisched serve``)."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path

from bench.timing_cli import error

__all__ = ["COMMANDS", "add_parsers"]


def add_parsers(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """The gateway benchmarks' subcommands and their flags."""
    gw = sub.add_parser("gateway", help="what semisched serve costs and buys: overhead, a "
                        "noisy neighbour, two replicas on one key (benchmark)")  # fmt: skip
    gw.add_argument("--out", type=Path, default=Path("results/gateway"), help="output folder")
    gw.add_argument("--parts", default="overhead,tenants,replicas",
                    help="comma-separated parts (default: overhead,tenants,replicas)")  # fmt: skip
    gw.add_argument("--rates", default="100,500", help="open-loop requests/s (100,500)")
    gw.add_argument("--seconds", type=float, default=10.0, help="open-loop duration (10)")
    gw.add_argument("--connections", type=int, default=32, help="closed-loop connections (32)")
    gw.add_argument("--requests", type=int, default=5000, help="closed-loop requests (5000)")
    gw.add_argument("--rounds", type=int, default=3, help="overhead rounds, alternated (3)")
    gw.add_argument("--quick", action="store_true",
                    help="tenants: a fifth of the span")  # fmt: skip
    gf = sub.add_parser("gateway-faults", help="a fault campaign against a real semisched "
                        "serve: storms, slow and hostile clients, upstream faults")  # fmt: skip
    gf.add_argument("--out", type=Path, default=Path("results/gateway"), help="output folder")
    gf.add_argument("--runs", type=int, default=10, help="disconnect storm runs (10)")
    gf.add_argument("--requests", type=int, default=1000,
                    help="requests per storm run (1000)")  # fmt: skip
    gf.add_argument("--concurrency", type=int, default=100, help="storm clients at once (100)")
    gf.add_argument("--sigterm-requests", type=int, default=200,
                    help="requests held when SIGTERM comes (200)")  # fmt: skip
    gf.add_argument("--seed", type=int, default=0, help="the storm's seed (0)")
    gf.add_argument("--quick", action="store_true", help="tiny sizes: seconds, for the test")
    gp = sub.add_parser("gateway-priority", help="priority through a real semisched serve: "
                        "a trickle beside a flood, marked or not, fresh and warm")  # fmt: skip
    gp.add_argument("--out", type=Path, default=Path("docs/results/gateway-priority"),
                    help="output folder (docs/results/gateway-priority)")  # fmt: skip
    gp.add_argument("--runs", type=int, default=1, help="runs of every cell, medians (1)")
    gp.add_argument("--quick", action="store_true", help="tiny sizes: seconds, for the test")


def _gateway(args: argparse.Namespace) -> Path:
    from bench.gateway import gateway_bench

    try:
        rates = [float(r) for r in args.rates.split(",") if r]
        parts = [p for p in args.parts.split(",") if p]
        written = gateway_bench(args.out, parts=parts, rates=rates, seconds=args.seconds,
                                connections=args.connections, requests=args.requests,
                                rounds=args.rounds, quick=args.quick)  # fmt: skip
    except ValueError as exc:
        error(str(exc))
    print(written.read_text())
    return written


def _gateway_faults(args: argparse.Namespace) -> Path:
    from bench.gateway_faults import Campaign, fault_campaign

    if args.quick:
        sizes = {"runs": 1, "requests": 40, "concurrency": 10, "sigterm_requests": 30}
    else:
        sizes = {"runs": args.runs, "requests": args.requests, "concurrency": args.concurrency,
                 "sigterm_requests": args.sigterm_requests}  # fmt: skip
    try:
        campaign = Campaign(**sizes, quick=args.quick, seed=args.seed)
    except ValueError as exc:
        error(str(exc))
    default = Campaign()
    command = " ".join(["python -m bench gateway-faults", "--out", str(args.out),
                        *(["--quick"] if args.quick else
                          [f"--{k.replace('_', '-')} {v}" for k, v in sizes.items()
                           if v != getattr(default, k)])])  # fmt: skip
    written = fault_campaign(Path(args.out), campaign, command=command)
    print(written.read_text())
    return written


def _gateway_priority(args: argparse.Namespace) -> Path:
    from dataclasses import replace

    from bench.gateway_priority import QUICK, PriorityRun, priority_bench

    try:
        run = replace(QUICK if args.quick else PriorityRun(), runs=args.runs)
    except ValueError as exc:
        error(str(exc))
    command = " ".join(["python -m bench gateway-priority", "--out", str(args.out),
                        *(["--quick"] if args.quick else []),
                        *([f"--runs {args.runs}"] if args.runs != 1 else [])])  # fmt: skip
    written = priority_bench(Path(args.out), run, command=command)
    print(written.read_text())
    return written


#: The gateway benchmarks by subcommand.
COMMANDS: dict[str, Callable[[argparse.Namespace], Path]] = {
    "gateway": _gateway,
    "gateway-faults": _gateway_faults,
    "gateway-priority": _gateway_priority,
}
