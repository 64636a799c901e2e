"""A run's real-time sends: the scheduler, the window, each line's answer as its record.

Split from `semisched.batch.run` (`BatchRun`, the job's life: prepare, plan, run, stop,
progress and summary), which calls `send_all` once it has a target and a plan. Here the
run's scheduler is made over its one client or its fleet, observed by `BatchTiming`;
every line goes through it with its planned prior while the window (``--window``) has
room, a streamed prior waited for past the look-ahead (`semisched.batch.streamed`); each
answer becomes its record (`semisched.batch.output`: a success with its usage and cost,
an error with its code, a line whose deadline passed or whose input changed), is counted
in the run's progress and written as it comes. A tiered job's Batch API records come in
through the same writer (`semisched.batch.tiered_job`). The 401/403s the auth guard holds
back (`semisched.batch.auth`) are written once a call succeeds, or never if it trips; the
stop's watcher pauses the scheduler and lets calls in flight finish for ``grace_s``.

Its functions take the `BatchRun` whose progress and state they update; they decide
nothing about scheduling.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from functools import partial
from typing import TYPE_CHECKING, Any, BinaryIO

import anyio

from semisched.batch.deadlines import Deadlines
from semisched.batch.input import BatchError, BatchLine, load_body
from semisched.batch.ledger import annotate
from semisched.batch.output import (
    ErrorCode,
    ResultWriter,
    error_code,
    error_record,
    success_record,
)
from semisched.batch.timing import BatchTiming
from semisched.core.request import Prior
from semisched.errors import RequestError
from semisched.fleet.endpoints import Endpoint
from semisched.runtime.apis import APIS
from semisched.runtime.calls import scheduler_config
from semisched.runtime.options import RuntimeOptions
from semisched.runtime.scheduler import RetryPolicy, Scheduler
from semisched.state.base import StateUnavailable

if TYPE_CHECKING:
    from anyio.abc import TaskGroup

    from semisched.batch.run import BatchRun
    from semisched.batch.summary import BatchProgress

__all__ = ["send_all"]


@dataclass(frozen=True, slots=True)
class _Sending:
    """What every send of one run shares."""

    scheduler: Scheduler
    source: BinaryIO
    writer: ResultWriter
    window: anyio.Semaphore
    deadlines: Deadlines
    timing: BatchTiming


def _scheduler(run: BatchRun, target: Any | list[Endpoint], timing: BatchTiming) -> Scheduler:
    """The run's scheduler over one client or a fleet (routing: the config's); every
    call brings its planned prior, so it needs no source; ``timing`` observes it."""
    opts = run.options
    client, endpoints = (None, target) if isinstance(target, list) else (target, None)
    return Scheduler(
        client,
        endpoints=endpoints,
        priors="heuristic",
        clock=run.clock,
        state=opts.state,
        metrics=False if run._metrics is None else run._metrics,
        observers=(timing,),
        config=scheduler_config(
            opts.scheduler_config(), retry=RetryPolicy(max_attempts=opts.max_attempts)
        ),
        options=RuntimeOptions(max_pending=None, namespace=opts.namespace),
    )


async def send_all(
    run: BatchRun,
    todo: list[BatchLine],
    priors: list[Prior],
    source: BinaryIO,
    target: Any | list[Endpoint],
    writer: ResultWriter,
) -> None:
    """Send ``todo`` with their planned ``priors`` through ``target`` (a client, or a fleet's
    endpoints), reading each body from ``source`` and writing each record to ``writer``; a
    tiered job's real-time lines come from its feed instead.

    Raises:
        BatchError: The shared state cannot be reached.

    A tiered job's failure (`TieredJob.failure`) is raised as it came once the sends end.
    """
    opts = run.options
    timing = BatchTiming(run.clock.now())
    scheduler = run.scheduler = _scheduler(run, target, timing)
    run._started = start = timing.started
    tiers = run._tiers
    job_start = start if tiers is None else tiers.job_start()
    deadlines, window = Deadlines(job_start, opts.deadline_s), anyio.Semaphore(opts.window)
    sending = _Sending(scheduler, source, writer, window, deadlines, timing)
    stop = run._stop = anyio.Event()
    if run._stopping:
        stop.set()
    streamed = run._streamed
    try:
        async with scheduler, anyio.create_task_group() as tg:
            tg.start_soon(_watch_stop, run, scheduler, tg.cancel_scope)
            if streamed is not None:
                tg.start_soon(streamed.run, opts.input)
            async with anyio.create_task_group() as sends:
                launch = partial(_launch, run, sending=sending, sends=sends)
                if tiers is not None:
                    await tiers.drive(tg, launch, partial(_emit, run, sending))
                else:
                    for i, (line, prior) in enumerate(zip(todo, priors, strict=True)):
                        if not await launch(i, line, prior):
                            break
            tg.cancel_scope.cancel()
    except StateUnavailable as exc:  # only entering can raise it (later: a fallback)
        raise BatchError(f"the shared state cannot be reached: {exc}") from None
    if tiers is not None and tiers.failure is not None:
        raise tiers.failure
    if not run._auth.tripped:
        _write_held(run, writer)
    run._sync(scheduler)
    assert run._progress is not None
    if run._stopping and run._progress.finished < run._progress.to_send:
        tripped = run._auth.tripped
        run._progress = replace(
            run._progress,
            interrupted=True,
            auth_status=run._auth.status if tripped else None,
            auth_refused=run._auth.dropped,
        )


async def _launch(
    run: BatchRun, i: int, line: BatchLine, prior: Prior, *, sending: _Sending, sends: TaskGroup
) -> bool:
    """Start sending ``line`` (the ``i``-th to send) when the window has room; ``False``:
    stopping, not sent."""
    streamed, window = run._streamed, sending.window
    if streamed is not None:  # semisched.batch.streamed's rule 2: past the look-ahead,
        # wait for this line's prior (or a finished request) before adding more
        while not (streamed.done or streamed.ready(line)) and (
            run.options.window - window.value >= streamed.lookahead
        ):
            await streamed.changed()
        prior = streamed.take(i, line, prior)
    await window.acquire()
    if run._stopping:
        window.release()
        return False
    sends.start_soon(_send_one, run, line, prior, sending)
    return True


def _emit(
    run: BatchRun, sending: _Sending, record: dict[str, Any], count: Callable[[BatchProgress], Any]
) -> None:
    """Write a record the Batch API answered, counted by ``count``."""
    assert run._progress is not None
    run._progress = count(run._progress)
    sending.writer.write(record)
    run._sync(sending.scheduler)
    if run._on_result is not None:
        run._on_result(run._progress)


async def _watch_stop(run: BatchRun, scheduler: Scheduler, scope: anyio.CancelScope) -> None:
    assert run._stop is not None
    await run._stop.wait()
    scheduler.pause()
    # Calls in flight may finish and be recorded; nothing new is sent.
    with anyio.move_on_after(run.clock.to_wall(run.options.grace_s)):
        while scheduler.statistics().inflight:
            await anyio.sleep(0.05)
    scope.cancel()


async def _send_one(run: BatchRun, line: BatchLine, prior: Prior, sending: _Sending) -> None:
    try:
        record = await _answer(run, line, prior, sending)
        if record is None:  # a 401/403, held back (semisched.batch.auth)
            if run._auth.tripped and not run._stopping:
                sending.scheduler.pause()  # now: the stop's watcher runs later
                run.stop()
            return
        if record.get("error") is None:  # the key works: what was held is recorded
            _write_held(run, sending.writer)
        sending.writer.write(record)
        run._sync(sending.scheduler)
        if run._on_result is not None:
            assert run._progress is not None
            run._on_result(run._progress)
    finally:
        sending.window.release()
        if run._streamed is not None:
            run._streamed.poke()


async def _answer(
    run: BatchRun, line: BatchLine, prior: Prior, sending: _Sending
) -> dict[str, Any] | None:
    """Send ``line`` with its planned ``prior``; its record (counted), or ``None`` for a
    401/403 the auth guard holds back."""
    due = sending.deadlines.of(line.deadline_s)
    deadline = None if due is None else due - run.clock.now()
    if deadline is not None and deadline <= 0:
        note = "its deadline passed before it was sent"
        return _failure(run, line, ErrorCode.DEADLINE_EXCEEDED, note, due)
    try:
        body = load_body(sending.source, line, run.options.model)
    except BatchError as exc:
        return _failure(run, line, ErrorCode.INPUT_CHANGED, str(exc), due)
    try:
        with sending.timing.track(line.custom_id) as timed:
            response = await sending.scheduler.submit(deadline=deadline, prior=prior, **body)
    except RequestError as exc:
        code, status = error_code(exc)
        record = error_record(line.custom_id, code, str(exc), status)
        run._hints.setdefault(getattr(exc, "hint", None) or "")  # the summary's, once
        held = run._auth.hold(record, code, status)
        return None if held else _counted(run, record, code, due)
    usage = APIS[body["api"]].usage(response)  # each API reports it its own way
    cost = run._prices.cost(timed.endpoint, body["model"], usage)
    met = None if due is None else run.clock.now() <= due
    assert run._progress is not None
    run._progress = run._progress.counted(tier="realtime", cost=cost, met=met, usage=usage)
    return annotate(success_record(line.custom_id, response, timed.record()), "realtime", cost)


def _failure(
    run: BatchRun, line: BatchLine, code: ErrorCode, message: str, due: float | None
) -> dict[str, Any]:
    return _counted(run, error_record(line.custom_id, code, message), code, due)


def _counted(
    run: BatchRun, record: dict[str, Any], code: ErrorCode, due: float | None = None
) -> dict[str, Any]:
    """``record``, an error of ``code`` sent real-time (``due``: its line's deadline),
    counted in the progress."""
    assert run._progress is not None
    met = None if due is None else False
    run._progress = run._progress.counted(tier="realtime", met=met, code=code)
    return annotate(record, "realtime", None)


def _write_held(run: BatchRun, writer: ResultWriter) -> None:
    for record, code in run._auth.release():
        writer.write(_counted(run, record, code))
