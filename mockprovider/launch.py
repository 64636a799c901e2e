"""Start ``python -m mockprovider`` as a child process on a free loopback port.

Used by the example, the live benchmark and the tests that need a real HTTP
server. The server is always stopped on exit from the context (terminate, then
kill after a grace period); its stderr is kept for error messages.
"""

from __future__ import annotations

import contextlib
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator

__all__ = ["free_port", "running_server"]


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
    port = free_port(host)
    command = [sys.executable, "-m", "mockprovider", "--host", host, "--port", str(port), *args]
    with tempfile.TemporaryFile() as log:
        proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=log)
        try:
            deadline = time.monotonic() + startup_timeout_s
            while True:
                if proc.poll() is not None:
                    log.seek(0)
                    raise RuntimeError(
                        f"mock provider exited with {proc.returncode}: "
                        f"{log.read().decode(errors='replace')[-2000:]}"
                    )
                try:
                    with socket.create_connection((host, port), timeout=0.5):
                        break
                except OSError:
                    if time.monotonic() > deadline:
                        raise RuntimeError(
                            f"mock provider did not accept connections on {host}:{port} "
                            f"within {startup_timeout_s}s"
                        ) from None
                    time.sleep(0.05)  # bounded start-up wait for a child process
            yield f"http://{host}:{port}/v1"
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
