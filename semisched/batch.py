"""Batch jobs through the scheduler: OpenAI Batch API files in and out, crash-safe.

``semisched batch INPUT.jsonl -o OUTPUT.jsonl --base-url URL`` (see
:mod:`semisched.cli`) is a thin shell over :func:`run_batch`:

1. **Read and validate everything first.** Every line must be an OpenAI Batch
   API input object (``custom_id``, ``method: POST``, a supported ``url``, a
   ``body`` the SDK accepts). Problems carry their line number; unless
   ``skip_invalid``, :class:`InvalidInput` is raised before anything is sent.
   With ``skip_invalid`` each bad line is written to the output as an error
   record (its ``id`` is ``batch_req_invalid_line_<N>``).
2. **Resume.** The output file is read first: ``custom_id``\\ s already answered
   (successes and errors alike) are skipped, and a torn last line left by a
   killed run is cut off. ``retry_failed`` rewrites the file without its error
   records (atomically) so those requests are sent again.
3. **Send through** :class:`semisched.Scheduler`: allocation and ordering on
   the predicted cost (learned priors when the ml extra is installed, else the
   ``max_tokens`` heuristic), the concurrency cap, and a rate budget
   (:mod:`semisched.core.budget`) that keeps requests and tokens per minute
   within ``rpm`` / ``tpm`` and follows the provider's ``x-ratelimit-*``
   headers and 429s. Retries belong to the scheduler.
4. **Append and flush each result as it completes** (one ``write`` of a whole
   line on an ``O_APPEND`` descriptor, no user-space buffer): after ``kill -9``
   every finished result is on disk, and a rerun sends only what has no result.
   Requests in flight at the kill have no result and are sent again; none is
   lost and none appears twice.
5. **Stop on request.** :meth:`BatchRun.stop` (Ctrl-C in the CLI) pauses
   dispatching, waits up to ``grace_s`` for calls in flight, records what
   finished and returns with ``interrupted`` set.

The API key is read from the environment variable named by ``api_key_env``
and is never written to the output, logs or progress.
"""

from __future__ import annotations

import json
import math
import os
import tempfile
import uuid
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import anyio
import numpy as np

from semisched.clock import Clock, MonotonicClock, ScaledClock
from semisched.core.config import PRESETS, BudgetConfig, SchedulerConfig, preset
from semisched.errors import (
    DeadlineExceeded,
    ProviderError,
    QuotaExceeded,
    RateLimited,
    RequestRejected,
    SemischedError,
)
from semisched.runtime import RetryPolicy, Scheduler

__all__ = [
    "SUPPORTED_URLS",
    "BatchError",
    "BatchLine",
    "BatchOptions",
    "BatchRun",
    "BatchSummary",
    "InvalidInput",
    "InvalidLine",
    "ResultWriter",
    "load_body",
    "read_answered",
    "read_input",
    "run_batch",
]

#: Batch ``url`` -> endpoint of the scheduler.
SUPPORTED_URLS: Mapping[str, str] = {
    "/v1/chat/completions": "chat",
    "/v1/completions": "completions",
}
INVALID_ID_PREFIX = "batch_req_invalid_line_"


class BatchError(Exception):
    """A batch job cannot start (unreadable input, unwritable output, no API key)."""


@dataclass(frozen=True, slots=True)
class BatchLine:
    """One valid input line: where it is, not its body.

    Bodies are read again when the line is sent (:func:`load_body`), so a job
    of 100,000 prompts holds a few numbers per line in memory, not the prompts.
    """

    line: int
    custom_id: str
    url: str
    offset: int
    size: int


@dataclass(frozen=True, slots=True)
class InvalidLine:
    """One input line that cannot be sent, and why."""

    line: int
    custom_id: str | None
    message: str

    def __str__(self) -> str:
        return f"line {self.line}: {self.message}"


class InvalidInput(BatchError):
    """The input has invalid lines (listed in ``problems``); nothing was sent."""

    def __init__(self, problems: Sequence[InvalidLine]) -> None:
        self.problems = list(problems)
        shown = "\n".join(f"  {p}" for p in self.problems[:20])
        more = len(self.problems) - 20
        tail = f"\n  ... and {more} more" if more > 0 else ""
        super().__init__(
            f"{len(self.problems)} invalid line(s) in the input; nothing was sent "
            f"(--skip-invalid records them as errors and sends the rest):\n{shown}{tail}"
        )


# -- input ------------------------------------------------------------------------------


def _check_line(
    number: int,
    offset: int,
    text: bytes,
    first_seen: dict[str, int],
    check_body: Callable[[str, dict[str, Any]], None] | None,
    default_model: str | None,
) -> BatchLine | InvalidLine:
    try:
        obj = json.loads(text)
    except ValueError as exc:
        return InvalidLine(number, None, f"not valid JSON ({exc})")
    if not isinstance(obj, dict):
        return InvalidLine(number, None, "must be a JSON object")
    custom_id = obj.get("custom_id")
    if not isinstance(custom_id, str) or not custom_id:
        return InvalidLine(number, None, "'custom_id' must be a non-empty string")
    if custom_id in first_seen:
        return InvalidLine(
            number,
            custom_id,
            f"duplicate custom_id {custom_id!r} (first on line {first_seen[custom_id]})",
        )
    first_seen[custom_id] = number
    method = obj.get("method", "POST")
    if method != "POST":
        return InvalidLine(number, custom_id, f"'method' must be 'POST', got {method!r}")
    url = obj.get("url")
    if not isinstance(url, str) or url not in SUPPORTED_URLS:
        return InvalidLine(
            number,
            custom_id,
            f"'url' {url!r} is not supported (supported: {', '.join(SUPPORTED_URLS)})",
        )
    body = obj.get("body")
    if not isinstance(body, dict):
        return InvalidLine(number, custom_id, "'body' must be a JSON object")
    body = dict(body)
    if default_model is not None:
        body.setdefault("model", default_model)
    if not isinstance(body.get("model"), str) or not body["model"]:
        return InvalidLine(number, custom_id, "'body.model' is missing (or pass --model)")
    if body.get("stream"):
        return InvalidLine(number, custom_id, "'body.stream' is not supported in batch files")
    if check_body is not None:
        try:
            check_body(SUPPORTED_URLS[url], body)
        except (TypeError, ValueError) as exc:
            return InvalidLine(number, custom_id, f"'body' is not a valid request: {exc}")
    return BatchLine(number, custom_id, url, offset, len(text))


def read_input(
    path: str | os.PathLike[str],
    *,
    check_body: Callable[[str, dict[str, Any]], None] | None = None,
    default_model: str | None = None,
) -> tuple[list[BatchLine], list[InvalidLine]]:
    """Parse and validate a Batch API input file (blank lines are ignored).

    A line that is not UTF-8 is an invalid line like any other.

    Raises:
        BatchError: The file cannot be read.
    """
    lines: list[BatchLine] = []
    invalid: list[InvalidLine] = []
    first_seen: dict[str, int] = {}
    try:
        with open(path, "rb") as handle:
            offset = 0
            for number, text in enumerate(handle, start=1):
                start, offset = offset, offset + len(text)
                if not text.strip():
                    continue
                checked = _check_line(number, start, text, first_seen, check_body, default_model)
                if isinstance(checked, BatchLine):
                    lines.append(checked)
                else:
                    invalid.append(checked)
    except OSError as exc:
        raise BatchError(f"cannot read input {os.fspath(path)!r}: {exc.strerror or exc}") from None
    return lines, invalid


def load_body(handle: Any, line: BatchLine, default_model: str | None) -> dict[str, Any]:
    """Read ``line``'s body again from the open (binary) input file.

    Raises:
        BatchError: The input changed since it was validated.
    """
    handle.seek(line.offset)
    raw = handle.read(line.size)
    try:
        obj = json.loads(raw)
        body = dict(obj["body"])
        if obj["custom_id"] != line.custom_id:
            raise ValueError
    except (ValueError, KeyError, TypeError):
        raise BatchError(
            f"input line {line.line} changed since it was validated; start the run again"
        ) from None
    if default_model is not None:
        body.setdefault("model", default_model)
    return body


# -- output -----------------------------------------------------------------------------


def read_answered(path: str | os.PathLike[str]) -> tuple[set[str], set[str], int]:
    """``(answered custom_ids, record ids, bytes cut)`` of an existing output file.

    A last line without its newline (a run killed mid-write) is cut off so the
    next append starts on a fresh line; that request is sent again. Records
    of invalid input lines count by their ``id``, not their ``custom_id``.

    Raises:
        BatchError: The file exists but cannot be read or repaired.
    """
    file = Path(path)
    if not file.exists():
        return set(), set(), 0
    try:
        data = file.read_bytes()
        keep = data.rfind(b"\n") + 1
        cut = len(data) - keep
        if cut:
            with open(file, "r+b") as handle:
                handle.truncate(keep)
    except OSError as exc:
        raise BatchError(f"cannot read output {os.fspath(path)!r}: {exc.strerror or exc}") from None
    answered: set[str] = set()
    ids: set[str] = set()
    for number, raw in enumerate(data[:keep].splitlines(), start=1):
        if not raw.strip():
            continue
        try:
            record = json.loads(raw)
            rid, cid = record.get("id"), record.get("custom_id")
        except (ValueError, AttributeError):
            raise BatchError(
                f"output {os.fspath(path)!r} line {number} is not a result record; "
                "is it the output of another tool? Use another -o path."
            ) from None
        if isinstance(rid, str):
            ids.add(rid)
        if isinstance(cid, str) and not (
            isinstance(rid, str) and rid.startswith(INVALID_ID_PREFIX)
        ):
            answered.add(cid)
    return answered, ids, cut


def drop_errors(path: str | os.PathLike[str]) -> int:
    """Rewrite the output without its error records (atomically); returns how many went."""
    file = Path(path)
    if not file.exists():
        return 0
    kept: list[bytes] = []
    dropped = 0
    for raw in file.read_bytes().splitlines(keepends=True):
        try:
            failed = json.loads(raw).get("error") is not None
        except (ValueError, AttributeError):
            failed = False
        if failed:
            dropped += 1
        else:
            kept.append(raw)
    fd, tmp = tempfile.mkstemp(dir=file.parent, prefix=file.name, suffix=".tmp")
    with os.fdopen(fd, "wb") as handle:
        handle.writelines(kept)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(tmp, file)
    return dropped


class ResultWriter:
    """Appends one result record per line; each is on disk (page cache) when ``write`` returns."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        try:
            self._fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        except OSError as exc:
            raise BatchError(
                f"cannot write output {os.fspath(path)!r}: {exc.strerror or exc}"
            ) from None
        self.path = Path(path)

    def write(self, record: Mapping[str, Any]) -> None:
        data = (json.dumps(record, ensure_ascii=False, separators=(",", ":")) + "\n").encode()
        view = memoryview(data)
        while view:  # a regular-file append is whole in practice; loop for the rare short write
            written = os.write(self._fd, view)
            view = view[written:]

    def close(self) -> None:
        if self._fd >= 0:
            os.fsync(self._fd)
            os.close(self._fd)
            self._fd = -1


def _new_id() -> str:
    return f"batch_req_{uuid.uuid4().hex}"


def success_record(custom_id: str, response: Any) -> dict[str, Any]:
    """A Batch API output record for a provider response."""
    dump = getattr(response, "model_dump", None)
    body = dump(mode="json") if callable(dump) else response
    return {
        "id": _new_id(),
        "custom_id": custom_id,
        "response": {
            "status_code": 200,
            "request_id": getattr(response, "_request_id", None),
            "body": body,
        },
        "error": None,
    }


def error_record(
    custom_id: str | None,
    code: str,
    message: str,
    status_code: int | None = None,
    rid: str | None = None,
) -> dict[str, Any]:
    """A Batch API output record for a request that produced no response."""
    response = None
    if status_code is not None:
        response = {
            "status_code": status_code,
            "request_id": None,
            "body": {"error": {"message": message, "type": code, "code": code}},
        }
    return {
        "id": rid or _new_id(),
        "custom_id": custom_id,
        "response": response,
        "error": {"code": code, "message": message},
    }


def _outcome(exc: SemischedError) -> tuple[str, int | None]:
    if isinstance(exc, QuotaExceeded):
        return "insufficient_quota", exc.status_code
    if isinstance(exc, RateLimited):
        return "rate_limited", exc.status_code
    if isinstance(exc, ProviderError):
        return "provider_error", exc.status_code
    if isinstance(exc, DeadlineExceeded):
        return "deadline_exceeded", None
    if isinstance(exc, RequestRejected):
        return "rejected", None
    return type(exc).__name__, None


# -- running ----------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class BatchOptions:
    """What ``semisched batch`` was asked to do (see the CLI's ``--help``)."""

    input: Path
    output: Path
    base_url: str
    api_key_env: str = "OPENAI_API_KEY"
    model: str | None = None
    max_concurrency: int = 32
    rpm: int | None = None
    tpm: int | None = None
    deadline_s: float | None = None
    policy: str = "adaptive_drr"
    skip_invalid: bool = False
    retry_failed: bool = False
    priors: str = "auto"
    time_scale: float = 1.0
    grace_s: float = 10.0
    budget_margin_s: float | None = None
    max_attempts: int = 6
    window: int = 2000
    request_timeout_s: float = 600.0

    def __post_init__(self) -> None:
        if self.policy not in PRESETS:
            raise ValueError(f"policy={self.policy!r} must be one of {sorted(PRESETS)}")
        if self.priors not in ("auto", "learned", "heuristic"):
            raise ValueError(f"priors={self.priors!r} must be auto, learned or heuristic")
        for name in ("max_concurrency", "window", "max_attempts"):
            value = getattr(self, name)
            if not (isinstance(value, int) and value >= 1):
                raise ValueError(f"{name}={value!r} must be an int >= 1")
        for name in ("deadline_s",):
            value = getattr(self, name)
            if value is not None and not (math.isfinite(value) and value > 0):
                raise ValueError(f"{name}={value!r} must be a number of seconds > 0")
        for name in ("time_scale", "request_timeout_s"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value > 0):
                raise ValueError(f"{name}={value!r} must be a finite number > 0")
        if not (math.isfinite(self.grace_s) and self.grace_s >= 0):
            raise ValueError(f"grace_s={self.grace_s!r} must be a number of seconds >= 0")
        self.scheduler_config()  # the budget's own checks (rpm, tpm, margin)

    @property
    def margin_s(self) -> float:
        """The rate budget's transit margin: 1 s, and never under 100 ms of wall time
        (compressed time against the mock shrinks real transit jitter's allowance)."""
        if self.budget_margin_s is not None:
            return self.budget_margin_s
        return max(1.0, 0.1 * self.time_scale)

    def scheduler_config(self) -> SchedulerConfig:
        """The policy preset with this job's concurrency and rate budget."""
        base = preset(self.policy)
        return replace(
            base,
            max_inflight=self.max_concurrency,
            budget=BudgetConfig(rpm=self.rpm, tpm=self.tpm, margin_s=self.margin_s),
        )


@dataclass(kw_only=True)
class BatchSummary:
    """What a run did (counts are this run's, except ``already_done``)."""

    total: int
    already_done: int
    invalid: int
    to_send: int
    succeeded: int = 0
    failed: Counter[str] = field(default_factory=Counter)
    prompt_tokens: int = 0
    completion_tokens: int = 0
    rate_limited: int = 0
    retries: int = 0
    elapsed_s: float = 0.0
    latencies_s: list[float] = field(default_factory=list)
    interrupted: bool = False
    priors: str = "heuristic"
    cut_bytes: int = 0

    @property
    def finished(self) -> int:
        """Requests answered in this run (success or error)."""
        return self.succeeded + sum(self.failed.values())

    def latency_percentile(self, q: float) -> float | None:
        """Percentile of successful call latency (send -> response), clock seconds."""
        if not self.latencies_s:
            return None
        return float(np.percentile(self.latencies_s, q))

    def lines(self) -> list[str]:
        """A human-readable summary."""
        p50, p95 = self.latency_percentile(50), self.latency_percentile(95)
        fails = ", ".join(f"{k} {v}" for k, v in sorted(self.failed.items())) or "none"
        tokens = self.prompt_tokens + self.completion_tokens
        rate = tokens / self.elapsed_s if self.elapsed_s > 0 else 0.0
        out = [
            f"{'interrupted' if self.interrupted else 'done'}: {self.finished} of "
            f"{self.to_send} requests answered in {self.elapsed_s:.1f} s "
            f"({self.already_done} already in the output, {self.invalid} invalid lines)",
            f"  succeeded {self.succeeded}; failed: {fails}",
            f"  tokens: {self.prompt_tokens} prompt + {self.completion_tokens} completion "
            f"({rate:.0f}/s); 429s {self.rate_limited}; retries {self.retries}",
        ]
        if p50 is not None and p95 is not None:
            out.append(f"  call latency p50 {p50:.2f} s, p95 {p95:.2f} s; priors: {self.priors}")
        return out


class _TimedRaw:
    def __init__(self, raw: Any, clock: Clock, sink: list[float]) -> None:
        self._raw = raw
        self._clock = clock
        self._sink = sink

    async def create(self, **params: Any) -> Any:
        start = self._clock.now()
        result = await self._raw.create(**params)
        self._sink.append(self._clock.now() - start)
        return result


class _TimedCompletions:
    def __init__(self, target: Any, clock: Clock, sink: list[float]) -> None:
        self.create = target.create  # the scheduler checks parameters against its signature
        self.with_raw_response = _TimedRaw(target.with_raw_response, clock, sink)


class _TimedChat:
    def __init__(self, completions: _TimedCompletions) -> None:
        self.completions = completions


class TimedClient:
    """An ``AsyncOpenAI`` seen through the scheduler's raw-response calls, timing each
    successful call (send -> response, clock seconds) into ``latencies``."""

    def __init__(self, client: Any, clock: Clock, latencies: list[float]) -> None:
        self.chat = _TimedChat(_TimedCompletions(client.chat.completions, clock, latencies))
        self.completions = _TimedCompletions(client.completions, clock, latencies)


def make_client(options: BatchOptions) -> Any:
    """An ``AsyncOpenAI`` for the job; the key comes from the environment only."""
    import openai

    key = os.environ.get(options.api_key_env)
    if not key:
        raise BatchError(
            f"the API key variable {options.api_key_env} is not set (set it, or name another "
            "variable with --api-key-env)"
        )
    return openai.AsyncOpenAI(
        base_url=options.base_url,
        api_key=key,
        max_retries=0,
        timeout=options.request_timeout_s / options.time_scale,
    )


def _priors(options: BatchOptions) -> tuple[Any, str]:
    if options.priors == "heuristic":
        return None, "heuristic"
    try:
        from predictors.learned import load_default

        return load_default(), "learned"
    except (ImportError, FileNotFoundError) as exc:
        if options.priors == "learned":
            raise BatchError(f"--priors learned: {exc}") from None
        return None, "heuristic (learned model unavailable)"


class BatchRun:
    """One run of a batch job; :meth:`run` does it, :meth:`stop` asks it to stop."""

    def __init__(
        self,
        options: BatchOptions,
        *,
        client: Any | None = None,
        clock: Clock | None = None,
        on_result: Callable[[BatchSummary], None] | None = None,
    ) -> None:
        self.options = options
        self._client = client
        self.clock: Clock = clock or (
            MonotonicClock() if options.time_scale == 1.0 else ScaledClock(options.time_scale)
        )
        self._on_result = on_result
        self._stopping = False
        self._stop: anyio.Event | None = None  # made in the run's event loop
        self.scheduler: Scheduler | None = None
        self.summary: BatchSummary | None = None

    def stop(self) -> None:
        """Stop dispatching, let in-flight calls finish (up to ``grace_s``), then return."""
        self._stopping = True
        if self._stop is not None:
            self._stop.set()

    @property
    def stopping(self) -> bool:
        """Whether :meth:`stop` was called."""
        return self._stopping

    def prepare(self) -> tuple[list[BatchLine], list[InvalidLine], set[str], set[str], int]:
        """Read the input and the output so far; raises on invalid input (nothing sent)."""
        opts = self.options
        probe = Scheduler(_Probe(), config=opts.scheduler_config())
        lines, invalid = read_input(
            opts.input,
            check_body=lambda endpoint, body: _check_endpoint(probe, endpoint, body),
            default_model=opts.model,
        )
        if invalid and not opts.skip_invalid:
            raise InvalidInput(invalid)
        if opts.output.resolve() == opts.input.resolve():
            raise BatchError("the output file must not be the input file")
        if opts.retry_failed:
            drop_errors(opts.output)
        answered, ids, cut = read_answered(opts.output)
        return lines, invalid, answered, ids, cut

    async def run(self) -> BatchSummary:
        opts = self.options
        lines, invalid, answered, ids, cut = self.prepare()
        todo = [line for line in lines if line.custom_id not in answered]
        new_invalid = [p for p in invalid if f"{INVALID_ID_PREFIX}{p.line}" not in ids]
        client = None
        if todo:
            client = self._client if self._client is not None else make_client(opts)
        latencies: list[float] = []
        priors, prior_name = _priors(opts) if todo else (None, "heuristic")
        writer = ResultWriter(opts.output)
        summary = BatchSummary(
            total=len(lines) + len(invalid),
            already_done=len(lines) - len(todo),
            invalid=len(invalid),
            to_send=len(todo),
            priors=prior_name,
            latencies_s=latencies,
            cut_bytes=cut,
        )
        self.summary = summary
        try:
            for problem in new_invalid:
                writer.write(
                    error_record(
                        problem.custom_id,
                        "invalid_line",
                        str(problem),
                        rid=f"{INVALID_ID_PREFIX}{problem.line}",
                    )
                )
            if client is not None:
                timed = TimedClient(client, self.clock, latencies)
                try:
                    source = open(opts.input, "rb")  # noqa: SIM115 - closed below
                except OSError as exc:
                    raise BatchError(
                        f"cannot read input {os.fspath(opts.input)!r}: {exc}"
                    ) from None
                with source:
                    await self._send_all(todo, source, timed, priors, writer, summary)
        finally:
            writer.close()
        return summary

    async def _send_all(
        self,
        todo: list[BatchLine],
        source: Any,
        client: Any,
        priors: Any,
        writer: ResultWriter,
        summary: BatchSummary,
    ) -> None:
        opts = self.options
        clock = self.clock
        scheduler = Scheduler(
            client,
            config=opts.scheduler_config(),
            priors=priors,
            prior_timeout_s=30.0,
            clock=clock,
            retry=RetryPolicy(max_attempts=opts.max_attempts),
            max_pending=None,
        )
        self.scheduler = scheduler
        window = anyio.Semaphore(opts.window)
        start = clock.now()
        job_deadline = None if opts.deadline_s is None else start + opts.deadline_s

        def sync() -> None:
            stats = scheduler.statistics().counters
            summary.rate_limited = stats["throttles"]
            summary.retries = stats["retries"]
            summary.elapsed_s = clock.now() - start

        def record(entry: dict[str, Any]) -> None:
            writer.write(entry)
            sync()
            if self._on_result is not None:
                self._on_result(summary)

        async def one(line: BatchLine) -> None:
            try:
                deadline = None
                if job_deadline is not None:
                    deadline = job_deadline - clock.now()
                    if deadline <= 0:
                        summary.failed["deadline_exceeded"] += 1
                        note = "the job deadline passed before it was sent"
                        record(error_record(line.custom_id, "deadline_exceeded", note))
                        return
                try:
                    body = load_body(source, line, opts.model)
                except BatchError as exc:
                    summary.failed["input_changed"] += 1
                    record(error_record(line.custom_id, "input_changed", str(exc)))
                    return
                try:
                    response = await scheduler.submit(deadline=deadline, **body)
                except SemischedError as exc:
                    code, status = _outcome(exc)
                    summary.failed[code] += 1
                    record(error_record(line.custom_id, code, str(exc), status))
                    return
                usage = getattr(response, "usage", None)
                summary.prompt_tokens += int(getattr(usage, "prompt_tokens", 0) or 0)
                summary.completion_tokens += int(getattr(usage, "completion_tokens", 0) or 0)
                summary.succeeded += 1
                record(success_record(line.custom_id, response))
            finally:
                window.release()

        async with scheduler, anyio.create_task_group() as tg:
            all_done = anyio.Event()
            outstanding = 0
            fed_all = False

            async def guarded(line: BatchLine) -> None:
                nonlocal outstanding
                try:
                    await one(line)
                finally:
                    outstanding -= 1
                    if fed_all and outstanding == 0:
                        all_done.set()

            async def feed() -> None:
                nonlocal outstanding, fed_all
                for line in todo:
                    await window.acquire()
                    if self._stopping:
                        window.release()
                        return
                    outstanding += 1
                    tg.start_soon(guarded, line)
                fed_all = True
                if outstanding == 0:
                    all_done.set()

            stop = self._stop = anyio.Event()
            if self._stopping:
                stop.set()

            async def watch_stop() -> None:
                await stop.wait()
                summary.interrupted = True
                scheduler.pause()
                # Calls in flight may finish and be recorded; nothing new is sent.
                with anyio.move_on_after(opts.grace_s / opts.time_scale):
                    while scheduler.statistics().inflight:
                        await anyio.sleep(0.05)
                tg.cancel_scope.cancel()

            tg.start_soon(watch_stop)
            tg.start_soon(feed)
            await all_done.wait()
            tg.cancel_scope.cancel()
        sync()


def _check_endpoint(probe: Scheduler, endpoint: str, body: dict[str, Any]) -> None:
    found = probe.check(**body)
    if found != endpoint:
        need = "messages" if endpoint == "chat" else "prompt"
        raise ValueError(f"this url needs '{need}' in the body")


class _Probe:
    """A stand-in client for validating bodies with the scheduler's own checks."""

    def __init__(self) -> None:
        import openai

        real = openai.AsyncOpenAI(api_key="validation-only", base_url="http://127.0.0.1:9")
        self.chat = real.chat
        self.completions = real.completions


async def run_batch(options: BatchOptions, **kwargs: Any) -> BatchSummary:
    """Run a batch job (see :class:`BatchRun`)."""
    return await BatchRun(options, **kwargs).run()
