"""A ``semisched batch`` job with ``--tier batch`` or ``auto``: its journal, its split, its feed.

`TieredJob` is what `BatchRun` adds for a tiered job:

1. **Opening** (`TieredJob.open`): the output's journal
   (`semisched.batch.journal`), whose first entry fixes the job's start for every
   later run (`semisched.batch.deadlines`, rule 3), and a client of the Batch API
   endpoint: the one endpoint's, or a fleet's first endpoint's.
2. **Driving** (`TieredJob.drive`), beside the real-time sends: the batches a killed
   run left open are taken back (`resume`); every
   other line without a record goes to its tier (`choose_tier`
   at the start): the real-time ones first, the earliest deadline first, into the feed the
   run sends from, the rest uploaded as batches, polled until each is read. Lines a batch
   hands back go into the same feed. The feed closes when the last batch is read.
3. **Recording** a line a batch answered (`TieredJob.batch_answer`): the output
   line's ``response`` as it came, with ``tier``, ``cost_usd`` (the usage at the Batch API
   price, `semisched.batch.ledger`) and ``batch_id``.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import anyio
from anyio.streams.memory import MemoryObjectSendStream

from semisched.batch.batch_api import line_outcome
from semisched.batch.client import ClientFactory, make_client, openai_factory
from semisched.batch.deadlines import Deadlines
from semisched.batch.forecast import batch_floor
from semisched.batch.input import SUPPORTED_URLS, BatchError, BatchLine, load_body, open_input
from semisched.batch.journal import Journal
from semisched.batch.ledger import annotate
from semisched.batch.output import ErrorCode, error_record
from semisched.batch.tier import Turnaround, choose_tier, realtime_need_s
from semisched.batch.tiered import BatchTier
from semisched.core.request import Prior, Request
from semisched.runtime.apis import APIS

if TYPE_CHECKING:
    from anyio.abc import TaskGroup

    from semisched.batch.options import BatchOptions
    from semisched.batch.run import BatchRun
    from semisched.batch.summary import BatchProgress

__all__ = ["TieredJob", "batch_client"]

#: ``launch(i, line, prior)``: send ``line`` real-time; ``False``: the run is stopping.
Launch = Callable[[int, BatchLine, Prior], Awaitable[bool]]
#: ``emit(record, count)``: write a record and count it in the progress.
Emit = Callable[[dict[str, Any], Callable[["BatchProgress"], "BatchProgress"]], None]


def batch_client(
    options: BatchOptions, client: Any | None, factory: ClientFactory | None
) -> Any:
    """The Batch API endpoint's client: ``client`` (the run's own), else one made for the
    one endpoint, or for a fleet's first endpoint (its key from its variable).

    Raises:
        BatchError: The key variable is not set.
    """
    if not options.fleet:
        return client if client is not None else make_client(options, factory=factory)
    first = options.endpoints[0]
    variable = first.key_env or options.api_key_env
    key = os.environ.get(variable)
    if not key:
        raise BatchError(f"endpoint {first.name!r}: the API key variable {variable} is not set")
    make = factory if factory is not None else openai_factory(options)
    return make(first.base_url, key)


class TieredJob:
    """A tiered job's journal, split and feed (module docstring); made by `open`."""

    def __init__(
        self, run: BatchRun, todo: Sequence[BatchLine], priors: Sequence[Prior],
        requests: Sequence[Request], client: Any, journal: Journal,
    ) -> None:  # fmt: skip
        self.run, self.options, self.clock = run, run.options, run.clock
        self.todo = list(todo)
        self.priors = {line.custom_id: p for line, p in zip(todo, priors, strict=True)}
        self.requests = {line.custom_id: r for line, r in zip(todo, requests, strict=True)}
        self.client, self.journal = client, journal
        opts = self.options
        self.turnaround = Turnaround(opts.batch_turnaround_s, opts.batch_safety)
        self.tier: BatchTier | None = None
        self.failure: BaseException | None = None
        self._feed: MemoryObjectSendStream[BatchLine] | None = None
        self._emit: Emit | None = None
        self._source = open_input(opts.input)
        self._map = opts.endpoints[0].options.get("model_map") if opts.endpoints else None

    @classmethod
    def open(
        cls, run: BatchRun, todo: Sequence[BatchLine], priors: Sequence[Prior],
        requests: Sequence[Request],
    ) -> TieredJob:  # fmt: skip
        """The tiered part of ``run``, sending ``todo``.

        Raises:
            BatchError: The journal cannot be read or written, or a key is missing.
        """
        client = batch_client(run.options, run._client, run._make_client)
        return cls(run, todo, priors, requests, client, Journal(run.options.output))

    def close(self) -> None:
        self.journal.close()
        self._source.close()

    def job_start(self) -> float:
        """The job's start on the run's clock: the journal's first run's, on a clock that
        runs ``time_scale`` times faster than the wall."""
        started = self.journal.state.started_unix
        elapsed = 0.0 if started is None else max(0.0, time.time() - started)
        return self.clock.now() - elapsed * self.options.time_scale

    # -- the run's side of the feed ---------------------------------------------------------

    async def drive(self, tg: TaskGroup, launch: Launch, emit: Emit) -> None:
        """Send the real-time lines as the feed brings them, while the batches run in ``tg``."""
        self._emit = emit
        send, receive = anyio.create_memory_object_stream[BatchLine](math.inf)
        self._feed = send
        tg.start_soon(self._batches, send)
        async with receive:
            async for line in receive:
                if not await launch(-1, line, self.priors[line.custom_id]):
                    break

    async def _batches(self, send: MemoryObjectSendStream[BatchLine]) -> None:
        opts = self.options
        deadlines = Deadlines(self.job_start(), opts.deadline_s)
        tier = self.tier = BatchTier(
            client=self.client, journal=self.journal, clock=self.clock,
            turnaround=self.turnaround, poll_s=opts.batch_poll_s, deadlines=deadlines, host=self,
            cancels=opts.tier == "auto",
        )  # fmt: skip
        async with send:
            try:
                claimed = self.journal.state.claimed()
                by_id = {line.custom_id: line for line in self.todo}
                free = await tier.resume(self.journal.state.open_uploads(), by_id)
                pool = [line for line in self.todo if line.custom_id not in claimed] + free
                now, estimate = self.clock.now(), self.turnaround.estimate_s
                due = {x.custom_id: deadlines.of(x.deadline_s) for x in pool}
                choice = {x.custom_id: choose_tier(opts.tier, due[x.custom_id], now, estimate)
                          for x in pool}  # fmt: skip
                now_lines = [x for x in pool if choice[x.custom_id] == "realtime"]
                self.resend(sorted(now_lines, key=lambda x: _order(due[x.custom_id])))
                await tier.submit([x for x in pool if choice[x.custom_id] == "batch"])
                await tier.run()
            except BatchError as exc:  # raised by the run once its sends are over
                self.failure = exc

    # -- TierHost ---------------------------------------------------------------------------

    def resend(self, lines: Sequence[BatchLine]) -> None:
        assert self._feed is not None
        for line in lines:
            self._feed.send_nowait(line)

    def body_of(self, line: BatchLine) -> dict[str, Any]:
        body = load_body(self._source, line, self.options.model)
        body.pop("api", None)
        tenant = body.pop("tenant", None)
        del tenant  # the scheduler's, not the provider's
        if self._map is not None and body.get("model") in self._map:
            body["model"] = self._map[body["model"]]
        return body

    def need_s(self, lines: Sequence[BatchLine]) -> float:
        requests = [self.requests[x.custom_id] for x in lines if x.custom_id in self.requests]
        floor = batch_floor(requests, self.options.scheduler_config()).floor_s
        return realtime_need_s(floor, self.turnaround.typical_s)

    def batch_answer(self, line: BatchLine, answer: Mapping[str, Any], batch_id: str) -> None:
        assert self._emit is not None and self.tier is not None
        response = answer.get("response")
        response = response if isinstance(response, Mapping) else {}
        body = response.get("body")
        body = body if isinstance(body, Mapping) else {}
        due = self.tier.deadlines.of(line.deadline_s)
        if line_outcome(answer) == "answered":
            usage = APIS[SUPPORTED_URLS[line.url]].usage(body)
            request = self.requests.get(line.custom_id)
            model = request.model if request is not None else str(body.get("model", ""))
            cost = self.run._prices.cost(None, model, usage, batch=True)
            met = None if due is None else self.clock.now() <= due
            record = {"id": answer.get("id"), "custom_id": line.custom_id,
                      "response": dict(response), "error": None, "batch_id": batch_id}  # fmt: skip

            def count(p: BatchProgress) -> BatchProgress:
                return p.counted(tier="batch", cost=cost, met=met, usage=usage)

            self._emit(annotate(record, "batch", cost), count)
            return
        error = body.get("error")
        said = error.get("message") if isinstance(error, Mapping) else None
        message = str(said or "the Batch API answered an error")
        status = response.get("status_code")
        code = ErrorCode.PROVIDER_ERROR
        failed = error_record(line.custom_id, code, message, status)
        failed["batch_id"] = batch_id
        missed = None if due is None else False
        self._emit(annotate(failed, "batch", None),
                   lambda p: p.counted(tier="batch", met=missed, code=code))  # fmt: skip


def _order(due: float | None) -> tuple[bool, float]:
    """Earliest deadline first; lines without one last."""
    return (due is None, 0.0 if due is None else due)
