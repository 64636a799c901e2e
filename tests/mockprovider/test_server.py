"""The mock provider's configuration, command line and real server (mockprovider.__main__).

The end-to-end test serves the app with uvicorn in a subprocess (``python -m mockprovider``) on
127.0.0.1: it needs real sockets and a real clock, so it is marked ``wallclock``.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from dataclasses import fields
from pathlib import Path
from typing import Any

import openai
import pytest

from mockprovider import MockConfig, MockStats
from mockprovider.__main__ import build_parser, config_from_args, main
from mockprovider.gate import GateConfig

MESSAGES: Any = [{"role": "user", "content": "Say something."}]
REPO = Path(__file__).resolve().parents[2]  # `-m mockprovider` runs this checkout's package


# -- configuration and command line ---------------------------------------------------------


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("time_scale", 0.0),
        ("time_scale", float("inf")),
        ("rpm", 0),
        ("tpm", 1.5),
        ("quota_tokens", -3),
        ("rate_window", "leaky"),
        ("api_key", ""),
        ("error_rate", 1.5),
        ("hang_rate", -0.1),
        ("drop_rate", True),
        ("capacity_loss", (1.0, 2.0)),
        ("capacity_loss", (-1.0, 0.5)),
        ("outages", ((2.0, 1.0),)),
        ("outages", [(1.0, 2.0)]),
        ("seed", 1.5),
        ("default_output_tokens", -1),
        ("model", ""),
        ("physics", "default"),
        ("context_tokens", 0),
        ("context_tokens", 4096.0),
    ],
)
def test_config_validation_names_the_field(field: str, value: object) -> None:
    with pytest.raises(ValueError, match=field):
        MockConfig(**{field: value})  # type: ignore[arg-type]


def test_config_rejects_fault_rates_above_one_in_total() -> None:
    with pytest.raises(ValueError, match="must not exceed 1"):
        MockConfig(error_rate=0.5, hang_rate=0.5, drop_rate=0.1)


def test_gate_config_carries_every_gate_field_with_minute_windows() -> None:
    config = MockConfig(
        rpm=7,
        tpm=900,
        rate_window="fixed",
        quota_tokens=5000,
        error_rate=0.1,
        hang_rate=0.2,
        drop_rate=0.3,
        seed=11,
        outages=((5.0, 6.0),),
    )
    gate = config.gate_config()
    assert gate.window_s == 60.0
    for f in fields(GateConfig):
        if f.name != "window_s":
            assert getattr(gate, f.name) == getattr(config, f.name), f.name


def test_cli_help_and_bad_values(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(["--help"])
    assert info.value.code == 0
    assert "--time-scale" in capsys.readouterr().out
    for argv, message in [
        (["--time-scale", "-2"], "must be a finite number > 0"),
        (["--error-rate", "2"], "must be a number in [0, 1]"),
        (["--capacity-loss", "soon"], "TIME:FRACTION"),
        (["--outage", "120:60"], "START:END"),
        (["--outage", "-1:5"], "START:END"),
        (["--outage", "60"], "START:END"),
        (["--outage", "60:inf"], "START:END"),
        (["--profile", "nope"], "invalid choice"),
        (["--api-key-env", "MOCKPROVIDER_TEST_UNSET_VARIABLE"], "unset"),
        (["--error-rate", "0.6", "--drop-rate", "0.6"], "must not exceed 1"),
    ]:
        with pytest.raises(SystemExit) as info:
            main(argv)
        assert info.value.code == 2
        assert message in capsys.readouterr().err
    args = build_parser().parse_args(["--capacity-loss", "30:0.5", "--rpm", "60"])
    assert args.capacity_loss == (30.0, 0.5)
    assert args.rpm == 60


def test_cli_outages_are_repeatable_windows() -> None:
    parser = build_parser()
    args = parser.parse_args(["--outage", "60:120", "--outage", "300:330.5", "--seed", "3"])
    config = config_from_args(args, parser)
    assert config.outages == ((60.0, 120.0), (300.0, 330.5))
    assert config.seed == 3
    assert config_from_args(parser.parse_args([]), parser) == MockConfig()  # its own defaults


def test_cli_context_window() -> None:
    parser = build_parser()
    config = config_from_args(parser.parse_args(["--context-tokens", "4096"]), parser)
    assert config.context_tokens == 4096
    assert MockConfig().context_tokens == 131_072
    assert "--context-tokens" in parser.format_help()


# -- the real server ------------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _wait_until_accepting(port: int, process: subprocess.Popen[bytes], deadline_s: float) -> None:
    deadline = time.monotonic() + deadline_s
    while True:
        assert process.poll() is None, "the server exited during startup"
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)  # bounded connect retries while uvicorn starts


def _stats(port: int) -> MockStats:
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}/v1/mock/stats", headers={"authorization": "Bearer sk-test"}
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        return MockStats.from_json(json.load(response))


@pytest.mark.wallclock
@pytest.mark.anyio
async def test_uvicorn_server_end_to_end() -> None:
    port = _free_port()
    env = {**os.environ, "MOCKPROVIDER_TEST_KEY": "sk-test"}
    command = [sys.executable, "-m", "mockprovider", "--port", str(port), "--time-scale", "100"]
    command += ["--api-key-env", "MOCKPROVIDER_TEST_KEY", "--log-level", "warning"]
    process = subprocess.Popen(
        command, cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    try:
        _wait_until_accepting(port, process, deadline_s=20.0)
        async with openai.AsyncOpenAI(
            base_url=f"http://127.0.0.1:{port}/v1", api_key="sk-test", max_retries=0
        ) as client:
            result = await client.chat.completions.create(
                model="m", messages=MESSAGES, extra_headers={"x-mock-output-tokens": "20"}
            )
            assert result.usage is not None
            assert result.usage.completion_tokens == 20
            stream = await client.chat.completions.create(
                model="m", messages=MESSAGES, max_tokens=6, stream=True
            )
            text = "".join([c.choices[0].delta.content or "" async for c in stream])
            assert text == "lorem ipsum dolor sit amet consectetur"
            # Over a real socket a dropped connection is an incomplete read.
            with pytest.raises(openai.APIConnectionError):
                await client.chat.completions.create(
                    model="m", messages=MESSAGES, extra_headers={"x-mock-fault": "drop"}
                )
        stats = _stats(port)
    finally:
        process.terminate()
        try:
            _, stderr = process.communicate(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            _, stderr = process.communicate()
    assert stats.time_scale == 100.0
    assert (stats.counters.requests, stats.counters.completed) == (3, 3)
    assert stats.counters.faults_drop == 1
    log = stderr.decode(errors="replace")
    assert "sk-test" not in log
    assert "Traceback" not in log  # the deliberate drop is not logged as a crash
