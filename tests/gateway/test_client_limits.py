"""Limits on what a gateway client may send, over real sockets: raw clients that send too
much, too deep or too slowly, or hold too many connections, against uvicorn on 127.0.0.1.

No assertion depends on a tight timing: a timeout of 1 s must end a connection well before
a generous bound (20 s) and before the client finished what it was sending.
"""

from __future__ import annotations

import json
import select
import socket
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx2
import openai
import pytest
from gateway_kit import UPSTREAM_SECRET, Servers, gateway_config, mock_app, servers, wait_for

from semisched.gateway.app import Gateway
from semisched.gateway.config import GatewayConfigError
from semisched.gateway.configfile import config_from_dict
from semisched.gateway.limits import Refused, json_depth_exceeds, parse_json

pytestmark = pytest.mark.wallclock

HI = [{"role": "user", "content": "hi"}]
BOUND_S = 20.0  # a limit of 1 s must act well within this, however busy the machine
CHAT = b"POST /v1/chat/completions HTTP/1.1\r\nhost: gw\r\nauthorization: Bearer sk-test-web\r\n"


@dataclass
class Stack:
    servers: Servers
    sizes: str  # small size limits: 6 MiB bodies, 8 KiB headers
    slow: str  # 1 s header, body and keep-alive timeouts
    few: str  # at most 4 connections
    few_gateway: Gateway

    def client(self, **options: Any) -> openai.OpenAI:
        return openai.OpenAI(base_url=self.sizes, api_key="sk-test-web", max_retries=0,
                             **options)  # fmt: skip


@pytest.fixture(scope="module")
def stack() -> Iterator[Stack]:
    env = {"UPSTREAM_KEY": UPSTREAM_SECRET}
    with servers() as s:
        upstream = s.serve_app(mock_app(api_key=UPSTREAM_SECRET)) + "/v1"

        def serve(**limits: Any) -> tuple[str, Gateway]:
            gateway = Gateway(gateway_config(upstream, gateway=limits), environ=env)
            return s.serve_gateway(gateway), gateway

        sizes, _ = serve(max_body_bytes=6 * 1024 * 1024, max_header_bytes=8192)
        slow, _ = serve(header_timeout_s=1, body_timeout_s=1, keepalive_timeout_s=1)
        few, few_gateway = serve(max_connections=4)
        yield Stack(s, sizes, slow, few, few_gateway)


def connect(base: str) -> socket.socket:
    host, port = base.removeprefix("http://").removesuffix("/v1").split(":")
    sock = socket.create_connection((host, int(port)), timeout=BOUND_S)
    return sock


def answer(sock: socket.socket) -> tuple[int, dict[str, str], bytes]:
    """Read one answer (status, headers, body) and check the server then closes."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        assert chunk, f"closed without an answer after {data!r}"
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = dict(line.lower().split(": ", 1) for line in lines[1:])
    while len(body) < int(headers.get("content-length", "0")):
        chunk = sock.recv(65536)
        assert chunk
        body += chunk
    return int(lines[0].split()[1]), headers, body


def closed(sock: socket.socket) -> bool:
    """Whether the server closed (``recv`` gives ``b""`` or a reset) within the bound."""
    try:
        return sock.recv(65536) == b""
    except ConnectionResetError:
        return True


def openai_error(body: bytes) -> dict[str, Any]:
    error = json.loads(body)["error"]
    assert set(error) == {"message", "type", "param", "code"}
    return error  # type: ignore[no-any-return]


# -- the body's size and nesting ------------------------------------------------------


def test_a_declared_body_over_the_limit_is_a_413_before_it_is_read(stack: Stack) -> None:
    with connect(stack.sizes) as sock:
        sock.sendall(CHAT + b"content-type: application/json\r\ncontent-length: 52428800\r\n"
                     b"\r\n" + b'{"model": "mock-1", "messages": ' + b" " * 1000)  # fmt: skip
        status, headers, body = answer(sock)  # 1 KB of 50 MB sent: not waited for
        assert status == 413 and headers["connection"] == "close"
        assert openai_error(body)["code"] == "request_too_large"
        assert closed(sock)


def test_a_chunked_body_is_cut_off_when_it_passes_the_limit(stack: Stack) -> None:
    with connect(stack.sizes) as sock:
        sock.sendall(CHAT + b"transfer-encoding: chunked\r\n\r\n")
        piece = b" " * 65536
        for _ in range(6 * 16):  # 6 MiB: the limit, not past it
            sock.sendall(b"10000\r\n" + piece + b"\r\n")
        sock.sendall(b"10\r\n" + b" " * 16)  # past it (and nothing more: no reset)
        status, headers, body = answer(sock)
        assert status == 413 and headers["connection"] == "close"
        assert openai_error(body)["code"] == "request_too_large"


def test_a_body_within_the_limit_is_served(stack: Stack) -> None:
    reply = stack.client().chat.completions.create(  # 5 MB, all of it stripped, not sent
        model="mock-1", max_tokens=3, messages=HI, extra_body={"metadata": {"x": "x" * 5_000_000}}
    )
    assert reply.choices  # fmt: skip


def nested(depth: int) -> Any:
    value: Any = 1
    for i in range(depth):
        value = [value] if i % 2 else {"a": value}
    return value


@pytest.mark.parametrize(("body", "too_deep"), [
    (b'{"a": [1, {"b": 2}]}', False), (b"[" * 100_000, True), (b"[" * 5000 + b"]" * 5000, True),
    (json.dumps(nested(128)).encode(), False), (json.dumps(nested(129)).encode(), True),
    (json.dumps({"s": "[" * 1000}).encode(), False),  # brackets in a string are no depth
])  # fmt: skip
def test_json_nested_deeper_than_the_limit_is_refused(body: bytes, too_deep: bool) -> None:
    if too_deep:
        with pytest.raises(Refused) as caught:
            parse_json(body, 128)
        assert caught.value.status == 400
    else:
        assert parse_json(body, 128) == json.loads(body)


def test_depth_counts_containers() -> None:
    assert [json_depth_exceeds(v, 2) for v in (1, [], [[]], [[[]]], {"a": {"b": [1]}})] == [
        False, False, False, True, True]  # fmt: skip


def test_a_body_too_deep_is_a_400_in_openais_shape_never_a_500(stack: Stack) -> None:
    for raw in (b"[" * 100_000, json.dumps({"model": "mock-1", "messages": HI,
                                            "metadata": nested(200)}).encode()):  # fmt: skip
        with connect(stack.sizes) as sock:
            sock.sendall(CHAT + b"content-length: %d\r\n\r\n" % len(raw) + raw)
            status, _, body = answer(sock)
        assert status == 400
        assert "nested deeper than 128" in openai_error(body)["message"]
    ok = stack.client().chat.completions.create(model="mock-1", messages=HI, max_tokens=2,
                                                extra_body={"metadata": nested(120)})  # fmt: skip
    assert ok.choices


def test_an_error_quotes_only_a_short_prefix_of_a_bad_value(stack: Stack) -> None:
    client = stack.client()
    with pytest.raises(openai.BadRequestError) as caught:
        client.chat.completions.create(model="mock-1", messages="x" * 5_000_000,  # type: ignore[arg-type]
                                       max_tokens=3)  # fmt: skip
    assert len(caught.value.response.content) < 2000
    with pytest.raises(openai.BadRequestError) as caught:
        client.chat.completions.create(model="mock-1", messages=HI, max_tokens=3,
                                       extra_headers={"x-semisched-class": "y" * 7000})  # fmt: skip
    assert caught.value.code == "invalid_hint" and len(caught.value.response.content) < 2000


# -- the headers ----------------------------------------------------------------------


def test_headers_over_the_limit_are_a_431(stack: Stack) -> None:
    with connect(stack.sizes) as sock:  # all at once
        sock.sendall(b"GET /healthz HTTP/1.1\r\nhost: gw\r\nx-big: " + b"a" * 20_000 + b"\r\n\r\n")
        status, headers, body = answer(sock)
        assert status == 431 and headers["connection"] == "close"
        assert openai_error(body)["code"] == "headers_too_large"
    with connect(stack.sizes) as sock:  # a header that never ends
        sock.sendall(b"GET /healthz HTTP/1.1\r\nhost: gw\r\nx-big: ")
        sent = 0
        while not select.select([sock], [], [], 0.05)[0]:
            assert sent < 1_000_000, "never cut off"
            sock.sendall(b"a" * 2048)
            sent += 2048
        status, _, _ = answer(sock)
        assert status == 431


@pytest.mark.parametrize("length", [b"-5", b"abc", b"5, 6"])
def test_a_request_the_parser_cannot_read_is_a_400_in_openais_shape(
    stack: Stack, length: bytes
) -> None:
    with connect(stack.sizes) as sock:
        sock.sendall(CHAT + b"content-length: " + length + b"\r\n\r\n{}")
        status, headers, body = answer(sock)
        assert status == 400 and headers["connection"] == "close"
        assert openai_error(body)["code"] == "invalid_http"
        assert closed(sock)


def test_headers_within_the_limit_are_served(stack: Stack) -> None:
    with connect(stack.sizes) as sock:
        sock.sendall(b"GET /healthz HTTP/1.1\r\nhost: gw\r\nx-big: " + b"a" * 7000 + b"\r\n\r\n")
        status, _, _ = answer(sock)
        assert status == 200


# -- the timeouts ---------------------------------------------------------------------


def trickle(sock: socket.socket, data: bytes, every_s: float = 0.2) -> tuple[int, float]:
    """Send ``data`` a byte every ``every_s`` until the server answers or closes;
    return the bytes sent and the seconds it took."""
    start = time.monotonic()
    for sent in range(len(data)):
        if select.select([sock], [], [], every_s)[0]:
            return sent, time.monotonic() - start
        try:
            sock.sendall(data[sent : sent + 1])
        except (BrokenPipeError, ConnectionResetError):
            return sent, time.monotonic() - start
    return len(data), time.monotonic() - start


def timed_out(sock: socket.socket) -> bool:
    """A 408 in OpenAI's shape, or the connection simply closed."""
    try:
        data = sock.recv(65536)
    except ConnectionResetError:
        return True
    return data == b"" or data.startswith(b"HTTP/1.1 408 ")


def test_headers_sent_a_byte_at_a_time_are_cut_off(stack: Stack) -> None:
    head = b"GET /healthz HTTP/1.1\r\nhost: gw\r\nx-slow: " + b"a" * 200 + b"\r\n\r\n"
    with connect(stack.slow) as sock:  # 40 s of bytes for a 1 s limit
        sent, took = trickle(sock, head)
        assert sent < len(head) and took < BOUND_S
        assert timed_out(sock)


def test_a_connection_that_sends_nothing_is_closed(stack: Stack) -> None:
    with connect(stack.slow) as sock:
        start = time.monotonic()
        assert timed_out(sock)
        assert time.monotonic() - start < BOUND_S


def test_a_body_sent_slowly_is_a_408(stack: Stack) -> None:
    with connect(stack.slow) as sock:
        sock.sendall(CHAT + b"content-length: 1000\r\n\r\n" + b'{"model": ')
        sent, took = trickle(sock, b" " * 990)
        assert sent < 990 and took < BOUND_S
        status, _, body = answer(sock)
        assert status == 408 and openai_error(body)["code"] == "request_timeout"


def test_an_idle_keep_alive_connection_is_closed(stack: Stack) -> None:
    with connect(stack.slow) as sock:
        sock.sendall(b"GET /healthz HTTP/1.1\r\nhost: gw\r\n\r\n")
        data = b""
        while b'"ok"' not in data:
            data += sock.recv(65536)
        start = time.monotonic()
        assert closed(sock)
        assert time.monotonic() - start < BOUND_S


# -- the connections ------------------------------------------------------------------


def open_connections(stack: Stack) -> int:
    server = next(s for s in stack.servers.servers if getattr(s, "gateway", None)
                  is stack.few_gateway)  # fmt: skip
    return int(stack.servers.call(lambda: len(server.server_state.connections)))


def test_connections_over_the_limit_are_refused_at_once(stack: Stack) -> None:
    idle = [connect(stack.few) for _ in range(4)]  # each would wait 60 s for its headers
    try:
        wait_for(lambda: open_connections(stack) == 4, what="four open connections")
        with connect(stack.few) as extra:
            status, headers, body = answer(extra)
            assert status == 503 and headers["retry-after"] == "1"
            assert openai_error(body)["code"] == "too_many_connections"
            assert closed(extra)
        idle.pop().close()
        wait_for(lambda: open_connections(stack) == 3, what="one connection closed")
        with connect(stack.few) as sock:
            sock.sendall(b"GET /healthz HTTP/1.1\r\nhost: gw\r\n\r\n")
            assert answer(sock)[0] == 200
    finally:
        for sock in idle:
            sock.close()


# -- the configuration ----------------------------------------------------------------


@pytest.mark.parametrize(("field", "value"), [
    ("max_body_bytes", 0), ("max_body_bytes", "1MB"), ("max_json_depth", 0),
    ("max_json_depth", 10_000), ("max_header_bytes", 100), ("max_connections", True),
    ("header_timeout_s", 0), ("body_timeout_s", -1), ("keepalive_timeout_s", float("inf")),
])  # fmt: skip
def test_a_bad_limit_is_refused_naming_its_field(field: str, value: Any) -> None:
    data = {"gateway": {field: value},
            "endpoint": [{"name": "a", "base_url": "http://127.0.0.1:1/v1"}]}  # fmt: skip
    with pytest.raises(GatewayConfigError, match=f"{field}="):
        config_from_dict(data, auth=False)


def test_the_limits_have_documented_defaults_and_are_read_from_the_file() -> None:
    endpoint = {"endpoint": [{"name": "a", "base_url": "http://127.0.0.1:1/v1"}]}
    default = config_from_dict(endpoint, auth=False)
    assert (default.max_body_bytes, default.max_json_depth, default.max_header_bytes) == (
        16 * 1024 * 1024, 128, 32 * 1024)  # fmt: skip
    assert (default.header_timeout_s, default.body_timeout_s, default.keepalive_timeout_s,
            default.max_connections) == (60, 60, 75, 10_240)  # fmt: skip
    config = config_from_dict(
        {**endpoint, "gateway": {"max_body_bytes": 1024, "keepalive_timeout_s": 5}}, auth=False
    )
    assert config.max_body_bytes == 1024 and config.keepalive_timeout_s == 5


def refusals(base: str, reason: str) -> float:
    """``semisched_gateway_refused_connections_total{reason=...}`` on ``base``'s /metrics."""
    text = httpx2.get(base.removesuffix("/v1") + "/metrics").text
    line = f'semisched_gateway_refused_connections_total{{reason="{reason}"}} '
    return sum(float(row.split()[-1]) for row in text.splitlines() if row.startswith(line))


def test_what_the_limits_refuse_is_counted_by_reason(stack: Stack) -> None:
    before = refusals(stack.slow, "header_timeout"), refusals(stack.sizes, "invalid_http")
    with connect(stack.slow) as sock:  # sends nothing: cut off at the header timeout
        assert answer(sock)[0] == 408
    with connect(stack.sizes) as sock:
        sock.sendall(CHAT + b"content-length: nope\r\n\r\n")
        assert answer(sock)[0] == 400
    after = refusals(stack.slow, "header_timeout"), refusals(stack.sizes, "invalid_http")
    assert (after[0] - before[0], after[1] - before[1]) == (1, 1)
