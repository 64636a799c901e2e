"""The ``semisched`` command line.

``semisched plan ...`` is the capacity planner (`semisched.plan.cli`): the
entry point (`semisched.command`) hands it its arguments, without the SDK's imports.

``semisched batch INPUT.jsonl -o OUTPUT.jsonl --base-url URL`` runs an OpenAI
Batch API file through the scheduler (`semisched.batch`): budgets never
exceeded, results appended as they complete, resumable after any crash.
Instead of one ``--base-url`` it takes a fleet: repeated
``--endpoint NAME=URL[,key-env=VAR][,rpm=N,...]`` options or ``--fleet
FILE.toml`` (`semisched.fleet.fleetfile`), routed by ``--routing POLICY``
(default: the fleet file's, else the preset's ``anticipated_load``).
Repeated ``--tenant NAME[,weight=W,service=CLASS,...]`` options declare who
shares the job; each line names its tenant in ``body.metadata.tenant``
(`semisched.batch.tenants`). ``--metrics-port N`` serves the job's
Prometheus metrics on ``http://127.0.0.1:N/metrics`` while it runs
(`semisched.batch.metrics`). This module handles signals; the arguments
are `semisched.batch.args`, the progress display `semisched.batch.display`
and the job itself `semisched.batch.BatchRun`. `main` owns its event loop;
`main_async` is the same command inside a running one (tests await it
in virtual time with an in-process provider and clock).

Before sending, the command prints one line naming the priors it uses (the
model, if any, loads while the first requests go out; the summary says how
many went with its priors) and one with the makespan floor; the
progress ETA starts from that floor (`semisched.batch.forecast.eta_s`).
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
from typing import Any, TextIO

import anyio

from semisched.batch import (
    BatchError,
    BatchForecast,
    BatchProgress,
    BatchRun,
    BatchSummary,
)
from semisched.batch.args import batch_options, parser
from semisched.batch.auth import AUTH_FAILURES
from semisched.batch.client import ClientFactory
from semisched.batch.display import Display, progress_display
from semisched.batch.metrics import serve_metrics
from semisched.runtime.clock import Clock

__all__ = ["main", "main_async"]


class _Shown:
    """The display, started at the first progress it is shown (a result or a tick)."""

    def __init__(self, display: Display) -> None:
        self.display = display
        self.started = False

    def show(self, progress: BatchProgress) -> None:
        if self.started:
            self.display.update(progress)
        else:
            self.started = True
            self.display.start(progress)


async def _tick(run: BatchRun, shown: _Shown, every_s: float) -> None:
    """Show the progress every ``every_s`` seconds whatever the run waits on (a rate
    window, a slow answer): a log or a pipe never goes silent for longer."""
    while True:
        due = shown.display.due_in() if shown.started else every_s
        await anyio.sleep(max(due, every_s / 10))
        progress = run.progress_now()
        if progress is not None and run.scheduler is not None:
            shown.show(progress)


async def _run_batch(run: BatchRun, shown: _Shown, tick_s: float = 0.0) -> BatchSummary:
    """Run ``run``; the first SIGINT/SIGTERM stops it gracefully, the second at once.
    With ``tick_s``, the progress is shown at least every ``tick_s`` seconds."""
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
        if tick_s > 0:
            tg.start_soon(_tick, run, shown, tick_s)
        failure: BatchError | None = None
        try:
            summary = await run.run()
        except BatchError as exc:  # raised here, not wrapped in the task group's ExceptionGroup
            failure = exc
        finally:
            shown.display.close()
        tg.cancel_scope.cancel()
    if failure is not None:
        raise failure
    if interrupted_twice or summary is None:  # pragma: no cover - needs a second signal
        so_far = run.summary()
        assert so_far is not None
        return replace(so_far, interrupted=True)
    return summary


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
        options = batch_options(args)
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
    shown = _Shown(progress_display(stream, progress_every))
    run = make_run(on_start=partial(_announce, stream=stream), on_result=shown.show)
    return await _run_batch(run, shown, progress_every)


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
    args = parser().parse_args(argv)
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
