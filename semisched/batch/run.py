"""One ``semisched batch`` run: the scheduler, the budgets, progress and stopping.

`BatchRun` reads the input and the output so far (`semisched.batch.input`,
`semisched.batch.output`), then sends every request that has no result through one
[`semisched.Scheduler`][semisched.Scheduler]: allocation and ordering on the predicted cost
(learned priors when the ml extra is installed, else the ``max_tokens`` heuristic), the
concurrency cap, and a rate budget (`semisched.core.budget`) that keeps requests and tokens
per minute within ``rpm`` / ``tpm`` and follows the provider's ``x-ratelimit-*`` headers and
429s. Retries belong to the scheduler. Each result is appended as it completes;
`BatchRun.stop` (Ctrl-C in the CLI) pauses dispatching, waits up to ``grace_s`` for calls in
flight and returns with ``interrupted`` set. The sends themselves (the scheduler, the
window, each answer's record, counted, and the stop's watcher) live in
`semisched.batch.sending`; this module keeps the job's life around them: prepare, plan, run,
stop, progress, summary.

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
from typing import TYPE_CHECKING, Any

import anyio

from semisched.batch.auth import AuthGuard
from semisched.batch.client import ClientFactory, connect
from semisched.batch.forecast import BatchForecast
from semisched.batch.input import (
    BatchError,
    InvalidInput,
    open_input,
    read_input,
)
from semisched.batch.ledger import Prices
from semisched.batch.options import BatchOptions
from semisched.batch.output import (
    ResultWriter,
    check_writable,
    drop_errors,
    invalid_line_record,
    read_answered,
)
from semisched.batch.planning import STREAMING, BatchPlan, load_priors, plan_job
from semisched.batch.sending import send_all
from semisched.batch.streamed import StreamedPriors
from semisched.batch.summary import BatchProgress, BatchSummary, engine_parts
from semisched.batch.tiered_job import TieredJob
from semisched.compress.runtime import CompressionStats
from semisched.core.request import Prior, Request
from semisched.core.stats import EngineStats
from semisched.priors.default import model_unavailable
from semisched.runtime.clock import AnyioClock, Clock
from semisched.runtime.scheduler import Scheduler

if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry

__all__ = ["STREAMING", "BatchPlan", "BatchRun", "load_priors", "run_batch"]


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
                    await send_all(self, todo, priors, source, target, writer)
        finally:
            writer.close()
            if self._tiers is not None:
                self._tiers.close()
        summary = self.summary()
        assert summary is not None
        return summary

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
