"""Start and stop llama.cpp's ``llama-server`` for tests and benchmarks.

`LlamaServer` runs one server as a child process on ``127.0.0.1`` and a free
port, waits until ``GET /health`` answers 200 (the model is loaded), and stops it
(SIGTERM, then SIGKILL after a grace period). Use it as a context manager:

```python
with LlamaServer(ServerOptions(binary=..., model=..., parallel=8)) as server:
    server.base_url  # http://127.0.0.1:PORT/v1
```

`server_command` is the command line alone, so a test checks it without a build.

What it is not: no build (`bench.real_engine.setup`), no requests beyond the
health check, no restart.
"""

from __future__ import annotations

import socket
import subprocess
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType

from mockprovider.launch import stop_process

__all__ = [
    "DEFAULT_BATCH",
    "EngineStartError",
    "LlamaServer",
    "ServerOptions",
    "free_port",
    "server_command",
]


#: llama-server's default ``--batch-size``: the most tokens (prompt and decode) of one step.
DEFAULT_BATCH = 512


class EngineStartError(RuntimeError):
    """The server exited or did not become healthy in time (its log's tail attached)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ServerOptions:
    """How one ``llama-server`` runs.

    Attributes:
        binary: The ``llama-server`` executable.
        model: The GGUF model file.
        parallel: Slots (``--parallel``): sequences decoded together by continuous batching.
        ctx_per_slot: Context tokens per slot; the KV cache holds ``parallel`` times this
            (``--ctx-size``), one part per slot (``--no-kv-unified``). Measured once here,
            8 requests of 500 prompt and 600 output tokens: 44 ms a step with a part per
            slot, 54 ms with one buffer shared by all slots.
        threads: CPU threads for decoding and prompt processing. 1 by default: on this
            shared 2-core machine two threads meet at a barrier every step and wait for
            whichever was descheduled; the same 8 requests took 263 ms a step with two.
        batch: Logical batch (``--batch-size``): tokens (prompt and decode) in one step.
        ubatch: Physical batch (``--ubatch-size``).
        nice: Niceness of the process (the machine is shared; 0 leaves it alone).
        extra: More arguments, appended as given.
    """

    binary: Path
    model: Path
    parallel: int = 8
    ctx_per_slot: int = 2048
    threads: int = 1
    batch: int = DEFAULT_BATCH
    ubatch: int = DEFAULT_BATCH
    nice: int = 10
    extra: tuple[str, ...] = field(default=())

    def __post_init__(self) -> None:
        for name in ("parallel", "ctx_per_slot", "threads", "batch", "ubatch"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name}={value!r} must be an integer >= 1")
        if not 0 <= self.nice <= 19:
            raise ValueError(f"nice={self.nice!r} must be in 0..19")


def server_command(options: ServerOptions, port: int) -> list[str]:
    """The command line that serves ``options`` on ``127.0.0.1:port``."""
    command = [
        str(options.binary),
        *("--model", str(options.model)),
        *("--host", "127.0.0.1", "--port", str(port)),
        *("--parallel", str(options.parallel), "--no-kv-unified", "--cont-batching"),
        *("--ctx-size", str(options.parallel * options.ctx_per_slot)),
        *("--threads", str(options.threads), "--threads-batch", str(options.threads)),
        *("--batch-size", str(options.batch), "--ubatch-size", str(options.ubatch)),
        *("--no-webui", "--no-cache-prompt", "--cache-ram", "0", "--no-warmup"),
        *options.extra,
    ]
    if options.nice:
        command = ["nice", "-n", str(options.nice), *command]
    return command


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class LlamaServer:
    """One ``llama-server`` child process (module docstring).

    Args:
        options: How it runs.
        log: Where its output goes (default: a file beside the model, ``llama-server.log``).
        start_timeout_s: Longest wait for ``/health`` before `start` gives up.
    """

    def __init__(
        self, options: ServerOptions, *, log: Path | None = None, start_timeout_s: float = 120.0
    ) -> None:
        self.options = options
        self.log = log if log is not None else options.model.with_name("llama-server.log")
        self.start_timeout_s = start_timeout_s
        self.port: int | None = None
        self._process: subprocess.Popen[bytes] | None = None

    def __repr__(self) -> str:
        state = "stopped" if self._process is None else f"running on port {self.port}"
        return f"<LlamaServer {self.options.model.name} parallel={self.options.parallel} {state}>"

    @property
    def url(self) -> str:
        if self.port is None:
            raise RuntimeError("the server is not running")
        return f"http://127.0.0.1:{self.port}"

    @property
    def base_url(self) -> str:
        """The OpenAI-compatible base URL (``.../v1``)."""
        return f"{self.url}/v1"

    def start(self) -> LlamaServer:
        """Start the process and wait until it is healthy.

        Raises:
            EngineStartError: It exited or was not healthy within ``start_timeout_s``.
        """
        if self._process is not None:
            raise RuntimeError("the server is already running")
        self.port = free_port()
        command = server_command(self.options, self.port)
        with open(self.log, "wb") as sink:
            self._process = subprocess.Popen(
                command, stdout=sink, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
            )
        deadline = time.monotonic() + self.start_timeout_s
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                self._fail(f"llama-server exited with {self._process.returncode}")
            if self._healthy():
                return self
            time.sleep(0.2)
        self._fail(f"llama-server was not healthy within {self.start_timeout_s:.0f} s")
        raise AssertionError("unreachable")

    def _healthy(self) -> bool:
        try:
            with urllib.request.urlopen(f"{self.url}/health", timeout=2.0) as answer:
                return bool(answer.status == 200)
        except (urllib.error.URLError, OSError):
            return False

    def _fail(self, why: str) -> None:
        self.stop()
        tail = self.log.read_text(errors="replace").splitlines()[-15:] if self.log.exists() else []
        raise EngineStartError("\n".join([f"{why}; log {self.log}:", *tail]))

    def stop(self, grace_s: float = 10.0) -> None:
        """Stop the process (SIGTERM, SIGKILL after ``grace_s``); idempotent."""
        process, self._process = self._process, None
        if process is not None:
            stop_process(process, grace_s)

    def __enter__(self) -> LlamaServer:
        return self.start()

    def __exit__(
        self,
        kind: type[BaseException] | None,
        value: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()
