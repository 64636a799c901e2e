"""``semisched plan``: how many units a workload needs for its SLOs, in one pool or two.

Usage:

```text
semisched plan --trace requests.jsonl --rate 20 --slo ttft_p99<=2 [--json]
semisched plan --mix balanced --rate 20 --slo interactive:e2e_p95<=5 --slo batch:e2e_p95<=200
semisched plan --batch input.jsonl --rate 5 --slo e2e_p95<=60 --compress
semisched plan ... --fleet-out fleet.toml [--base-url URL_WITH_{name}] [--key-env VAR]
semisched plan fit LOG [--profile NAME] [--out profile.json]
```

Exit status: 0 planned; 2 bad input, or an SLO no fleet can meet (the message
says what it would take). The planner is `semisched.plan.planner`; this
module reads arguments and files and prints.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, TextIO

from semisched.plan.fleetout import DEFAULT_BASE_URL, client_fleet_toml, mock_fleet_toml
from semisched.plan.planner import MAX_UTILISATION, Infeasible, make_plan
from semisched.plan.profile import (
    UnitProfile,
    load_profile,
    named_profile,
    profile_names,
)
from semisched.plan.report import plan_json, plan_table
from semisched.plan.slo import parse_slo
from semisched.plan.workload import Workload, load_batch, load_trace, mix_workload

__all__ = ["main", "plan_main"]

#: ``semisched plan --help``'s description: the module docstring as plain text.
DESCRIPTION = """\
How many units a workload needs for its SLOs, in one pool or two.

examples:
  semisched plan --trace requests.jsonl --rate 20 --slo ttft_p99<=2 [--json]
  semisched plan --mix balanced --rate 20 --slo interactive:e2e_p95<=5 --slo batch:e2e_p95<=200
  semisched plan --batch input.jsonl --rate 5 --slo e2e_p95<=60 --compress
  semisched plan ... --fleet-out fleet.toml [--base-url URL_WITH_{name}] [--key-env VAR]
  semisched plan fit LOG [--profile NAME] [--out profile.json]

Exit status: 0 planned; 2 bad input, or an SLO no fleet can meet (the message
says what it would take)."""

#: Profile overrides: option -> UnitProfile field and type.
_OVERRIDES: dict[str, tuple[str, type]] = {
    "--base-iter-ms": ("base_iter_ms", float),
    "--per-slot-ms": ("per_slot_ms", float),
    "--slots": ("slots", int),
    "--context-tokens": ("context_tokens", int),
    "--prefill-chunk": ("prefill_chunk", int),
    "--overhead-ms": ("overhead_ms", float),
    "--cost": ("cost_per_hour", float),
    "--max-slots": ("max_slots", int),
}


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="semisched plan",
        description=DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    _workload_options(parser)
    unit = parser.add_argument_group("unit profile")
    unit.add_argument(
        "--profile",
        default="default",
        help=f"a named profile ({', '.join(profile_names())}; default 'default')",
    )
    unit.add_argument(
        "--profile-file", type=Path, help="a profile JSON (`semisched plan fit --out`)"
    )
    for option, (field, kind) in _OVERRIDES.items():
        unit.add_argument(option, type=kind, dest=field, help=f"override the profile's {field}")
    _sweep_options(parser.add_argument_group("two-pool sweep"))
    _output_options(parser.add_argument_group("output"))
    return parser


def _workload_options(parser: argparse.ArgumentParser) -> None:
    """The workload (one source of requests), its rate and the SLOs."""
    source = parser.add_argument_group("workload (one of)")
    one = source.add_mutually_exclusive_group(required=True)
    one.add_argument(
        "--trace",
        type=Path,
        help="JSONL: prompt_tokens, output_tokens[, arrival, "
        "class, max_tokens, floor_tokens] per line",
    )
    one.add_argument(
        "--batch",
        type=Path,
        help="a `semisched batch` input file (priors give each request's output length)",
    )
    one.add_argument("--mix", help="a synthetic mix: balanced, heavy, heavy70")
    source.add_argument("--requests", type=int, default=100_000, help="--mix: draws (100000)")
    source.add_argument("--seed", type=int, default=0, help="--mix draws and p_c draws (0)")
    source.add_argument(
        "--priors",
        default="auto",
        choices=("auto", "learned", "heuristic"),
        help="--batch: the output-length priors (auto)",
    )
    parser.add_argument("--rate", type=float, help="arrivals per second (default: the trace's)")
    parser.add_argument(
        "--slo",
        action="append",
        required=True,
        metavar="[CLASS:]METRIC_pNN<=S",
        help="an objective, e.g. ttft_p99<=2 or batch:e2e_p95<=60 (repeatable)",
    )


def _sweep_options(sweep: argparse._ArgumentGroup) -> None:
    """The candidate boundaries, compression and the utilisation cap."""
    sweep.add_argument(
        "--boundary",
        type=int,
        action="append",
        help="candidate B_short (repeatable; "
        "default: the context over powers of two and 1.5x powers of two)",
    )
    sweep.add_argument(
        "--compressibility",
        type=float,
        default=0.0,
        help="p_c: share of borderline requests whose prompts compress (0: none)",
    )
    sweep.add_argument(
        "--compress",
        action="store_true",
        help="--batch: compute each prompt's compression floor from its text",
    )
    sweep.add_argument(
        "--max-utilisation",
        type=float,
        default=MAX_UTILISATION,
        help=f"utilisation cap per pool ({MAX_UTILISATION})",
    )


def _output_options(out: argparse._ArgumentGroup) -> None:
    """The table or JSON, and the fleet files."""
    out.add_argument("--json", action="store_true", help="print JSON instead of the table")
    out.add_argument("--fleet-out", type=Path, help="write the recommended fleet as a fleet file")
    out.add_argument(
        "--base-url",
        default=DEFAULT_BASE_URL,
        help=f"--fleet-out: endpoint URL template with {{name}} (default {DEFAULT_BASE_URL})",
    )
    out.add_argument("--key-env", help="--fleet-out: the variable holding the endpoints' API key")
    out.add_argument(
        "--mock-fleet-out",
        type=Path,
        help="write a mock provider fleet file serving the recommended units",
    )


def profile_from_args(args: argparse.Namespace) -> UnitProfile:
    """The unit: a named or file profile with the options' overrides."""
    base = load_profile(args.profile_file) if args.profile_file else named_profile(args.profile)
    changes = {
        field: getattr(args, field)
        for field, _ in _OVERRIDES.values()
        if getattr(args, field) is not None
    }
    if changes and "max_slots" not in changes and changes.get("slots", 0) > base.max_slots:
        changes["max_slots"] = changes["slots"]
    return base.with_(**changes) if changes else base


def workload_from_args(args: argparse.Namespace) -> tuple[Workload, str]:
    """The workload and a short description of its source."""
    if args.trace is not None:
        return load_trace(args.trace), f"trace {args.trace}"
    if args.mix is not None:
        return mix_workload(args.mix, requests=args.requests, seed=args.seed), f"mix {args.mix}"
    return _batch_workload(args), f"batch {args.batch}"


def _batch_workload(args: argparse.Namespace) -> Workload:
    from semisched.priors.default import choose_priors
    from semisched.priors.sources import PriorQuery
    from semisched.runtime.estimate import prompt_bytes

    source, _ = choose_priors(args.priors, asked_by=f"--priors {args.priors}")

    def priors(bodies: Sequence[dict[str, Any]]) -> list[tuple[float, float]]:
        queries = [
            PriorQuery(
                request_id=str(i), messages=tuple(b["messages"]), max_tokens=b.get("max_tokens")
            )
            for i, b in enumerate(bodies)
        ]
        batch = getattr(source, "prior_batch", None)
        answers = batch(queries) if callable(batch) else [source.prior(q) for q in queries]
        return [(a.p50, a.p90) for a in answers]

    def count(messages: Sequence[Mapping[str, Any]]) -> int:
        # The runtime's first estimate: 4 bytes per token (semisched.runtime.estimate).
        return math.ceil(prompt_bytes(messages=messages)[0] / 4.0)

    floor = None
    if args.compress:
        from semisched.compress.compressor import ExtractiveCompressor

        compressor = ExtractiveCompressor()

        def floor(messages: Sequence[Mapping[str, Any]]) -> int:
            return compressor.floor(list(messages))

    return load_batch(args.batch, priors, count_tokens=count, floor_tokens=floor)


def plan_main(argv: Sequence[str], stream: TextIO) -> int:
    """Run ``semisched plan`` (or ``semisched plan fit``) with ``argv``; return the exit status."""
    if argv[:1] == ["fit"]:
        from semisched.plan.fit import fit_main

        return fit_main(argv[1:], stream)
    args = _parser().parse_args(argv)
    try:
        profile = profile_from_args(args)
        slos = [parse_slo(text) for text in args.slo]
        workload, source = workload_from_args(args)
        rate = args.rate if args.rate is not None else workload.arrival_rate()
        if rate is None:
            raise ValueError("--rate is needed: the workload has no arrival times to take it from")
        if not rate > 0 or not math.isfinite(rate):
            raise ValueError(f"--rate {rate!r} must be a positive number of requests per second")
        started = time.perf_counter()
        plan = make_plan(
            workload,
            rate=rate,
            slos=slos,
            profile=profile,
            compressibility=args.compressibility,
            max_utilisation=args.max_utilisation,
            boundaries=args.boundary,
            seed=args.seed,
        )
        elapsed = time.perf_counter() - started
        if args.fleet_out is not None:
            text = client_fleet_toml(plan, base_url=args.base_url, key_env=args.key_env)
            args.fleet_out.write_text(text, encoding="utf-8")
        if args.mock_fleet_out is not None:
            args.mock_fleet_out.write_text(mock_fleet_toml(plan), encoding="utf-8")
    except Infeasible as exc:
        print(f"semisched plan: infeasible: {exc}", file=sys.stderr)
        return 2
    except (ValueError, OSError, ImportError) as exc:
        print(f"semisched plan: {exc}", file=sys.stderr)
        return 2
    if args.json:
        json.dump(plan_json(plan, source=source, elapsed_s=elapsed), stream, indent=2)
        stream.write("\n")
    else:
        stream.write(plan_table(plan, source=source) + "\n")
        stream.write(f"Planned in {1e3 * elapsed:.0f} ms.\n")
        for path, what in (
            (args.fleet_out, "fleet file"),
            (args.mock_fleet_out, "mock fleet file"),
        ):
            if path is not None:
                stream.write(f"Wrote the {what} {path}.\n")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m semisched.plan.cli``: the same as ``semisched plan``."""
    return plan_main(list(sys.argv[1:] if argv is None else argv), sys.stdout)


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
