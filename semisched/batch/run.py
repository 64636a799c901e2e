"""One ``semisched batch`` run: the scheduler, the budgets, progress and stopping.

`BatchRun` reads the input and the output so far (`semisched.batch.input`,
`semisched.batch.output`), then sends every request that has no result through one
[`semisched.Scheduler`][semisched.Scheduler]: allocation and ordering on the predicted cost
(learned priors when the ml extra is installed, else the ``max_tokens`` heuristic), the
concurrency cap, and a rate budget (`semisched.core.budget`) that keeps requests and tokens
per minute within ``rpm`` / ``tpm`` and follows the provider's ``x-ratelimit-*`` headers and
429s. Retries belong to the scheduler. Each result is appended as it completes;
`BatchRun.stop` (Ctrl-C in the CLI) pauses dispatching, waits up to ``grace_s`` for calls in
flight and returns with ``interrupted`` set.

Before sending, the run loads its prior source once (the learned model only when asked for,
lazily, timed) and plans every request it will send (`semisched.batch.forecast`): the priors
found there go to ``submit``, so the model reads each prompt once, and the same requests give
the makespan floor that the progress ETA and the summary report. `BatchRun.dry_run` does all
of that and stops: it sends nothing and changes no file.

It decides nothing about scheduling and draws nothing (the CLI shows `BatchProgress`). A job
goes to one endpoint (``base_url``) or a fleet (``endpoints``); with ``--tier batch`` or
``auto`` some lines go through the provider's Batch API instead
(`semisched.batch.tiered_job`). API keys are read from the environment, never written to the
output, logs or progress.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, replace
from functools import partial
from typing import TYPE_CHECKING, Any, BinaryIO

import anyio

from semisched.batch.auth import AuthGuard
from semisched.batch.client import ClientFactory, connect
from semisched.batch.deadlines import Deadlines
from semisched.batch.forecast import BatchForecast
from semisched.batch.input import (
    BatchError,
    BatchLine,
    InvalidInput,
    load_body,
    open_input,
    read_input,
)
from semisched.batch.ledger import Prices, annotate
from semisched.batch.options import BatchOptions
from semisched.batch.output import (
    ErrorCode,
    ResultWriter,
    check_writable,
    drop_errors,
    error_code,
    error_record,
    invalid_line_record,
    read_answered,
    success_record,
)
from semisched.batch.planning import STREAMING, BatchPlan, load_priors, plan_job
from semisched.batch.streamed import StreamedPriors
from semisched.batch.summary import BatchProgress, BatchSummary, engine_parts
from semisched.batch.tiered_job import TieredJob
from semisched.batch.timing import BatchTiming
from semisched.compress.runtime import CompressionStats
from semisched.core.request import Prior, Request
from semisched.core.stats import EngineStats
from semisched.errors import RequestError
from semisched.fleet.endpoints import Endpoint
from semisched.priors.default import model_unavailable
from semisched.runtime.apis import APIS
from semisched.runtime.calls import scheduler_config
from semisched.runtime.clock import AnyioClock, Clock
from semisched.runtime.options import RuntimeOptions
from semisched.runtime.scheduler import RetryPolicy, Scheduler
from semisched.state.base import StateUnavailable

if TYPE_CHECKING:
    from anyio.abc import TaskGroup
    from prometheus_client import CollectorRegistry

__all__ = ["STREAMING", "BatchPlan", "BatchRun", "load_priors", "run_batch"]

@dataclass(frozen=True, slots=True)
class _Sending:
    """What every send of one run shares."""

    scheduler: Scheduler
    source: BinaryIO
    writer: ResultWriter
    window: anyio.Semaphore
    deadlines: Deadlines
    timing: BatchTiming


class BatchRun:
    """One run of a batch job; `run` does it, `stop` asks it to stop.

    Args:
        options: The job.
        client: An ``AsyncOpenAI`` (or compatible) client for a one-endpoint
            job; by default one is made from ``options`` (`make_client`)
            when there is work. A fleet job takes ``make_client`` instead.
        make_client: ``make_client(base_url, api_key)`` -> a client, for each
            endpoint of the job (default: ``AsyncOpenAI`` with the job's
            timeout); keys are read from the environment first either way.
        clock: The scheduler's clock; by default the event loop's, compressed
            ``options.time_scale`` times (the mock provider's compressed time).
        on_start: Called once before the first request is sent, with what the
            run will send, its priors and its makespan floor.
        on_result: Called with the progress after each recorded result.
        metrics: The registry of the run's Prometheus metrics (``--metrics-port``).
    """

    def __init__(
        self,
        options: BatchOptions,
        *,
        client: Any | None = None,
        make_client: ClientFactory | None = None,
        clock: Clock | None = None,
        on_start: Callable[[BatchForecast], None] | None = None,
        on_result: Callable[[BatchProgress], None] | None = None,
        metrics: CollectorRegistry | None = None,
    ) -> None:
        if client is not None and options.fleet:
            raise ValueError(
                "client= is for a one-endpoint job (base_url); a fleet's clients come from "
                "make_client="
            )
        self.options = options
        self._client = client
        self._make_client = make_client
        self._engine_stats: EngineStats | None = None
        self._compression: CompressionStats | None = None
        self.clock: Clock = clock if clock is not None else AnyioClock(options.time_scale)
        self._on_start = on_start
        self._on_result, self._metrics = on_result, metrics
        self._stopping = False
        self._stop: anyio.Event | None = None  # made in the run's event loop
        self.scheduler: Scheduler | None = None
        self._progress: BatchProgress | None = None
        self._latencies: list[float] = []
        self.forecast: BatchForecast | None = None
        self._cut_bytes = 0
        self._started: float | None = None
        self._streamed: StreamedPriors | None = None
        self._auth = AuthGuard()
        self._hints: dict[str, None] = {}  # ProviderError.hint of the failures, in order
        self._requests: list[Request] = []
        self._prices = Prices(options)
        self._tiers: TieredJob | None = None

    def __repr__(self) -> str:
        progress = self._progress
        state = "stopping" if self._stopping else "not started" if progress is None else "running"
        done = "" if progress is None else f" {progress.finished}/{progress.to_send}"
        return f"<BatchRun {os.fspath(self.options.input)!r} {state}{done}>"

    def stop(self) -> None:
        """Stop dispatching, let in-flight calls finish (up to ``grace_s``), then return."""
        self._stopping = True
        if self._stop is not None:
            self._stop.set()

    @property
    def stopping(self) -> bool:
        """Whether `stop` was called."""
        return self._stopping

    def progress(self) -> BatchProgress | None:
        """Where the run stands (``None`` before it has read its input)."""
        return self._progress

    def summary(self) -> BatchSummary | None:
        """What the run did so far (``None`` before it has read its input)."""
        if self._progress is None:
            return None
        return BatchSummary.from_progress(
            self._progress,
            latencies_s=tuple(self._latencies),
            priors=self._priors_used(),
            cut_bytes=self._cut_bytes,
            compression=self._compression,
            hints=tuple(hint for hint in self._hints if hint),
            **engine_parts(self._engine_stats, fleet=self.options.fleet),
        )

    def _priors_used(self) -> str:
        if self._streamed is not None and self._progress is not None:
            return self._streamed.describe(self._progress.finished)
        return "heuristic" if self.forecast is None else str(self.forecast.priors)

    def prepare(self, *, read_only: bool = False) -> BatchPlan:
        """Read the input and the output so far.

        Args:
            read_only: Change no file (a dry run): a torn last output line is
                ignored, not cut, and with ``retry_failed`` the error records
                are left in place but not counted as answered.

        Raises:
            InvalidInput: The input has invalid lines (and not ``skip_invalid``).
            BatchError: A file cannot be read, or the output is the input.
        """
        opts = self.options
        lines, invalid = read_input(opts.input, **opts.input_checks())
        if invalid and not opts.skip_invalid:
            raise InvalidInput(invalid)
        if opts.output.resolve() == opts.input.resolve():
            raise BatchError("the output file must not be the input file")
        if opts.retry_failed and not read_only:
            drop_errors(opts.output)
        answered = read_answered(
            opts.output, repair=not read_only, count_errors=not opts.retry_failed
        )
        return BatchPlan(lines=tuple(lines), invalid=tuple(invalid), answered=answered)

    async def dry_run(self) -> BatchForecast:
        """Validate and plan exactly as `run` does, then stop: nothing is sent,
        no client is made and no file is changed.

        Raises:
            BatchError: The job could not start (see `prepare`; an output
                that could not be written; ``--priors learned`` unavailable).
        """
        plan = self.prepare(read_only=True)
        check_writable(self.options.output)
        forecast, _ = await self._plan(plan)
        return forecast

    async def _plan(
        self, plan: BatchPlan, *, streamed: bool = False
    ) -> tuple[BatchForecast, list[Prior]]:
        """Plan the lines to send (`plan_job`): the forecast
        and each line's prior; the requests are kept for the Batch API tier."""
        forecast, requests = await plan_job(self.options, plan, streamed=streamed)
        self._requests = requests
        return forecast, [request.prior for request in requests]

    async def run(self) -> BatchSummary:
        """Send what has no result and record each answer.

        Raises:
            BatchError: The job cannot start (see `prepare`; an API key
                variable not set: `connect`).
        """
        opts = self.options
        plan = self.prepare()
        todo = plan.todo
        target = None  # what it sends through; a missing key stops the job here
        if todo:
            target = connect(
                opts,
                clock=self.clock,
                sink=self._latencies,
                client=self._client,
                factory=self._make_client,
            )
        check_writable(opts.output)  # before the priors: loading and planning take time
        streamed = None
        if todo and opts.priors != "heuristic" and not opts.tiered:
            missing = model_unavailable()
            if missing is not None and opts.priors == "learned":
                raise BatchError(f"--priors learned: {missing}")
            if missing is None:
                lookahead = 2 * (opts.scheduler_config().max_inflight or 32)
                streamed = StreamedPriors(opts, todo, lookahead=lookahead)
        self._streamed = streamed
        self.forecast, priors = await self._plan(plan, streamed=streamed is not None)
        writer = ResultWriter(opts.output)
        self._cut_bytes = plan.answered.cut_bytes
        floor = self.forecast.floor
        self._progress = BatchProgress(
            total=len(plan.lines) + len(plan.invalid),
            already_done=len(plan.lines) - len(todo),
            invalid=len(plan.invalid),
            to_send=len(todo),
            floor_s=floor.floor_s if todo else None,
            floor_binding=floor.binding if todo else None,
            window_s=self.forecast.window_s,
        )
        try:
            for problem in plan.new_invalid:
                writer.write(invalid_line_record(problem))
            if target is not None:
                if opts.tiered:  # the journal, and the Batch API endpoint's client
                    self._tiers = TieredJob.open(self, todo, priors, self._requests)
                if self._on_start is not None:
                    self._on_start(self.forecast)
                with open_input(opts.input) as source:
                    await self._send_all(todo, priors, source, target, writer)
        finally:
            writer.close()
            if self._tiers is not None:
                self._tiers.close()
        summary = self.summary()
        assert summary is not None
        return summary

    def _scheduler(self, target: Any | list[Endpoint], timing: BatchTiming) -> Scheduler:
        """The run's scheduler over one client or a fleet (routing: the config's); every
        call brings its planned prior, so it needs no source; ``timing`` observes it."""
        opts = self.options
        client, endpoints = (None, target) if isinstance(target, list) else (target, None)
        return Scheduler(
            client,
            endpoints=endpoints,
            priors="heuristic",
            clock=self.clock,
            state=opts.state,
            metrics=False if self._metrics is None else self._metrics,
            observers=(timing,),
            config=scheduler_config(
                opts.scheduler_config(), retry=RetryPolicy(max_attempts=opts.max_attempts)
            ),
            options=RuntimeOptions(max_pending=None, namespace=opts.namespace),
        )

    async def _send_all(
        self,
        todo: list[BatchLine],
        priors: list[Prior],
        source: BinaryIO,
        target: Any | list[Endpoint],
        writer: ResultWriter,
    ) -> None:
        opts = self.options
        timing = BatchTiming(self.clock.now())
        scheduler = self.scheduler = self._scheduler(target, timing)
        self._started = start = timing.started
        tiers = self._tiers
        job_start = start if tiers is None else tiers.job_start()
        deadlines, window = Deadlines(job_start, opts.deadline_s), anyio.Semaphore(opts.window)
        sending = _Sending(scheduler, source, writer, window, deadlines, timing)
        stop = self._stop = anyio.Event()
        if self._stopping:
            stop.set()
        streamed = self._streamed
        try:
            async with scheduler, anyio.create_task_group() as tg:
                tg.start_soon(self._watch_stop, scheduler, tg.cancel_scope)
                if streamed is not None:
                    tg.start_soon(streamed.run, opts.input)
                async with anyio.create_task_group() as sends:
                    launch = partial(self._launch, sending=sending, sends=sends)
                    if tiers is not None:
                        await tiers.drive(tg, launch, partial(self._emit, sending))
                    else:
                        for i, (line, prior) in enumerate(zip(todo, priors, strict=True)):
                            if not await launch(i, line, prior):
                                break
                tg.cancel_scope.cancel()
        except StateUnavailable as exc:  # only entering can raise it (later: a fallback)
            raise BatchError(f"the shared state cannot be reached: {exc}") from None
        if tiers is not None and tiers.failure is not None:
            raise tiers.failure
        if not self._auth.tripped:
            self._write_held(writer)
        self._sync(scheduler)
        assert self._progress is not None
        if self._stopping and self._progress.finished < self._progress.to_send:
            tripped = self._auth.tripped
            self._progress = replace(
                self._progress,
                interrupted=True,
                auth_status=self._auth.status if tripped else None,
                auth_refused=self._auth.dropped,
            )

    async def _launch(
        self, i: int, line: BatchLine, prior: Prior, *, sending: _Sending, sends: TaskGroup
    ) -> bool:
        """Start sending ``line`` (the ``i``-th to send) when the window has room; ``False``:
        stopping, not sent."""
        streamed, window = self._streamed, sending.window
        if streamed is not None:  # semisched.batch.streamed's rule 2: past the look-ahead,
            # wait for this line's prior (or a finished request) before adding more
            while not (streamed.done or streamed.ready(line)) and (
                self.options.window - window.value >= streamed.lookahead
            ):
                await streamed.changed()
            prior = streamed.take(i, line, prior)
        await window.acquire()
        if self._stopping:
            window.release()
            return False
        sends.start_soon(self._send_one, line, prior, sending)
        return True

    def _emit(
        self, sending: _Sending, record: dict[str, Any], count: Callable[[BatchProgress], Any]
    ) -> None:
        """Write a record the Batch API answered, counted by ``count``."""
        assert self._progress is not None
        self._progress = count(self._progress)
        sending.writer.write(record)
        self._sync(sending.scheduler)
        if self._on_result is not None:
            self._on_result(self._progress)

    async def _watch_stop(self, scheduler: Scheduler, scope: anyio.CancelScope) -> None:
        assert self._stop is not None
        await self._stop.wait()
        scheduler.pause()
        # Calls in flight may finish and be recorded; nothing new is sent.
        with anyio.move_on_after(self.clock.to_wall(self.options.grace_s)):
            while scheduler.statistics().inflight:
                await anyio.sleep(0.05)
        scope.cancel()

    async def _send_one(self, line: BatchLine, prior: Prior, sending: _Sending) -> None:
        try:
            record = await self._answer(line, prior, sending)
            if record is None:  # a 401/403, held back (semisched.batch.auth)
                if self._auth.tripped and not self._stopping:
                    sending.scheduler.pause()  # now: the stop's watcher runs later
                    self.stop()
                return
            if record.get("error") is None:  # the key works: what was held is recorded
                self._write_held(sending.writer)
            sending.writer.write(record)
            self._sync(sending.scheduler)
            if self._on_result is not None:
                assert self._progress is not None
                self._on_result(self._progress)
        finally:
            sending.window.release()
            if self._streamed is not None:
                self._streamed.poke()

    async def _answer(
        self, line: BatchLine, prior: Prior, sending: _Sending
    ) -> dict[str, Any] | None:
        """Send ``line`` with its planned ``prior``; its record (counted), or ``None`` for a
        401/403 the auth guard holds back."""
        due = sending.deadlines.of(line.deadline_s)
        deadline = None if due is None else due - self.clock.now()
        if deadline is not None and deadline <= 0:
            note = "its deadline passed before it was sent"
            return self._failure(line, ErrorCode.DEADLINE_EXCEEDED, note, due)
        try:
            body = load_body(sending.source, line, self.options.model)
        except BatchError as exc:
            return self._failure(line, ErrorCode.INPUT_CHANGED, str(exc), due)
        try:
            with sending.timing.track(line.custom_id) as timed:
                response = await sending.scheduler.submit(deadline=deadline, prior=prior, **body)
        except RequestError as exc:
            code, status = error_code(exc)
            record = error_record(line.custom_id, code, str(exc), status)
            self._hints.setdefault(getattr(exc, "hint", None) or "")  # the summary's, once
            held = self._auth.hold(record, code, status)
            return None if held else self._counted(record, code, due)
        usage = APIS[body["api"]].usage(response)  # each API reports it its own way
        cost = self._prices.cost(timed.endpoint, body["model"], usage)
        met = None if due is None else self.clock.now() <= due
        assert self._progress is not None
        self._progress = self._progress.counted(tier="realtime", cost=cost, met=met, usage=usage)
        return annotate(success_record(line.custom_id, response, timed.record()), "realtime", cost)

    def _failure(
        self, line: BatchLine, code: ErrorCode, message: str, due: float | None
    ) -> dict[str, Any]:
        return self._counted(error_record(line.custom_id, code, message), code, due)

    def _counted(
        self, record: dict[str, Any], code: ErrorCode, due: float | None = None
    ) -> dict[str, Any]:
        """``record``, an error of ``code`` sent real-time (``due``: its line's deadline),
        counted in the progress."""
        assert self._progress is not None
        met = None if due is None else False
        self._progress = self._progress.counted(tier="realtime", met=met, code=code)
        return annotate(record, "realtime", None)

    def _write_held(self, writer: ResultWriter) -> None:
        for record, code in self._auth.release():
            writer.write(self._counted(record, code))

    def _sync(self, scheduler: Scheduler) -> None:
        """Copy the scheduler's counters and the elapsed time into the progress."""
        assert self._progress is not None and self._started is not None
        stats = scheduler.statistics()
        self._engine_stats, self._compression = stats.engine, stats.compression
        elapsed = self.clock.now() - self._started
        self._progress = self._progress.synced(stats, elapsed, self._latencies)

    def progress_now(self) -> BatchProgress | None:
        """The progress read now, for a line while no result comes (``None``: not planned)."""
        if self.scheduler is not None and self._started is not None:
            self._sync(self.scheduler)
        return self._progress


async def run_batch(options: BatchOptions, **kwargs: Any) -> BatchSummary:
    """Run a batch job (see `BatchRun`)."""
    return await BatchRun(options, **kwargs).run()
