"""ASGI responses of admitted requests: served by the physics, hung, or dropped on purpose.

What it is: the two response classes ``mockprovider.app`` returns for a request that passed
the gate. `ServedResponse` submits the request to the ``PhysicsDriver``, waits for its
events and answers (JSON at completion; SSE: the first events at the first token, the rest at
completion), or drops the connection. `HangResponse` never answers. Bodies come from
the request's `Answer` (``mockprovider.apis``: one per API, over ``mockprovider.wire``);
admission and fault draws happen before, in ``mockprovider.gate``. A request with no output
token (an embedding) completes when its prefill does.

Faults and timeouts as a client sees them:

* hang: no answer, no physics slot; the handler waits for the client to disconnect (uvicorn)
  or to cancel its call (``ASGITransport`` runs the app inside the caller's task, so
  cancelling the call cancels the handler). ``ASGITransport`` enforces no timeouts: only
  cancellation ends it.
* drop: the request is served by the physics; at completion (JSON) or at the first token
  (SSE) the app sends the status line, headers and part of the body, then raises
  `ConnectionDropped`. Under uvicorn the server closes the socket: the client reads an
  incomplete body, httpx2 raises ``RemoteProtocolError`` and openai raises
  ``APIConnectionError``. Under ``ASGITransport`` the exception itself propagates into the
  client call; ``ConnectionDropped`` subclasses ``httpx2.RemoteProtocolError`` so that openai
  maps it to the same ``APIConnectionError`` (openai only wraps httpx2 request errors, not
  arbitrary exceptions).
* physics timeout (``PhysicsParams.timeout_s``): 504 ``server_error``/``timeout`` before the
  first byte; mid-stream, the API's failure event (chat and completions: an SSE
  ``data: {"error": ...}`` event, which openai raises as ``APIError``; Responses:
  ``response.failed``).

A request that is cancelled or whose client disconnects is released from the physics in a
``finally``, so no slot ever leaks (counted as ``client_cancelled``).
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from typing import Any, Literal, Protocol

import anyio
import httpx2
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from mockprovider.driver import Flight, PhysicsDriver
from mockprovider.errors import timeout_body
from mockprovider.physics import EventKind
from mockprovider.stats import CounterName
from mockprovider.wire import Job, raw_headers

__all__ = ["Answer", "ConnectionDropped", "HangResponse", "ServedResponse", "ServingHost"]


class ConnectionDropped(httpx2.RemoteProtocolError):
    """Raised by the app to drop a connection mid-response (see the module docstring)."""


class ServingHost(Protocol):
    """What a served response needs from the app that admitted it."""

    @property
    def driver(self) -> PhysicsDriver:
        """The physics driver of the app."""
        ...

    def count(self, name: CounterName) -> None:
        """Count one more ``name`` in the app's counters."""

    def completed(self, job: Job) -> None:
        """Count a completed request and bill its tokens to the quota."""

    def new_id(self, job: Job) -> str:
        """A fresh answer id (``chatcmpl-...``, ``cmpl-...``, ``resp_...``, ...)."""
        ...


class Answer(Protocol):
    """What one admitted request answers, in its API's shapes (``mockprovider.apis``)."""

    def body(self, rid: str, created: int) -> Mapping[str, Any]:
        """The JSON answer with id ``rid``, created at ``created`` (Unix seconds)."""
        ...

    def head(self, rid: str, created: int) -> bytes:
        """The SSE events sent at the first token (or at completion without one)."""
        ...

    def tail(self, rid: str, created: int) -> list[bytes]:
        """The SSE events sent at completion, after `head`."""
        ...

    def failed(self, error: Mapping[str, Any]) -> bytes:
        """The SSE event that ends a stream cut by ``error`` (an OpenAI error body)."""
        ...


_Outcome = Literal["pending", "done", "dropped", "disconnected"]


async def _until_disconnect(receive: Receive) -> None:
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return


class ServedResponse(Response):
    """A response that waits for the physics, then answers (JSON or SSE) or drops.

    Args:
        host: The app that admitted the request.
        job: The parsed request.
        answer: What it answers (its API's bodies).
        headers: Extra response headers (rate-limit state, ``x-request-id``).
        drop: Drop the connection mid-response (the injected ``drop`` fault).
    """

    def __init__(
        self, host: ServingHost, job: Job, answer: Answer, headers: dict[str, str], *, drop: bool
    ) -> None:
        super().__init__(status_code=200)
        self._host = host
        self._job = job
        self._answer = answer
        self._extra = headers
        self._drop = drop
        self._outcome: _Outcome = "pending"

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        host = self._host
        flight = host.driver.submit(self._job.input_tokens, self._job.output_tokens)
        try:
            async with anyio.create_task_group() as tg:

                async def watch() -> None:
                    await _until_disconnect(receive)
                    if self._outcome == "pending":
                        self._outcome = "disconnected"
                        tg.cancel_scope.cancel()

                tg.start_soon(watch)
                if self._job.stream:
                    await self._stream(flight, send)
                else:
                    await self._json(flight, send)
                tg.cancel_scope.cancel()
        finally:
            if host.driver.release(flight):
                host.count("client_cancelled")
        if self._outcome == "dropped":
            host.count("faults_drop")
            raise ConnectionDropped("mock provider dropped the connection mid-response")

    async def _start(
        self, send: Send, status: int, content_type: str, length: int | None = None
    ) -> None:
        headers = raw_headers(self._extra, content_type)
        if length is not None:
            headers.append((b"content-length", str(length).encode()))
        await send({"type": "http.response.start", "status": status, "headers": headers})

    async def _body(self, send: Send, body: bytes, *, more: bool) -> None:
        await send({"type": "http.response.body", "body": body, "more_body": more})

    async def _timed_out(self, send: Send) -> None:
        self._host.count("timeouts")
        self._outcome = "done"
        data = json.dumps(timeout_body()).encode()
        await self._start(send, 504, "application/json", len(data))
        await self._body(send, data, more=False)

    async def _json(self, flight: Flight, send: Send) -> None:
        event = await self._host.driver.terminal_event(flight)
        if event.kind is EventKind.TIMED_OUT:
            await self._timed_out(send)
            return
        job = self._job
        self._host.completed(job)
        data = json.dumps(self._answer.body(self._host.new_id(job), int(time.time()))).encode()
        self._outcome = "dropped" if self._drop else "done"
        await self._start(send, 200, "application/json", len(data))
        await self._body(send, data[: len(data) // 2] if self._drop else data, more=self._drop)

    async def _stream(self, flight: Flight, send: Send) -> None:
        driver, job = self._host.driver, self._job
        event = await driver.next_event(flight)
        if event.kind is EventKind.TIMED_OUT:
            await self._timed_out(send)
            return
        rid, created = self._host.new_id(job), int(time.time())
        await self._start(send, 200, "text/event-stream; charset=utf-8")
        await self._body(send, self._answer.head(rid, created), more=True)
        if self._drop:
            self._outcome = "dropped"
            return
        if event.kind is EventKind.FIRST_TOKEN:
            event = await driver.terminal_event(flight)
        if event.kind is EventKind.TIMED_OUT:
            self._host.count("timeouts")
            self._outcome = "done"
            await self._body(send, self._answer.failed(timeout_body()), more=False)
            return
        self._host.completed(job)
        self._outcome = "done"
        *pieces, last = self._answer.tail(rid, created)
        for piece in pieces:
            await self._body(send, piece, more=True)
        await self._body(send, last, more=False)


class HangResponse(Response):
    """A response that never comes: it waits for the client to go away."""

    def __init__(self) -> None:
        super().__init__(status_code=200)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await _until_disconnect(receive)
