"""``python -m bench``: the benchmark harness's command line."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from bench.experiments import quick


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    q = sub.add_parser(
        "quick",
        help="balanced/high: naive, quota-tiered, adaptive DRR, full stack; mean ± std over seeds",
    )
    q.add_argument("--out", type=Path, default=Path("results/quick"), help="output folder")
    q.add_argument("--seeds", type=int, default=5, help="seeds per strategy (default 5)")
    q.add_argument("--workers", type=int, default=None, help="processes (default: all cores)")
    args = parser.parse_args(argv)
    if args.seeds < 1:
        parser.error(f"--seeds={args.seeds} must be >= 1")
    start = time.perf_counter()
    if args.command == "quick":
        quick(args.out, seeds=args.seeds, workers=args.workers)
    print(f"\nwrote {args.out}/summary.csv in {time.perf_counter() - start:.1f}s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
