"""The official ``openai`` npm package calls the gateway, streaming and not.

Needs Node and the package installed beside the script:
``npm ci --prefix tests/gateway/node`` (CI runs it); skipped otherwise, saying so.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
from gateway_kit import UPSTREAM_SECRET, gateway_config, mock_app, servers

from semisched.gateway.app import Gateway

pytestmark = pytest.mark.wallclock

NODE = Path(__file__).resolve().parent / "node"


def test_the_node_openai_client_gets_answers_and_streams() -> None:
    node = shutil.which("node")
    if node is None:
        pytest.skip("node is not installed")
    if not (NODE / "node_modules" / "openai").is_dir():
        pytest.skip("the openai npm package is not installed: npm ci --prefix tests/gateway/node")
    with servers() as s:
        upstream = s.serve_app(mock_app(api_key=UPSTREAM_SECRET)) + "/v1"
        gateway = Gateway(gateway_config(upstream), environ={"UPSTREAM_KEY": UPSTREAM_SECRET})
        base = s.serve_gateway(gateway)
        done = subprocess.run([node, str(NODE / "check.mjs"), base, "sk-test-web"],
                              capture_output=True, text=True, timeout=120)  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    seen = json.loads(done.stdout)
    assert seen["content"] and seen["completion_tokens"] == 5
    assert seen["chunks"] > 1 and seen["text"].startswith("lorem")
    assert seen["stream_completion_tokens"] == 5
    assert seen["unauthorized"] == {"status": 401, "code": "invalid_api_key"}
