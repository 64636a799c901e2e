"""Streamed responses: :class:`ScheduledStream`, the caller's view of a provider stream.

A streamed call holds its send opportunity until the stream ends, so the
runtime must learn when that happens and how many tokens it produced. The
stream reports back exactly once through ``on_end(tokens, complete)``: when it
is exhausted (``complete=True``), or when it fails or the caller closes it
early (``complete=False``); and once through ``on_first()`` when its first
content chunk arrives (the time to first token).

What this module is not: it schedules nothing and talks to no engine; the
runtime decides what an ending means.
"""

from __future__ import annotations

import inspect
from collections.abc import AsyncIterator, Callable
from typing import Any

__all__ = ["ScheduledStream", "StreamEnd"]

#: ``on_end(tokens, complete)``: output tokens (the usage count, else the
#: content chunks seen) and whether the stream ran to its end.
StreamEnd = Callable[[int | None, bool], None]


class ScheduledStream:
    """The caller's view of a streamed response; reports back when it ends.

    Iterate it like the provider's stream (``async for chunk in stream``). When
    semisched asked for ``include_usage`` on the caller's behalf, the usage-only
    final chunk is hidden. The request holds its send opportunity until the
    stream is exhausted or closed (``aclose`` or ``async with``).

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
    ) -> None:
        self._inner = inner
        self._hide_usage = hide_usage
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
