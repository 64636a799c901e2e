"""The async runtime: ``await scheduler.submit(...)`` over any OpenAI-compatible client.

This shell executes what :class:`semisched.core.Engine` decides and decides
nothing itself. It

- validates a call and builds the core's :class:`~semisched.core.Request`
  (prior from a :class:`~predictors.base.PriorSource`, prompt tokens from the
  bytes-per-token estimator),
- runs every :class:`~semisched.core.Send` as a task in its own task group,
  calling the wrapped client with its retries turned off,
- feeds outcomes back (``completed`` / ``failed`` / ``cancel``), owns retries
  and their backoff, reads rate-limit headers into the core's signals,
- resolves each caller exactly once: the provider's response object, or an
  outcome from :mod:`semisched.errors`.

Structured concurrency (anyio): the scheduler is an async context manager that
owns its task group; nothing is fire-and-forget. Cancelling a caller's
``submit`` removes the request from the queue or aborts its in-flight call and
releases its send opportunity. Time comes from a :class:`~semisched.clock.Clock`
(real, or compressed for tests and live benchmarks).
"""

from __future__ import annotations

import inspect
import itertools
import math
import random
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any

import anyio
import openai
from anyio.abc import TaskGroup

from predictors.base import BatchPriorSource, PriorQuery, PriorSource
from predictors.priors import Heuristic
from semisched.clock import Clock, MonotonicClock
from semisched.core.budget import ProviderLimits
from semisched.core.config import SchedulerConfig, preset
from semisched.core.engine import Action, Defer, Engine, EngineStats, Expire, Reject, Send, Wake
from semisched.core.request import Prior, Request
from semisched.errors import (
    DeadlineExceeded,
    ProviderError,
    QueueFull,
    QuotaExceeded,
    RateLimited,
    RequestRejected,
    SchedulerClosed,
    SemischedError,
)
from semisched.estimate import TokenEstimator, prompt_bytes
from semisched.headers import RateLimitInfo, parse_rate_limits, retry_after_seconds

__all__ = [
    "Failure",
    "RetryPolicy",
    "ScheduledClient",
    "ScheduledStream",
    "Scheduler",
    "SchedulerStats",
    "classify_failure",
]

#: Keyword arguments that belong to the scheduler and never reach the provider.
SCHEDULER_ARGS = frozenset({"klass", "deadline", "prior"})


# -- failures: the one place foreign exceptions are read --------------------------


@dataclass(frozen=True, slots=True)
class Failure:
    """What a failed provider call means for scheduling.

    Attributes:
        kind: ``rate_limited`` (429 rate_limit_exceeded), ``quota`` (429
            insufficient_quota), ``transient`` (5xx, 408/409, timeouts,
            connection errors), ``fatal`` (any other 4xx, unknown errors).
        status_code: HTTP status, if there was a response.
        retry_after_wall_s: The provider's hint, in wall seconds.
        headers: Response headers, if any (for rate-limit signals).
        message: Short description.
    """

    kind: str
    status_code: int | None
    retry_after_wall_s: float | None
    headers: Mapping[str, str]
    message: str

    @property
    def retryable(self) -> bool:
        """Whether another attempt can help."""
        return self.kind in ("rate_limited", "transient")


def classify_failure(exc: BaseException) -> Failure:
    """Map an exception from the wrapped client to a :class:`Failure`.

    This is the only place that reads ``openai`` exceptions (httpx's rule:
    foreign exceptions are mapped in exactly one place).
    """
    if isinstance(exc, openai.APIStatusError):
        headers: Mapping[str, str] = exc.response.headers
        status = exc.status_code
        code = exc.code or (exc.type if isinstance(exc.type, str) else None)
        hint = retry_after_seconds(headers)
        if status == 429:
            kind = "quota" if code == "insufficient_quota" else "rate_limited"
            return Failure(kind, status, None if kind == "quota" else hint, headers, exc.message)
        kind = "transient" if status >= 500 or status in (408, 409) else "fatal"
        return Failure(kind, status, hint, headers, exc.message)
    if isinstance(exc, openai.APITimeoutError | openai.APIConnectionError):
        return Failure("transient", None, None, {}, f"{type(exc).__name__}: {exc}")
    return Failure("fatal", None, None, {}, f"{type(exc).__name__}: {exc}")


@dataclass(frozen=True, kw_only=True)
class RetryPolicy:
    """Bounded, jittered retries, always inside the request's deadline.

    Attributes:
        max_attempts: Total sends per request, first included.
        base_delay_s: Backoff before the second attempt (clock seconds);
            doubles per attempt.
        max_delay_s: Cap on one backoff.
        jitter: Each backoff is multiplied by a factor uniform in
            ``[1 - jitter, 1 + jitter]``.
        seed: Seed of the jitter's random stream (``None``: unseeded).
    """

    max_attempts: int = 4
    base_delay_s: float = 0.5
    max_delay_s: float = 30.0
    jitter: float = 0.5
    seed: int | None = None

    def __post_init__(self) -> None:
        if not (isinstance(self.max_attempts, int) and self.max_attempts >= 1):
            raise ValueError(f"max_attempts={self.max_attempts!r} must be an int >= 1")
        for name in ("base_delay_s", "max_delay_s"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value >= 0):
                raise ValueError(f"{name}={value!r} must be a finite number >= 0")
        if not (math.isfinite(self.jitter) and 0 <= self.jitter < 1):
            raise ValueError(f"jitter={self.jitter!r} must be in [0, 1)")

    def backoff(self, attempt: int, rng: random.Random) -> float:
        """Delay before attempt ``attempt + 1`` (``attempt`` sends so far)."""
        delay = min(self.max_delay_s, self.base_delay_s * 2.0 ** (attempt - 1))
        return delay * (1.0 + self.jitter * (2.0 * rng.random() - 1.0))


# -- statistics ---------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SchedulerStats:
    """A frozen snapshot of the runtime and its core.

    Attributes:
        pending: Requests submitted and not yet resolved.
        open_streams: Streams handed to callers and not yet finished.
        counters: Runtime outcome counters.
        engine: The core's snapshot (queues per class, in flight, signals,
            decision counters, rejects/defers per bucket).
        rate_limits: The last ``x-ratelimit-*`` headers seen.
        estimator: Bytes-per-token EMA per ``model/kind``.
    """

    pending: int
    open_streams: int
    counters: dict[str, int]
    engine: EngineStats
    rate_limits: RateLimitInfo | None
    estimator: dict[str, tuple[float, float, int]]

    @property
    def severity(self) -> float:
        """Current overload severity."""
        return self.engine.signals.severity

    @property
    def queued(self) -> dict[str, int]:
        """Queue depth per class."""
        return self.engine.queued

    @property
    def inflight(self) -> int:
        """Requests in flight."""
        return self.engine.inflight


# -- per-request state ----------------------------------------------------------------


@dataclass(eq=False)
class _Call:
    """A validated call, before it becomes a core request."""

    endpoint: str  # "chat" or "completions"
    params: dict[str, Any]  # what goes to the provider
    klass: str | None
    deadline_s: float | None
    prior: Prior | None
    added_usage: bool
    nbytes: int
    kind: str


@dataclass(eq=False)
class _Pending:
    id: str
    call: _Call
    request: Request
    done: anyio.Event = field(default_factory=anyio.Event)
    value: Any = None
    error: BaseException | None = None
    resolved: bool = False
    abandoned: bool = False
    attempts: int = 0
    scope: anyio.CancelScope | None = None


# -- priors off the event loop ---------------------------------------------------


class _PriorBatcher:
    """Micro-batches queries for a blocking source and runs it in a worker thread."""

    def __init__(self, source: BatchPriorSource, *, max_batch: int, max_wait_s: float) -> None:
        self.source = source
        self.max_batch = max_batch
        self.max_wait_s = max_wait_s
        self.send, self.receive = anyio.create_memory_object_stream[
            tuple[PriorQuery, list[Prior | BaseException], anyio.Event]
        ](max_buffer_size=math.inf)
        self.limiter = anyio.CapacityLimiter(1)

    async def run(self) -> None:
        async with self.receive:
            async for first in self.receive:
                batch = [first]
                with anyio.move_on_after(self.max_wait_s):
                    while len(batch) < self.max_batch:
                        batch.append(await self.receive.receive())
                queries = [q for q, _, _ in batch]
                try:
                    priors: Sequence[Prior | BaseException] = await anyio.to_thread.run_sync(
                        self.source.prior_batch, queries, limiter=self.limiter
                    )
                    if len(priors) != len(queries):
                        raise ValueError("prior_batch returned a wrong number of priors")
                except Exception as exc:  # the caller falls back; never kill the runtime
                    priors = [exc] * len(queries)
                for (_, slot, event), prior in zip(batch, priors, strict=True):
                    slot.append(prior)
                    event.set()


# -- streams ---------------------------------------------------------------------------


class ScheduledStream:
    """The caller's view of a streamed response; reports back when it ends.

    Iterate it like the provider's stream (``async for chunk in stream``). When
    semisched asked for ``include_usage`` on the caller's behalf, the usage-only
    final chunk is hidden. The request holds its send opportunity until the
    stream is exhausted or closed (``aclose`` or ``async with``).
    """

    def __init__(
        self, inner: Any, *, hide_usage: bool, on_end: Callable[[int | None, bool], None]
    ) -> None:
        self._inner = inner
        self._hide_usage = hide_usage
        self._on_end: Callable[[int | None, bool], None] | None = on_end
        self._usage_tokens: int | None = None
        self._content_chunks = 0
        self.usage: Any = None

    def __aiter__(self) -> AsyncIterator[Any]:
        return self._iterate()

    async def _iterate(self) -> AsyncIterator[Any]:
        try:
            async for chunk in self._inner:
                usage = getattr(chunk, "usage", None)
                if usage is not None:
                    self.usage = usage
                    self._usage_tokens = getattr(usage, "completion_tokens", None)
                choices = getattr(chunk, "choices", None)
                if choices:
                    self._content_chunks += 1
                elif usage is not None and self._hide_usage:
                    continue
                yield chunk
        except BaseException:
            self._finish(complete=False)
            raise
        self._finish(complete=True)

    def _finish(self, *, complete: bool) -> None:
        on_end, self._on_end = self._on_end, None
        if on_end is not None:
            tokens = self._usage_tokens if self._usage_tokens is not None else self._content_chunks
            on_end(tokens, complete)

    async def aclose(self) -> None:
        """Stop early: closes the provider's stream and frees the send opportunity."""
        self._finish(complete=False)
        close = getattr(self._inner, "close", None)
        if close is not None:
            result = close()
            if inspect.isawaitable(result):
                await result

    async def __aenter__(self) -> ScheduledStream:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


# -- the scheduler -----------------------------------------------------------------------


class Scheduler:
    """Client-side scheduler over an OpenAI-compatible async client.

    Example::

        async with Scheduler(AsyncOpenAI()) as scheduler:
            resp = await scheduler.submit(model="gpt-4o-mini", messages=[...],
                                          max_tokens=200, deadline=30)

    Args:
        client: ``openai.AsyncOpenAI`` or any object with
            ``chat.completions.create`` / ``completions.create`` coroutines.
            An OpenAI client is used through ``with_options(max_retries=0)``:
            the scheduler owns retries, so the core sees every attempt.
        config: A :class:`SchedulerConfig` or a preset name.
        priors: Where priors come from when a call gives none (default:
            :class:`~predictors.priors.Heuristic`, from ``max_tokens``). A
            :class:`~predictors.base.BatchPriorSource` runs off the event loop.
        prior_timeout_s: Longest wall wait for a blocking source; then
            ``fallback`` answers.
        fallback: Prior source used on timeout or error of ``priors``.
        clock: Time source (default real monotonic time).
        retry: Retry policy.
        max_pending: Refuse (``QueueFull``) beyond this many unresolved requests.
        estimator: Prompt-token estimator (bytes-per-token EMA).
        cancel_late: Abort a call still in flight when its deadline passes
            (``DeadlineExceeded``, phase ``in_flight``). ``False`` lets it finish
            late and returns the response, which is how the paper and the
            simulator count a late completion.
    """

    def __init__(
        self,
        client: Any,
        *,
        config: SchedulerConfig | str = "final_adrr_olc",
        priors: PriorSource | None = None,
        prior_timeout_s: float = 0.05,
        fallback: PriorSource | None = None,
        clock: Clock | None = None,
        retry: RetryPolicy | None = None,
        max_pending: int | None = None,
        estimator: TokenEstimator | None = None,
        cancel_late: bool = True,
    ) -> None:
        if not (math.isfinite(prior_timeout_s) and prior_timeout_s > 0):
            raise ValueError(f"prior_timeout_s={prior_timeout_s!r} must be a finite number > 0")
        if max_pending is not None and not (isinstance(max_pending, int) and max_pending >= 1):
            raise ValueError(f"max_pending={max_pending!r} must be None or an int >= 1")
        self.config = preset(config) if isinstance(config, str) else config
        with_options = getattr(client, "with_options", None)
        self._client = with_options(max_retries=0) if callable(with_options) else client
        self._targets = {
            "chat": self._client.chat.completions,
            "completions": getattr(self._client, "completions", None),
        }
        self._allowed = {name: _allowed_params(t) for name, t in self._targets.items() if t}
        self._engine = Engine(self.config)
        self._priors: PriorSource = priors if priors is not None else Heuristic()
        self._fallback: PriorSource = fallback if fallback is not None else Heuristic()
        self._prior_timeout_s = prior_timeout_s
        self._batcher = (
            _PriorBatcher(self._priors, max_batch=32, max_wait_s=0.002)
            if isinstance(self._priors, BatchPriorSource)
            else None
        )
        self._clock: Clock = clock if clock is not None else MonotonicClock()
        self._retry = retry if retry is not None else RetryPolicy()
        self._rng = random.Random(self._retry.seed)
        self._max_pending = max_pending
        self._estimator = estimator if estimator is not None else TokenEstimator()
        self._cancel_late = cancel_late
        self._pending: dict[str, _Pending] = {}
        self._ids = itertools.count(1)
        self._tg: TaskGroup | None = None
        self._closed = False
        self._wake_at: float | None = None
        self._changed = anyio.Event()
        self._idle = anyio.Event()
        self._open_streams = 0
        self._rate_limits: RateLimitInfo | None = None
        self._counters = dict.fromkeys(
            (
                "submitted", "succeeded", "rejected", "deadline_exceeded", "queue_full",
                "rate_limited", "quota_exceeded", "provider_errors", "closed", "cancelled",
                "retries", "throttles", "prior_fallbacks",
            ),
            0,
        )  # fmt: skip
        self.client = ScheduledClient(self)

    def __repr__(self) -> str:
        state = "closed" if self._closed else "open" if self._tg else "not started"
        return f"<Scheduler {state} pending={len(self._pending)} {self._engine!r}>"

    # -- lifecycle -----------------------------------------------------------------------

    async def __aenter__(self) -> Scheduler:
        if self._tg is not None or self._closed:
            raise RuntimeError("a Scheduler can be entered only once")
        self._tg = anyio.create_task_group()
        await self._tg.__aenter__()
        self._tg.start_soon(self._driver)
        if self._batcher is not None:
            self._tg.start_soon(self._batcher.run)
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool | None:
        """Leaving normally waits for every pending request; leaving with an
        exception resolves them with :class:`SchedulerClosed` at once."""
        assert self._tg is not None
        self._closed = True
        try:
            if exc_type is None:
                while self._pending or self._open_streams:
                    self._idle = anyio.Event()
                    await self._idle.wait()
        finally:
            for pending in list(self._pending.values()):
                self._abandon(pending, SchedulerClosed(
                    "the scheduler was closed", request_id=pending.id, klass=pending.request.klass
                ))  # fmt: skip
            self._tg.cancel_scope.cancel()
            if self._batcher is not None:
                self._batcher.send.close()
            await self._tg.__aexit__(exc_type, exc, tb)
        return None

    # -- the public call -------------------------------------------------------------------

    async def submit(
        self,
        *,
        model: str,
        messages: Sequence[Mapping[str, Any]] | None = None,
        prompt: Any = None,
        klass: str | None = None,
        deadline: float | None = None,
        prior: Prior | tuple[float, float] | None = None,
        **params: Any,
    ) -> Any:
        """Schedule one chat (``messages``) or completions (``prompt``) call.

        Args:
            model: Provider model name.
            messages: Chat messages (chat endpoint).
            prompt: Prompt (completions endpoint).
            klass: Scheduling class; default ``interactive`` for short priors,
                else the batch class.
            deadline: Seconds from now (on the scheduler's clock) after which
                the answer is useless.
            prior: Output-length prior (a :class:`Prior` or ``(p50, p90)``);
                default from the scheduler's prior source.
            **params: Passed to the provider unchanged (``max_tokens``,
                ``temperature``, ``stream``, ``extra_headers``, ...).

        Returns:
            The wrapped client's own response (``ChatCompletion``,
            ``Completion``), or a :class:`ScheduledStream` for ``stream=True``.

        Raises:
            ValueError, TypeError: Bad input, before anything is queued.
            SemischedError: An outcome (see :mod:`semisched.errors`).
        """
        call = self._prepare(model, messages, prompt, klass, deadline, prior, params)
        if self._tg is None or self._closed:
            raise SchedulerClosed(
                "the scheduler is not running (use `async with Scheduler(...)`)",
                request_id="",
                klass=call.klass or "",
            )
        rid = f"req-{next(self._ids)}"
        self._counters["submitted"] += 1
        if self._max_pending is not None and len(self._pending) >= self._max_pending:
            self._counters["queue_full"] += 1
            raise QueueFull(
                f"{len(self._pending)} requests pending (max_pending={self._max_pending})",
                request_id=rid,
                klass=call.klass or "",
                limit=self._max_pending,
            )
        resolved_prior = call.prior or await self._resolve_prior(rid, call)
        klass_name = call.klass or self.config.class_for(resolved_prior.routing_bucket)
        now = self._clock.now()
        max_tokens = call.params.get("max_completion_tokens", call.params.get("max_tokens"))
        request = Request(
            id=rid,
            klass=klass_name,
            prior=resolved_prior,
            input_tokens=float(
                self._estimator.estimate(call.params["model"], call.kind, call.nbytes)
            ),
            arrival=now,
            deadline=None if call.deadline_s is None else now + call.deadline_s,
            max_output_tokens=max_tokens
            if isinstance(max_tokens, int) and not isinstance(max_tokens, bool) and max_tokens >= 0
            else None,
        )
        pending = _Pending(id=rid, call=call, request=request)
        self._pending[rid] = pending
        try:
            self._execute(self._engine.submit(request, now))
            await pending.done.wait()
        except BaseException:
            if not pending.resolved:  # the caller was cancelled
                self._counters["cancelled"] += 1
                self._abandon(pending, None)
            raise
        if pending.error is not None:
            raise pending.error
        return pending.value

    def check(
        self,
        *,
        model: str,
        messages: Sequence[Mapping[str, Any]] | None = None,
        prompt: Any = None,
        klass: str | None = None,
        deadline: float | None = None,
        prior: Prior | tuple[float, float] | None = None,
        **params: Any,
    ) -> str:
        """Validate a call exactly as :meth:`submit` would, without scheduling it.

        Returns:
            The endpoint it would use: ``"chat"`` or ``"completions"``.

        Raises:
            ValueError, TypeError: What :meth:`submit` would raise for it.
        """
        return self._prepare(model, messages, prompt, klass, deadline, prior, params).endpoint

    def pause(self) -> None:
        """Send nothing more until :meth:`resume`; queued requests wait (deadlines still apply).

        In-flight calls continue. A batch job uses this on Ctrl-C: stop
        dispatching, let what is in flight finish, then leave.
        """
        self._execute(self._engine.hold(self._clock.now()))

    def resume(self) -> None:
        """Undo :meth:`pause`."""
        self._execute(self._engine.release(self._clock.now()))

    def statistics(self) -> SchedulerStats:
        """A frozen snapshot: queue depth per class, in flight, severity, counters, EMAs."""
        return SchedulerStats(
            pending=len(self._pending),
            open_streams=self._open_streams,
            counters=dict(self._counters),
            engine=self._engine.statistics(),
            rate_limits=self._rate_limits,
            estimator=self._estimator.snapshot(),
        )

    # -- preparation (pure validation) ------------------------------------------------------

    def _prepare(
        self,
        model: str,
        messages: Sequence[Mapping[str, Any]] | None,
        prompt: Any,
        klass: str | None,
        deadline: float | None,
        prior: Prior | tuple[float, float] | None,
        params: dict[str, Any],
    ) -> _Call:
        if not isinstance(model, str) or not model:
            raise ValueError(f"model={model!r} must be a non-empty string")
        if (messages is None) == (prompt is None):
            raise ValueError("pass exactly one of messages= (chat) or prompt= (completions)")
        endpoint = "chat" if messages is not None else "completions"
        if endpoint not in self._allowed:
            raise TypeError("the wrapped client has no completions.create for prompt=")
        if messages is not None:
            if isinstance(messages, str | bytes) or not isinstance(messages, Sequence):
                raise TypeError(f"messages must be a list of message dicts, got {messages!r}")
            if not messages:
                raise ValueError("messages=[] must contain at least one message")
            for i, message in enumerate(messages):
                if not isinstance(message, Mapping) or not isinstance(message.get("role"), str):
                    raise ValueError(f"messages[{i}]={message!r} must be a dict with a 'role'")
        allowed = self._allowed[endpoint]
        if allowed is not None:
            unknown = sorted(set(params) - allowed)
            if unknown:
                raise TypeError(f"unknown keyword argument(s) for {endpoint}: {unknown}")
        if deadline is not None and (
            isinstance(deadline, bool)
            or not isinstance(deadline, int | float)
            or not math.isfinite(deadline)
            or deadline <= 0
        ):
            raise ValueError(f"deadline={deadline!r} must be a finite number of seconds > 0")
        if prior is not None and not isinstance(prior, Prior):
            if not (isinstance(prior, tuple) and len(prior) == 2):
                raise TypeError(f"prior={prior!r} must be a Prior or a (p50, p90) tuple")
            prior = Prior(p50=float(prior[0]), p90=float(prior[1]))
        names = [c.name for c in self.config.classes]
        if klass is not None and klass not in names:
            raise ValueError(f"klass={klass!r} must be one of {names}")
        stream = params.get("stream", False)
        if not isinstance(stream, bool):
            raise TypeError(f"stream={stream!r} must be a bool")
        sent = dict(params, model=model)
        if messages is not None:
            sent["messages"] = list(messages)
        else:
            sent["prompt"] = prompt
        added_usage = False
        if stream:
            options = dict(sent.get("stream_options") or {})
            if not options.get("include_usage"):
                options["include_usage"] = True
                sent["stream_options"] = options
                added_usage = True
        nbytes, kind = prompt_bytes(messages=messages, prompt=prompt)
        return _Call(endpoint, sent, klass, deadline, prior, added_usage, nbytes, kind)

    async def _resolve_prior(self, rid: str, call: _Call) -> Prior:
        max_tokens = call.params.get("max_tokens", call.params.get("max_completion_tokens"))
        messages = call.params.get("messages")
        query = PriorQuery(
            request_id=rid,
            messages=tuple(messages) if messages is not None else None,
            prompt=call.params.get("prompt")
            if isinstance(call.params.get("prompt"), str)
            else None,
            max_tokens=max_tokens if isinstance(max_tokens, int) else None,
        )
        if self._batcher is None:
            try:
                return self._priors.prior(query)
            except Exception:
                self._counters["prior_fallbacks"] += 1
                return self._fallback.prior(query)
        slot: list[Prior | BaseException] = []
        event = anyio.Event()
        await self._batcher.send.send((query, slot, event))
        with anyio.move_on_after(self._prior_timeout_s):
            await event.wait()
        if slot and isinstance(slot[0], Prior):
            return slot[0]
        self._counters["prior_fallbacks"] += 1
        return self._fallback.prior(query)

    # -- executing the core's actions ------------------------------------------------------

    def _execute(self, actions: list[Action]) -> None:
        for action in actions:
            if isinstance(action, Send):
                pending = self._pending.get(action.request.id)
                if pending is None:  # pragma: no cover - the core only sends pending ids
                    raise RuntimeError(f"core sent unknown request {action.request.id!r}")
                pending.attempts = action.attempt
                assert self._tg is not None
                self._tg.start_soon(self._send, pending)
            elif isinstance(action, Wake):
                if self._wake_at is None or action.at < self._wake_at:
                    self._wake_at = action.at
                    self._changed.set()
            elif isinstance(action, Reject):
                self._counters["rejected"] += 1
                pending = self._pending[action.request.id]
                self._resolve(
                    pending,
                    error=RequestRejected(
                        f"rejected: {action.reason}",
                        request_id=pending.id,
                        klass=action.request.klass,
                        reason=action.reason,
                        bucket=action.request.bucket.value,
                        severity=action.severity,
                        retry_after=action.retry_after,
                    ),
                )
            elif isinstance(action, Expire):
                self._counters["deadline_exceeded"] += 1
                pending = self._pending[action.request.id]
                phase = "retry" if pending.attempts else "queued"
                self._resolve(
                    pending,
                    error=DeadlineExceeded(
                        f"deadline exceeded ({phase}): {action.reason}",
                        request_id=pending.id,
                        klass=action.request.klass,
                        phase=phase,
                        deadline=action.request.deadline,
                    ),
                )
            elif not isinstance(action, Defer):  # pragma: no cover
                raise TypeError(f"unknown action {action!r}")

    async def _driver(self) -> None:
        """Poll the core at its Wake times (the only timer the runtime keeps)."""
        clock = self._clock
        while True:
            changed = self._changed
            wake = self._wake_at
            if wake is None:
                await changed.wait()
            else:
                delay = clock.to_wall(wake - clock.now())
                if delay > 0:
                    with anyio.move_on_after(delay):
                        await changed.wait()
            if changed.is_set():
                self._changed = anyio.Event()
            now = clock.now()
            if self._wake_at is not None and now >= self._wake_at:
                self._wake_at = None
                self._execute(self._engine.poll(now))
                # The engine reports a timer once; one it reported while this
                # shell still held an earlier, now-served timer was dropped by
                # _execute. Re-arm from the engine's own next timer.
                upcoming = self._engine.next_wakeup()
                if upcoming is not None and (self._wake_at is None or upcoming < self._wake_at):
                    self._wake_at = upcoming

    async def _send(self, pending: _Pending) -> None:
        call = pending.call
        target = self._targets[call.endpoint]
        with anyio.CancelScope() as scope:
            pending.scope = scope
            deadline = pending.request.deadline
            if deadline is not None and self._cancel_late:
                scope.deadline = anyio.current_time() + self._clock.to_wall(
                    deadline - self._clock.now()
                )
            try:
                raw_api = getattr(target, "with_raw_response", None)
                if raw_api is not None:
                    raw = await raw_api.create(**call.params)
                    headers: Mapping[str, str] = raw.headers
                    response = raw.parse()
                else:
                    response = await target.create(**call.params)
                    headers = {}
            except Exception as exc:
                self._on_failure(pending, exc)
                return
            finally:
                pending.scope = None
        if scope.cancelled_caught:
            if not pending.resolved:  # the deadline passed in flight
                self._execute(self._engine.cancel(pending.id, self._clock.now()))
                self._counters["deadline_exceeded"] += 1
                self._resolve(
                    pending,
                    error=DeadlineExceeded(
                        "deadline exceeded while in flight; the call was aborted",
                        request_id=pending.id,
                        klass=pending.request.klass,
                        phase="in_flight",
                        deadline=deadline,
                    ),
                )
            return
        self._observe_headers(headers, pending)
        if call.params.get("stream"):
            self._open_streams += 1
            stream = ScheduledStream(
                response,
                hide_usage=call.added_usage,
                on_end=lambda tokens, complete: self._stream_ended(pending, tokens, complete),
            )
            self._counters["succeeded"] += 1
            self._resolve(pending, value=stream, keep_inflight=True)
            return
        usage = getattr(response, "usage", None)
        output_tokens = int(getattr(usage, "completion_tokens", 0) or 0)
        prompt_tokens = int(getattr(usage, "prompt_tokens", 0) or 0)
        self._estimator.observe(call.params["model"], call.kind, call.nbytes, prompt_tokens)
        charged = None
        if usage is not None:
            reserved = pending.request.max_output_tokens
            charged = prompt_tokens + (reserved if reserved is not None else output_tokens)
        self._execute(
            self._engine.completed(
                pending.id, self._clock.now(), output_tokens=output_tokens, charged_tokens=charged
            )
        )
        self._counters["succeeded"] += 1
        self._resolve(pending, value=response)

    def _stream_ended(self, pending: _Pending, tokens: int | None, complete: bool) -> None:
        self._open_streams -= 1
        now = self._clock.now()
        if complete:
            self._execute(self._engine.completed(pending.id, now, output_tokens=tokens or 0))
        else:
            self._execute(self._engine.cancel(pending.id, now))
        self._check_idle()

    def _observe_headers(self, headers: Mapping[str, str], pending: _Pending) -> None:
        info = parse_rate_limits(headers) if headers else None
        if info is not None:
            self._rate_limits = info
            now = self._clock.now()
            headroom = info.headroom
            if headroom is not None:
                self._engine.observe_headroom(headroom, now)
            per_wall = self._clock.to_wall(1.0)  # header times are wall seconds
            self._engine.observe_limits(
                pending.id,
                now,
                ProviderLimits(
                    limit_requests=info.limit_requests,
                    remaining_requests=info.remaining_requests,
                    reset_requests_s=None
                    if info.reset_requests_s is None
                    else info.reset_requests_s / per_wall,
                    limit_tokens=info.limit_tokens,
                    remaining_tokens=info.remaining_tokens,
                    reset_tokens_s=None
                    if info.reset_tokens_s is None
                    else info.reset_tokens_s / per_wall,
                ),
            )

    def _on_failure(self, pending: _Pending, exc: Exception) -> None:
        failure = classify_failure(exc)
        self._observe_headers(failure.headers, pending)
        now = self._clock.now()
        throttled = failure.kind == "rate_limited"
        if throttled:
            self._counters["throttles"] += 1
        deadline = pending.request.deadline
        if failure.retryable and pending.attempts < self._retry.max_attempts:
            if failure.retry_after_wall_s is not None:
                wall = failure.retry_after_wall_s
                delay = wall / self._clock.to_wall(1.0)
            else:
                delay = self._retry.backoff(pending.attempts, self._rng)
            retry_at = now + delay
            if deadline is None or retry_at < deadline:
                self._counters["retries"] += 1
                self._execute(
                    self._engine.failed(pending.id, now, retry_at=retry_at, throttled=throttled)
                )
                return
            note = "no retry fits before the deadline"
        elif failure.retryable:
            note = f"gave up after {pending.attempts} attempts"
        else:
            note = "not retryable"
        self._execute(self._engine.failed(pending.id, now, throttled=throttled))
        cls: type[ProviderError] = ProviderError
        if failure.kind == "quota":
            cls, counter = QuotaExceeded, "quota_exceeded"
        elif throttled:
            cls, counter = RateLimited, "rate_limited"
        else:
            counter = "provider_errors"
        self._counters[counter] += 1
        error = cls(
            f"{failure.message} ({note})",
            request_id=pending.id,
            klass=pending.request.klass,
            status_code=failure.status_code,
            attempts=pending.attempts,
            retry_after=failure.retry_after_wall_s,
        )
        error.__cause__ = exc
        self._resolve(pending, error=error)

    # -- resolution -----------------------------------------------------------------------

    def _resolve(
        self,
        pending: _Pending,
        *,
        value: Any = None,
        error: SemischedError | None = None,
        keep_inflight: bool = False,
    ) -> None:
        if pending.resolved:
            raise RuntimeError(f"request {pending.id!r} resolved twice")
        pending.resolved = True
        pending.value, pending.error = value, error
        self._pending.pop(pending.id, None)
        pending.done.set()
        if not keep_inflight:
            self._check_idle()

    def _abandon(self, pending: _Pending, error: SemischedError | None) -> None:
        """Drop a request the caller no longer waits for (cancel or close)."""
        pending.abandoned = True
        if pending.scope is not None:
            pending.scope.cancel()
        if not pending.resolved:
            if error is not None:
                self._counters["closed"] += 1
                self._resolve(pending, error=error)
            else:
                pending.resolved = True
                self._pending.pop(pending.id, None)
                pending.done.set()
                self._check_idle()
        self._execute(self._engine.cancel(pending.id, self._clock.now()))

    def _check_idle(self) -> None:
        if not self._pending and not self._open_streams:
            self._idle.set()


def _allowed_params(target: Any) -> frozenset[str] | None:
    """Keyword names the wrapped ``create`` accepts (``None``: it takes ``**kwargs``)."""
    create = getattr(target, "create", None)
    if create is None:
        return frozenset()
    try:
        sig = inspect.signature(create)
    except (TypeError, ValueError):
        return None
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in sig.parameters.values()):
        return None
    return frozenset(sig.parameters) - SCHEDULER_ARGS - {"model", "messages", "prompt"}


class _ScheduledCompletions:
    def __init__(self, scheduler: Scheduler, endpoint: str) -> None:
        self._scheduler = scheduler
        self._endpoint = endpoint

    async def create(self, **kwargs: Any) -> Any:
        """Scheduled ``create``: same arguments, plus ``klass``, ``deadline``, ``prior``."""
        if self._endpoint == "chat" and "messages" not in kwargs:
            raise TypeError("chat.completions.create() needs messages=")
        if self._endpoint == "completions" and "prompt" not in kwargs:
            raise TypeError("completions.create() needs prompt=")
        return await self._scheduler.submit(**kwargs)


class _Chat:
    def __init__(self, scheduler: Scheduler) -> None:
        self.completions = _ScheduledCompletions(scheduler, "chat")


class ScheduledClient:
    """Drop-in facade: ``scheduler.client.chat.completions.create(...)`` is scheduled.

    Existing code that calls an ``AsyncOpenAI`` client changes one line: use
    ``scheduler.client`` in its place.
    """

    def __init__(self, scheduler: Scheduler) -> None:
        self.chat = _Chat(scheduler)
        self.completions = _ScheduledCompletions(scheduler, "completions")
