"""``python -m bench concurrency``'s command line: its flags, and the run they ask for."""

from __future__ import annotations

import argparse
from pathlib import Path

__all__ = ["add_parser", "run"]


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text} must be >= 1")
    return value


def _sizes(text: str) -> list[int]:
    try:
        sizes = [int(n) for n in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} must be comma-separated integers") from None
    if not sizes or min(sizes) < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: every fleet size must be >= 1")
    return sizes


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """The ``concurrency`` subcommand and its flags."""
    cc = sub.add_parser("concurrency", help="learned concurrency limits vs the true slots")
    cc.add_argument("--out", type=Path, default=Path("docs/results/concurrency"), help="output")
    cc.add_argument("--seeds", type=_positive, default=3, help="seeds per cell (default 3)")
    cc.add_argument("--requests", type=_positive, default=2000, help="requests per run (2000)")
    cc.add_argument("--sizes", type=_sizes, default=[1, 4, 16],
                    help="comma-separated fleet sizes (1,4,16)")  # fmt: skip
    cc.add_argument("--halving-requests", type=_positive, default=2500,
                    help="the halving run's (2500)")  # fmt: skip


def run(args: argparse.Namespace) -> Path:
    """Run the benchmark the flags ask for; print its tables; the folder written."""
    from bench.concurrency import concurrency

    written = concurrency(args.out, seeds=args.seeds, requests=args.requests, sizes=args.sizes,
                          halving_requests=args.halving_requests)  # fmt: skip
    print((written / "tables.md").read_text())
    return written
