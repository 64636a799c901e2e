"""The ``semisched`` command line.

``semisched plan ...`` is the capacity planner (:mod:`semisched.plan.cli`): the
entry point (:mod:`semisched.command`) hands it its arguments, without the SDK's imports.

``semisched batch INPUT.jsonl -o OUTPUT.jsonl --base-url URL`` runs an OpenAI
Batch API file through the scheduler (:mod:`semisched.batch`): budgets never
exceeded, results appended as they complete, resumable after any crash.
Instead of one ``--base-url`` it takes a fleet: repeated
``--endpoint NAME=URL[,key-env=VAR][,rpm=N,...]`` options or ``--fleet
FILE.toml`` (:mod:`semisched.fleet.fleetfile`), routed by ``--routing POLICY``
(default: the fleet file's, else the preset's ``anticipated_load``).
Repeated ``--tenant NAME[,weight=W,service=CLASS,...]`` options declare who
shares the job; each line names its tenant in ``body.metadata.tenant``
(:mod:`semisched.batch.tenants`). ``--metrics-port N`` serves the job's
Prometheus metrics on ``http://127.0.0.1:N/metrics`` while it runs
(:mod:`semisched.batch.metrics`). This module parses arguments and handles
signals; the progress display is :mod:`semisched.batch.display` and the job
itself is :class:`semisched.batch.BatchRun`. :func:`main` owns its event loop;
:func:`main_async` is the same command inside a running one (tests await it
in virtual time with an in-process provider and clock).

Before sending, the command prints one line naming the priors it uses (the
model, if any, loads while the first requests go out; the summary says how
many went with its priors) and one with the makespan floor; the
progress ETA starts from that floor (:func:`semisched.batch.forecast.eta_s`).
``--dry-run`` validates and plans as a run would (with the model's priors for
every line), prints the floor's three bounds and sends nothing.

Exit status: 0 every request answered successfully (with ``--dry-run``: the
job could start); 1 some requests ended in an error (recorded in the
output); 2 the job could not start (bad arguments, invalid input, unreadable
or unwritable files, a bad fleet, no API key), or its API key was refused (three
401 or 403 answers in a row and no success: the rest is left unsent, and a rerun
with the right key resumes); 130 interrupted (rerun the same command to resume).
"""

from __future__ import annotations

import argparse
import signal
import sys
from collections.abc import Callable, Sequence
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import Any, TextIO

import anyio

from semisched.batch import (
    BatchError,
    BatchForecast,
    BatchOptions,
    BatchProgress,
    BatchRun,
    BatchSummary,
)
from semisched.batch.auth import AUTH_FAILURES
from semisched.batch.client import ClientFactory
from semisched.batch.display import Display, progress_display
from semisched.batch.metrics import serve_metrics
from semisched.batch.tenants import parse_tenant_option, tenant_config
from semisched.core.config import PRESETS, ROUTING_POLICY_NAMES, RoutingConfig
from semisched.core.tenants.config import TENANT_POLICY_NAMES, TenantSpec
from semisched.fleet.fleetfile import EndpointDef, FleetFileError, load_fleet, parse_endpoint_option
from semisched.runtime.clock import Clock

__all__ = ["main", "main_async"]


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="semisched", description="Client-side scheduling for OpenAI-compatible LLM APIs."
    )
    sub = parser.add_subparsers(dest="command", required=True)
    batch = sub.add_parser(
        "batch",
        help="run an OpenAI Batch API JSONL file through the scheduler",
        description=(
            "Send every request of an OpenAI Batch API input file through the scheduler and "
            "append each result to OUTPUT as it completes. Rerunning with the same OUTPUT "
            "skips what is already answered. API keys are read from the environment only. "
            "Exit status: 0 all succeeded; 1 some failed; 2 the job could not start, or its API "
            f"key was refused ({AUTH_FAILURES} 401/403 answers in a row, no success: the rest "
            "is left unsent and unrecorded, so a rerun with the right key resumes); 130 "
            "interrupted."
        ),
    )
    _add_files(batch)
    _add_budgets(batch)
    _add_tenants(batch)
    _add_run_control(batch)
    # Listed for --help; semisched.command hands `plan ...` to semisched.plan.cli first.
    sub.add_parser(
        "plan",
        help="capacity planning: units for a workload's SLOs, one pool or two "
        "(semisched plan --help)",
        add_help=False,
    )
    return parser


def _endpoint_arg(text: str) -> EndpointDef:
    """``--endpoint``'s value (argparse reports the message of a bad one)."""
    try:
        return parse_endpoint_option(text)
    except FleetFileError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _add_files(batch: argparse.ArgumentParser) -> None:
    """Where requests come from, where results go, and the endpoints."""
    batch.add_argument("input", type=Path, help="Batch API input file (JSONL)")
    batch.add_argument("-o", "--output", type=Path, required=True, help="results file (JSONL)")
    target = batch.add_mutually_exclusive_group(required=True)
    target.add_argument("--base-url", help="OpenAI-compatible base URL (…/v1): one endpoint")
    target.add_argument(
        "--endpoint",
        action="append",
        type=_endpoint_arg,
        dest="endpoints",
        metavar="NAME=URL[,key-env=VAR]",
        help="one endpoint of a fleet (repeat for each); also ,rpm=N ,tpm=N "
        ",max-concurrency=N ,weight=X ,pool=short|long ,context-tokens=N",
    )
    target.add_argument(
        "--fleet",
        type=Path,
        metavar="FILE",
        help="the fleet's endpoints and routing in a TOML file (see semisched.fleet.fleetfile)",
    )
    batch.add_argument(
        "--api-key-env",
        default="OPENAI_API_KEY",
        metavar="VAR",
        help="environment variable holding the API key (default OPENAI_API_KEY); with a "
        "fleet, of every endpoint that names none",
    )
    batch.add_argument(
        "--routing",
        choices=ROUTING_POLICY_NAMES,
        metavar="POLICY",
        help="which endpoint takes each request: "
        f"{', '.join(ROUTING_POLICY_NAMES)} (default: the fleet file's, else anticipated_load)",
    )
    batch.add_argument(
        "--state",
        metavar="URL",
        help="share the budgets with every runner in --namespace through this Redis "
        "(redis://HOST:PORT/DB): several runners, one key, no 429 storm",
    )
    batch.add_argument(
        "--namespace",
        default="semisched",
        help="the shared state's key namespace (default semisched)",
    )
    batch.add_argument("--model", help="model for lines whose body names none")


def _add_budgets(batch: argparse.ArgumentParser) -> None:
    """Concurrency, rate budgets, the deadline and the scheduling preset."""
    batch.add_argument(
        "--max-concurrency", type=int, default=32, metavar="N", help="calls in flight (32)"
    )
    batch.add_argument("--rpm", type=int, help="requests per minute budget")
    batch.add_argument(
        "--tpm", type=int, help="tokens per minute budget (prompt estimate + max_tokens)"
    )
    batch.add_argument(
        "--budget-margin",
        type=float,
        metavar="SECONDS",
        help="how much longer than its minute a budget charge counts: the allowance for "
        "network transit (default 1)",
    )
    batch.add_argument(
        "--deadline", type=float, metavar="SECONDS", help="finish the job within this time"
    )
    batch.add_argument(
        "--policy",
        default="batch_packing",
        choices=sorted(PRESETS),
        help="scheduling preset (default batch_packing: under --rpm/--tpm keeps both rate "
        "windows busy, longest work first, sheds nothing; batch_makespan: longest predicted "
        "work first; adaptive_drr: the online two-class default)",
    )


def _tenant_arg(text: str) -> TenantSpec:
    """``--tenant``'s value (argparse reports the message of a bad one)."""
    try:
        return parse_tenant_option(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _add_tenants(batch: argparse.ArgumentParser) -> None:
    """Who shares the job: each line names its tenant in body.metadata.tenant."""
    batch.add_argument(
        "--tenant",
        action="append",
        type=_tenant_arg,
        dest="tenants",
        metavar="NAME[,weight=W]",
        help="declare a tenant (repeat for each); also ,service=guaranteed|elastic|best_effort "
        ",rpm=N ,tpm=N ,max-concurrency=N. A line names its own in body.metadata.tenant",
    )
    batch.add_argument(
        "--tenant-policy",
        choices=TENANT_POLICY_NAMES,
        help="which tenant sends next: fair_share (the default), fifo or static_quota",
    )
    batch.add_argument(
        "--default-tenant", metavar="NAME", help="the tenant of lines that name none"
    )


def _port(text: str) -> int:
    """``--metrics-port``'s value: a TCP port, 1 to 65535."""
    if not text.isdigit() or not 1 <= int(text) <= 65535:
        raise argparse.ArgumentTypeError(f"{text!r} is not a TCP port (1 to 65535)")
    return int(text)


def _add_run_control(batch: argparse.ArgumentParser) -> None:
    """Invalid lines, retries of failures, priors, stopping and progress."""
    batch.add_argument(
        "--skip-invalid",
        action="store_true",
        help="record invalid lines as errors in the output and send the rest (a repeated "
        "custom_id's record names its line, so each custom_id keeps its first line's record)",
    )
    batch.add_argument(
        "--retry-failed",
        action="store_true",
        help="drop the error records of an earlier run from OUTPUT and send those again",
    )
    batch.add_argument(
        "--priors",
        default="auto",
        choices=("auto", "learned", "heuristic"),
        help="output-length priors: the learned model if installed (auto), or max_tokens",
    )
    batch.add_argument(
        "--grace",
        type=float,
        default=10.0,
        metavar="SECONDS",
        help="on Ctrl-C, wait this long for calls in flight (10)",
    )
    batch.add_argument(
        "--progress-every",
        type=float,
        default=10.0,
        metavar="SECONDS",
        help="seconds between progress lines when not on a terminal (10)",
    )
    batch.add_argument(
        "--dry-run",
        action="store_true",
        help="validate the input and read OUTPUT exactly as a run would, print the makespan "
        "floor (its requests, tokens and serving bounds) and send nothing",
    )
    batch.add_argument(
        "--metrics-port",
        type=_port,
        metavar="PORT",
        help="serve the job's Prometheus metrics on http://127.0.0.1:PORT/metrics while it runs",
    )
    batch.add_argument(
        "--time-scale",
        type=float,
        default=1.0,
        metavar="FACTOR",
        help="how many times faster than real time the provider's rate windows run, so the "
        "budget's minute matches the provider's: 1 (the default) for a real provider; for a "
        "compressed-time mock (python -m mockprovider --time-scale N) pass the same N",
    )


async def _run_batch(run: BatchRun, display: Display) -> BatchSummary:
    """Run ``run``; the first SIGINT/SIGTERM stops it gracefully, the second at once."""
    interrupted_twice = False
    summary: BatchSummary | None = None
    async with anyio.create_task_group() as tg:

        async def on_signals() -> None:
            nonlocal interrupted_twice
            with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
                async for _ in signals:
                    if not run.stopping:
                        print(
                            f"\nstopping: no new requests; waiting up to {run.options.grace_s:g}"
                            " s for calls in flight (Ctrl-C again to stop now)",
                            file=sys.stderr,
                            flush=True,
                        )
                        run.stop()
                    else:
                        interrupted_twice = True
                        tg.cancel_scope.cancel()

        tg.start_soon(on_signals)
        failure: BatchError | None = None
        try:
            summary = await run.run()
        except BatchError as exc:  # raised here, not wrapped in the task group's ExceptionGroup
            failure = exc
        finally:
            display.close()
        tg.cancel_scope.cancel()
    if failure is not None:
        raise failure
    if interrupted_twice or summary is None:  # pragma: no cover - needs a second signal
        so_far = run.summary()
        assert so_far is not None
        return replace(so_far, interrupted=True)
    return summary


def _fleet(args: argparse.Namespace) -> tuple[tuple[EndpointDef, ...], RoutingConfig | None]:
    """The endpoints and routing the arguments ask for (``()`` with ``--base-url``).

    Raises:
        FleetFileError: The fleet file is unreadable or wrong (two ``--endpoint``
            options with one name are :class:`BatchOptions`' to refuse).
    """
    routing: RoutingConfig | None = None
    endpoints: tuple[EndpointDef, ...] = tuple(args.endpoints or ())
    if args.fleet is not None:
        fleet = load_fleet(args.fleet)
        endpoints, routing = fleet.endpoints, fleet.routing
    if args.routing is not None:  # overrides the file's policy, keeps its options
        routing = replace(routing or RoutingConfig(), policy=args.routing)
    return endpoints, routing


def _options(args: argparse.Namespace) -> BatchOptions:
    """The job the arguments ask for (raises ``ValueError`` naming a bad one)."""
    endpoints, routing = _fleet(args)
    return BatchOptions(
        input=args.input,
        output=args.output,
        base_url=args.base_url,
        endpoints=endpoints,
        routing=routing,
        tenants=tenant_config(
            args.tenants or (), policy=args.tenant_policy, default=args.default_tenant
        ),
        state=args.state,
        namespace=args.namespace,
        api_key_env=args.api_key_env,
        model=args.model,
        max_concurrency=args.max_concurrency,
        rpm=args.rpm,
        tpm=args.tpm,
        deadline_s=args.deadline,
        policy=args.policy,
        skip_invalid=args.skip_invalid,
        retry_failed=args.retry_failed,
        priors=args.priors,
        time_scale=args.time_scale,
        grace_s=args.grace,
        budget_margin_s=args.budget_margin,
    )


def _report(summary: BatchSummary, stream: TextIO, key_hint: str = "the API key") -> int:
    """Print the summary; return the exit status (``key_hint``: where the key comes from)."""
    for line in summary.lines():
        print(line, file=stream)
    if summary.cut_bytes:
        print(
            f"  (cut a torn last line of {summary.cut_bytes} bytes from the output first)",
            file=stream,
        )
    if summary.auth_status is not None:
        unanswered, refused = summary.to_send - summary.finished, summary.auth_refused
        print(f"authentication failed: {AUTH_FAILURES} answers in a row were "
              f"{summary.auth_status}s and none succeeded; stopped with {unanswered} requests "
              f"without a record ({refused} refused, {unanswered - refused} not sent). "
              f"Check {key_hint}, then rerun the same command to resume.", file=stream)  # fmt: skip
        return 2
    if summary.interrupted:
        print(f"interrupted: {summary.to_send - summary.finished} requests not answered; "
              "rerun the same command to resume", file=stream)  # fmt: skip
        return 130
    return 1 if summary.failed.total or summary.invalid else 0


def _announce(forecast: BatchForecast, stream: TextIO) -> None:
    """Before the first send: the priors line and the floor."""
    floor = forecast.floor
    print(forecast.priors_line(), file=stream)
    print(
        f"makespan floor {floor.floor_s:.1f} s ({floor.binding} bound) for "
        f"{forecast.to_send} requests; --dry-run shows the bounds",
        file=stream,
        flush=True,
    )


async def _dry_run(run: BatchRun, stream: TextIO) -> int:
    """Validate and plan; print the forecast; send nothing."""
    try:
        forecast = await run.dry_run()
    except BatchError as exc:
        print(f"semisched batch: {exc}", file=stream)
        return 2
    for line in forecast.lines():
        print(line, file=stream)
    return 0


async def _batch(
    args: argparse.Namespace, client: Any, make_client: ClientFactory | None, clock: Clock | None
) -> int:
    stream = sys.stderr
    try:
        options = _options(args)
    except ValueError as exc:
        print(f"semisched batch: {exc}", file=stream)
        return 2
    if options.fleet:
        client = None  # a fleet makes one client per endpoint (make_client)
    if args.dry_run:
        run = BatchRun(options, client=client, make_client=make_client, clock=clock)
        return await _dry_run(run, stream)
    try:
        with serve_metrics(args.metrics_port, stream) as registry:
            make_run = partial(BatchRun, options, client=client, make_client=make_client,
                               clock=clock, metrics=registry)  # fmt: skip
            summary = await _send(make_run, args.progress_every, stream)
    except BatchError as exc:
        print(f"semisched batch: {exc}", file=stream)
        return 2
    return _report(summary, stream, "each endpoint's key" if options.fleet else
                   f"the key in {options.api_key_env}")  # fmt: skip


async def _send(
    make_run: Callable[..., BatchRun], progress_every: float, stream: TextIO
) -> BatchSummary:
    """Run the job (``make_run(on_start=, on_result=)``) with a progress display on
    ``stream``; ``BatchError``: it could not start."""
    display = progress_display(stream, progress_every)
    started = False

    def on_result(progress: BatchProgress) -> None:
        nonlocal started
        if started:
            display.update(progress)
        else:
            started = True
            display.start(progress)

    run = make_run(on_start=partial(_announce, stream=stream), on_result=on_result)
    return await _run_batch(run, display)


async def main_async(
    argv: Sequence[str] | None = None,
    *,
    client: Any = None,
    make_client: ClientFactory | None = None,
    clock: Clock | None = None,
) -> int:
    """The ``semisched`` command in a running event loop.

    Args:
        argv: The arguments (default ``sys.argv[1:]``).
        client: An ``AsyncOpenAI``-compatible client to use instead of one made
            from ``--base-url`` and the API key variable (tests: an in-process
            provider). Ignored with ``--endpoint`` or ``--fleet``.
        make_client: ``make_client(base_url, api_key)`` -> a client, for each
            endpoint (tests: in-process providers); the key variables are
            checked first either way.
        clock: The scheduler's clock instead of real (or ``--time-scale``) time.

    Returns:
        The exit status (see the module docstring).
    """
    args = _parser().parse_args(argv)
    if args.command == "batch":
        return await _batch(args, client, make_client, clock)
    return 2  # pragma: no cover - argparse requires a command


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``semisched`` command."""
    if argv is None or list(argv)[:1] == ["plan"]:  # the entry point decides: one path
        from semisched.command import main as command

        return command(argv)
    return anyio.run(partial(main_async, argv))


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
