"""The gateway over real sockets when its upstreams fail: a refused key takes its endpoint
out (status, /readyz), a hung upstream is bounded by ``max_request_s``, a stalled stream
ends with an SSE error event at its deadline, and no answer names an upstream's URL."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from typing import Any

import httpx2
import pytest
from gateway_kit import KEYS, UPSTREAM_SECRET, Capture, Servers, mock_app, servers

from mockprovider.launch import free_port
from semisched.core.lifecycle import FailureKind
from semisched.errors import ProviderError
from semisched.gateway.answers import outcome_response
from semisched.gateway.app import Gateway
from semisched.gateway.configfile import config_from_dict
from semisched.gateway.keys import key_hash

pytestmark = pytest.mark.wallclock

HEADERS = {"authorization": "Bearer sk-test-web"}
BODY = {"model": "mock-1", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 5}


def config(endpoints: list[dict[str, Any]], **gateway: Any) -> Any:
    data = {
        "routing": "round_robin",
        "gateway": {"port": 0, **gateway},
        "tenant": [{"name": tenant, "key_sha256": key_hash(key)} for key, tenant in KEYS.items()],
        "endpoint": endpoints,
    }
    return config_from_dict(data, where="test")


def serve(s: Servers, endpoints: list[dict[str, Any]], environ: dict[str, str],
          **gateway: Any) -> str:  # fmt: skip
    """The gateway's root URL (no ``/v1``)."""
    return s.serve_gateway(Gateway(config(endpoints, **gateway), environ=environ))[:-3]


@pytest.fixture
def s() -> Iterator[Servers]:
    with servers() as running:
        yield running


def test_a_refused_key_takes_its_endpoint_out_and_every_request_is_answered(s: Servers) -> None:
    upstream = s.serve_app(mock_app(api_key=UPSTREAM_SECRET)) + "/v1"
    endpoints = [{"name": "bad-key", "base_url": upstream, "key_env": "BAD_KEY"},
                 {"name": "good", "base_url": upstream, "key_env": "GOOD_KEY"}]  # fmt: skip
    base = serve(s, endpoints, {"BAD_KEY": "sk-revoked-0000", "GOOD_KEY": UPSTREAM_SECRET})
    with httpx2.Client(base_url=base, timeout=60) as client:
        answers = [client.post("/v1/chat/completions", json=BODY, headers=HEADERS)
                   for _ in range(6)]  # fmt: skip
        status = client.get("/semisched/status").json()
        ready = client.get("/readyz")
    assert [a.status_code for a in answers] == [200] * 6  # the refusal failed over
    bad = {e["name"]: e for e in status["endpoints"]}["bad-key"]
    assert (bad["circuit"], bad["circuit_reason"], bad["sent"]) == ("open", "auth", 1)
    assert ready.status_code == 200  # the good endpoint takes the work
    health = ready.json()["endpoints"]
    assert health["bad-key"]["failing"] and health["bad-key"]["reason"] == "auth"
    assert not health["good"]["failing"]
    assert "sk-revoked-0000" not in json.dumps([status, ready.json()])


def test_an_unreachable_upstream_is_named_by_its_endpoint_never_its_url(s: Servers) -> None:
    port = free_port()  # nothing listens there: every connection is refused
    endpoints = [{"name": "internal-llm", "base_url": f"http://127.0.0.1:{port}/v1"}]
    base = serve(s, endpoints, {})
    with httpx2.Client(base_url=base, timeout=60) as client:
        answer = client.post("/v1/chat/completions", json=BODY, headers=HEADERS)
        ready = client.get("/readyz")
    error = answer.json()["error"]
    assert (answer.status_code, error["code"]) == (502, "upstream_unreachable")
    assert "'internal-llm'" in error["message"]
    assert str(port) not in answer.text and "127.0.0.1" not in answer.text
    assert ready.status_code == 503 and str(port) not in ready.text


def test_a_hung_upstream_holds_a_request_no_longer_than_max_request_s(s: Servers) -> None:
    capture = Capture(mock_app(api_key=UPSTREAM_SECRET))
    capture.open.clear()  # it holds every completion: the upstream hangs
    upstream = s.serve_app(capture) + "/v1"
    endpoints = [{"name": "hung", "base_url": upstream, "key_env": "KEY"}]
    base = serve(s, endpoints, {"KEY": UPSTREAM_SECRET}, max_request_s=1.0)
    try:
        with httpx2.Client(base_url=base, timeout=60) as client:
            answer = client.post("/v1/chat/completions", json=BODY, headers=HEADERS)
    finally:
        capture.open.set()
    assert answer.status_code == 504
    assert answer.json()["error"]["code"] == "deadline_exceeded"
    assert len(capture.bodies) == 1  # no retry started past the bound


def test_an_upstream_timeout_after_the_retries_is_a_504_timeout() -> None:
    error = ProviderError("Request timed out.", request_id="r", klass="batch", status_code=None,
                          attempts=4, kind=FailureKind.TIMEOUT)  # fmt: skip
    answer = outcome_response(error, drain_retry_after_s=1.0)
    body = json.loads(bytes(answer.body))["error"]
    assert (answer.status_code, body["code"], body["type"]) == (504, "timeout", "timeout_error")


async def _stalls_after_one_chunk(scope: Any, receive: Any, send: Any) -> None:
    """An upstream whose streams send one chunk and then nothing until the client leaves."""
    if scope["type"] != "http":
        return
    while (await receive()).get("more_body"):
        pass
    await send({"type": "http.response.start", "status": 200,
                "headers": [(b"content-type", b"text/event-stream")]})  # fmt: skip
    chunk = {
        "id": "c",
        "object": "chat.completion.chunk",
        "created": 0,
        "model": "mock-1",
        "choices": [{"index": 0, "delta": {"content": "hi"}, "finish_reason": None}],
    }
    await send({"type": "http.response.body", "body": b"data: " + json.dumps(chunk).encode()
                + b"\n\n", "more_body": True})  # fmt: skip
    while (await receive())["type"] != "http.disconnect":
        await asyncio.sleep(0)


def test_a_stream_stalled_after_its_first_chunk_ends_with_an_error_event_at_its_deadline(
    s: Servers,
) -> None:
    upstream = s.serve_app(_stalls_after_one_chunk) + "/v1"
    base = serve(s, [{"name": "stalls", "base_url": upstream}], {})
    headers = {**HEADERS, "x-semisched-deadline": "1"}
    with httpx2.Client(base_url=base, timeout=60) as client:
        answer = client.post("/v1/chat/completions", json={**BODY, "stream": True},
                             headers=headers)  # fmt: skip
    events = [line[6:] for line in answer.text.splitlines() if line.startswith("data: ")]
    assert answer.status_code == 200
    assert json.loads(events[0])["choices"][0]["delta"]["content"] == "hi"
    assert json.loads(events[1])["error"]["code"] == "deadline_exceeded"  # not upstream_error
    assert events[-1] == "[DONE]"


async def _html_502(scope: Any, receive: Any, send: Any) -> None:
    """An upstream behind a proxy that answers its own HTML page, naming an internal host."""
    await send({"type": "http.response.start", "status": 502,
                "headers": [(b"content-type", b"text/html")]})  # fmt: skip
    await send({"type": "http.response.body",
                "body": b"<html>502: http://10.1.2.3:8000/v1 is down</html>"})  # fmt: skip


def test_an_upstream_error_page_that_is_not_openais_shape_is_answered_in_it(s: Servers) -> None:
    upstream = s.serve_app(_html_502) + "/v1"
    base = serve(s, [{"name": "behind-proxy", "base_url": upstream}], {})
    with httpx2.Client(base_url=base, timeout=60) as client:
        answer = client.post("/v1/chat/completions", json=BODY,
                             headers={**HEADERS, "x-semisched-deadline": "30"})  # fmt: skip
    assert answer.status_code == 502
    error = answer.json()["error"]
    assert error["code"] == "upstream_error" and "behind-proxy" in error["message"]
    assert "10.1.2.3" not in answer.text and "127.0.0.1" not in answer.text


async def _refuses_the_key(scope: Any, receive: Any, send: Any) -> None:
    """An upstream refusing the gateway's key, quoting a masked form of it as OpenAI does."""
    body = {"error": {"message": "Incorrect API key provided: sk-upst****7d1e.",
                      "code": "invalid_api_key", "type": "invalid_request_error"}}  # fmt: skip
    await send({"type": "http.response.start", "status": 401,
                "headers": [(b"content-type", b"application/json")]})  # fmt: skip
    await send({"type": "http.response.body", "body": json.dumps(body).encode()})


async def _not_json(scope: Any, receive: Any, send: Any) -> None:
    await send({"type": "http.response.start", "status": 200,
                "headers": [(b"content-type", b"application/json")]})  # fmt: skip
    await send({"type": "http.response.body", "body": b"{not json"})


@pytest.mark.parametrize(("upstream", "code", "absent"), [
    (_refuses_the_key, "upstream_auth_failed", "sk-upst"),  # the gateway's key, masked or not
    (_not_json, "upstream_error", "{not json"),  # a broken answer is not passed on as a 200
])  # fmt: skip
def test_what_the_client_must_not_see_of_an_upstream_is_a_502_naming_the_endpoint(
    s: Servers, upstream: Any, code: str, absent: str
) -> None:
    base = serve(s, [{"name": "lone", "base_url": s.serve_app(upstream) + "/v1"}], {},
                 max_request_s=30)  # fmt: skip
    with httpx2.Client(base_url=base, timeout=60) as client:
        answer = client.post("/v1/chat/completions", json=BODY, headers=HEADERS)
    assert answer.status_code == 502  # not the upstream's 401: the caller's key was fine
    assert answer.json()["error"]["code"] == code and "lone" in answer.text
    assert absent not in answer.text
