"""The Responses API and embeddings through the gateway, over real sockets: uvicorn on
127.0.0.1, the Python openai client (and raw HTTP) in front, the mock provider behind a
recording :class:`~gateway_kit.Capture`. They are scheduled as the completion routes are:
keys and tenants, hints, the field tables, metrics; a Responses stream is relayed as its
typed events."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from typing import Any

import httpx2
import openai
import pytest
from gateway_kit import UPSTREAM_SECRET, Capture, Servers, gateway_config, mock_app, servers

from semisched.errors import DeadlineExceeded
from semisched.gateway.app import Gateway
from semisched.gateway.sse import SSEResponse
from semisched.gateway.tickets import Ticket
from semisched.gateway.upstream import SSEChunk
from semisched.runtime.apis import APIS

pytestmark = pytest.mark.wallclock

WEB = {"authorization": "Bearer sk-test-web"}
BATCH = {"authorization": "Bearer sk-test-batch"}
RESPONSE = {"model": "mock-1", "input": "hi"}
EMBEDDING = {"model": "mock-1", "input": ["one", "two words", "three more words"]}


class Stack:
    def __init__(self, s: Servers, capture: Capture, base: str, upstream: str) -> None:
        self.servers, self.capture, self.base, self.upstream = s, capture, base, upstream
        self.http = httpx2.Client(timeout=30)
        self.clients: list[openai.OpenAI] = []

    def client(self, key: str = "sk-test-web") -> openai.OpenAI:
        client = openai.OpenAI(base_url=self.base, api_key=key, max_retries=0)
        self.clients.append(client)
        return client

    def post(self, path: str, body: Any, headers: dict[str, str] | None = None) -> httpx2.Response:
        headers = WEB if headers is None else headers
        return self.http.post(self.base + path, json=body, headers=headers)

    def get(self, path: str) -> httpx2.Response:
        return self.http.get(self.base.removesuffix("/v1") + path)

    def mock_stats(self) -> dict[str, Any]:
        stats: dict[str, Any] = self.http.get(
            self.upstream + "/mock/stats", headers={"authorization": f"Bearer {UPSTREAM_SECRET}"}
        ).json()
        return stats

    def metric(self, line_start: str) -> float:
        lines = self.get("/metrics").text.splitlines()
        return sum(float(line.rsplit(" ", 1)[1]) for line in lines if line.startswith(line_start))


@pytest.fixture(scope="module")
def stack() -> Iterator[Stack]:
    with servers() as s:
        capture = Capture(mock_app(api_key=UPSTREAM_SECRET))
        upstream = s.serve_app(capture) + "/v1"
        config = gateway_config(upstream, gateway={"models": ["mock-1"]})
        gateway = Gateway(config, environ={"UPSTREAM_KEY": UPSTREAM_SECRET})
        stack = Stack(s, capture, s.serve_gateway(gateway), upstream)
        try:
            yield stack
        finally:
            stack.http.close()
            for client in stack.clients:
                client.close()


def tenant_completed(stack: Stack, tenant: str) -> int:
    status = stack.get("/semisched/status").json()
    return next(int(t["completed"]) for t in status["tenants"] if t["name"] == tenant)


# -- the Responses API ----------------------------------------------------------------------


def test_a_response_comes_back_as_the_upstream_answered_it(stack: Stack) -> None:
    before = stack.metric('semisched_gateway_responses_total{route="responses",status="200"}')
    reply = stack.client().responses.create(
        model="mock-1", input="hi", previous_response_id="resp_earlier", store=False,
        metadata={"mock_output_tokens": "4"}, instructions="be brief",
        extra_body={"guardrails": True},
    )  # fmt: skip
    assert reply.status == "completed"
    assert len(reply.output_text.split()) == 4
    assert reply.usage is not None and reply.usage.output_tokens == 4
    assert reply.usage.output_tokens_details.reasoning_tokens == 0  # passed on as sent
    assert (reply.previous_response_id, reply.store) == ("resp_earlier", False)
    sent = stack.capture.bodies[-1]
    assert sent == {"model": "mock-1", "input": "hi", "previous_response_id": "resp_earlier",
                    "store": False, "metadata": {"mock_output_tokens": "4"},
                    "instructions": "be brief"}  # fmt: skip
    after = stack.metric('semisched_gateway_responses_total{route="responses",status="200"}')
    assert after == before + 1


def test_max_output_tokens_is_honoured_streamed_and_not(stack: Stack) -> None:
    client = stack.client()
    many = {"mock_output_tokens": "50"}
    reply = client.responses.create(model="mock-1", input="hi", max_output_tokens=3,
                                    metadata=many)  # fmt: skip
    assert reply.status == "incomplete" and reply.usage is not None
    assert reply.usage.output_tokens == 3 and len(reply.output_text.split()) == 3
    assert reply.incomplete_details is not None
    assert reply.incomplete_details.reason == "max_output_tokens"
    events = list(client.responses.create(model="mock-1", input="hi", max_output_tokens=3,
                                          metadata=many, stream=True))  # fmt: skip
    last = events[-1]
    assert last.type == "response.incomplete"
    assert last.response.usage is not None and last.response.usage.output_tokens == 3
    assert stack.capture.bodies[-1]["max_output_tokens"] == 3


def test_a_response_stream_is_its_typed_events_and_its_usage_is_what_the_mock_counted(
    stack: Stack,
) -> None:
    before = stack.mock_stats()
    events = list(stack.client().responses.create(
        model="mock-1", input="hi", stream=True, metadata={"mock_output_tokens": "6"}))  # fmt: skip
    after = stack.mock_stats()
    types = [event.type for event in events]
    assert types[0] == "response.created" and types[-1] == "response.completed"
    assert [event.sequence_number for event in events] == list(range(len(events)))
    text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    done = events[-1].response
    assert text == done.output_text and len(text.split()) == 6
    assert done.usage is not None and done.usage.output_tokens == 6
    assert after["quota_used"] - before["quota_used"] == done.usage.total_tokens
    assert after["requests_by_api"]["responses"] == before["requests_by_api"]["responses"] + 1
    assert after["counters"]["completed"] == before["counters"]["completed"] + 1


def test_on_the_wire_each_event_is_named_and_no_done_follows(stack: Stack) -> None:
    response = stack.post("/responses", {**RESPONSE, "stream": True, "max_output_tokens": 2})
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/event-stream")
    assert "[DONE]" not in response.text
    blocks = [b for b in response.text.split("\n\n") if b]
    for block in blocks:
        event_line, data_line = block.split("\n")
        assert event_line.startswith("event: ") and data_line.startswith("data: ")
        assert json.loads(data_line[6:])["type"] == event_line[7:]
    assert blocks[-1].startswith("event: response.")  # completed or incomplete: the end


def test_a_chat_stream_keeps_its_data_events_and_done(stack: Stack) -> None:
    body = {"model": "mock-1", "messages": [{"role": "user", "content": "hi"}],
            "max_tokens": 2, "stream": True}  # fmt: skip
    response = stack.post("/chat/completions", body)
    assert response.status_code == 200
    assert "event:" not in response.text and response.text.endswith("data: [DONE]\n\n")


# -- embeddings -----------------------------------------------------------------------------


def test_embeddings_of_a_list_of_inputs(stack: Stack) -> None:
    before = stack.mock_stats()["requests_by_api"]["embeddings"]
    reply = stack.client().embeddings.create(model="mock-1", input=EMBEDDING["input"],
                                             dimensions=8, encoding_format="float")  # fmt: skip
    assert [d.index for d in reply.data] == [0, 1, 2]
    assert all(len(d.embedding) == 8 for d in reply.data)
    assert reply.usage.prompt_tokens > 0
    assert stack.capture.bodies[-1] == {**EMBEDDING, "dimensions": 8, "encoding_format": "float"}
    assert stack.mock_stats()["requests_by_api"]["embeddings"] == before + 1


def test_embeddings_never_stream(stack: Stack) -> None:
    sent = len(stack.capture.bodies)
    with pytest.raises(openai.BadRequestError) as caught:
        stack.client().embeddings.create(model="mock-1", input="hi",
                                         extra_body={"stream": True})  # fmt: skip
    assert (caught.value.code, caught.value.param) == ("invalid_value", "stream")
    assert len(stack.capture.bodies) == sent
    response = stack.post("/embeddings", {**EMBEDDING, "stream": False})  # stripped, not refused
    assert response.status_code == 200 and response.headers["x-semisched-stripped"] == "stream"
    assert "stream" not in stack.capture.bodies[-1]


# -- refusals, keys and tenants, as for chat ------------------------------------------------

#: (path, body, headers, status, param, code): one row per refusal.
REFUSED: list[tuple[str, dict[str, Any], dict[str, str], int, str | None, str]] = [
    ("/responses", {"model": "mock-1"}, WEB, 400, "input", "missing_required_parameter"),
    ("/responses", {**RESPONSE, "input": 5}, WEB, 400, "input", "invalid_value"),
    ("/responses", {**RESPONSE, "max_output_tokens": 0}, WEB, 400, "max_output_tokens",
     "invalid_value"),
    ("/responses", {**RESPONSE, "max_output_tokens": "9"}, WEB, 400, "max_output_tokens",
     "invalid_value"),
    ("/responses", {**RESPONSE, "temperature": 9}, WEB, 400, "temperature", "invalid_value"),
    ("/responses", {**RESPONSE, "store": "yes"}, WEB, 400, "store", "invalid_value"),
    ("/responses", {**RESPONSE, "stream": "yes"}, WEB, 400, "stream", "invalid_value"),
    ("/responses", {**RESPONSE, "model": "gpt-x"}, WEB, 404, "model", "model_not_found"),
    ("/responses", {**RESPONSE, "service_tier": "priority"}, WEB, 403, "service_tier",
     "service_tier_not_allowed"),
    ("/responses", {**RESPONSE, "metadata": {"tenant": "batch"}}, WEB, 403, "metadata.tenant",
     "tenant_mismatch"),
    ("/responses", RESPONSE, {**WEB, "x-semisched-tenant": "batch"}, 403,
     "x-semisched-tenant", "tenant_mismatch"),
    ("/responses", RESPONSE, {**WEB, "x-semisched-deadline": "soon"}, 400,
     "x-semisched-deadline", "invalid_hint"),
    ("/responses", RESPONSE, {**WEB, "x-semisched-class": "vip"}, 400, "x-semisched-class",
     "invalid_hint"),
    ("/embeddings", {"model": "mock-1"}, WEB, 400, "input", "missing_required_parameter"),
    ("/embeddings", {**EMBEDDING, "input": []}, WEB, 400, "input", "invalid_value"),
    ("/embeddings", {**EMBEDDING, "dimensions": 0}, WEB, 400, "dimensions", "invalid_value"),
    ("/embeddings", {**EMBEDDING, "encoding_format": "int8"}, WEB, 400, "encoding_format",
     "invalid_value"),
    ("/embeddings", {**EMBEDDING, "stream": True}, WEB, 400, "stream", "invalid_value"),
    ("/embeddings", {**EMBEDDING, "model": "gpt-x"}, BATCH, 404, "model", "model_not_found"),
]  # fmt: skip


@pytest.mark.parametrize(("path", "body", "headers", "status", "param", "code"), REFUSED)
def test_a_refused_request_is_answered_in_openais_shape_and_never_sent(
    stack: Stack, path: str, body: dict[str, Any], headers: dict[str, str], status: int,
    param: str | None, code: str,
) -> None:  # fmt: skip
    sent = len(stack.capture.bodies)
    response = stack.post(path, body, headers)
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert (error["param"], error["code"], error["type"]) == (param, code,
                                                              "invalid_request_error")  # fmt: skip
    assert len(stack.capture.bodies) == sent  # nothing reached the upstream


@pytest.mark.parametrize("path", ["/responses", "/embeddings"])
@pytest.mark.parametrize("key", [None, "sk-wrong"])
def test_a_missing_or_unknown_key_is_a_401(stack: Stack, path: str, key: str | None) -> None:
    sent = len(stack.capture.bodies)
    headers = {} if key is None else {"authorization": f"Bearer {key}"}
    response = stack.post(path, RESPONSE if path == "/responses" else EMBEDDING, headers)
    assert response.status_code == 401
    assert response.json()["error"]["code"] == "invalid_api_key"
    assert len(stack.capture.bodies) == sent


def test_each_call_is_its_keys_tenants_and_its_hints_reach_the_scheduler(stack: Stack) -> None:
    web, batch = tenant_completed(stack, "web"), tenant_completed(stack, "batch")
    submitted = 'semisched_requests_submitted_total{class="batch",tenant="batch"}'
    before = stack.metric(submitted)
    stack.client("sk-test-batch").responses.create(
        model="mock-1", input="hi", max_output_tokens=4,
        extra_headers={"x-semisched-class": "batch", "x-semisched-deadline": "60",
                       "x-semisched-prior": "4,8"})  # fmt: skip
    stack.client().embeddings.create(model="mock-1", input="hi")
    assert stack.metric(submitted) == before + 1
    assert tenant_completed(stack, "batch") == batch + 1
    assert tenant_completed(stack, "web") == web + 1
    routes = stack.metric('semisched_gateway_responses_total{route="embeddings",status="200"}')
    assert routes >= 1


def test_the_routes_are_the_apis_paths_and_take_only_post(stack: Stack) -> None:
    for spec in APIS.values():
        response = stack.http.get(stack.base.removesuffix("/v1") + spec.path, headers=WEB)
        assert response.status_code == 405, spec.path
        assert response.json()["error"]["code"] == "method_not_allowed"


# -- a Responses stream that fails mid-way: the API's own error event -----------------------


class FailingStream:
    """Stands for a ScheduledStream: ``chunks``, then ``error`` (if any)."""

    def __init__(self, chunks: list[SSEChunk], error: Exception | None) -> None:
        self.chunks, self.error, self.closed = chunks, error, False

    def __aiter__(self) -> Any:
        return self._chunks()

    async def _chunks(self) -> Any:
        for chunk in self.chunks:
            yield chunk
        if self.error is not None:
            raise self.error

    async def aclose(self) -> None:
        self.closed = True


def relayed(chunks: list[SSEChunk], error: Exception | None, *, typed: bool) -> bytes:
    """What :class:`SSEResponse` sends the client for ``chunks`` then ``error``."""
    sent: list[dict[str, Any]] = []

    async def main() -> None:
        gone = asyncio.Event()

        async def receive() -> dict[str, Any]:
            await gone.wait()  # the client stays
            return {"type": "http.disconnect"}

        async def send(message: dict[str, Any]) -> None:
            sent.append(message)

        stream: Any = FailingStream(chunks, error)
        response = SSEResponse(stream, Ticket("t"), {}, on_cancel=lambda: None, typed=typed)
        await response({"type": "http"}, receive, send)
        assert stream.closed

    asyncio.run(main())
    assert sent[-1].get("more_body", False) is False
    return b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")


def test_a_failure_mid_stream_ends_a_responses_stream_with_an_error_event() -> None:
    created = SSEChunk(b'{"type":"response.created","sequence_number":0}',
                       b"response.created")  # fmt: skip
    late = DeadlineExceeded("deadline exceeded (in_flight): late", request_id="r", klass="k",
                            phase="in_flight", deadline=1.0)  # fmt: skip
    typed = relayed([created], late, typed=True).decode()
    first, error, tail = typed.split("\n\n")
    assert first == 'event: response.created\ndata: {"type":"response.created","sequence_number":0}'
    assert tail == "" and "[DONE]" not in typed
    name, data = error.split("\n")
    assert name == "event: error"
    event = json.loads(data.removeprefix("data: "))
    assert event["type"] == "error" and event["code"] == "deadline_exceeded"
    assert event["sequence_number"] == 1 and event["param"] is None
    assert "deadline exceeded" in event["message"]
    chat = relayed([SSEChunk(b'{"choices":[]}')], late, typed=False).decode()
    assert chat.startswith('data: {"choices":[]}\n\ndata: {"error": {')
    assert chat.endswith("data: [DONE]\n\n") and "event:" not in chat


def test_a_whole_responses_stream_is_relayed_event_by_event_and_read_by_the_runtime() -> None:
    usage = {"input_tokens": 3, "output_tokens": 2, "total_tokens": 5,
             "output_tokens_details": {"reasoning_tokens": 1}}  # fmt: skip
    completed = SSEChunk(json.dumps({"type": "response.completed", "sequence_number": 4,
                                     "response": {"usage": usage}}).encode(),
                         b"response.completed")  # fmt: skip
    delta = SSEChunk(b'{"type":"response.output_text.delta","delta":"a"}')  # no event: line
    spec = APIS["responses"]
    assert spec.read_chunk(delta) == (None, True)
    block, content = spec.read_chunk(completed)
    assert block == usage and content is False
    read = spec.read_usage(block)
    assert (read.output_tokens, read.reasoning_tokens) == (2, 1)
    out = relayed([delta, completed], None, typed=True).decode()
    assert out == ('event: response.output_text.delta\ndata: {"type":"response.output_text.delta",'
                   '"delta":"a"}\n\nevent: response.completed\ndata: ' +
                   completed.data.decode() + "\n\n")  # fmt: skip
