"""The official ``openai`` npm package calls the gateway, streaming and not: chat
completions (``check.mjs``), the Responses API and embeddings (``responses.mjs``).

Needs Node and the package installed beside the script:
``npm ci --prefix tests/gateway/node`` (CI runs it); skipped otherwise, saying so.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
from gateway_kit import UPSTREAM_SECRET, gateway_config, mock_app, servers

from semisched.gateway.app import Gateway

pytestmark = pytest.mark.wallclock

NODE = Path(__file__).resolve().parent / "node"


def run_node(script: str) -> dict[str, Any]:
    """Run ``script`` of :data:`NODE` against a gateway over the mock; what it printed."""
    node = shutil.which("node")
    if node is None:
        pytest.skip("node is not installed")
    if not (NODE / "node_modules" / "openai").is_dir():
        pytest.skip("the openai npm package is not installed: npm ci --prefix tests/gateway/node")
    with servers() as s:
        upstream = s.serve_app(mock_app(api_key=UPSTREAM_SECRET)) + "/v1"
        gateway = Gateway(gateway_config(upstream), environ={"UPSTREAM_KEY": UPSTREAM_SECRET})
        base = s.serve_gateway(gateway)
        done = subprocess.run([node, str(NODE / script), base, "sk-test-web"],
                              capture_output=True, text=True, timeout=120)  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    seen: dict[str, Any] = json.loads(done.stdout)
    return seen


def test_the_node_openai_client_gets_answers_and_streams() -> None:
    seen = run_node("check.mjs")
    assert seen["content"] and seen["completion_tokens"] == 5
    assert seen["chunks"] > 1 and seen["text"].startswith("lorem")
    assert seen["stream_completion_tokens"] == 5
    assert seen["unauthorized"] == {"status": 401, "code": "invalid_api_key"}


def test_the_node_openai_client_calls_the_responses_api_and_embeddings() -> None:
    seen = run_node("responses.mjs")
    assert seen["status"] == "completed" and seen["output_tokens"] == 5
    assert len(seen["output_text"].split()) == 5
    assert seen["types"][0] == "response.created" and seen["last_type"] == "response.completed"
    assert seen["types"].count("response.output_text.delta") > 1
    assert seen["text"] == seen["stream_output_text"] == seen["output_text"]
    assert seen["stream_output_tokens"] == 5
    assert seen["capped"] == {"status": "incomplete", "output_tokens": 2}
    assert seen["embeddings"] == [8, 8] and seen["embedding_tokens"] > 0
    assert seen["refused"] == {"status": 400, "code": "invalid_value", "param": "stream"}
