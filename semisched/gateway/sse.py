"""Streamed answers at the gateway: SSE event by event, and the client's disconnect.

:class:`SSEResponse` passes an upstream stream on to the client as Server-Sent
Events: each upstream ``data:`` event as it arrives, then ``data: [DONE]``.

Rules:

1. The client's disconnect cancels the stream: its upstream call is closed at once
   (:func:`watching` watches for it in a task of its own).
2. A failure mid-stream ends it with an ``error`` event in OpenAI's shape (its code
   as the answer would have it: a deadline is ``deadline_exceeded``), then
   ``[DONE]``: the client learns the stream is not whole.
3. A drain past its grace (the gateway shutting down) cuts a stream with an error
   event whose code is ``shutting_down``, then ``[DONE]``.

What this module is not: it schedules nothing and reads no request.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable

import anyio
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from semisched.gateway.answers import stream_error
from semisched.gateway.tickets import Ticket
from semisched.runtime.streams import ScheduledStream

__all__ = ["SSEResponse", "watching"]

_SSE_HEADERS = {"cache-control": "no-cache", "x-accel-buffering": "no"}
#: A stream cut by a drain past its grace: an error event in OpenAI's shape, then the end.
_DONE = b"data: [DONE]\n\n"
_DRAINED = b"data: " + json.dumps({"error": {
    "message": "the gateway is shutting down; the stream was cut before its end",
    "type": "server_error", "param": None, "code": "shutting_down"}}).encode() + b"\n\n"


async def _watch(receive: Receive, ticket: Ticket) -> None:
    """Cancel ``ticket`` when its client disconnects (uvicorn's ``http.disconnect``)."""
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            ticket.cancel("disconnect")
            return


def watching(receive: Receive, ticket: Ticket) -> asyncio.Task[None]:
    """:func:`_watch` in a task of its own, which the caller cancels when it is done.

    A plain asyncio task, not an anyio task group: the gateway serves on uvicorn
    (asyncio), and a task group per request cost ~0.3 ms on the benchmark's
    machine, a fifth of all the gateway did per request. The task only waits on
    ``receive`` and holds nothing: once cancelled it ends at its next step.
    """
    return asyncio.get_running_loop().create_task(_watch(receive, ticket))


class SSEResponse(Response):
    """A stream passed on event by event; the client's disconnect closes the upstream's.

    Each upstream ``data:`` event is sent as it arrives, then ``data: [DONE]``.
    A failure mid-stream ends it with an ``error`` event in OpenAI's shape.
    """

    def __init__(
        self,
        stream: ScheduledStream,
        ticket: Ticket,
        headers: dict[str, str],
        *,
        on_cancel: Callable[[], None],
    ) -> None:
        # Not Response.__init__: no body, so no content-length (StreamingResponse's way).
        self.status_code = 200
        self.media_type = "text/event-stream"
        self.background = None
        self.init_headers({**_SSE_HEADERS, **headers})
        self.stream = stream
        self.ticket = ticket
        self.on_cancel = on_cancel

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await send({"type": "http.response.start", "status": self.status_code,
                    "headers": self.raw_headers})  # fmt: skip
        watcher = watching(receive, self.ticket)
        try:
            with anyio.CancelScope() as cancel:
                self.ticket.scope = cancel
                await self._pump(send)
            if cancel.cancelled_caught:
                self.on_cancel()
                if self.ticket.reason == "drain":  # the client is still there: say why
                    await send({"type": "http.response.body", "body": _DRAINED + _DONE})
            else:
                await send({"type": "http.response.body", "body": _DONE})
        finally:
            watcher.cancel()
            self.ticket.scope = None
            with anyio.CancelScope(shield=True):
                await self.stream.aclose()

    async def _pump(self, send: Send) -> None:
        try:
            async for chunk in self.stream:
                await send({"type": "http.response.body", "body": b"data: " + chunk.data +
                            b"\n\n", "more_body": True})  # fmt: skip
        except Exception as exc:  # the stream failed mid-way: say so, in the stream (rule 2)
            await send({"type": "http.response.body", "more_body": True,
                        "body": b"data: " + stream_error(exc) + b"\n\n"})  # fmt: skip
