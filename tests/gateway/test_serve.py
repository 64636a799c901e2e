"""The gateway over real sockets: uvicorn on 127.0.0.1, the Python openai client in front,
the mock provider (wrapped in a recording :class:`~gateway_kit.Capture`) behind."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx2
import openai
import pytest
from gateway_kit import UPSTREAM_SECRET, Capture, Servers, gateway_config, mock_app, servers

from semisched.gateway.app import Gateway

pytestmark = pytest.mark.wallclock

HI = [{"role": "user", "content": "hi"}]


class Stack:
    def __init__(self, s: Servers, capture: Capture, gateway: Gateway, base: str) -> None:
        self.servers, self.capture, self.gateway, self.base = s, capture, gateway, base
        self.clients: list[openai.OpenAI] = []

    def client(self, key: str = "sk-test-web", **options: Any) -> openai.OpenAI:
        client = openai.OpenAI(base_url=self.base, api_key=key, **{"max_retries": 0, **options})
        self.clients.append(client)
        return client

    def get(self, path: str) -> httpx2.Response:
        return httpx2.get(self.base.removesuffix("/v1") + path)

    def metric(self, line_start: str) -> float:
        total = 0.0
        for line in self.get("/metrics").text.splitlines():
            if line.startswith(line_start):
                total += float(line.rsplit(" ", 1)[1])
        return total


@pytest.fixture(scope="module")
def stack() -> Iterator[Stack]:
    with servers() as s:
        capture = Capture(mock_app(api_key=UPSTREAM_SECRET))
        upstream = s.serve_app(capture) + "/v1"
        gateway = Gateway(gateway_config(upstream, budget={"tpm": 5000}),
                          environ={"UPSTREAM_KEY": UPSTREAM_SECRET})  # fmt: skip
        stack = Stack(s, capture, gateway, s.serve_gateway(gateway))
        try:
            yield stack
        finally:
            for client in stack.clients:
                client.close()


def test_a_chat_completion_comes_back_as_the_upstream_answered_it(stack: Stack) -> None:
    reply = stack.client().chat.completions.create(model="mock-1", messages=HI, max_tokens=5)
    assert reply.choices[0].message.content
    assert reply.usage is not None and reply.usage.completion_tokens == 5
    assert stack.capture.authorizations[-1] == f"Bearer {UPSTREAM_SECRET}"  # not the caller's


def test_a_completions_call_comes_back_too(stack: Stack) -> None:
    reply = stack.client().completions.create(model="mock-1", prompt="once upon", max_tokens=4)
    assert reply.choices[0].text
    assert stack.capture.bodies[-1]["prompt"] == "once upon"


def test_a_stream_arrives_chunk_by_chunk_with_its_usage(stack: Stack) -> None:
    stream = stack.client().chat.completions.create(
        model="mock-1", messages=HI, max_tokens=6, stream=True,
        stream_options={"include_usage": True},
    )  # fmt: skip
    chunks = list(stream)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert len([c for c in chunks if c.choices and c.choices[0].delta.content]) > 1
    assert text.startswith("lorem ipsum")  # the mock's words, as it streamed them
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens == 6


def test_a_stream_without_usage_asked_gets_none_though_the_gateway_reads_it(stack: Stack) -> None:
    stream = stack.client().completions.create(model="mock-1", prompt="x", max_tokens=3,
                                               stream=True)  # fmt: skip
    chunks = list(stream)
    assert all(c.usage is None for c in chunks)
    assert stack.capture.bodies[-1]["stream_options"] == {"include_usage": True}


@pytest.mark.parametrize("key", ["", "sk-not-a-gateway-key"])
def test_a_missing_or_unknown_key_is_a_401_in_openais_shape(stack: Stack, key: str) -> None:
    seen = len(stack.capture.bodies)
    with pytest.raises(openai.AuthenticationError) as caught:
        stack.client(
            key=key or "x", default_headers={"authorization": key}
        ).chat.completions.create(model="mock-1", messages=HI, max_tokens=5)
    assert caught.value.status_code == 401
    assert caught.value.code == "invalid_api_key"
    assert set(caught.value.body) == {"message", "type", "param", "code"}  # type: ignore[arg-type]
    assert len(stack.capture.bodies) == seen  # nothing reached the upstream


def test_fields_that_are_not_openais_never_reach_the_upstream(stack: Stack) -> None:
    raw = stack.client().chat.completions.with_raw_response.create(
        model="mock-1", messages=HI, max_tokens=5,
        extra_body={"priority": "batch", "metadata": {"team": "a"}, "guardrails": ["x"]},
    )  # fmt: skip
    assert raw.headers["x-semisched-stripped"] == "guardrails,metadata,priority"
    sent = stack.capture.bodies[-1]
    assert set(sent) == {"model", "messages", "max_tokens"}


def test_a_header_cannot_claim_another_tenant(stack: Stack) -> None:
    client = stack.client()
    with pytest.raises(openai.PermissionDeniedError) as caught:
        client.chat.completions.create(model="mock-1", messages=HI, max_tokens=5,
                                       extra_headers={"x-semisched-tenant": "batch"})  # fmt: skip
    assert caught.value.code == "tenant_mismatch"
    with pytest.raises(openai.PermissionDeniedError):
        client.chat.completions.create(model="mock-1", messages=HI, max_tokens=5,
                                       extra_body={"metadata": {"tenant": "batch"}})  # fmt: skip
    own = client.chat.completions.create(model="mock-1", messages=HI, max_tokens=5,
                                         extra_headers={"x-semisched-tenant": "web"})  # fmt: skip
    assert own.choices


def test_hints_reach_the_scheduler_and_bad_ones_are_a_400(stack: Stack) -> None:
    client = stack.client(key="sk-test-batch")
    before = stack.metric('semisched_requests_submitted_total{class="batch",tenant="batch"}')
    client.chat.completions.create(model="mock-1", messages=HI, max_tokens=5, extra_headers={
        "x-semisched-class": "batch", "x-semisched-deadline": "30",
        "x-semisched-prior": "5,8"})  # fmt: skip
    after = stack.metric('semisched_requests_submitted_total{class="batch",tenant="batch"}')
    assert after == before + 1
    with pytest.raises(openai.BadRequestError) as caught:
        client.chat.completions.create(model="mock-1", messages=HI, max_tokens=5,
                                       extra_headers={"x-semisched-deadline": "soon"})  # fmt: skip
    assert caught.value.code == "invalid_hint"


def test_a_rejection_is_a_429_the_openai_client_retries(stack: Stack) -> None:
    before = stack.metric('semisched_gateway_responses_total{route="chat",status="429"}')
    with pytest.raises(openai.RateLimitError) as caught:
        stack.client(max_retries=2).chat.completions.create(
            model="mock-1", messages=HI, max_tokens=9000
        )  # the budget can never pay it
    after = stack.metric('semisched_gateway_responses_total{route="chat",status="429"}')
    assert after - before == 3  # the first try and the client's own two retries
    assert caught.value.response.headers["retry-after"] == "1"
    assert caught.value.code == "request_rejected"
    assert "can never be sent" in caught.value.message  # the decision's explanation


def test_an_upstream_failure_passes_through_with_its_status(stack: Stack) -> None:
    stack.capture.answer = (422, {"error": {"message": "no such thing", "type": "invalid",
                                            "param": "x", "code": "nope"}})  # fmt: skip
    try:
        with pytest.raises(openai.UnprocessableEntityError) as caught:
            stack.client().chat.completions.create(model="mock-1", messages=HI, max_tokens=5)
    finally:
        stack.capture.answer = None
    assert caught.value.status_code == 422
    assert caught.value.body == {"message": "no such thing", "type": "invalid", "param": "x",
                                 "code": "nope"}  # fmt: skip


def test_the_side_routes(stack: Stack) -> None:
    # One completed call of its own: the module's other tests may run in another worker.
    stack.client().chat.completions.create(model="mock-1", messages=HI, max_tokens=5)
    models = stack.client().models.list()
    assert [m.id for m in models.data] == ["mock-1"]
    assert stack.get("/healthz").json() == {"status": "ok"}
    ready = stack.get("/readyz")
    assert ready.status_code == 200 and ready.json()["upstreams"] == {"mock": True}
    assert stack.metric('semisched_requests_total{class="interactive",endpoint="mock",'
                        'outcome="completed",tenant="web"}') >= 1  # fmt: skip
    status = stack.get("/semisched/status").json()
    assert [e["name"] for e in status["endpoints"]] == ["mock"]
    assert status["endpoints"][0]["circuit"] == "closed"
    assert status["endpoints"][0]["resent"] == 0  # the mock never closes a connection early
    assert status["budget"]["limit_tokens"] == 5000
    assert {t["name"] for t in status["tenants"]} == {"web", "batch"}


def test_readyz_says_when_an_upstream_is_down() -> None:
    with servers() as s:
        gateway = Gateway(gateway_config("http://127.0.0.1:9/v1"), environ={"UPSTREAM_KEY": "k"})
        base = s.serve_gateway(gateway)
        ready = httpx2.get(base.removesuffix("/v1") + "/readyz")
    assert ready.status_code == 503 and ready.json()["upstreams"] == {"mock": False}
