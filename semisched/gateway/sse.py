"""Streamed answers at the gateway: SSE event by event, and the client's disconnect.

`SSEResponse` passes an upstream stream on to the client as Server-Sent
Events, in its API's framing:

- chat and completions: each upstream ``data:`` event as it arrives, then
  ``data: [DONE]``;
- the APIs whose streams are typed events (``ApiSpec.typed_events``: the Responses
  API): each event as
  ``event: <type>`` and its ``data:``, as it arrives; the last event (``response.completed``
  or ``response.incomplete``, carrying the usage) is the end: no ``[DONE]``.

Rules:

1. The client's disconnect cancels the stream: its upstream call is closed at once
   (`watching` watches for it in a task of its own).
2. A failure mid-stream ends it with an ``error`` event in OpenAI's shape (its code
   as the answer would have it: a deadline is ``deadline_exceeded``), then
   ``[DONE]``: the client learns the stream is not whole. A typed stream's is the
   Responses API's ``error`` event (``event: error``, data ``{"type": "error",
   "code", "message", "param", "sequence_number"}``), and nothing after it.
3. A drain past its grace (the gateway shutting down) cuts a stream with an error
   event whose code is ``shutting_down``, then ``[DONE]`` (a typed stream: its
   ``error`` event, as rule 2).

What this module is not: it schedules nothing and reads no request.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from typing import Any

import anyio
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from semisched.gateway.answers import error_body, stream_error
from semisched.gateway.tickets import Ticket
from semisched.runtime.streams import ScheduledStream

__all__ = ["SSEResponse", "watching"]

_SSE_HEADERS = {"cache-control": "no-cache", "x-accel-buffering": "no"}
_DONE = b"data: [DONE]\n\n"
#: A stream cut by a drain past its grace: an error in OpenAI's shape (rule 3).
_DRAINED = error_body("the gateway is shutting down; the stream was cut before its end",
                      "server_error", "shutting_down")  # fmt: skip


class _DataEvents:
    """Chat's and completions' framing: ``data:`` events, then ``data: [DONE]``."""

    end = _DONE

    def event(self, chunk: Any) -> bytes:
        data: bytes = chunk.data
        return b"data: " + data + b"\n\n"

    def error(self, body: bytes) -> bytes:
        """The ``error`` event of an error ``body`` (``{"error": {...}}``, OpenAI's shape)."""
        return b"data: " + body + b"\n\n"


class _TypedEvents:
    """The Responses API's framing: ``event: <type>`` and ``data:``, no ``[DONE]``."""

    end = b""

    def __init__(self) -> None:
        self.sequence = 0  # the next event's sequence_number

    def event(self, chunk: Any) -> bytes:
        name: bytes = getattr(chunk, "event", b"")
        kind = chunk.get("type")
        if not name and isinstance(kind, str):
            name = kind.encode()
        number = chunk.get("sequence_number")
        self.sequence = number + 1 if type(number) is int else self.sequence + 1
        head = b"event: " + name + b"\n" if name else b""
        data: bytes = chunk.data
        return head + b"data: " + data + b"\n\n"

    def error(self, body: bytes) -> bytes:
        """The Responses API's ``error`` event for an error ``body`` (OpenAI's shape)."""
        error = json.loads(body)["error"]  # always an object (an upstream's body included)
        data = {"type": "error", "code": error.get("code"),
                "message": error.get("message") or "the stream failed",
                "param": error.get("param"), "sequence_number": self.sequence}  # fmt: skip
        return b"event: error\ndata: " + json.dumps(data).encode() + b"\n\n"


async def _watch(receive: Receive, ticket: Ticket) -> None:
    """Cancel ``ticket`` when its client disconnects (uvicorn's ``http.disconnect``)."""
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            ticket.cancel("disconnect")
            return


def watching(receive: Receive, ticket: Ticket) -> asyncio.Task[None]:
    """`_watch` in a task of its own, which the caller cancels when it is done.

    A plain asyncio task, not an anyio task group: the gateway serves on uvicorn
    (asyncio), and a task group per request cost ~0.3 ms on the benchmark's
    machine, a fifth of all the gateway did per request. The task only waits on
    ``receive`` and holds nothing: once cancelled it ends at its next step.
    """
    return asyncio.get_running_loop().create_task(_watch(receive, ticket))


class SSEResponse(Response):
    """A stream passed on event by event; the client's disconnect closes the upstream's.

    Each upstream event is sent as it arrives, in its API's framing (module
    docstring: ``typed`` for the Responses API's typed events). A failure
    mid-stream ends it with an ``error`` event in OpenAI's shape.
    """

    def __init__(
        self,
        stream: ScheduledStream,
        ticket: Ticket,
        headers: dict[str, str],
        *,
        on_cancel: Callable[[], None],
        typed: bool = False,
    ) -> None:
        # Not Response.__init__: no body, so no content-length (StreamingResponse's way).
        self.status_code = 200
        self.media_type = "text/event-stream"
        self.background = None
        self.init_headers({**_SSE_HEADERS, **headers})
        self.stream = stream
        self.ticket = ticket
        self.on_cancel = on_cancel
        self.framing: _DataEvents | _TypedEvents = _TypedEvents() if typed else _DataEvents()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await send({"type": "http.response.start", "status": self.status_code,
                    "headers": self.raw_headers})  # fmt: skip
        watcher = watching(receive, self.ticket)
        framing = self.framing
        try:
            with anyio.CancelScope() as cancel:
                self.ticket.scope = cancel
                await self._pump(send)
            if cancel.cancelled_caught:
                self.on_cancel()
                if self.ticket.reason == "drain":  # the client is still there: say why
                    await send({"type": "http.response.body",
                                "body": framing.error(_DRAINED) + framing.end})  # fmt: skip
            else:
                await send({"type": "http.response.body", "body": framing.end})
        finally:
            watcher.cancel()
            self.ticket.scope = None
            with anyio.CancelScope(shield=True):
                await self.stream.aclose()

    async def _pump(self, send: Send) -> None:
        framing = self.framing
        try:
            async for chunk in self.stream:
                await send({"type": "http.response.body", "body": framing.event(chunk),
                            "more_body": True})  # fmt: skip
        except Exception as exc:  # the stream failed mid-way: say so, in the stream (rule 2)
            await send({"type": "http.response.body", "more_body": True,
                        "body": framing.error(stream_error(exc))})  # fmt: skip
