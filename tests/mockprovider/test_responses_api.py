"""The mock's Responses API (``POST /v1/responses``, mockprovider.apis), driven by the real
openai client: shapes, streamed events, the output cap, the chat route's physics, rate limits,
faults and statistics.

Every test runs in virtual time (``conftest.py``, ``served.serve``).
"""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import anyio
import openai
import pytest
from openai.types.responses import (
    Response,
    ResponseCompletedEvent,
    ResponseContentPartAddedEvent,
    ResponseContentPartDoneEvent,
    ResponseCreatedEvent,
    ResponseFailedEvent,
    ResponseIncompleteEvent,
    ResponseInProgressEvent,
    ResponseOutputItemAddedEvent,
    ResponseOutputItemDoneEvent,
    ResponseTextDeltaEvent,
    ResponseTextDoneEvent,
)
from served import CLIENT_GENERATORS, DEFAULT, PROMPT_TOKENS, Mock, asgi_scope, lone_time, serve

from mockprovider import MockConfig, create_app

pytestmark = [pytest.mark.anyio, CLIENT_GENERATORS]

PROMPT = "Say something."  # PROMPT_TOKENS, as the chat tests' message
EVENTS: dict[str, type[Any]] = {
    "response.created": ResponseCreatedEvent,
    "response.in_progress": ResponseInProgressEvent,
    "response.output_item.added": ResponseOutputItemAddedEvent,
    "response.content_part.added": ResponseContentPartAddedEvent,
    "response.output_text.delta": ResponseTextDeltaEvent,
    "response.output_text.done": ResponseTextDoneEvent,
    "response.content_part.done": ResponseContentPartDoneEvent,
    "response.output_item.done": ResponseOutputItemDoneEvent,
    "response.completed": ResponseCompletedEvent,
    "response.incomplete": ResponseIncompleteEvent,
    "response.failed": ResponseFailedEvent,
}


async def respond(mock: Mock, output: int | None = None, **kwargs: Any) -> Response:
    headers = {} if output is None else {"x-mock-output-tokens": str(output)}
    headers.update(kwargs.pop("extra_headers", {}))
    kwargs.setdefault("input", PROMPT)
    result: Response = await mock.client.responses.create(
        model="m", extra_headers=headers, **kwargs
    )
    return result


async def stream_events(mock: Mock, output: int, **kwargs: Any) -> list[Any]:
    stream = await mock.client.responses.create(
        model="m",
        input=PROMPT,
        stream=True,
        extra_headers={"x-mock-output-tokens": str(output)},
        **kwargs,
    )
    return [event async for event in stream]


# -- shapes ---------------------------------------------------------------------------------


async def test_a_response_parses_counts_its_prompt_and_echoes_the_request() -> None:
    items: Any = [
        {"role": "system", "content": "s" * 8},
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "u" * 10}]},
        {"role": "developer", "content": "d" * 3},
    ]
    async with serve(MockConfig()) as mock:
        result = await respond(
            mock,
            7,
            input=items,
            instructions="i" * 4,
            previous_response_id="resp_earlier",
            store=False,
            metadata={"k": "v"},
            temperature=0.5,
            reasoning={"effort": "low"},
            extra_body={"some_future_field": {"x": 1}},
        )
        plain = await respond(mock, 3)
        stats = await mock.stats()
    assert isinstance(result, Response)
    assert result.object == "response"
    assert result.id.startswith("resp_") and int(result.id[5:], 16) >= 0
    assert (result.status, result.incomplete_details, result.error) == ("completed", None, None)
    assert result.model == "m"
    (message,) = result.output
    assert message.type == "message" and message.id.startswith("msg_")
    assert (message.role, message.status) == ("assistant", "completed")
    assert len(result.output_text.split()) == 7
    # "iiii\nssssssss\nuuuuuuuuuu\nddd": 28 bytes, 7 tokens, counted as the chat route does.
    assert result.usage is not None
    assert (result.usage.input_tokens, result.usage.output_tokens) == (7, 7)
    assert result.usage.total_tokens == 14
    assert result.usage.input_tokens_details.cached_tokens == 0
    assert result.usage.output_tokens_details.reasoning_tokens == 0
    assert (result.previous_response_id, result.store) == ("resp_earlier", False)
    assert (result.metadata, result.temperature, result.instructions) == ({"k": "v"}, 0.5, "iiii")
    assert (plain.previous_response_id, plain.store) == (None, True)
    assert plain.usage is not None and plain.usage.input_tokens == PROMPT_TOKENS
    assert plain.output_text == "lorem ipsum dolor"
    assert (stats.counters.requests, stats.counters.completed) == (2, 2)
    assert stats.requests_by_api.responses == 2
    assert stats.quota_used == 14 + PROMPT_TOKENS + 3


async def test_max_output_tokens_caps_the_answer_and_makes_it_incomplete() -> None:
    async with serve(MockConfig(default_output_tokens=5)) as mock:
        default = await respond(mock)
        capped = await respond(mock, 50, max_output_tokens=20)
        under_the_cap = await respond(mock, 3, max_output_tokens=20)
        by_cap = await respond(mock, max_output_tokens=9)
        metadata_hint = await respond(mock, metadata={"mock_output_tokens": "6"})
    for result, tokens, status in [
        (default, 5, "completed"),
        (capped, 20, "incomplete"),
        (under_the_cap, 3, "completed"),
        (by_cap, 9, "completed"),
        (metadata_hint, 6, "completed"),
    ]:
        assert result.usage is not None
        assert result.usage.output_tokens == tokens
        assert len(result.output_text.split()) == tokens
        assert result.status == status
    assert capped.incomplete_details is not None
    assert capped.incomplete_details.reason == "max_output_tokens"
    assert capped.output[0].status == "incomplete"  # type: ignore[union-attr]
    assert capped.max_output_tokens == 20


# -- streaming ------------------------------------------------------------------------------


async def test_a_stream_is_typed_events_that_add_up_to_the_response() -> None:
    async with serve(MockConfig()) as mock:
        events = await stream_events(mock, 10)
        full = await respond(mock, 10)
        stats = await mock.stats()
        snapshot = mock.app.state.metrics_snapshot()
    types = [event.type for event in events]
    assert types == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
        *["response.output_text.delta"] * 5,  # the first word, then four groups
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.completed",
    ]
    for event in events:
        assert type(event) is EVENTS[event.type]  # openai parsed every one
    assert [event.sequence_number for event in events] == list(range(len(events)))
    text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    done = events[-1].response
    assert text == done.output_text == full.output_text
    assert events[-4].text == text
    assert done.status == "completed"
    assert done.usage is not None
    assert done.usage.output_tokens == len(text.split()) == 10
    assert done.usage.input_tokens == PROMPT_TOKENS
    assert done.id == events[0].response.id
    assert events[0].response.status == "in_progress" and events[0].response.output == []
    assert events[2].item.id == done.output[0].id
    assert stats.counters.completed == 2
    assert snapshot.output_tokens == 2 * done.usage.output_tokens
    assert stats.quota_used == 2 * done.usage.total_tokens


async def test_a_stream_cut_at_the_cap_ends_with_response_incomplete() -> None:
    async with serve(MockConfig()) as mock:
        events = await stream_events(mock, 50, max_output_tokens=6)
        single = await stream_events(mock, 1)
    last = events[-1]
    assert isinstance(last, ResponseIncompleteEvent)
    assert last.response.status == "incomplete"
    assert last.response.incomplete_details is not None
    assert last.response.incomplete_details.reason == "max_output_tokens"
    assert last.response.usage is not None and last.response.usage.output_tokens == 6
    assert "".join(e.delta for e in events if e.type == "response.output_text.delta").split() == (
        last.response.output_text.split()
    )
    assert [e.delta for e in single if e.type == "response.output_text.delta"] == ["lorem"]
    assert single[-1].type == "response.completed"


async def test_the_stream_on_the_wire_names_each_event_and_sends_no_done() -> None:
    body = {"model": "m", "input": PROMPT, "stream": True, "max_output_tokens": 3}
    async with serve(MockConfig()) as mock:
        response = await mock.http.post("/v1/responses", json=body)
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/event-stream")
    blocks = [b for b in response.text.split("\n\n") if b]
    assert "[DONE]" not in response.text
    for block in blocks:
        event_line, data_line = block.split("\n")
        assert event_line.startswith("event: ") and data_line.startswith("data: ")
        assert json.loads(data_line[6:])["type"] == event_line[7:]
    assert blocks[-1].startswith("event: response.completed\n")


async def test_a_stream_sends_its_first_events_at_the_first_token() -> None:
    # At the ASGI level: httpx2.ASGITransport hands the client the body only once it is whole.
    app = create_app(MockConfig(), clock=anyio.current_time)
    body = {"model": "m", "input": PROMPT, "stream": True}
    incoming = [{"type": "http.request", "body": json.dumps(body).encode(), "more_body": False}]
    sent: list[tuple[float, dict[str, Any]]] = []

    async def receive() -> dict[str, Any]:
        if incoming:
            return incoming.pop()
        await anyio.sleep_forever()  # the client stays connected
        raise AssertionError("unreachable")

    async def send(message: dict[str, Any]) -> None:
        sent.append((anyio.current_time() - start, message))

    start = anyio.current_time()
    await app(asgi_scope("/v1/responses", {"x-mock-output-tokens": "100"}), receive, send)
    first_token = 2 * DEFAULT.iteration_ms(1) / 1000  # the prefill, then one decode iteration
    times = [t for t, _ in sent]
    assert times[:2] == [pytest.approx(first_token, rel=1e-9)] * 2
    assert times[2:] == [pytest.approx(lone_time(100), rel=1e-9)] * (len(sent) - 2)
    head = sent[1][1]["body"].decode()
    assert head.count("event: ") == 5 and "response.output_text.delta" in head
    assert sent[-1][1]["body"].startswith(b"event: response.completed\n")


async def test_a_response_takes_the_chat_routes_physics_time() -> None:
    async with serve(MockConfig()) as mock:
        start = anyio.current_time()
        await respond(mock, 100)
        alone = anyio.current_time() - start
        start = anyio.current_time()
        await mock.chat(100)
        chat = anyio.current_time() - start
    assert alone == pytest.approx(lone_time(100), rel=1e-9)
    assert chat == pytest.approx(alone, rel=1e-9)


# -- errors, limits and faults --------------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"input": PROMPT}, "model"),
        ({"model": "m", "input": 5}, "input"),
        ({"model": "m", "input": [1]}, "input[0]"),
        ({"model": "m", "input": [{"role": 1, "content": "x"}]}, "input[0].role"),
        ({"model": "m", "input": [{"role": "user", "content": 5}]}, "input[0].content"),
        ({"model": "m", "input": [{"role": "user", "content": ["x"]}]}, "input[0].content"),
        ({"model": "m", "input": PROMPT, "instructions": 5}, "instructions"),
        ({"model": "m", "input": PROMPT, "max_output_tokens": 0}, "max_output_tokens"),
        ({"model": "m", "input": PROMPT, "stream": "yes"}, "stream"),
        ({"model": "m", "input": PROMPT, "store": "no"}, "store"),
        ({"model": "m", "input": PROMPT, "previous_response_id": 5}, "previous_response_id"),
        ({"model": "m", "input": PROMPT, "max_output_tokens": 10**9}, "max_output_tokens"),
    ],
)
async def test_bad_responses_requests_get_openai_400(body: dict[str, Any], param: str) -> None:
    async with serve(MockConfig()) as mock:
        response = await mock.http.post("/v1/responses", json=body)
        stats = await mock.stats()
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["param"] == param
    assert isinstance(error["message"], str) and "code" in error
    assert stats.counters.bad_requests == 1 and stats.physics.submitted == 0


async def test_rate_windows_answer_429_with_retry_after_and_charge_max_output_tokens() -> None:
    async with serve(MockConfig(time_scale=100, rpm=2, tpm=100)) as mock:
        hint = {"x-mock-input-tokens": "30"}
        raw = mock.client.responses.with_raw_response
        ok = await raw.create(model="m", input=PROMPT, max_output_tokens=40, extra_headers=hint)
        with pytest.raises(openai.RateLimitError) as tokens:
            await respond(mock, max_output_tokens=40, extra_headers=hint)
        await respond(mock, 1, max_output_tokens=1)
        with pytest.raises(openai.RateLimitError) as requests:
            await respond(mock, 1)
        stats = await mock.stats()
    assert ok.headers["x-ratelimit-remaining-tokens"] == "30"  # 100 - (30 + 40)
    assert ok.headers["x-ratelimit-remaining-requests"] == "1"
    assert ok.headers["x-request-id"].startswith("req_mock")
    assert ok.parse().usage is not None
    for info, kind in ((tokens, "tokens"), (requests, "requests")):
        assert info.value.type == kind
        assert info.value.code == "rate_limit_exceeded"
        assert info.value.response.headers["retry-after"] == "1"
        assert int(info.value.response.headers["retry-after-ms"]) > 0
    assert "Limit 100, Used 70, Requested 70" in tokens.value.message
    counters = stats.counters
    assert (counters.rate_limited_tokens, counters.rate_limited_requests) == (1, 1)
    assert (counters.requests, counters.completed) == (4, 2)
    assert stats.requests_by_api.responses == 4


@pytest.mark.parametrize("stream", [False, True])
async def test_faults_hit_responses_as_they_hit_chat(stream: bool) -> None:
    async with serve(MockConfig(error_rate=1.0)) as failing:
        with pytest.raises(openai.InternalServerError) as info:
            await respond(failing, 1, stream=stream)
    async with serve(MockConfig(drop_rate=1.0)) as dropping:
        with pytest.raises(openai.APIConnectionError):
            await (stream_events(dropping, 20_000) if stream else respond(dropping, 50))
        stats = await dropping.stats()
    assert info.value.status_code == 500 and info.value.type == "server_error"
    assert stats.counters.faults_drop == 1
    assert (stats.physics.active, stats.physics.queued) == (0, 0)


async def test_a_physics_timeout_is_a_504_or_a_failed_stream() -> None:
    physics = replace(DEFAULT, timeout_s=1.0, slots=1)
    async with serve(MockConfig(physics=physics)) as mock:
        with pytest.raises(openai.InternalServerError) as info:
            await respond(mock, 10_000)
        events = await stream_events(mock, 10_000)
        stats = await mock.stats()
    assert (info.value.status_code, info.value.code) == (504, "timeout")
    assert events[4].type == "response.output_text.delta"  # the first token came
    failed = events[-1]
    assert isinstance(failed, ResponseFailedEvent)
    assert failed.sequence_number == len(events) - 1
    assert failed.response.status == "failed"
    assert failed.response.error is not None and failed.response.error.code == "server_error"
    assert "timed out" in failed.response.error.message
    assert stats.counters.timeouts == 2
