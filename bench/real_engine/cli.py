"""``python -m bench real-engine STEP``: the real engine's commands, one per step.

* ``setup``: build llama-server and the model into the cache (`.setup`), write
  ``setup.md``.
* ``fit``: measure the engine and fit the mock's physics to it (`.calibrate`); writes
  ``calibration.csv`` and ``fit.json`` (the ``llama-cpp`` profile of the mock, with the
  engine commit and the machine it was measured on).
* ``compare``: the same seeded open-loop workload through the fitted mock and the
  engine (`.compare`); writes ``compare.csv`` and ``compare_requests.csv``.
* ``headline``: the quick comparison's four strategies through the SDK into one engine,
  beside the simulator's prediction (`.headline`); writes ``headline.csv``,
  ``headline.md`` and ``headline_run.json``.
* ``routing``: one scheduler over a fast and a slow engine, per routing policy
  (`.routing_engine`); writes ``routing.csv`` and ``routing.md``.
* ``steps``: a few batch shapes streamed token by token, the engine's step time beside
  the fitted mock's (`.steps`); writes ``steps.csv`` and ``steps.md``.

All write under ``--out`` (default ``docs/results/real-engine``). ``headline``, ``routing``
and ``compare`` size their load by a fit of this engine on this machine made first
(``--profile machine``, `.profiles`), one made before (``--profile cached``), or by
the committed profile (``--profile committed``).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from bench.real_engine.client import Completion

__all__ = ["add_parser", "run"]

DEFAULT_OUT = Path("docs/results/real-engine")
#: Slots of the engine (``--parallel``), the mock profile's ``slots``.
PARALLEL = 8


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """The ``real-engine`` subcommand and its own subcommands."""
    real = sub.add_parser("real-engine", help="llama.cpp's llama-server: build it, fit the mock "
                          "to it, compare the two, run the headline and routing on it")  # fmt: skip
    steps = real.add_subparsers(dest="step", required=True)
    for name, text in (
        ("setup", "download, build and cache llama-server and the model; write setup.md"),
        ("fit", "measure the engine; fit the mock's llama-cpp profile (calibration.csv, fit.json)"),
        ("compare", "one seeded open-loop workload on the fitted mock and on the engine"),
        (
            "headline",
            "the quick comparison's four strategies through the SDK into one engine, "
            "beside the simulator (headline.csv, headline.md)",
        ),
        (
            "routing",
            "one scheduler over a fast and a slow engine, per routing policy "
            "(routing.csv, routing.md)",
        ),
        (
            "steps",
            "stream a few batch shapes token by token: the engine's step time beside the "
            "fitted mock's (steps.csv, steps.md)",
        ),
    ):
        step = steps.add_parser(name, help=text)
        step.add_argument("--out", type=Path, default=DEFAULT_OUT, help=f"folder ({DEFAULT_OUT})")
        if name in ("headline", "routing", "compare"):
            _profile_argument(step)
        if name in ("headline", "routing"):
            _matrix_arguments(step, name)
            continue
        if name != "setup":
            step.add_argument("--parallel", type=int, default=PARALLEL, help="engine slots (8)")
            step.add_argument("--seed", type=int, default=0, help="seed (0)")
        if name in ("fit", "steps"):
            step.add_argument("--repeats", type=positive, default=3, help="sweeps (3)")
        if name == "steps":
            step.add_argument("--fit", type=Path, help="the fitted profile (OUT/fit.json)")
        if name == "fit":
            step.add_argument("--from-csv", action="store_true",
                              help="refit calibration.csv in --out, no engine run")  # fmt: skip
        if name == "compare":
            step.add_argument("--requests", type=int, default=300, help="requests (300)")
            step.add_argument("--fit", type=Path, help="the fitted profile, used as it is "
                              "(default: --profile's)")  # fmt: skip
            step.add_argument("--load", type=float, default=0.9,
                              help="offered load, share of the fitted capacity (0.9)")  # fmt: skip


def positive(text: str) -> int:
    """An integer >= 1 (an argparse type)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} must be >= 1")
    return value


def loads(text: str) -> tuple[str, ...]:
    """A comma-separated list of congestion levels of ``bench.workloads`` (an argparse type)."""
    from bench.workloads import CONGESTION

    names = tuple(dict.fromkeys(n.strip() for n in text.split(",") if n.strip()))
    unknown = [n for n in names if n not in CONGESTION]
    if unknown or not names:
        raise argparse.ArgumentTypeError(
            f"{text!r}: each load must be one of {', '.join(sorted(CONGESTION))}"
        )
    return names


def caps(text: str) -> tuple[str, ...]:
    """A comma-separated list of the routing run's endpoint caps (an argparse type)."""
    from bench.real_engine.routing_engine import CAPS

    names = tuple(dict.fromkeys(n.strip() for n in text.split(",") if n.strip()))
    if not names or any(n not in CAPS for n in names):
        raise argparse.ArgumentTypeError(f"{text!r}: each cap must be one of {', '.join(CAPS)}")
    return names


def policies(text: str) -> tuple[str, ...]:
    """A comma-separated list of the routing run's policies (an argparse type)."""
    from bench.real_engine.routing_engine import POLICIES

    names = tuple(dict.fromkeys(n.strip() for n in text.split(",") if n.strip()))
    if not names or any(n not in POLICIES for n in names):
        raise argparse.ArgumentTypeError(
            f"{text!r}: each policy must be one of {', '.join(POLICIES)}"
        )
    return names


def _matrix_arguments(step: argparse.ArgumentParser, name: str) -> None:
    step.add_argument("--seeds", type=positive, default=3, help="seeds 0..N-1 (3)")
    step.add_argument("--requests", type=positive, default=300, help="requests per run (300)")
    if name == "headline":
        step.add_argument("--loads", type=loads, default=("medium", "high"),
                          help="congestion levels, comma-separated (medium,high)")  # fmt: skip
        step.add_argument("--from-csv", action="store_true",
                          help="rewrite headline.md from OUT/headline.csv (no engine)")  # fmt: skip
    else:
        from bench.workloads import CONGESTION

        step.add_argument("--load", choices=sorted(CONGESTION), default="medium",
                          help="congestion of the pair's joint capacity (medium)")  # fmt: skip
        from bench.real_engine.routing_engine import POLICIES

        step.add_argument("--policies", type=policies, default=POLICIES,
                          help=f"routing policies, comma-separated ({','.join(POLICIES)})")
        step.add_argument("--caps", type=caps, default=("slots", "learned"),
                          help="endpoint caps, comma-separated: slots (each endpoint at most "
                          "its slots), learned (nothing told: each endpoint's limit learned), "
                          "none (the scheduler's total only) (slots,learned)")  # fmt: skip


def _profile_argument(step: argparse.ArgumentParser) -> None:
    from bench.real_engine.profiles import PROFILES

    step.add_argument("--profile", choices=PROFILES, default="machine",
                      help="what sizes the load: machine (a fit of this engine on this "
                      "machine, made first), cached (one made before, when OUT/fit.json or "
                      "the cache holds one; else made first), committed (the committed "
                      "llama-cpp profile; compare: OUT/fit.json as it is) (machine)")  # fmt: skip


@contextlib.contextmanager
def interruptible() -> Iterator[None]:
    """Ctrl-C raises ``KeyboardInterrupt`` at once, wherever the run is.

    asyncio turns the first Ctrl-C into a cancellation of ``anyio.run``'s main task, and a
    run absorbed it (seen: ``steps`` went on to its next case, the engine still up). With
    Python's own handler in place of asyncio's (asyncio keeps a handler it did not
    install), the interrupt leaves every ``anyio.run`` and the ``with LlamaServer`` block,
    which stops the server.
    """

    def interrupt(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    try:
        previous = signal.signal(signal.SIGINT, interrupt)
    except ValueError:  # not the main thread: nothing to replace
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def run(args: argparse.Namespace) -> Path:
    """Run the chosen step (Ctrl-C stops it and its engines: `interruptible`); the
    main file it wrote."""
    with interruptible():
        return _run(args)


def _run(args: argparse.Namespace) -> Path:
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    if args.step == "headline" and args.from_csv:
        from bench.real_engine.headline_report import rewrite_markdown

        return rewrite_markdown(out)
    if args.step == "headline":
        from bench.real_engine.headline_report import headline_main

        return headline_main(out, seeds=range(args.seeds), loads=args.loads,
                             requests=args.requests, parallel=PARALLEL,
                             profile=args.profile)  # fmt: skip
    if args.step == "routing":
        from bench.real_engine.routing_engine import routing_main

        return routing_main(out, seeds=range(args.seeds), load=args.load,
                            requests=args.requests, caps=args.caps,
                            profile=args.profile, policies=args.policies)  # fmt: skip
    if args.step == "setup":
        from bench.real_engine.setup import setup_main

        setup_main(out)
        return out / "setup.md"
    if args.step == "fit":
        return _fit(args, out)
    if args.step == "steps":
        from bench.real_engine.steps import steps_main

        fit = args.fit if args.fit is not None else out / "fit.json"
        return steps_main(
            out, fit=fit, repeats=args.repeats, seed=args.seed, parallel=args.parallel
        )
    from bench.real_engine.compare import compare_main
    from bench.real_engine.profiles import engine_profile

    fit = args.fit
    if fit is None and args.profile == "committed":
        fit = out / "fit.json"
    if fit is None:
        fit = engine_profile(out, "machine", args.parallel).path
        assert fit is not None  # a machine profile is a fit's file
    return compare_main(out, fit=fit, parallel=args.parallel, requests=args.requests,
                        load=args.load, seed=args.seed)  # fmt: skip


def _fit(args: argparse.Namespace, out: Path) -> Path:
    from bench.real_engine.calibrate import (
        fit_engine,
        plan_fit_crosscheck,
        read_calibration,
        write_calibration,
        write_fit,
    )
    from bench.real_engine.launcher import DEFAULT_BATCH
    from bench.real_engine.profiles import provenance

    if args.from_csv:  # the measurement's provenance is the old fit's, when it has one
        completions = read_calibration(out / "calibration.csv")
        old = json.loads((out / "fit.json").read_text(encoding="utf-8")) if (
            out / "fit.json").exists() else {}  # fmt: skip
        origin = {k: old[k] for k in ("engine_commit", "machine") if k in old}
    else:
        completions = measure(args.parallel, args.repeats, args.seed)
        write_calibration(out, completions)
        origin = provenance()
    fit = fit_engine(completions, args.parallel, DEFAULT_BATCH)
    data = write_fit(out, fit, plan_fit_crosscheck(completions, fit), provenance=origin)
    print(json.dumps(data, indent=2))
    return out / "fit.json"


def measure(parallel: int, repeats: int, seed: int) -> list[Completion]:
    """The decode, prefill and context sweeps on a fresh server (`.calibrate`)."""
    import numpy as np
    from tokenizers import Tokenizer

    from bench.real_engine.calibrate import (
        CONTEXT_PROMPTS,
        context_jobs,
        decode_jobs,
        prefill_jobs,
    )
    from bench.real_engine.client import Job, run_jobs
    from bench.real_engine.launcher import LlamaServer, ServerOptions
    from bench.real_engine.setup import EnginePaths

    paths = EnginePaths.default()
    vocab = Tokenizer.from_file(str(paths.tokenizer)).get_vocab_size()
    rng = np.random.default_rng(seed)
    levels = sorted({1, 2, *range(4, parallel + 1, 2), parallel})
    done: list[Completion] = []
    with LlamaServer(
        ServerOptions(binary=paths.server, model=paths.gguf, parallel=parallel)
    ) as srv:
        run_jobs(srv.base_url, [Job(arrival=0.0, prompt=(5, 6, 7), max_tokens=8)])  # warm-up
        for repeat in range(repeats):
            for n in levels:
                done += run_jobs(srv.base_url, decode_jobs(rng, n, vocab, repeat))
                print(f"decode n={n} repeat {repeat}: done", flush=True)
            for job in prefill_jobs(rng, vocab, repeat):
                done += run_jobs(srv.base_url, [job])
            print(f"prefill repeat {repeat}: done", flush=True)
            for n in (1, parallel):
                for prompt in CONTEXT_PROMPTS:
                    done += run_jobs(srv.base_url, context_jobs(rng, n, prompt, vocab, repeat))
                print(f"context n={n} repeat {repeat}: done", flush=True)
    return done
