"""Nothing one request does ends the gateway: a request that fails inside it is answered 500
and the next is served; a scheduler that stopped makes ``/healthz`` say 503; a drain past its
grace answers what is left in OpenAI's shape (JSON 503, a stream's error event), and the log
says what happened."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx2
import pytest
from gateway_kit import (
    UPSTREAM_SECRET,
    Capture,
    Servers,
    gateway_config,
    mock_app,
    servers,
    wait_for,
)

from mockprovider.launch import free_port
from semisched.gateway.app import Gateway
from semisched.gateway.keys import key_hash
from semisched.gateway.params import RequestChecks

pytestmark = pytest.mark.wallclock

AUTH = {"authorization": "Bearer sk-test-web"}
BODY = {"model": "mock-1", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 3}


@pytest.fixture
def served() -> Iterator[tuple[Servers, Gateway, str, Capture]]:
    with servers() as s:
        capture = Capture(mock_app(api_key=UPSTREAM_SECRET))
        upstream = s.serve_app(capture) + "/v1"
        gateway = Gateway(gateway_config(upstream), environ={"UPSTREAM_KEY": UPSTREAM_SECRET})
        yield s, gateway, s.serve_gateway(gateway), capture


def test_a_request_that_fails_inside_the_gateway_is_answered_500_and_the_next_is_served(
    served: tuple[Servers, Gateway, str, Capture],
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _, _, base, capture = served
    check = RequestChecks.check

    def broken(self: RequestChecks, body: Any, **kwargs: Any) -> None:
        if body.get("user") == "break":
            raise KeyError("a bug")
        check(self, body, **kwargs)

    monkeypatch.setattr(RequestChecks, "check", broken)
    bad = httpx2.post(f"{base}/chat/completions", json={**BODY, "user": "break"}, headers=AUTH)
    good = httpx2.post(f"{base}/chat/completions", json=BODY, headers=AUTH)
    assert bad.status_code == 500
    assert bad.json()["error"]["code"] == "internal_error"
    assert "a bug" not in bad.text  # the traceback is logged, not sent
    assert good.status_code == 200 and good.json()["choices"]
    assert len(capture.bodies) == 1  # the broken one was never sent
    logged = [r for r in caplog.records if r.levelname == "ERROR" and r.exc_info]
    assert len(logged) == 1
    health = httpx2.get(base.removesuffix("/v1") + "/healthz")
    assert health.status_code == 200


def test_healthz_says_503_once_the_scheduler_stopped(
    served: tuple[Servers, Gateway, str, Capture],
) -> None:
    s, gateway, base, _ = served
    scheduler = gateway.scheduler
    root = base.removesuffix("/v1")
    assert httpx2.get(f"{root}/healthz").status_code == 200
    assert scheduler is not None and scheduler.alive
    # What a bug escaping every supervision would do: the scheduler's task group ends.
    s.call(scheduler._tg.cancel_scope.cancel)  # type: ignore[union-attr]
    health = httpx2.get(f"{root}/healthz")
    assert health.status_code == 503 and health.json()["status"] == "failed"


def _gateway_file(tmp_path: Path, upstream: str) -> Path:
    path = tmp_path / "gateway.toml"
    path.write_text(
        "[gateway]\nmax_inflight = 4\ngrace_s = 2\n"
        f'[[tenant]]\nname = "web"\nkey_sha256 = "{key_hash("sk-test-web")}"\n'
        f'[[endpoint]]\nname = "mock"\nbase_url = "{upstream}"\nkey_env = "UPSTREAM_KEY"\n'
    )
    return path


def _in_thread(target: Any) -> threading.Thread:
    thread = threading.Thread(target=target)
    thread.start()
    return thread


def test_past_the_grace_what_is_left_gets_openai_shaped_answers_and_the_log_says_so(
    tmp_path: Path,
) -> None:
    with servers() as s:
        # One token per 50 ms: a 2,000-token stream outlives the 2 s grace.
        upstream = s.serve_app(mock_app(api_key=UPSTREAM_SECRET, time_scale=0.4)) + "/v1"
        port = free_port()
        env = {**os.environ, "UPSTREAM_KEY": UPSTREAM_SECRET}
        stderr = tmp_path / "stderr"
        with stderr.open("wb") as log:
            proc = subprocess.Popen(
                [sys.executable, "-m", "semisched", "serve", "--config",
                 str(_gateway_file(tmp_path, upstream)), "--port", str(port),
                 "--log-level", "info", "--access-log"],
                env=env, stdout=subprocess.DEVNULL, stderr=log,
            )  # fmt: skip
            try:
                _drain_past_grace(proc, f"http://127.0.0.1:{port}", stderr)
            finally:
                if proc.poll() is None:
                    proc.kill()
                    proc.wait()
    text = stderr.read_text()
    assert "draining" in text and "grace over" in text  # the gateway's INFO lines appear
    access = [line for line in text.splitlines() if "semisched.gateway.access" in line]
    assert any("status=503" in line and "tenant=web" in line for line in access), text
    assert UPSTREAM_SECRET not in text and "sk-test-web" not in text


def _drain_past_grace(proc: subprocess.Popen[bytes], root: str, stderr: Path) -> None:
    def up() -> bool:
        try:
            return httpx2.get(f"{root}/healthz").status_code == 200
        except httpx2.HTTPError:
            return proc.poll() is not None

    wait_for(up, 60, "the gateway")
    assert proc.poll() is None, stderr.read_text()
    long = {**BODY, "max_tokens": 2000}
    answers: dict[str, httpx2.Response] = {}
    events: list[str] = []
    started = threading.Event()

    def plain() -> None:
        answers["json"] = httpx2.post(f"{root}/v1/chat/completions", json=long, headers=AUTH,
                                      timeout=60)  # fmt: skip

    def stream() -> None:
        with httpx2.stream("POST", f"{root}/v1/chat/completions", json={**long, "stream": True},
                           headers=AUTH, timeout=60) as reply:  # fmt: skip
            answers["stream"] = reply
            for line in reply.iter_lines():
                if line.startswith("data: "):
                    events.append(line.removeprefix("data: "))
                    started.set()

    threads = [_in_thread(plain), _in_thread(stream)]
    assert started.wait(30), "the stream never started"
    wait_for(lambda: httpx2.get(f"{root}/semisched/status").json()["endpoints"][0]["inflight"]
             == 2, 30, "both in flight")  # fmt: skip
    proc.send_signal(signal.SIGTERM)
    for thread in threads:
        thread.join(60)
    plain_answer = answers["json"]
    assert plain_answer.status_code == 503
    assert plain_answer.json()["error"]["code"] == "shutting_down"
    assert answers["stream"].status_code == 200
    assert events[-1] == "[DONE]"
    cut = json.loads(events[-2])
    assert cut["error"]["code"] == "shutting_down"  # the stream says why it ends early
    assert proc.wait(60) in (0, -signal.SIGTERM)
