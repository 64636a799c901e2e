"""The mock provider's HTTP app, driven by the real openai client (mockprovider.app): shapes,
streaming, request errors, auth, rate limits, quota and the stats endpoint.

Every test runs in virtual time (``conftest.py``, ``served.serve``). Timing, faults and
cancellation are in ``test_serving.py``; the real server (uvicorn) in ``test_server.py``.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import asdict
from typing import Any

import anyio
import openai
import pytest
from openai.types import Completion
from openai.types.chat import ChatCompletion, ChatCompletionChunk
from served import CLIENT_GENERATORS, MESSAGES, PROMPT_TOKENS, lone_time, serve

from mockprovider import MockConfig, MockStats

pytestmark = [pytest.mark.anyio, CLIENT_GENERATORS]

DURATION = re.compile(r"^(\d+ms|(\d+h)?(\d+m)?\d+(\.\d+)?s)$")


# -- shapes ---------------------------------------------------------------------------------


async def test_chat_completion_parses_with_hinted_usage() -> None:
    async with serve(MockConfig()) as mock:
        result = await mock.chat(7, extra_headers={"x-mock-input-tokens": "11"})
    assert isinstance(result, ChatCompletion)
    assert result.object == "chat.completion"
    assert result.model == "m"
    assert result.id.startswith("chatcmpl-")
    assert result.usage is not None
    assert (result.usage.prompt_tokens, result.usage.completion_tokens) == (11, 7)
    assert result.usage.total_tokens == 18
    (choice,) = result.choices
    assert choice.finish_reason == "stop"
    assert choice.message.role == "assistant"
    assert choice.message.content is not None
    assert len(choice.message.content.split()) == 7


async def test_output_length_rules_and_prompt_estimate() -> None:
    async with serve(MockConfig(default_output_tokens=5)) as mock:
        default = await mock.chat()
        by_max = await mock.chat(max_tokens=9)
        capped = await mock.chat(50, max_completion_tokens=20)
        hinted_below_cap = await mock.chat(3, max_tokens=20)
        long_prompt = await mock.client.chat.completions.create(
            model="m", messages=[{"role": "user", "content": "x" * 41}]
        )
    cases = [(default, 5, "stop"), (by_max, 9, "stop"), (capped, 20, "length")]
    cases.append((hinted_below_cap, 3, "stop"))
    for result, tokens, finish in cases:
        assert result.usage is not None
        assert result.usage.completion_tokens == tokens
        assert result.choices[0].finish_reason == finish
    assert long_prompt.usage is not None
    assert long_prompt.usage.prompt_tokens == 11  # 41 bytes / 4, rounded up


async def test_legacy_completions_accept_string_and_list_prompts() -> None:
    async with serve(MockConfig()) as mock:
        one = await mock.client.completions.create(model="m", prompt="a" * 16, max_tokens=4)
        many = await mock.client.completions.create(model="m", prompt=["ab", "cd"], max_tokens=2)
        tokens = await mock.client.completions.create(model="m", prompt=[1, 2, 3], max_tokens=1)
    assert isinstance(one, Completion)
    assert one.object == "text_completion"
    assert one.choices[0].text == "lorem ipsum dolor sit"
    assert one.usage is not None
    assert (one.usage.prompt_tokens, one.usage.completion_tokens) == (4, 4)
    assert many.usage is not None
    assert many.usage.prompt_tokens == 1
    assert tokens.usage is not None
    assert tokens.usage.prompt_tokens == 3


async def test_models_list_and_retrieve() -> None:
    async with serve(MockConfig(model="mock-xl")) as mock:
        listed = await mock.client.models.list()
        model = await mock.client.models.retrieve("mock-xl")
        with pytest.raises(openai.NotFoundError):
            await mock.client.models.retrieve("other")
    assert [m.id for m in listed.data] == ["mock-xl"]
    assert model.owned_by == "mock"


# -- streaming ------------------------------------------------------------------------------


@pytest.mark.parametrize("include_usage", [False, True])
async def test_streaming_chunks_reassemble(include_usage: bool) -> None:
    tokens = 10
    async with serve(MockConfig()) as mock:
        full = await mock.chat(tokens)
        extra: dict[str, Any] = {"stream_options": {"include_usage": True}} if include_usage else {}
        chunks = await mock.stream_all(tokens, **extra)
    assert all(isinstance(c, ChatCompletionChunk) for c in chunks)
    # First word with the role, 4 content chunks, the finish chunk, [the usage chunk].
    assert len(chunks) == 1 + 4 + 1 + int(include_usage)
    content = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert content == full.choices[0].message.content
    assert chunks[0].choices[0].delta.role == "assistant"
    finish = chunks[5]
    assert finish.choices[0].finish_reason == "stop"
    assert all(c.choices[0].finish_reason is None for c in chunks[:5])
    if include_usage:
        last = chunks[-1]
        assert last.choices == []
        assert last.usage is not None
        assert last.usage.model_dump() == full.usage.model_dump()  # type: ignore[union-attr]
        assert all(c.usage is None for c in chunks[:-1])
    else:
        assert all(c.usage is None for c in chunks)


async def test_streaming_legacy_completions_and_single_token() -> None:
    async with serve(MockConfig()) as mock:
        stream = await mock.client.completions.create(
            model="m", prompt="hi", max_tokens=1, stream=True
        )
        chunks = [chunk async for chunk in stream]
    assert [c.choices[0].text for c in chunks] == ["lorem", ""]
    assert [c.choices[0].finish_reason for c in chunks] == [None, "stop"]


async def test_stream_ends_with_done_on_the_wire() -> None:
    body = {"model": "m", "messages": MESSAGES, "stream": True, "max_tokens": 3}
    async with serve(MockConfig()) as mock:
        response = await mock.http.post("/v1/chat/completions", json=body)
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/event-stream")
    events = [e for e in response.text.split("\n\n") if e]
    assert events[-1] == "data: [DONE]"
    assert all(e.startswith("data: ") for e in events)


# -- request errors -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "param"),
    [
        (b"{not json", None),
        (b"[1, 2]", None),
        (b"[" * 100_000, None),
        (json.dumps({"messages": MESSAGES}).encode(), "model"),
        (json.dumps({"model": "m"}).encode(), "messages"),
        (json.dumps({"model": "m", "messages": "hi"}).encode(), "messages"),
        (json.dumps({"model": "m", "messages": []}).encode(), "messages"),
        (json.dumps({"model": "m", "messages": [1]}).encode(), "messages[0]"),
        (json.dumps({"model": "m", "messages": [{"content": "x"}]}).encode(), "messages[0].role"),
        (
            json.dumps({"model": "m", "messages": [{"role": "user", "content": 5}]}).encode(),
            "messages[0].content",
        ),
        (json.dumps({"model": 5, "messages": MESSAGES}).encode(), "model"),
        (
            json.dumps({"model": "m", "messages": MESSAGES, "max_tokens": "9"}).encode(),
            "max_tokens",
        ),
        (json.dumps({"model": "m", "messages": MESSAGES, "max_tokens": 0}).encode(), "max_tokens"),
        (json.dumps({"model": "m", "messages": MESSAGES, "stream": "yes"}).encode(), "stream"),
        (
            json.dumps({"model": "m", "messages": MESSAGES, "stream_options": {}}).encode(),
            "stream_options",
        ),
        (json.dumps({"model": "m", "messages": MESSAGES, "n": 2}).encode(), "n"),
    ],
)
async def test_bad_chat_requests_get_openai_400(body: bytes, param: str | None) -> None:
    async with serve(MockConfig()) as mock:
        response = await mock.http.post("/v1/chat/completions", content=body)
        stats = await mock.stats()
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["type"] == "invalid_request_error"
    assert error["param"] == param
    assert isinstance(error["message"], str)
    assert "code" in error
    assert stats.counters.bad_requests == 1
    assert stats.physics.submitted == 0


@pytest.mark.parametrize(
    ("body", "headers", "param"),
    [
        ({"model": "m"}, {}, "prompt"),
        ({"model": "m", "prompt": 5}, {}, "prompt"),
        ({"model": "m", "prompt": ["a", 1]}, {}, "prompt"),
        ({"model": "m", "prompt": "a"}, {"x-mock-output-tokens": "many"}, "x-mock-output-tokens"),
        ({"model": "m", "prompt": "a"}, {"x-mock-input-tokens": "-1"}, "x-mock-input-tokens"),
        ({"model": "m", "prompt": "a"}, {"x-mock-fault": "explode"}, "x-mock-fault"),
    ],
)
async def test_bad_completion_requests_get_openai_400(
    body: dict[str, Any], headers: dict[str, str], param: str
) -> None:
    async with serve(MockConfig()) as mock:
        response = await mock.http.post("/v1/completions", json=body, headers=headers)
    assert response.status_code == 400
    assert response.json()["error"]["param"] == param


async def test_a_cap_beyond_the_context_window_is_refused_at_once_like_vllm() -> None:
    async with serve(MockConfig()) as mock:
        start = anyio.current_time()
        with pytest.raises(openai.BadRequestError) as info:
            await mock.chat(max_tokens=10**12)
        waited = anyio.current_time() - start
        stats = await mock.stats()
        async with serve(MockConfig(context_tokens=4096)) as small:
            with pytest.raises(openai.BadRequestError) as smaller:
                await small.chat(max_completion_tokens=4093)
            assert (await small.chat(max_completion_tokens=4092)).usage is not None
    assert waited == 0.0  # answered, not decoded until a timeout
    assert info.value.body == {
        "message": "'max_tokens' or 'max_completion_tokens' is too large: 1000000000000. "
        f"This model's maximum context length is 131072 tokens and your request has "
        f"{PROMPT_TOKENS} input tokens (1000000000000 > 131072 - {PROMPT_TOKENS}).",
        "type": "BadRequestError",
        "param": "max_tokens",
        "code": 400,
    }
    assert "maximum context length is 4096 tokens" in smaller.value.message
    assert stats.counters.bad_requests == 1 and stats.physics.submitted == 0


async def test_openai_client_raises_bad_request_and_unknown_routes_are_openai_shaped() -> None:
    async with serve(MockConfig()) as mock:
        with pytest.raises(openai.BadRequestError) as info:
            await mock.client.chat.completions.create(model="m", messages="hi")  # type: ignore[arg-type]
        missing = await mock.http.get("/v1/nothing")
        wrong_method = await mock.http.get("/v1/chat/completions")
    assert info.value.status_code == 400
    assert missing.status_code == 404
    assert missing.json()["error"]["code"] == "not_found"
    assert wrong_method.status_code == 405
    assert "POST" in wrong_method.headers["allow"]


async def test_api_key_is_required_and_never_echoed() -> None:
    secret = "sk-very-secret"
    config = MockConfig(api_key=secret)
    assert secret not in repr(config)
    async with serve(config, api_key=secret) as good:
        assert (await good.chat(1)).usage is not None
    async with serve(config, api_key="wrong-key") as bad:
        with pytest.raises(openai.AuthenticationError) as info:
            await bad.chat(1)
        bare = await bad.http.post("/v1/chat/completions", json={"model": "m", "messages": []})
        models = await bad.http.get("/v1/models")
        counters = bad.app.state.mock_stats().counters
    assert info.value.status_code == 401
    assert info.value.code == "invalid_api_key"
    for response in (bare, models):
        assert response.status_code == 401
        assert response.json()["error"]["type"] == "invalid_request_error"
    for text in (str(info.value.body), bare.text):
        assert secret not in text
        assert "wrong-key" not in text
    assert (counters.requests, counters.unauthorized, counters.bad_requests) == (2, 3, 0)


# -- rate limits and quota ------------------------------------------------------------------


async def test_rpm_limit_answers_429_with_openai_headers_in_real_time() -> None:
    scale = 1000.0  # the 60 virtual seconds of the window are 60 real milliseconds
    async with serve(MockConfig(time_scale=scale, rpm=2, tpm=10_000)) as mock:
        raw = mock.client.chat.completions.with_raw_response
        first = await raw.create(model="m", messages=MESSAGES, max_tokens=1)
        second = await raw.create(model="m", messages=MESSAGES, max_tokens=1)
        with pytest.raises(openai.RateLimitError) as info:
            await mock.chat(1)
        refused_at = anyio.current_time()
        stats = await mock.stats()
        # Waiting what the header says, on the client's own clock, is exactly enough.
        await anyio.sleep(int(info.value.response.headers["retry-after-ms"]) / 1000)
        assert (await mock.chat(1)).usage is not None
    assert first.parse().usage is not None
    assert first.headers["x-ratelimit-limit-requests"] == "2"
    assert first.headers["x-ratelimit-remaining-requests"] == "1"
    assert second.headers["x-ratelimit-remaining-requests"] == "0"
    assert first.headers["x-ratelimit-limit-tokens"] == "10000"
    charge = PROMPT_TOKENS + 1
    assert int(second.headers["x-ratelimit-remaining-tokens"]) == 10_000 - 2 * charge
    for headers in (first.headers, second.headers):
        assert DURATION.match(headers["x-ratelimit-reset-requests"])
        assert DURATION.match(headers["x-ratelimit-reset-tokens"])
    error = info.value
    assert error.status_code == 429
    assert error.code == "rate_limit_exceeded"
    assert error.type == "requests"
    assert error.param is None
    headers = error.response.headers
    # Two calls of 2 iterations each came before: 60 s - 0.07 s of the window remain.
    waited = (60.0 - stats.virtual_time) / scale
    assert stats.virtual_time == pytest.approx(2 * lone_time(1), rel=1e-9)
    assert refused_at * scale == pytest.approx(stats.virtual_time, rel=1e-9)
    assert headers["retry-after"] == "1"
    assert headers["retry-after-ms"] == str(math.ceil(waited * 1000)) == "60"
    assert headers["x-ratelimit-remaining-requests"] == "0"
    assert headers["x-ratelimit-reset-requests"] == "60ms"
    assert stats.counters.rate_limited_requests == 1
    assert stats.physics.submitted == 2


async def test_tpm_limit_charges_prompt_plus_max_tokens() -> None:
    async with serve(MockConfig(time_scale=100, tpm=100)) as mock:
        hint = {"x-mock-input-tokens": "30"}
        raw = mock.client.chat.completions.with_raw_response
        ok = await raw.create(model="m", messages=MESSAGES, max_tokens=40, extra_headers=hint)
        with pytest.raises(openai.RateLimitError) as limited:
            await mock.chat(extra_headers=hint, max_tokens=40)
        with pytest.raises(openai.RateLimitError) as too_large:
            await mock.chat(extra_headers=hint, max_tokens=200)
        counters = (await mock.stats()).counters
    assert ok.headers["x-ratelimit-remaining-tokens"] == "30"
    assert "x-ratelimit-limit-requests" not in ok.headers
    assert limited.value.type == "tokens"
    assert limited.value.code == "rate_limit_exceeded"
    # 60 virtual seconds less the first call's 41 iterations, at 100x: 0.59 real seconds.
    assert limited.value.response.headers["retry-after"] == "1"
    assert limited.value.response.headers["retry-after-ms"] == "593"
    assert "Limit 100, Used 70, Requested 70" in limited.value.message
    assert too_large.value.type == "tokens"
    assert "Request too large" in too_large.value.message
    assert "retry-after" not in too_large.value.response.headers
    assert (counters.rate_limited_tokens, counters.rate_limited_requests) == (2, 0)


async def test_quota_exhaustion_answers_insufficient_quota() -> None:
    async with serve(MockConfig(quota_tokens=50)) as mock:
        first = await mock.chat(30, extra_headers={"x-mock-input-tokens": "20"})
        with pytest.raises(openai.RateLimitError) as info:
            await mock.chat(1)
        stats = await mock.stats()
    assert first.usage is not None
    assert first.usage.total_tokens == 50
    error = info.value
    assert error.code == "insufficient_quota"
    assert error.type == "insufficient_quota"
    assert "You exceeded your current quota" in error.message
    assert "retry-after" not in error.response.headers
    assert (stats.quota_limit, stats.quota_used) == (50, 50)
    assert stats.counters.insufficient_quota == 1


# -- statistics -----------------------------------------------------------------------------


async def test_stats_endpoint_serves_the_dataclass_as_json() -> None:
    config = MockConfig(rpm=10, tpm=1000, quota_tokens=500, time_scale=4.0, api_key="k")
    async with serve(config) as mock:
        await mock.chat(10, max_tokens=20)
        response = await mock.http.get("/v1/mock/stats", headers={"authorization": "Bearer k"})
        stats = mock.app.state.mock_stats()
        denied = await mock.http.get("/v1/mock/stats")
    assert response.json() == json.loads(json.dumps(asdict(stats)))
    assert MockStats.from_json(response.json()) == stats
    assert stats.time_scale == 4.0
    assert stats.requests_window is not None and stats.requests_window.remaining == 9
    assert stats.tokens_window is not None and stats.tokens_window.remaining == 1000 - 24
    assert (stats.quota_limit, stats.quota_used) == (500, PROMPT_TOKENS + 10)
    assert stats.counters.requests == 1 and stats.counters.completed == 1
    assert denied.status_code == 401
    assert mock.app.state.mock_stats().counters.unauthorized == 1
