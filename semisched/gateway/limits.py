"""Limits on what a gateway client may send: sizes, nesting, timeouts, connections.

The gateway is a hostile-input boundary: a client must not be able to hold its
memory, its sockets or its CPU with a request it never finishes or one no
provider would take. Each limit is a ``[gateway]`` key of
`GatewayConfig` (defaults and why there), and
each is answered in OpenAI's error shape with ``connection: close``:

========================  ==========================================  ======================
``[gateway]`` key         what                                        answer
========================  ==========================================  ======================
``max_connections``       open connections at once                    503, closed at once
``max_header_bytes``      the request line and headers                431
``header_timeout_s``      total time to receive the whole header      408
``body_timeout_s``        total time to receive the whole body        408
``keepalive_timeout_s``   idle time between requests on a connection  closed (uvicorn's)
``max_body_bytes``        the request body                            413
``max_json_depth``        the body's JSON nesting                     400
========================  ==========================================  ======================

Rules:

1. Connections, headers and timeouts are enforced by `LimitedProtocol`,
   uvicorn's httptools protocol with timers armed and counters kept around the
   parser (`protocol_for`); nothing reaches the app until the whole
   header block arrived within ``header_timeout_s`` and ``max_header_bytes``.
2. A header timer runs from the connection's accept (the first request) or
   from the first byte of a later request's header block left incomplete by a
   read, until the block is complete: it bounds the total time, so a client
   sending one byte at a time does not keep it open. Between requests,
   uvicorn's keep-alive timer (``keepalive_timeout_s``) applies.
3. A body timer runs from the end of the headers, when a read leaves the body
   incomplete, until its last byte: the common request, headers and body in
   one read, arms neither timer. Its answer is a 408 unless the app already
   answered (then the connection just closes); the app sees a disconnect.
4. The header size counts the bytes of the reads while a header block is
   incomplete (so a header that never ends is cut off within one read of the
   limit), and exactly (request target and header fields) once it is complete.
5. The body's size and nesting are checked by the app (`read_body`,
   `parse_json`): a declared ``Content-Length`` over the limit is refused
   before a byte of the body is read; a chunked body is counted as it arrives
   and refused when it passes the limit. Nesting is measured only when the
   body holds more brackets than the limit (never on the common request), and
   a body too deep for Python's parser is refused the same way, never a
   ``RecursionError``.
6. An error quotes at most a short prefix of what the client sent
   (`semisched.core.checks.short_repr`).

What this module is not: it parses no config (`semisched.gateway.config`)
and schedules nothing; the HTTP parsing itself is uvicorn's and httptools'.
"""

from __future__ import annotations

import asyncio
import http
import json
import logging
from collections.abc import Callable
from typing import Any, ClassVar

from starlette.requests import ClientDisconnect
from starlette.types import Receive
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from semisched.gateway.answers import error_body
from semisched.gateway.config import GatewayConfig

__all__ = ["LimitedProtocol", "Refused", "json_depth_exceeds", "parse_json", "protocol_for",
           "raw_answer", "read_body"]  # fmt: skip

logger = logging.getLogger("semisched.gateway")


class Refused(ValueError):
    """A request the gateway will not read on (the client's input: a ``ValueError``).

    Attributes:
        status: The HTTP status it is answered with (400, 408, 413, 431, 503).
        code: The OpenAI-style error code.
    """

    def __init__(self, status: int, message: str, code: str) -> None:
        super().__init__(message)
        self.status = status
        self.code = code


# -- the body (rule 5) ------------------------------------------------------------------


def _too_large(limit: int) -> Refused:
    return Refused(413, f"the request body is larger than the gateway's limit of {limit} bytes "
                   "(max_body_bytes)", "request_too_large")  # fmt: skip


async def read_body(receive: Receive, content_length: str | None, limit: int) -> bytes:
    """The request's body, refused past ``limit`` bytes (rule 5).

    Args:
        receive: The ASGI ``receive``.
        content_length: The request's ``Content-Length`` header, if any.
        limit: ``max_body_bytes``.

    Raises:
        Refused: 413, before the body is read when ``Content-Length`` says so.
        ClientDisconnect: The client left first.
    """
    if content_length is not None and content_length.isdigit() and int(content_length) > limit:
        raise _too_large(limit)
    chunks = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise ClientDisconnect()
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            raise _too_large(limit)
        chunks.append(chunk)
        if not message.get("more_body", False):
            return chunks[0] if len(chunks) == 1 else b"".join(chunks)


def json_depth_exceeds(value: Any, limit: int) -> bool:
    """Whether parsed JSON ``value`` nests deeper than ``limit`` (a scalar is depth 0,
    ``[]`` depth 1); level by level, without recursion, so any depth is safe to measure."""
    level = [value] if type(value) in (dict, list) else []
    depth = 0
    while level:
        depth += 1
        if depth > limit:
            return True
        deeper = []
        for item in level:  # json.loads makes exactly dicts and lists: type() is faster
            for child in item.values() if type(item) is dict else item:
                kind = type(child)
                if kind is dict or kind is list:
                    deeper.append(child)
        level = deeper
    return False


def parse_json(raw: bytes, max_depth: int) -> Any:
    """``json.loads(raw)``, refusing a body nested deeper than ``max_depth`` (rule 5).

    Raises:
        Refused: 400, nested too deeply (Python's parser's own limit included).
        ValueError: Not JSON (``json.JSONDecodeError``, ``UnicodeDecodeError``).
    """
    try:
        value = json.loads(raw)
    except RecursionError:
        value = None
    else:  # depth <= brackets in the body: count them (fast, C) before walking anything
        if raw.count(b"[") + raw.count(b"{") <= max_depth or not json_depth_exceeds(
            value, max_depth
        ):
            return value
    raise Refused(400, f"the request body's JSON is nested deeper than {max_depth} levels "
                  "(max_json_depth)", "invalid_request")  # fmt: skip


# -- the connection (rules 1-4) ---------------------------------------------------------


def raw_answer(status: int, message: str, code: str, *, retry_after: bool = False) -> bytes:
    """A whole HTTP/1.1 error answer in OpenAI's shape, ending the connection."""
    body = error_body(message, "invalid_request_error" if status < 500 else "server_error", code)
    head = [f"HTTP/1.1 {status} {http.HTTPStatus(status).phrase}",
            "content-type: application/json", f"content-length: {len(body)}",
            "connection: close"]  # fmt: skip
    if retry_after:
        head.append("retry-after: 1")
    return ("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + body


class LimitedProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol with the connection's limits (rules 1-4).

    Made for a config by `protocol_for`; uvicorn makes one per connection.
    """

    gateway: ClassVar[GatewayConfig]
    #: Each is told a refusal's reason (a metric); `protocol_for` sets them.
    counters: ClassVar[tuple[Callable[[str], None], ...]] = ()

    _answered = False  # a limit answered; the connection is closing
    _in_header = False  # a header block has begun and is not complete
    _in_body = False  # the headers are complete and the body is not
    _header_bytes = 0  # read so far while the header block is incomplete (rule 4)
    _read = 0  # the current read's length
    _header_timer: asyncio.TimerHandle | None = None
    _body_timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        if len(self.connections) > self.gateway.max_connections:
            logger.debug("refused a connection: %d open", len(self.connections) - 1)
            self._refuse(raw_answer(503, "the gateway holds its maximum of "
                                    f"{self.gateway.max_connections} connections; try again",
                                    "too_many_connections", retry_after=True),
                         "too_many_connections")  # fmt: skip
            return
        self._header_timer = self.loop.call_later(self.gateway.header_timeout_s,
                                                  self._header_timed_out)  # fmt: skip

    def connection_lost(self, exc: Exception | None) -> None:
        self._cancel_timers()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self._answered:
            return
        self._read = len(data)
        super().data_received(data)
        if self._answered or self.transport.is_closing():
            return
        if self._in_header:
            self._header_bytes += len(data)
            if self._header_bytes > self.gateway.max_header_bytes:
                self._headers_too_large()
            elif self._header_timer is None and (self.cycle is None or
                                                 self.cycle.response_complete):  # fmt: skip
                self._header_timer = self.loop.call_later(self.gateway.header_timeout_s,
                                                          self._header_timed_out)  # fmt: skip
        elif self._in_body and self._body_timer is None:
            self._body_timer = self.loop.call_later(self.gateway.body_timeout_s,
                                                    self._body_timed_out)  # fmt: skip

    def on_message_begin(self) -> None:
        self._in_header = True
        super().on_message_begin()

    def on_headers_complete(self) -> None:
        self._in_header = False
        if self._header_timer is not None:
            self._header_timer.cancel()
            self._header_timer = None
        if self._answered:
            return
        limit = self.gateway.max_header_bytes
        if self._header_bytes + self._read > limit and (  # else it cannot be more: measure
            len(self.url) + sum(len(n) + len(v) + 4 for n, v in self.headers) > limit
        ):
            self._headers_too_large()
            return
        self._header_bytes = 0
        self._in_body = True
        super().on_headers_complete()

    def on_body(self, body: bytes) -> None:
        if not self._answered:
            super().on_body(body)

    def on_message_complete(self) -> None:
        self._in_body = False
        if self._body_timer is not None:
            self._body_timer.cancel()
            self._body_timer = None
        if not self._answered:
            super().on_message_complete()

    def _headers_too_large(self) -> None:
        self._refuse(raw_answer(431, "the request's headers are larger than the gateway's "
                                f"limit of {self.gateway.max_header_bytes} bytes "
                                "(max_header_bytes)", "headers_too_large"),
                     "headers_too_large")  # fmt: skip

    def _header_timed_out(self) -> None:
        self._header_timer = None
        if self._answered or self.transport.is_closing():
            return
        if self.cycle is not None and not self.cycle.response_complete:
            return  # answering a request: the next one's header waits (pipelining)
        self._refuse(raw_answer(408, "the request's headers did not arrive within "
                                f"{self.gateway.header_timeout_s:g} s (header_timeout_s)",
                                "request_timeout"), "header_timeout")  # fmt: skip

    def _body_timed_out(self) -> None:
        self._body_timer = None
        if self._answered or self.transport.is_closing() or not self._in_body:
            return
        if self.cycle is not None and self.cycle.response_started:
            self._refuse(None, "body_timeout")  # the app answered already: only close
            return
        self._refuse(raw_answer(408, "the request's body did not arrive within "
                                f"{self.gateway.body_timeout_s:g} s (body_timeout_s)",
                                "request_timeout"), "body_timeout")  # fmt: skip

    def send_400_response(self, msg: str) -> None:
        """A request the HTTP parser cannot read (a bad ``Content-Length``, a malformed
        line): 400 in OpenAI's shape, not uvicorn's plain text."""
        if self._answered:
            return
        self._refuse(raw_answer(400, "the request is not valid HTTP/1.1 (its request line, "
                                "headers or length cannot be read)", "invalid_http"),
                     "invalid_http")  # fmt: skip

    def _refuse(self, answer: bytes | None, reason: str) -> None:
        """Write ``answer`` (if any), end the app's request (a disconnect) and close;
        ``reason`` is counted (`protocol_for`'s ``refused``)."""
        self._answered = True
        for count in self.counters:
            count(reason)
        self._cancel_timers()
        cycle = self.cycle
        if cycle is not None and not cycle.response_complete:
            cycle.disconnected = True  # the app's receive says http.disconnect, sends are dropped
            cycle.message_event.set()
        if answer is not None:
            self.transport.write(answer)
        self.transport.close()

    def _cancel_timers(self) -> None:
        for timer in (self._header_timer, self._body_timer):
            if timer is not None:
                timer.cancel()
        self._header_timer = self._body_timer = None


def protocol_for(
    config: GatewayConfig, refused: Callable[[str], None] | None = None
) -> type[LimitedProtocol]:
    """`LimitedProtocol` with ``config``'s limits, for ``uvicorn.Config(http=...)``;
    ``refused(reason)`` is called for each connection it refuses or cuts off
    (``too_many_connections``, ``headers_too_large``, ``header_timeout``,
    ``body_timeout``, ``invalid_http``)."""
    counters = () if refused is None else (refused,)
    return type("LimitedProtocol", (LimitedProtocol,), {"gateway": config, "counters": counters})
