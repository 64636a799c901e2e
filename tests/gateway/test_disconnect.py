"""A client that disconnects cancels its request: a queued one is never sent, one in
flight has its upstream call closed, and the metrics count both as cancelled."""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator
from typing import Any

import httpx2
import pytest
from gateway_kit import (
    UPSTREAM_SECRET,
    Capture,
    Servers,
    gateway_config,
    mock_app,
    servers,
    wait_for,
)

from semisched.gateway.app import Gateway

pytestmark = pytest.mark.wallclock


def raw_request(base: str, body: dict[str, Any]) -> socket.socket:
    """Send one chat request on a raw socket (so the test decides when it disconnects)."""
    host, port = base.removeprefix("http://").split("/")[0].split(":")
    data = json.dumps(body).encode()
    sock = socket.create_connection((host, int(port)))
    sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\n"
                 b"authorization: Bearer sk-test-web\r\ncontent-type: application/json\r\n"
                 b"content-length: " + str(len(data)).encode() + b"\r\n\r\n" + data)  # fmt: skip
    return sock


def chat(text: str, **extra: Any) -> dict[str, Any]:
    return {"model": "mock-1", "messages": [{"role": "user", "content": text}],
            "max_tokens": 3, **extra}  # fmt: skip


class Stack:
    def __init__(self, s: Servers, capture: Capture, gateway: Gateway, base: str) -> None:
        self.servers, self.capture, self.gateway, self.base = s, capture, gateway, base

    def status(self) -> dict[str, Any]:
        return httpx2.get(self.base.removesuffix("/v1") + "/semisched/status").json()

    def cancelled_metric(self) -> float:
        text = httpx2.get(self.base.removesuffix("/v1") + "/metrics").text
        return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
                   if line.startswith("semisched_requests_total{") and 'outcome="cancelled"'
                   in line)  # fmt: skip


@pytest.fixture
def stack() -> Iterator[Stack]:
    with servers() as s:
        capture = Capture(mock_app(api_key=UPSTREAM_SECRET, time_scale=1.0))
        upstream = s.serve_app(capture) + "/v1"
        gateway = Gateway(gateway_config(upstream, gateway={"max_inflight": 1}),
                          environ={"UPSTREAM_KEY": UPSTREAM_SECRET})  # fmt: skip
        yield Stack(s, capture, gateway, s.serve_gateway(gateway))


def post_in_thread(base: str, body: dict[str, Any], out: list[httpx2.Response]) -> threading.Thread:
    def post() -> None:
        out.append(httpx2.post(f"{base}/chat/completions", json=body, timeout=60,
                               headers={"authorization": "Bearer sk-test-web"}))  # fmt: skip

    thread = threading.Thread(target=post)
    thread.start()
    return thread


def test_a_queued_request_whose_client_left_is_never_sent(stack: Stack) -> None:
    stack.capture.open.clear()  # the upstream holds what it gets: one in flight, the rest queue
    answers: list[httpx2.Response] = []
    first = post_in_thread(stack.base, chat("first"), answers)
    wait_for(lambda: len(stack.capture.bodies) == 1, what="the first request upstream")
    left = raw_request(stack.base, chat("left"))
    wait_for(lambda: stack.status()["queues"].get("web", {}).get("interactive", {})
             .get("queued") == 1, what="the second request queued")  # fmt: skip
    left.close()
    wait_for(lambda: stack.status()["cancelled"]["queued"] == 1, what="its cancellation")
    stack.capture.open.set()
    first.join(60)
    last = post_in_thread(stack.base, chat("last"), answers)
    last.join(60)
    assert [a.status_code for a in answers] == [200, 200]
    sent = [b["messages"][0]["content"] for b in stack.capture.bodies]
    assert sent == ["first", "last"]  # "left" never reached the upstream
    assert stack.cancelled_metric() == 1


def test_a_request_in_flight_whose_client_left_has_its_upstream_call_closed(
    stack: Stack,
) -> None:
    stack.capture.open.clear()
    left = raw_request(stack.base, chat("left"))
    wait_for(lambda: stack.status()["inflight"] == 1, what="the request in flight")
    left.close()
    wait_for(lambda: stack.capture.disconnected == 1, what="the upstream call closed")
    wait_for(lambda: stack.status()["inflight"] == 0, what="its send opportunity freed")
    assert stack.status()["cancelled"] == {"queued": 0, "in_flight": 1}
    assert stack.cancelled_metric() == 1


def test_a_stream_whose_client_left_is_closed_upstream(stack: Stack) -> None:
    app_stats = stack.capture.app.state.mock_stats
    left = raw_request(stack.base, chat("left", max_tokens=400, stream=True))
    received = b""
    while b"data: " not in received:  # the first chunk has come through
        received += left.recv(4096)
    left.close()
    wait_for(lambda: app_stats().counters.client_cancelled == 1, what="the upstream stream closed")
    wait_for(lambda: stack.status()["cancelled"]["in_flight"] == 1, what="counted")
    assert app_stats().counters.completed == 0
    wait_for(lambda: stack.cancelled_metric() == 1, what="the metric")
