"""The fault campaign's two ends on loopback: a fake upstream it switches between faults,
and a raw HTTP/1.1 client that can misbehave the way real clients do.

`FaultyUpstream` is an ASGI app served by uvicorn in a thread of the benchmark's
process (`FaultyUpstream.running`), so the campaign sets its `mode`
and reads its counters directly. It answers ``POST .../chat/completions`` (JSON, or SSE
when the body says ``"stream": true``) after a random delay in `delay_s`,
and counts every request it receives, answers and sees abandoned. Its modes:

``ok``          answer (after the delay)
``429-once``    the next request gets 429 with ``Retry-After: 120``, then ``ok``
``stall``       a stream sends its first chunk, then nothing until the caller leaves
``hang``        send nothing until the caller leaves
``502``         502 with a proxy's HTML page naming the URL it was called at

With `key` set, a request without ``Authorization: Bearer KEY`` is a 401.
Every wait is bounded by `HOLD_S`.

`exchange` sends bytes on a fresh connection and reads one answer (and, if asked,
waits for the server to close): the slow, hostile and vanishing clients are built on it.

What this module is not: no scenario lives here (`bench.gateway_faults`).
"""

from __future__ import annotations

import asyncio
import json
import random
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from typing import Any

from bench.gateway_upstream import read_body, send_body
from mockprovider.launch import free_port

__all__ = ["HOLD_S", "Exchange", "FaultyUpstream", "exchange", "read_answer", "request_bytes"]

#: The longest the upstream holds a request it does not answer.
HOLD_S = 60.0
_ANSWER = {"id": "chatcmpl-fault", "object": "chat.completion", "created": 0, "model": "mock-1",
           "choices": [{"index": 0, "finish_reason": "stop",
                        "message": {"role": "assistant", "content": "ok"}}],
           "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}}  # fmt: skip
_CHUNK = {"id": "chatcmpl-fault", "object": "chat.completion.chunk", "created": 0,
          "model": "mock-1", "choices": [{"index": 0, "delta": {"content": "ok"}}]}  # fmt: skip


@dataclass(kw_only=True)
class FaultyUpstream:
    """The fake upstream (module docstring); counters are plain ints read between runs."""

    mode: str = "ok"
    delay_s: tuple[float, float] = (0.0, 0.0)
    chunks: int = 5
    chunk_gap_s: float = 0.02
    key: str | None = None
    seed: int = 0
    received: int = 0
    answered: int = 0
    abandoned: int = 0
    refused_keys: int = 0
    events: list[tuple[float, str]] = field(default_factory=list)
    port: int = 0
    _rng: random.Random = field(default_factory=random.Random)

    def __post_init__(self) -> None:
        self._rng.seed(self.seed)

    def __repr__(self) -> str:
        return (f"<FaultyUpstream mode={self.mode} received={self.received} "
                f"answered={self.answered} abandoned={self.abandoned}>")  # fmt: skip

    @property
    def url(self) -> str:
        """Its ``/v1`` base URL."""
        return f"http://127.0.0.1:{self.port}/v1"

    def reset(self, mode: str = "ok", delay_s: tuple[float, float] = (0.0, 0.0)) -> None:
        """Switch to ``mode`` and zero the counters."""
        self.mode, self.delay_s = mode, delay_s
        self.received = self.answered = self.abandoned = self.refused_keys = 0
        self.events.clear()

    @contextmanager
    def running(self) -> Iterator[FaultyUpstream]:
        """Serve on a free loopback port in a thread until the block ends."""
        import uvicorn

        self.port = free_port()
        config = uvicorn.Config(self, host="127.0.0.1", port=self.port, log_level="error",
                                access_log=False, lifespan="off",
                                timeout_graceful_shutdown=1)  # fmt: skip
        server = uvicorn.Server(config)
        thread = threading.Thread(target=server.run, name="faulty-upstream", daemon=True)
        thread.start()
        deadline = time.monotonic() + 30
        while not server.started:  # bounded start-up wait
            if time.monotonic() > deadline or not thread.is_alive():
                raise RuntimeError("the fake upstream did not start")
            time.sleep(0.02)
        try:
            yield self
        finally:
            server.should_exit = True
            thread.join(timeout=10)

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        body = await read_body(receive)
        self.received += 1
        gone = asyncio.Event()
        watcher = asyncio.get_running_loop().create_task(_watch(receive, gone))
        try:
            await self._answer(scope, body, send, gone)
        finally:
            watcher.cancel()

    async def _answer(self, scope: dict[str, Any], body: bytes, send: Any,
                      gone: asyncio.Event) -> None:  # fmt: skip
        headers = dict(scope["headers"])
        if self.key is not None and headers.get(b"authorization") != f"Bearer {self.key}".encode():
            self.refused_keys += 1
            error = {
                "error": {
                    "message": "Incorrect API key provided",
                    "type": "invalid_request_error",
                    "param": None,
                    "code": "invalid_api_key",
                }
            }
            await send_body(send, 401, json.dumps(error).encode())
            return
        mode = self.mode
        self.events.append((time.monotonic(), mode))
        if mode == "429-once":
            self.mode = "ok"
            await send_body(send, 429, b'{"error": {"message": "Rate limit reached", "type": '
                        b'"requests", "param": null, "code": "rate_limit_exceeded"}}',
                        [(b"retry-after", b"120")])  # fmt: skip
            return
        if mode == "502":
            page = (
                f"<html><body><h1>502 Bad Gateway</h1><p>upstream http://127.0.0.1:"
                f"{self.port}{scope['path']} failed: connection reset</p></body></html>"
            )
            await send_body(send, 502, page.encode(), content_type=b"text/html")
            return
        if mode == "hang" or await _gone_within(gone, self._rng.uniform(*self.delay_s)):
            await _gone_within(gone, HOLD_S)
            self.abandoned += 1
            return
        stream = len(body) < 1 << 20 and json.loads(body or b"{}").get("stream") is True
        if not stream:
            await send_body(send, 200, json.dumps(_ANSWER).encode())
            self.answered += 1
        elif await self._stream(send, gone, stall=mode == "stall"):
            self.answered += 1
        else:
            self.abandoned += 1

    async def _stream(self, send: Any, gone: asyncio.Event, *, stall: bool) -> bool:
        """An SSE answer; ``False`` when the caller left first (or a stall was cut)."""
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-type", b"text/event-stream")]})  # fmt: skip
        chunk = b"data: " + json.dumps(_CHUNK).encode() + b"\n\n"
        for i in range(self.chunks):
            await send({"type": "http.response.body", "body": chunk, "more_body": True})
            if stall or await _gone_within(gone, self.chunk_gap_s if i else 0.0):
                if stall:
                    await _gone_within(gone, HOLD_S)
                await send({"type": "http.response.body", "body": b""})
                return False
        await send({"type": "http.response.body", "body": b"data: [DONE]\n\n"})
        return True


async def _watch(receive: Any, gone: asyncio.Event) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass
    gone.set()


async def _gone_within(gone: asyncio.Event, seconds: float) -> bool:
    """Whether the caller left within ``seconds`` (waiting that long at most)."""
    if seconds <= 0:
        return gone.is_set()
    try:
        await asyncio.wait_for(gone.wait(), seconds)
    except TimeoutError:
        return False
    return True


# -- the raw client ---------------------------------------------------------------------


@dataclass
class Exchange:
    """What one raw exchange got: ``status`` ``None`` when no HTTP answer came."""

    status: int | None = None
    headers: dict[str, str] = field(default_factory=dict)
    body: bytes = b""
    received: int = 0  # every byte read, head included
    answered_s: float | None = None  # from the start to the answer's head
    closed_s: float | None = None  # from the start to the server's close (when waited for)
    error: str = ""

    def json_error(self) -> dict[str, Any] | None:
        """The body's OpenAI-shaped ``error`` object, if it is one."""
        try:
            data = json.loads(self.body)
        except ValueError:
            return None
        error = data.get("error") if isinstance(data, dict) else None
        return error if isinstance(error, dict) and "message" in error else None


def request_bytes(method: str, path: str, body: bytes = b"", *, headers: dict[str, str]
                  | list[tuple[str, str]] | None = None, close: bool = True,
                  length: int | None = None) -> bytes:  # fmt: skip
    """A whole HTTP/1.1 request (``length``: a ``Content-Length`` other than the body's)."""
    items = list(headers.items()) if isinstance(headers, dict) else list(headers or [])
    lines = [f"{method} {path} HTTP/1.1", "host: 127.0.0.1", *(f"{k}: {v}" for k, v in items)]
    if body or length is not None or method == "POST":
        lines.append(f"content-length: {len(body) if length is None else length}")
    if close:
        lines.append("connection: close")
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + body


async def read_answer(reader: asyncio.StreamReader, got: Exchange, start: float) -> None:
    """Read one answer into ``got``: its head, then ``Content-Length`` bytes, or to EOF."""
    head = await reader.readuntil(b"\r\n\r\n")
    got.answered_s = time.perf_counter() - start
    got.received += len(head)
    lines = head.decode("latin-1").split("\r\n")
    got.status = int(lines[0].split()[1])
    got.headers = {k.strip().lower(): v.strip() for k, _, v in
                   (line.partition(":") for line in lines[1:] if line)}  # fmt: skip
    length = got.headers.get("content-length")
    got.body = await (reader.readexactly(int(length)) if length else reader.read())
    got.received += len(got.body)


async def exchange(port: int, data: bytes, *, timeout_s: float = 30.0, wait_close: bool = False,
                   trickle_s: float | None = None) -> Exchange:  # fmt: skip
    """Send ``data`` on a fresh connection to ``127.0.0.1:port`` and read one answer.

    Args:
        trickle_s: Send one byte every ``trickle_s`` seconds instead of all at once.
        wait_close: After the answer (or none), wait for the server to close.
    """
    got = Exchange()
    start = time.perf_counter()
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        async with asyncio.timeout(timeout_s):
            sender = asyncio.create_task(_send_all(writer, data, trickle_s))
            try:
                await read_answer(reader, got, start)
            except (asyncio.IncompleteReadError, ConnectionError) as exc:
                got.error = type(exc).__name__
            if wait_close:
                got.received += len(await reader.read())
                got.closed_s = time.perf_counter() - start
            sender.cancel()
    except TimeoutError:
        got.error = got.error or "timeout"
    finally:
        await close_writer(writer)
    return got


async def close_writer(writer: asyncio.StreamWriter) -> None:
    """Close a client connection and wait until its transport is gone.

    ``close`` alone only schedules it: a loop that ends first leaves the socket open,
    and the garbage collector then warns about it."""
    writer.close()
    with suppress(OSError):  # a peer's reset: closed all the same
        await writer.wait_closed()


async def _send_all(writer: asyncio.StreamWriter, data: bytes, trickle_s: float | None) -> None:
    try:
        if trickle_s is None:
            writer.write(data)
            await writer.drain()
            return
        for i in range(len(data)):
            writer.write(data[i : i + 1])
            await writer.drain()
            await asyncio.sleep(trickle_s)
    except ConnectionError:
        pass
