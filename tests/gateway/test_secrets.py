"""The upstream's key is sent upstream and nowhere else: not in answers, logs or metrics."""

from __future__ import annotations

import logging

import httpx2
import pytest
from gateway_kit import UPSTREAM_SECRET, Capture, gateway_config, mock_app, servers

from semisched.gateway.app import Gateway

pytestmark = pytest.mark.wallclock

HI = [{"role": "user", "content": "hi"}]


def test_the_upstream_key_never_leaves_through_answers_logs_or_metrics(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    seen: list[str] = []
    with servers() as s:
        capture = Capture(mock_app(api_key=UPSTREAM_SECRET))
        upstream = s.serve_app(capture) + "/v1"
        gateway = Gateway(gateway_config(upstream, budget={"tpm": 5000}),
                          environ={"UPSTREAM_KEY": UPSTREAM_SECRET})  # fmt: skip
        base = s.serve_gateway(gateway)
        root = base.removesuffix("/v1")
        body = {"model": "mock-1", "messages": HI, "max_tokens": 5}
        with httpx2.Client(headers={"authorization": "Bearer sk-test-web"}) as http:
            answers = [
                http.post(f"{base}/chat/completions", json=body),
                http.post(f"{base}/chat/completions", json={**body, "stream": True}),
                http.post(f"{base}/chat/completions", json={**body, "max_tokens": 9000}),  # 429
                http.post(f"{base}/chat/completions", json=body, headers={"authorization": ""}),
                http.get(f"{base}/models"),
                http.get(f"{root}/readyz"),
                http.get(f"{root}/semisched/status"),
                http.get(f"{root}/metrics"),
            ]
            capture.answer = (401, {"error": {"message": "bad key", "type": "x", "code": "y"}})
            answers.append(http.post(f"{base}/chat/completions", json=body))
        seen += [f"{a.status_code} {a.headers} {a.text}" for a in answers]
        seen.append(repr(gateway) + repr(gateway.clients) + repr(gateway.config))
    # The caller's missing key: 401. The upstream refusing the gateway's key: 502, its body
    # (which may quote that key, masked) not passed on.
    assert [a.status_code for a in answers] == [200, 200, 429, 401, 200, 200, 200, 200, 502]
    assert "bad key" not in answers[-1].text
    assert capture.authorizations[0] == f"Bearer {UPSTREAM_SECRET}"  # it was used upstream
    seen += [record.getMessage() for record in caplog.records]
    assert caplog.records  # the servers did log
    assert not [text for text in seen if UPSTREAM_SECRET in text]
