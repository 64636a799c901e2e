"""SIGTERM drains a real ``semisched serve`` process: it stops accepting, answers what is
queued with 503 and ``Retry-After``, lets what is in flight finish, then exits."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import httpx2
import pytest
from gateway_kit import UPSTREAM_SECRET, Capture, mock_app, servers, wait_for

from mockprovider.launch import free_port
from semisched.gateway.keys import key_hash

pytestmark = pytest.mark.wallclock

BODY = {"model": "mock-1", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 3}


def gateway_file(tmp_path: Path, upstream: str) -> Path:
    path = tmp_path / "gateway.toml"
    path.write_text(
        "[gateway]\nmax_inflight = 1\ngrace_s = 30\n"
        f'[[tenant]]\nname = "web"\nkey_sha256 = "{key_hash("sk-test-web")}"\n'
        f'[[endpoint]]\nname = "mock"\nbase_url = "{upstream}"\nkey_env = "UPSTREAM_KEY"\n'
    )
    return path


def post(base: str, out: list[httpx2.Response]) -> threading.Thread:
    def run() -> None:
        out.append(httpx2.post(f"{base}/chat/completions", json=BODY, timeout=60,
                               headers={"authorization": "Bearer sk-test-web"}))  # fmt: skip

    thread = threading.Thread(target=run)
    thread.start()
    return thread


def refused(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=2).close()
    except OSError:
        return True
    return False


def test_sigterm_answers_the_queued_503_and_lets_the_in_flight_finish(tmp_path: Path) -> None:
    with servers() as s:
        capture = Capture(mock_app(api_key=UPSTREAM_SECRET))
        upstream = s.serve_app(capture) + "/v1"
        port = free_port()
        env: dict[str, Any] = {**os.environ, "UPSTREAM_KEY": UPSTREAM_SECRET}
        log = (tmp_path / "stderr").open("wb")
        proc = subprocess.Popen(
            [sys.executable, "-m", "semisched", "serve", "--config",
             str(gateway_file(tmp_path, upstream)), "--port", str(port), "--log-level", "warning"],
            env=env, stdout=subprocess.DEVNULL, stderr=log,
        )  # fmt: skip
        try:
            wait_for(lambda: not refused(port) or proc.poll() is not None, 60, "the gateway")
            assert proc.poll() is None, (tmp_path / "stderr").read_text()
            base = f"http://127.0.0.1:{port}/v1"
            capture.open.clear()
            in_flight: list[httpx2.Response] = []
            queued: list[httpx2.Response] = []
            first = post(base, in_flight)
            wait_for(lambda: len(capture.bodies) == 1, what="one request in flight")
            second = post(base, queued)
            wait_for(lambda: httpx2.get(f"http://127.0.0.1:{port}/semisched/status")
                     .json()["queued_by_class"]["interactive"] == 1, what="one queued")  # fmt: skip
            proc.send_signal(signal.SIGTERM)
            second.join(60)
            assert queued[0].status_code == 503
            assert queued[0].headers["retry-after"] == "1"
            assert queued[0].json()["error"]["code"] == "shutting_down"
            assert refused(port)  # it stopped accepting
            assert proc.poll() is None  # still draining: one call in flight
            capture.open.set()
            first.join(60)
            assert in_flight[0].status_code == 200 and in_flight[0].json()["choices"]
            assert proc.wait(60) in (0, -signal.SIGTERM)  # uvicorn re-raises the signal
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            log.close()
            capture.open.set()
    assert len(capture.bodies) == 1  # the queued one was never sent
