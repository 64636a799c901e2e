"""Start ``python -m mockprovider`` as a child process on a free loopback port.

Used by the example, the live benchmark and the tests that need a real HTTP
server. The server is always stopped on exit from the context (terminate, then
kill after a grace period); its stderr is kept for error messages.

``running_server(*args)`` serves one endpoint and yields its ``/v1`` base URL;
``running_fleet(path)`` serves the fleet of a TOML file (``mockprovider.fleet``)
and yields each endpoint's base URL by name. Tests that need no real socket run
``mockprovider.fleet.create_fleet_app`` in-process instead (``httpx2.ASGITransport``).
"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping, Sequence

__all__ = ["free_port", "running_fleet", "running_process", "running_server", "stop_process"]


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that was free a moment ago (bind to port 0, read it, close)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


@contextlib.contextmanager
def running_server(
    *args: str, host: str = "127.0.0.1", startup_timeout_s: float = 30.0
) -> Iterator[str]:
    """Run the mock provider with extra CLI ``args``; yield its ``/v1`` base URL.

    Raises:
        RuntimeError: If the server exits or does not accept connections in time.
    """
    with _serving(args, host, startup_timeout_s) as root:
        yield f"{root}/v1"


@contextlib.contextmanager
def running_fleet(
    path: str | os.PathLike[str],
    *args: str,
    host: str = "127.0.0.1",
    startup_timeout_s: float = 30.0,
) -> Iterator[dict[str, str]]:
    """Run ``python -m mockprovider --fleet path``; yield each endpoint's base URL by name.

    The file is read here first (``mockprovider.fleet.load_fleet``), so a bad file raises
    its ``ValueError`` before any process starts. Extra ``args`` are server options
    (``--log-level``, ``--access-log``).

    Raises:
        ValueError: The fleet file is invalid.
        RuntimeError: If the server exits or does not accept connections in time.
    """
    from mockprovider.fleet import load_fleet

    fleet = load_fleet(path)
    with _serving(("--fleet", os.fspath(path), *args), host, startup_timeout_s) as root:
        yield {e.name: f"{root}{e.base_path}" for e in fleet}


@contextlib.contextmanager
def running_process(
    argv: Sequence[str],
    port: int,
    *,
    host: str = "127.0.0.1",
    startup_timeout_s: float = 30.0,
    env: Mapping[str, str] | None = None,
    stop_timeout_s: float = 10.0,
) -> Iterator[subprocess.Popen[bytes]]:
    """Run ``python *argv`` and wait until it accepts connections on ``host:port``.

    Yields the process; on exit it is terminated (killed after ``stop_timeout_s``).
    Used for the mock, and by the benchmarks and tests that start a server process.

    Raises:
        RuntimeError: It exited (its stderr's tail in the message), or did not accept
            connections within ``startup_timeout_s``.
    """
    command = [sys.executable, *argv]
    with tempfile.TemporaryFile() as log:
        proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=log,
                                env=None if env is None else dict(env))  # fmt: skip
        try:
            deadline = time.monotonic() + startup_timeout_s
            while True:
                if proc.poll() is not None:
                    log.seek(0)
                    raise RuntimeError(
                        f"{' '.join(argv[:2])} exited with {proc.returncode}: "
                        f"{log.read().decode(errors='replace')[-2000:]}"
                    )
                try:
                    with socket.create_connection((host, port), timeout=0.5):
                        break
                except OSError:
                    if time.monotonic() > deadline:
                        raise RuntimeError(
                            f"{' '.join(argv[:2])} did not accept connections on {host}:{port} "
                            f"within {startup_timeout_s}s"
                        ) from None
                    time.sleep(0.05)  # bounded start-up wait for a child process
            yield proc
        finally:
            stop_process(proc, stop_timeout_s)


def stop_process(proc: subprocess.Popen[bytes], timeout_s: float = 10.0) -> None:
    """Stop ``proc``: SIGTERM, then SIGKILL if it has not exited within ``timeout_s``;
    reaped either way (a no-op for one that already exited)."""
    if proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


@contextlib.contextmanager
def _serving(args: tuple[str, ...], host: str, startup_timeout_s: float) -> Iterator[str]:
    """Run the server with ``args`` on a free port; yield ``http://host:port``."""
    port = free_port(host)
    argv = ["-m", "mockprovider", "--host", host, "--port", str(port), *args]
    with running_process(argv, port, host=host, startup_timeout_s=startup_timeout_s):
        yield f"http://{host}:{port}"
