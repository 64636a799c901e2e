"""What the gateway refuses before sending, over real sockets: uvicorn on 127.0.0.1, raw
HTTP in front (NaN, duplicate keys and headers are what no OpenAI client sends), the mock
provider behind a recording :class:`~gateway_kit.Capture` that must stay untouched."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx2
import openai
import pytest
from gateway_kit import KEYS, UPSTREAM_SECRET, Capture, Servers, mock_app, servers

from semisched.gateway.app import Gateway
from semisched.gateway.cli import build_config, parser
from semisched.gateway.configfile import config_from_dict
from semisched.gateway.hints import BadRequest
from semisched.gateway.keys import key_hash
from semisched.gateway.params import RequestChecks
from semisched.runtime.apis import APIS

pytestmark = pytest.mark.wallclock

HI = [{"role": "user", "content": "hi"}]
CHAT = {"model": "mock-1", "messages": HI, "max_tokens": 3}
WEB = {"authorization": "Bearer sk-test-web"}
BATCH = {"authorization": "Bearer sk-test-batch"}


class Stack:
    def __init__(self, s: Servers, capture: Capture, base: str) -> None:
        self.servers, self.capture, self.base = s, capture, base
        self.http = httpx2.Client(base_url=base, timeout=30)

    def post(self, path: str, body: Any, headers: Any = WEB) -> httpx2.Response:
        content = body if isinstance(body, bytes) else httpx2.Request(
            "POST", "http://x", json=body).content  # fmt: skip
        if isinstance(headers, dict):
            headers = list(headers.items())
        return self.http.post(
            path, content=content, headers=[("content-type", "application/json"), *headers]
        )


@pytest.fixture(scope="module")
def stack() -> Iterator[Stack]:
    with servers() as s:
        capture = Capture(mock_app(api_key=UPSTREAM_SECRET))
        upstream = s.serve_app(capture) + "/v1"
        tiers = {"web": ["priority"]}
        config = config_from_dict({
            "gateway": {"port": 0, "models": ["mock-1"]},
            "tenant": [{"name": t, "key_sha256": key_hash(k), **(
                {"service_tiers": tiers[t]} if t in tiers else {})} for k, t in KEYS.items()],
            "endpoint": [{"name": "mock", "base_url": upstream, "key_env": "UPSTREAM_KEY"}],
        }, where="test")  # fmt: skip
        gateway = Gateway(config, environ={"UPSTREAM_KEY": UPSTREAM_SECRET})
        stack = Stack(s, capture, s.serve_gateway(gateway).removesuffix("/v1"))
        try:
            yield stack
        finally:
            stack.http.close()


def assert_openai_error(response: httpx2.Response, status: int, param: Any, code: str) -> str:
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == "application/json"
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert (error["param"], error["code"]) == (param, code)
    assert error["type"] == "invalid_request_error"
    message: str = error["message"]
    return message


CHAT_PATH = "/v1/chat/completions"
COMPLETIONS_PATH = "/v1/completions"
TWICE = [("authorization", "Bearer sk-test-web"), ("authorization", "Bearer sk-test-batch")]

#: (path, body, headers, status, param, code): one row per refusal.
REFUSED: list[tuple[str, Any, Any, int, str | None, str]] = [
    (CHAT_PATH, {**CHAT, "n": 10**9}, WEB, 400, "n", "invalid_value"),
    (CHAT_PATH, {**CHAT, "n": -1}, WEB, 400, "n", "invalid_value"),
    (CHAT_PATH, {**CHAT, "temperature": "hot"}, WEB, 400, "temperature", "invalid_value"),
    (CHAT_PATH, {**CHAT, "max_tokens": 10**8}, WEB, 400, "max_tokens", "invalid_value"),
    (CHAT_PATH, {**CHAT, "stop": list("abcde")}, WEB, 400, "stop", "invalid_value"),
    (CHAT_PATH, {**CHAT, "stream": "yes"}, WEB, 400, "stream", "invalid_value"),
    (CHAT_PATH, {"model": "mock-1"}, WEB, 400, "messages", "missing_required_parameter"),
    (CHAT_PATH, b'{"model": "mock-1", "messages": [{"role": "user", "content": "hi"}], '
                b'"temperature": NaN}', WEB, 400, None, "invalid_json"),
    (CHAT_PATH, b'{"model": "mock-1", "model": "gpt-4o", "messages": []}', WEB, 400, None,
     "invalid_json"),
    (CHAT_PATH, b"[]", WEB, 400, None, "invalid_json"),
    (CHAT_PATH, {**CHAT, "model": "gpt-unknown"}, WEB, 404, "model", "model_not_found"),
    (CHAT_PATH, {**CHAT, "service_tier": "priority"}, BATCH, 403, "service_tier",
     "service_tier_not_allowed"),
    (CHAT_PATH, {**CHAT, "service_tier": "flex"}, WEB, 403, "service_tier",
     "service_tier_not_allowed"),
    (CHAT_PATH, CHAT, TWICE, 400, "authorization", "duplicate_header"),
    (CHAT_PATH, CHAT, [*WEB.items(), ("x-semisched-class", "batch"),
                       ("x-semisched-class", "interactive")], 400, "x-semisched-class",
     "duplicate_header"),
    (COMPLETIONS_PATH, {"model": "mock-1", "prompt": "x", "logprobs": 6}, WEB, 400, "logprobs",
     "invalid_value"),
    (COMPLETIONS_PATH, {"model": "mock-1"}, WEB, 400, "prompt", "missing_required_parameter"),
]  # fmt: skip


@pytest.mark.parametrize(("path", "body", "headers", "status", "param", "code"), REFUSED)
def test_a_refused_request_is_answered_in_openais_shape_and_never_sent(
    stack: Stack, path: str, body: Any, headers: Any, status: int, param: str | None, code: str
) -> None:
    sent = len(stack.capture.bodies)
    message = assert_openai_error(stack.post(path, body, headers), status, param, code)
    assert len(message) < 300
    assert len(stack.capture.bodies) == sent  # nothing reached the upstream


def test_the_openai_client_sees_an_unknown_model_as_not_found(stack: Stack) -> None:
    with openai.OpenAI(base_url=stack.base + "/v1", api_key="sk-test-web", max_retries=0) as c:
        with pytest.raises(openai.NotFoundError) as caught:
            c.chat.completions.create(model="gpt-unknown", messages=HI)  # type: ignore[arg-type]
    assert caught.value.code == "model_not_found"


def test_a_tenant_allowed_a_service_tier_sends_it(stack: Stack) -> None:
    for headers, tier in ((WEB, "priority"), (BATCH, "auto"), (BATCH, "default")):
        response = stack.post(CHAT_PATH, {**CHAT, "service_tier": tier}, headers)
        assert response.status_code == 200, response.text
        assert stack.capture.bodies[-1]["service_tier"] == tier


@pytest.mark.parametrize("extra", [
    {f"field_{i}": i for i in range(20_000)},
    {"caf\u00e9": 1, "\u2603": 2, "bad\r\nx-injected: 1": 3, "guardrails": 4},
])  # fmt: skip
def test_the_stripped_header_is_short_and_safe_whatever_the_names(
    stack: Stack, extra: dict[str, Any]
) -> None:
    response = stack.post(CHAT_PATH, {**CHAT, **extra})
    assert response.status_code == 200, response.text
    value = response.headers["x-semisched-stripped"]
    assert len(value) < 600 and value.isascii()
    assert "x-injected" not in response.headers
    assert set(stack.capture.bodies[-1]) == set(CHAT)
    if "guardrails" in extra:
        assert value == "guardrails,+3 more"


@pytest.mark.parametrize(("method", "path", "status", "code"), [
    ("POST", "/v1/chat/completions/", 404, "unknown_url"),
    ("POST", "/v1/completions/", 404, "unknown_url"),
    ("GET", "/v1/models/", 404, "unknown_url"),
    ("POST", "/v1/nothing", 404, "unknown_url"),
    ("GET", "/", 404, "unknown_url"),
    ("GET", "/v1/chat/completions", 405, "method_not_allowed"),
    ("DELETE", "/v1/models", 405, "method_not_allowed"),
])  # fmt: skip
def test_unknown_paths_and_methods_are_openai_shaped_and_never_redirected(
    stack: Stack, method: str, path: str, status: int, code: str
) -> None:
    sent = len(stack.capture.bodies)
    response = stack.http.request(method, path, json=CHAT,
                                  headers={**WEB, "host": "evil.example"})  # fmt: skip
    assert "location" not in response.headers
    assert_openai_error(response, status, None, code)
    if status == 405:
        assert "allow" in response.headers
    assert len(stack.capture.bodies) == sent


def test_the_demo_declares_its_model_so_another_is_refused() -> None:
    config = build_config(parser().parse_args(["--demo"]), demo_upstream="http://127.0.0.1:9/v1")
    checks = RequestChecks.of(config)
    assert checks.models == frozenset({"mock-1"})
    body = {"model": "gpt-4o", "messages": HI}
    with pytest.raises(BadRequest) as caught:
        checks.check(body, api=APIS["chat"], tenant="alice")
    assert (caught.value.status, caught.value.code) == (404, "model_not_found")
