"""HTTP/1.1 to one upstream: keep-alive connections, llhttp's parser (httptools) on asyncio.

`Wire` sends one request at a time on each of its connections to one
origin (the upstream's scheme, host and port) and keeps the connections alive
between requests, most recently used first. It is what the gateway's upstream
client (`semisched.gateway.upstream`) sends through. Measured on the
gateway's benchmark, a general HTTP client (``httpx2``'s pool) cost more per
request than the rest of the gateway, most of it probing every idle connection
on each request, and h11 (pure Python) cost several times what httptools does.

Rules:

1. A connection carries one request at a time; it goes back to the idle list
   only once its answer was read to the end and the upstream keeps it alive;
   otherwise it is closed.
2. An idle connection is reused only if it has been idle less than
   ``keepalive_s`` and the upstream has not closed it (its socket has nothing
   to read); else it is closed and the next one tried.
3. At most ``max_connections`` requests are on the wire at once; more wait
   their turn, first come first served.
4. Each read waits at most ``timeout_s`` (between a stream's chunks, too), a
   new connection ``connect_timeout_s``: `TimeoutError` past them. A
   connection that fails raises `WireError` and is never reused.
5. A request whose *reused* connection closes before any byte of its answer came
   is sent once more at once, on a new connection (counted in `Wire.resent`).
   HTTP/1.1 lets either side close an idle connection at any time, and an upstream
   that closes one idle for its keep-alive timeout (llama.cpp's server: 5 s, as
   long as this side's) can do so just as a request goes out on it. That is not a
   failure of the upstream, and the scheduler should not read it as one (its
   retry policy would resend the request anyway, after a back-off, and count a
   failure against the endpoint's health and concurrency limit). A new
   connection that fails raises `WireError`, as does a failure once an answer
   began.

What this module is not: no redirects, cookies, proxies (an upstream behind one
goes through `.proxied`), compression or retries (rule 5's one resend aside); it
reads no JSON and raises no ``openai`` exception (the upstream client maps
failures). It runs on asyncio only (the gateway runs on uvicorn).
"""

from __future__ import annotations

import asyncio
import select
import ssl
import time
from collections.abc import AsyncIterator, Mapping
from typing import cast
from urllib.parse import urlsplit

import httptools

__all__ = ["Reply", "Wire", "WireError"]

#: A stream's body buffered beyond this pauses reading from the upstream.
_HIGH_WATER = 1 << 20


class WireError(Exception):
    """The connection failed (refused, reset, closed early, or not HTTP/1.1)."""


class _Connection(asyncio.Protocol):
    """One connection: the parser's callbacks fill the current answer; readers wait on it."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.transport: asyncio.Transport | None = None
        self.parser = httptools.HttpResponseParser(self)
        self.idle_since = 0.0
        self.lost: WireError | None = None
        self._waiter: asyncio.Future[None] | None = None
        self._begin()

    def _begin(self) -> None:
        self.heard = False  # a byte of the current answer came (rule 5)
        self.status = 0
        self.headers: dict[str, str] = {}
        self.head = False
        self.body: list[bytes] = []
        self.buffered = 0
        self.complete = False
        self.keep_alive = False
        self.paused = False

    # -- asyncio's and the parser's callbacks ----------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's is not a subclass

    def data_received(self, data: bytes) -> None:
        self.heard = True
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError as exc:
            self._lose(WireError(f"the upstream broke HTTP/1.1: {exc}"))
            return
        self._wake()

    def eof_received(self) -> bool:
        self._lose(WireError("the upstream closed the connection"))
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        self._lose(WireError(f"the connection was lost: {exc!r}"))

    def on_header(self, name: bytes, value: bytes) -> None:
        self.headers[name.decode("latin-1").lower()] = value.decode("latin-1")

    def on_headers_complete(self) -> None:
        self.status = self.parser.get_status_code()
        if self.status >= 200:  # 1xx: informational, its (empty) message is skipped
            self.head = True

    def on_body(self, body: bytes) -> None:
        self.body.append(body)
        self.buffered += len(body)
        if self.buffered > _HIGH_WATER and not self.paused and self.transport is not None:
            self.paused = True
            self.transport.pause_reading()

    def on_message_complete(self) -> None:
        if self.head:
            self.complete = True
            self.keep_alive = self.parser.should_keep_alive()  # reset once this returns
        else:
            self._begin()

    # -- the reader's side ----------------------------------------------------------------

    def _lose(self, error: WireError) -> None:
        if self.lost is None:
            self.lost = error
        if self.transport is not None:
            self.transport.close()
        self._wake()

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    async def wait(self, timeout_s: float) -> None:
        """Until the parser has more (rule 4: `TimeoutError` after ``timeout_s``)."""
        if self.lost is not None:
            raise self.lost
        if self.paused and self.transport is not None:
            self.paused = False
            self.transport.resume_reading()
        waiter = self._waiter = self.loop.create_future()
        timer = self.loop.call_later(timeout_s, _time_out, waiter)
        try:
            await waiter
        finally:
            timer.cancel()
            self._waiter = None

    def take(self) -> bytes:
        body = b"".join(self.body)
        self.body.clear()
        self.buffered = 0
        return body

    def close(self) -> None:
        if self.lost is None:
            self.lost = WireError("closed")
        if self.transport is not None:
            self.transport.close()

    def stale(self, now: float, keepalive_s: float) -> bool:
        """Rule 2: idle too long, closed, or its socket readable (the upstream closed it)."""
        if self.lost is not None or now - self.idle_since > keepalive_s or self.transport is None:
            return True
        sock = self.transport.get_extra_info("socket")
        try:
            return sock is None or bool(select.select([sock], [], [], 0)[0])
        except (OSError, ValueError):
            return True


def _time_out(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_exception(TimeoutError())


class Reply:
    """One answer: ``status``, ``headers`` (names lower-cased), then the body."""

    __slots__ = ("_conn", "_wire", "headers", "status")

    def __init__(self, wire: Wire, conn: _Connection) -> None:
        self._wire = wire
        self._conn: _Connection | None = conn
        self.status = conn.status
        self.headers = conn.headers

    def __repr__(self) -> str:
        return f"<Reply {self.status} open={self._conn is not None}>"

    async def read(self) -> bytes:
        """The whole body (the connection goes back to the pool, rule 1)."""
        return b"".join([chunk async for chunk in self.chunks()])

    async def chunks(self) -> AsyncIterator[bytes]:
        """The body as it arrives."""
        conn = self._conn
        if conn is None:
            return
        try:
            while True:
                if conn.body:
                    yield conn.take()
                elif conn.complete:
                    break
                else:
                    await conn.wait(self._wire.timeout_s)
            self._conn = None
            self._wire._done(conn, reuse=True)
        finally:
            if self._conn is not None:  # left early or failed: never reused
                self.close()

    def close(self) -> None:
        """Close the connection unless the body was read to the end."""
        conn, self._conn = self._conn, None
        if conn is not None:
            self._wire._done(conn, reuse=False)

    async def aclose(self) -> None:
        """`close` (the shape of an async resource)."""
        self.close()


class Wire:
    """Keep-alive HTTP/1.1 connections to ``base_url``'s origin (module docstring).

    Args:
        base_url: ``http://`` or ``https://`` URL; its path prefixes every request's.
        headers: Sent with every request (a key here is in no ``repr``).
        timeout_s: The longest wait for one read (rule 4).
        connect_timeout_s: The longest wait for a connection.
        max_connections: Requests on the wire at once (rule 3).
        keepalive_s: How long an idle connection may be reused (rule 2).
        ssl_context: For ``https``; default: ``httpx2``'s (the system's, or certifi's).

    Raises:
        ValueError: ``base_url`` is not http(s), a header holds a line break, or a
            number is out of range.
    """

    def __init__(
        self,
        base_url: str,
        *,
        headers: Mapping[str, str] | None = None,
        timeout_s: float = 600.0,
        connect_timeout_s: float = 10.0,
        max_connections: int = 1000,
        keepalive_s: float = 5.0,
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        url = urlsplit(base_url)
        if url.scheme not in ("http", "https") or not url.hostname:
            raise ValueError(f"base_url={base_url!r} must be an http:// or https:// URL")
        if max_connections < 1:
            raise ValueError(f"{max_connections=} must be at least 1")
        if timeout_s <= 0 or connect_timeout_s <= 0:
            raise ValueError(f"{timeout_s=} and {connect_timeout_s=} must be positive")
        self.tls = url.scheme == "https"
        self.host = url.hostname
        self.port = url.port or (443 if self.tls else 80)
        self.prefix = url.path.rstrip("/") + "/"
        netloc = self.host if url.port is None else f"{self.host}:{self.port}"
        fields = {"host": netloc, **(headers or {})}
        for name, value in fields.items():
            if any(c in name + value for c in "\r\n\0"):
                raise ValueError(f"header {name!r} must not hold a line break")
        self._head = "".join(f"{k}: {v}\r\n" for k, v in fields.items())
        self.timeout_s = timeout_s
        self.connect_timeout_s = connect_timeout_s
        self.keepalive_s = keepalive_s
        self._ssl = ssl_context
        self._idle: list[_Connection] = []
        self._slots: asyncio.Semaphore | None = None
        self._max = max_connections
        self.open = 0
        #: Requests sent once more after their reused connection closed first (rule 5).
        self.resent = 0
        self.closed = False

    def __repr__(self) -> str:
        scheme = "https" if self.tls else "http"
        return (f"<Wire {scheme}://{self.host}:{self.port} open={self.open} "
                f"idle={len(self._idle)}>")  # fmt: skip

    async def request(self, method: str, path: str, body: bytes = b"") -> Reply:
        """Send ``method path`` with ``body``; the answer's head, its body still to read.

        Raises:
            WireError: The connection failed. TimeoutError: rule 4.
        """
        if self._slots is None:
            self._slots = asyncio.Semaphore(self._max)
        target = self.prefix + path.lstrip("/")
        head = f"{method} {target} HTTP/1.1\r\n{self._head}content-length: {len(body)}\r\n\r\n"
        data = head.encode("latin-1") + body
        slots = self._slots
        await slots.acquire()  # held until the answer is read or closed (rule 3)
        conn = None
        try:
            conn, reused = await self._connection()
            try:
                await self._send(conn, data)
            except WireError:
                if not reused or conn.heard:
                    raise
                self._drop(conn)  # closed idle as the request went out: once more (rule 5)
                conn = None
                conn, _ = await self._connection(fresh=True)
                self.resent += 1
                await self._send(conn, data)
        except BaseException:
            if conn is not None:
                self._drop(conn)
            slots.release()
            raise
        return Reply(self, conn)

    async def _send(self, conn: _Connection, data: bytes) -> None:
        """Write one request on ``conn`` and wait for its answer's head."""
        assert conn.transport is not None
        conn.transport.write(data)
        while not conn.head:
            await conn.wait(self.timeout_s)

    async def _connection(self, *, fresh: bool = False) -> tuple[_Connection, bool]:
        """An idle connection that is still good (rule 2), else a new one (``fresh``:
        always a new one); and whether it is reused."""
        now = time.monotonic()
        while self._idle and not fresh:
            conn = self._idle.pop()
            if not conn.stale(now, self.keepalive_s):
                conn._begin()
                return conn, True
            self._drop(conn)
        loop = asyncio.get_running_loop()
        context = self._ssl_context() if self.tls else None
        try:
            async with asyncio.timeout(self.connect_timeout_s):
                _, conn = await loop.create_connection(
                    lambda: _Connection(loop), self.host, self.port, ssl=context,
                    server_hostname=self.host if context else None)  # fmt: skip
        except OSError as exc:
            raise WireError(f"cannot connect to {self.host}:{self.port}: {exc}") from exc
        self.open += 1
        return conn, False

    def _ssl_context(self) -> ssl.SSLContext:
        if self._ssl is None:
            import httpx2

            self._ssl = httpx2.create_ssl_context()
        return self._ssl

    def _done(self, conn: _Connection, *, reuse: bool) -> None:
        """An answer is done with ``conn``: its slot is free; rule 1 says whether the
        connection goes back to the idle list (``reuse``: read to the end) or is closed."""
        if self._slots is not None:
            self._slots.release()
        if not reuse or self.closed or conn.lost is not None or not conn.keep_alive:
            self._drop(conn)
            return
        conn.idle_since = time.monotonic()
        self._idle.append(conn)

    def _drop(self, conn: _Connection) -> None:
        self.open -= 1
        conn.close()

    async def aclose(self) -> None:
        """Close every idle connection; those in use close when their answer is done."""
        self.closed = True
        idle, self._idle = self._idle, []
        for conn in idle:
            self._drop(conn)
