"""Streamed responses: `ScheduledStream`, the caller's view of a provider stream.

A streamed call holds its send opportunity until the stream ends, so the
runtime must learn when that happens and how many tokens it produced. The
stream reports back exactly once through ``on_end(tokens, complete)``: when it
is exhausted (``complete=True``), or when it fails or the caller closes it
early (``complete=False``); and once through ``on_first()`` when its first
content chunk arrives (the time to first token).

A stream never outlives its request's deadline, and never waits longer than
an idle timeout for its next chunk (`IDLE_TIMEOUT_S` unless told): a
stream stalled mid-way ends with [`DeadlineExceeded`][semisched.errors.DeadlineExceeded]
(phase ``in_flight``) at the deadline, or with a
[`ProviderError`][semisched.errors.ProviderError] of kind ``timeout`` after the idle
timeout, and its upstream stream is closed. (The gateway turns either into an
SSE ``error`` event.)

What this module is not: it schedules nothing and talks to no engine; the
runtime decides what an ending means.
"""

from __future__ import annotations

import inspect
from collections.abc import AsyncIterator, Callable
from typing import Any

import anyio

from semisched.core.lifecycle import FailureKind
from semisched.core.request import Request
from semisched.errors import DeadlineExceeded, ProviderError, RequestError
from semisched.runtime.apis import APIS, ApiSpec
from semisched.runtime.clock import loop_time

__all__ = ["IDLE_TIMEOUT_S", "ScheduledStream", "StreamEnd"]

#: Wall seconds a stream waits for its next chunk at most: 600 s, the OpenAI
#: clients' own read timeout, for a wrapped client that has none (a healthy
#: stream pauses far less, a reasoning model's silent thinking included).
IDLE_TIMEOUT_S = 600.0
_END = object()  # the inner stream is exhausted

#: ``on_end(tokens, complete)``: output tokens (the usage count, else the
#: content chunks seen) and whether the stream ran to its end.
StreamEnd = Callable[[int | None, bool], None]


class ScheduledStream:
    """The caller's view of a streamed response; reports back when it ends.

    Iterate it like the provider's stream (``async for chunk in stream``). When
    semisched asked for ``include_usage`` on the caller's behalf, the usage-only
    final chunk is hidden. The request holds its send opportunity until the
    stream is exhausted or closed (``aclose`` or ``async with``).

    Args:
        inner: The provider's stream.
        hide_usage: Hide the usage-only final chunk.
        on_end: Called once when it ends.
        on_first: Called once at the first content chunk.
        request: The core's request (named by a timeout's error).
        wall_left_s: Wall seconds left until the request's deadline, counted from
            now; ``None``: it has no deadline.
        idle_timeout_s: The longest wait for one chunk, wall seconds.
        api: The scheduled API it streams from: how a chunk (an event of the
            Responses API) carries content and usage (default: chat completions).

    Attributes:
        usage: The usage the provider reported, once the stream has seen it.
    """

    def __init__(
        self,
        inner: Any,
        *,
        hide_usage: bool,
        on_end: StreamEnd,
        on_first: Callable[[], None] | None = None,
        request: Request | None = None,
        wall_left_s: float | None = None,
        idle_timeout_s: float = IDLE_TIMEOUT_S,
        api: ApiSpec = APIS["chat"],
    ) -> None:
        if not idle_timeout_s > 0:
            raise ValueError(f"{idle_timeout_s=} must be > 0")
        self._inner = inner
        self._request = request
        self._deadline = None if wall_left_s is None else loop_time() + wall_left_s
        self._idle_s = idle_timeout_s
        self._hide_usage = hide_usage
        self._api = api
        self._on_end: StreamEnd | None = on_end
        self._on_first = on_first
        self._usage_tokens: int | None = None
        self._content_chunks = 0
        self.usage: Any = None

    def __repr__(self) -> str:
        state = "open" if self._on_end is not None else "ended"
        return f"<ScheduledStream {state} chunks={self._content_chunks}>"

    def __aiter__(self) -> AsyncIterator[Any]:
        return self._iterate()

    async def _next(self, chunks: AsyncIterator[Any]) -> Any:
        """The inner stream's next chunk (`_END` after its last), waited for until
        the deadline or the idle timeout, whichever is sooner (module docstring)."""
        wait = self._idle_s
        deadline = self._deadline
        if deadline is not None and deadline - loop_time() < wait:
            wait = max(0.0, deadline - loop_time())
        with anyio.move_on_after(wait):
            try:
                return await anext(chunks)
            except StopAsyncIteration:
                return _END
        await self._close_inner()  # the upstream's stream is abandoned: close it
        raise self._timed_out(wait < self._idle_s)

    def _timed_out(self, at_deadline: bool) -> RequestError:
        """The error a stall ends the stream with: its deadline passed, or no chunk came
        in the idle timeout."""
        request = self._request
        rid, klass = (request.id, request.klass) if request is not None else ("", "")
        if at_deadline:
            return DeadlineExceeded(
                "deadline exceeded (in_flight): the stream was still open at its deadline",
                request_id=rid, klass=klass, phase="in_flight",
                deadline=None if request is None else request.deadline,
            )  # fmt: skip
        return ProviderError(
            f"the stream sent nothing for {self._idle_s:g} s", request_id=rid, klass=klass,
            status_code=None, attempts=0, kind=FailureKind.TIMEOUT, reason="the stream stalled",
        )  # fmt: skip

    async def _iterate(self) -> AsyncIterator[Any]:
        try:
            chunks = aiter(self._inner)
            read_chunk, read_usage = self._api.read_chunk, self._api.read_usage
            while (chunk := await self._next(chunks)) is not _END:
                usage, content = read_chunk(chunk)
                if usage is not None:
                    self.usage = usage
                    self._usage_tokens = read_usage(usage).output_tokens
                if content:
                    self._content_chunks += 1
                    if self._on_first is not None:  # the first content: time to first token
                        on_first, self._on_first = self._on_first, None
                        on_first()
                elif usage is not None and self._hide_usage:
                    continue
                yield chunk
        except BaseException:
            self._finish(complete=False)
            raise
        self._finish(complete=True)
        await self._close_inner()  # release the connection at once, not at garbage collection

    def _finish(self, *, complete: bool) -> None:
        on_end, self._on_end = self._on_end, None
        if on_end is not None:
            tokens = self._usage_tokens if self._usage_tokens is not None else self._content_chunks
            on_end(tokens, complete)

    async def aclose(self) -> None:
        """Stop early: closes the provider's stream and frees the send opportunity."""
        self._finish(complete=False)
        await self._close_inner()

    async def _close_inner(self) -> None:
        close = getattr(self._inner, "close", None)
        if close is not None:
            result = close()
            if inspect.isawaitable(result):
                await result

    async def __aenter__(self) -> ScheduledStream:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()
