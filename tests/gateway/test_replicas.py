"""Two gateway processes share one upstream limit through a real Redis: the upstream
never answers 429, though each replica alone would have sent past it."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx2
import pytest
from gateway_kit import UPSTREAM_SECRET, mock_app, servers, wait_for

from bench.redis_server import RedisServer, server_binary
from mockprovider.launch import free_port
from semisched.gateway.keys import key_hash

pytestmark = pytest.mark.wallclock

BODY = {"model": "mock-1", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 3}
RPM = 12  # per 6 wall seconds: the mock's virtual minute at time scale 10


@pytest.fixture
def redis_url(tmp_path: Path) -> Iterator[str]:
    server = RedisServer(server_binary(), tmp_path)
    server.start()
    try:
        yield server.url
    finally:
        server.stop()


def config(tmp_path: Path, upstream: str) -> Path:
    path = tmp_path / "gateway.toml"
    path.write_text(
        f"[budget]\nrpm = {RPM}\nwindow_s = 6.0\nadapt = false\n"
        f'[[tenant]]\nname = "web"\nkey_sha256 = "{key_hash("sk-test-web")}"\n'
        f'[[endpoint]]\nname = "mock"\nbase_url = "{upstream}"\nkey_env = "UPSTREAM_KEY"\n'
        # The mock's headers count per virtual minute (6 wall seconds): the fleet
        # budget above keeps its limit, the endpoint must not read them per wall minute.
        "learn_limits = false\n"
    )
    return path


def start_replicas(
    path: Path, redis_url: str, count: int = 2
) -> tuple[list[int], list[subprocess.Popen[bytes]]]:
    """``count`` `semisched serve` processes on ``path`` and one Redis, each accepting
    connections (their ports, and the processes: the caller stops them)."""
    env = {**os.environ, "UPSTREAM_KEY": UPSTREAM_SECRET}
    ports = [free_port() for _ in range(count)]
    procs = [subprocess.Popen([sys.executable, "-m", "semisched", "serve", "--config", str(path),
                               "--port", str(p), "--state", redis_url, "--log-level", "warning"],
                              env=env, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL) for p in ports]  # fmt: skip
    for port, proc in zip(ports, procs, strict=True):
        wait_for(lambda p=port, c=proc: accepting(p) or c.poll() is not None, 60)
        assert proc.poll() is None
    return ports, procs


def accepting(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
    except OSError:
        return False
    return True


@pytest.mark.timeout(200)  # the second half of the load waits for the shared window
def test_two_replicas_on_one_key_never_draw_a_429(tmp_path: Path, redis_url: str) -> None:
    with servers() as s:
        app = mock_app(api_key=UPSTREAM_SECRET, rpm=RPM)
        upstream = s.serve_app(app) + "/v1"
        ports, procs = start_replicas(config(tmp_path, upstream), redis_url)
        try:
            start = time.monotonic()

            def call(i: int) -> int:
                url = f"http://127.0.0.1:{ports[i % 2]}/v1/chat/completions"
                auth = {"authorization": "Bearer sk-test-web"}
                return httpx2.post(url, json=BODY, timeout=240, headers=auth).status_code

            with ThreadPoolExecutor(12) as pool:
                codes = list(pool.map(call, range(2 * RPM)))
            took = time.monotonic() - start
        finally:
            for proc in procs:
                proc.send_signal(signal.SIGTERM)
            for proc in procs:
                proc.wait(60)
    counters = app.state.mock_stats().counters
    assert codes == [200] * (2 * RPM)
    assert counters.rate_limited_requests == 0  # the shared budget kept both under the limit
    assert took > 6.0  # the second half waited for the window: neither replica sent it early
