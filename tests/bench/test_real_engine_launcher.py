"""The llama-server launcher: its command line, and its start/health/stop cycle on a stand-in
binary (a small Python HTTP server that answers /health the way llama-server does, once its
"model" has loaded). No engine, no build."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from bench.real_engine.launcher import (
    EngineStartError,
    LlamaServer,
    ServerOptions,
    server_command,
)

FAKE_SERVER = """#!{python}
import http.server, sys, time
args = sys.argv[1:]
port = int(args[args.index("--port") + 1])
time.sleep(0.5)  # the model loads
class Health(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200 if self.path == "/health" else 404)
        self.end_headers()
        self.wfile.write(b'{{"status":"ok"}}')
    def log_message(self, *a):
        pass
print("listening", port, flush=True)
http.server.HTTPServer(("127.0.0.1", port), Health).serve_forever()
"""


def _options(binary: Path, **kw: object) -> ServerOptions:
    return ServerOptions(binary=binary, model=binary.with_name("model.gguf"), **kw)  # type: ignore[arg-type]


def test_the_command_serves_on_loopback_with_the_slots_and_a_cache_per_slot() -> None:
    options = _options(Path("/opt/llama-server"), parallel=6, ctx_per_slot=1024, threads=2)
    command = server_command(options, 18123)
    assert command[:3] == ["nice", "-n", "10"] and command[3] == "/opt/llama-server"

    def value(flag: str) -> str:
        return command[command.index(flag) + 1]

    assert (value("--host"), value("--port")) == ("127.0.0.1", "18123")
    assert value("--parallel") == "6" and value("--ctx-size") == "6144"
    assert value("--model") == "/opt/model.gguf" and value("--threads") == "2"
    assert {"--no-kv-unified", "--cont-batching", "--no-cache-prompt", "--no-webui"} <= set(command)


def test_nice_zero_runs_the_binary_itself_and_extra_arguments_come_last() -> None:
    command = server_command(_options(Path("/bin/srv"), nice=0, extra=("--metrics",)), 1)
    assert command[0] == "/bin/srv" and command[-1] == "--metrics"


@pytest.mark.parametrize(("field", "value"), [("parallel", 0), ("threads", 1.5), ("nice", 20)])
def test_bad_options_name_their_field(field: str, value: object) -> None:
    with pytest.raises(ValueError, match=field):
        _options(Path("/bin/srv"), **{field: value})


@pytest.mark.wallclock
def test_the_server_is_healthy_before_start_returns_and_gone_after_stop(tmp_path: Path) -> None:
    binary = tmp_path / "llama-server"
    binary.write_text(FAKE_SERVER.format(python=sys.executable))
    binary.chmod(0o755)
    server = LlamaServer(_options(binary, nice=0), start_timeout_s=60.0)
    with server:
        assert server._healthy()
        assert server.base_url == f"http://127.0.0.1:{server.port}/v1"
        process = server._process
    assert process is not None and process.poll() is not None  # stopped, reaped
    assert "stopped" in repr(server)


@pytest.mark.wallclock
def test_a_server_that_exits_fails_the_start_with_its_log(tmp_path: Path) -> None:
    binary = tmp_path / "llama-server"
    binary.write_text("#!/bin/sh\necho 'error: failed to load model' \nexit 3\n")
    binary.chmod(0o755)
    with pytest.raises(EngineStartError, match=r"exited with 3(.|\n)*failed to load model"):
        LlamaServer(_options(binary, nice=0), start_timeout_s=60.0).start()
