"""The mock's Embeddings API (``POST /v1/embeddings``, mockprovider.embeddings), driven by the
real openai client, and the physics of a prefill-only request (mockprovider.physics).

Every test runs in virtual time (``conftest.py``, ``served.serve``).
"""

from __future__ import annotations

import base64
import math
import struct
from dataclasses import replace
from typing import Any

import anyio
import openai
import pytest
from openai.types import CreateEmbeddingResponse
from served import CLIENT_GENERATORS, DEFAULT, PROMPT_TOKENS, serve

from mockprovider import MockConfig, profile
from mockprovider.embeddings import DEFAULT_DIMENSIONS
from mockprovider.physics import EventKind, PhysicsParams, ProviderPhysics

pytestmark = [pytest.mark.anyio, CLIENT_GENERATORS]


def prefill_time(params: PhysicsParams, tokens: int) -> float:
    """When a lone prefill-only request of ``tokens`` completes in the pure physics, checking
    that it shows no first token."""
    physics = ProviderPhysics(params)
    physics.submit(0.0, "e", tokens, 0)
    events = []
    while (nxt := physics.next_event_time()) is not None:
        events += physics.advance(nxt)
    assert [e.kind for e in events] == [EventKind.COMPLETED]
    assert (events[0].input_tokens, events[0].output_tokens) == (tokens, 0)
    assert physics.statistics().active == 0
    return events[0].time


# -- physics --------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["default", "llama-cpp"])
@pytest.mark.parametrize("tokens", [0, 1, 512, 513, 2000])
def test_a_prefill_only_request_holds_its_slot_for_its_prefill_alone(
    name: str, tokens: int
) -> None:
    params = profile(name)
    iterations = max(1, math.ceil(tokens / params.prefill_chunk))  # no decode step
    expected = iterations * params.iteration_ms(1) / 1000
    expected += params.prefill_ms_per_token * tokens / 1000 + params.overhead_ms / 1000
    # The context (the prompt, and one token more an iteration, fluidly) costs K a token.
    expected += params.context_ms_per_token * (tokens + iterations / 2) * iterations / 1000
    assert prefill_time(params, tokens) == pytest.approx(expected, rel=1e-9)


def test_a_prefill_only_request_delays_a_decoding_one_by_its_prefill() -> None:
    params = replace(DEFAULT, slots=2)
    physics = ProviderPhysics(params)
    physics.submit(0.0, "decode", 1, 100)
    physics.submit(0.0, "embed", 1024, 0)
    done: dict[str, float] = {}
    while (nxt := physics.next_event_time()) is not None:
        for event in physics.advance(nxt):
            if event.kind is EventKind.COMPLETED:
                done[event.request_id] = event.time
    two, one = params.iteration_ms(2) / 1000, params.iteration_ms(1) / 1000
    assert done["embed"] == pytest.approx(2 * two, rel=1e-9)  # two prefill chunks, shared
    assert done["decode"] == pytest.approx(2 * two + 99 * one, rel=1e-9)


# -- shapes ---------------------------------------------------------------------------------


async def test_embeddings_of_a_string_strings_and_token_ids() -> None:
    async with serve(MockConfig()) as mock:
        create = mock.client.embeddings.create
        one = await create(model="e", input="a" * 16, encoding_format="float")
        many = await create(model="e", input=["ab", "c" * 9, "ab"], encoding_format="float")
        ids = await create(model="e", input=[1, 2, 3], encoding_format="float")
        id_lists = await create(model="e", input=[[1, 2], [3, 4, 5]], encoding_format="float")
        narrow = await create(model="e", input="a" * 16, dimensions=8, encoding_format="float")
        stats = await mock.stats()
    assert isinstance(one, CreateEmbeddingResponse)
    assert (one.object, one.model) == ("list", "e")
    cases = [(one, 4, 1), (many, 1 + 3 + 1, 3), (ids, 3, 1), (id_lists, 5, 2), (narrow, 4, 1)]
    for result, tokens, vectors in cases:
        assert (result.usage.prompt_tokens, result.usage.total_tokens) == (tokens, tokens)
        assert [d.index for d in result.data] == list(range(vectors))
        assert all(d.object == "embedding" for d in result.data)
    for result in (one, many, ids, id_lists):
        for d in result.data:
            assert len(d.embedding) == DEFAULT_DIMENSIONS
            assert math.fsum(x * x for x in d.embedding) == pytest.approx(1.0, rel=1e-5)
    assert len(narrow.data[0].embedding) == 8
    assert many.data[0].embedding == many.data[2].embedding  # the same input, the same vector
    assert many.data[0].embedding != many.data[1].embedding
    assert ids.data[0].embedding != id_lists.data[0].embedding
    assert stats.requests_by_api.embeddings == stats.counters.completed == 5
    assert stats.physics.completed == 5
    assert stats.quota_used == 4 + 5 + 3 + 5 + 4  # input tokens only
    assert mock.app.state.metrics_snapshot().output_tokens == 0


async def test_base64_vectors_decode_to_the_float_vectors() -> None:
    async with serve(MockConfig()) as mock:
        floats = await mock.client.embeddings.create(
            model="e", input=["x", "y"], encoding_format="float"
        )
        decoded = await mock.client.embeddings.create(model="e", input=["x", "y"])  # base64
        raw = await mock.http.post(
            "/v1/embeddings", json={"model": "e", "input": "x", "encoding_format": "base64"}
        )
    assert [d.embedding for d in decoded.data] == [d.embedding for d in floats.data]
    text = raw.json()["data"][0]["embedding"]
    assert isinstance(text, str)
    data = base64.b64decode(text)
    assert len(data) == 4 * DEFAULT_DIMENSIONS
    assert list(struct.unpack(f"<{DEFAULT_DIMENSIONS}f", data)) == floats.data[0].embedding


async def test_an_embedding_takes_its_prefill_time_and_no_decode_step() -> None:
    async with serve(MockConfig()) as mock:
        start = anyio.current_time()
        result = await mock.client.embeddings.create(
            model="e", input="hello", extra_headers={"x-mock-input-tokens": "1500"}
        )
        waited = anyio.current_time() - start
        stats = await mock.stats()
    assert result.usage.prompt_tokens == 1500
    assert waited == pytest.approx(prefill_time(DEFAULT, 1500), rel=1e-9)
    assert waited == pytest.approx(3 * DEFAULT.iteration_ms(1) / 1000, rel=1e-9)  # 3 chunks
    assert (stats.physics.submitted, stats.physics.completed) == (1, 1)
    assert (stats.physics.active, stats.physics.queued) == (0, 0)


# -- errors, limits and faults --------------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"input": "x"}, "model"),
        ({"model": "e"}, "input"),
        ({"model": "e", "input": ""}, "input"),
        ({"model": "e", "input": []}, "input"),
        ({"model": "e", "input": [""]}, "input"),
        ({"model": "e", "input": [[]]}, "input"),
        ({"model": "e", "input": ["a", 1]}, "input"),
        ({"model": "e", "input": 5}, "input"),
        ({"model": "e", "input": ["a"] * 2049}, "input"),
        ({"model": "e", "input": "x", "encoding_format": "hex"}, "encoding_format"),
        ({"model": "e", "input": "x", "dimensions": 0}, "dimensions"),
        ({"model": "e", "input": "x", "dimensions": 100_000}, "dimensions"),
        ({"model": "e", "input": "x" * 600_000}, "input"),  # beyond the context window
    ],
)
async def test_bad_embedding_requests_get_openai_400(body: dict[str, Any], param: str) -> None:
    async with serve(MockConfig()) as mock:
        response = await mock.http.post("/v1/embeddings", json=body)
        stats = await mock.stats()
    assert response.status_code == 400
    assert response.json()["error"]["param"] == param
    assert stats.counters.bad_requests == 1 and stats.physics.submitted == 0


async def test_rate_windows_answer_429_with_retry_after_and_charge_the_input_tokens() -> None:
    async with serve(MockConfig(time_scale=100, rpm=2, tpm=10)) as mock:
        raw = mock.client.embeddings.with_raw_response
        ok = await raw.create(model="e", input="a" * 24)  # 6 tokens
        with pytest.raises(openai.RateLimitError) as tokens:
            await mock.client.embeddings.create(model="e", input="a" * 24)
        await mock.client.embeddings.create(model="e", input=[1])
        with pytest.raises(openai.RateLimitError) as requests:
            await mock.client.embeddings.create(model="e", input=[1])
        stats = await mock.stats()
    assert ok.headers["x-ratelimit-remaining-tokens"] == "4"
    assert ok.headers["x-ratelimit-remaining-requests"] == "1"
    for info, kind in ((tokens, "tokens"), (requests, "requests")):
        assert info.value.type == kind
        assert info.value.code == "rate_limit_exceeded"
        assert info.value.response.headers["retry-after"] == "1"
    assert "Requested 6" in tokens.value.message
    assert (stats.counters.rate_limited_tokens, stats.counters.rate_limited_requests) == (1, 1)


async def test_faults_and_timeouts_hit_embeddings_as_they_hit_chat() -> None:
    async with serve(MockConfig(error_rate=1.0)) as failing:
        with pytest.raises(openai.InternalServerError) as error:
            await failing.client.embeddings.create(model="e", input="x")
    async with serve(MockConfig(drop_rate=1.0)) as dropping:
        with pytest.raises(openai.APIConnectionError):
            await dropping.client.embeddings.create(model="e", input="x")
    slow = replace(DEFAULT, timeout_s=0.01)
    async with serve(MockConfig(physics=slow)) as timing_out:
        with pytest.raises(openai.InternalServerError) as timeout:
            await timing_out.client.embeddings.create(
                model="e", input="x", extra_headers={"x-mock-input-tokens": "100000"}
            )
        stats = await timing_out.stats()
    assert error.value.status_code == 500
    assert (timeout.value.status_code, timeout.value.code) == (504, "timeout")
    assert stats.counters.timeouts == 1


async def test_stats_count_requests_per_api() -> None:
    async with serve(MockConfig()) as mock:
        await mock.chat(1)
        await mock.client.completions.create(model="m", prompt="x", max_tokens=1)
        await mock.client.responses.create(model="m", input="x", max_output_tokens=1)
        await mock.client.embeddings.create(model="e", input="x")
        await mock.http.post("/v1/embeddings", json={"model": "e"})  # a 400 counts too
        stats = await mock.stats()
    by_api = stats.requests_by_api
    assert (by_api.chat_completions, by_api.completions, by_api.responses) == (1, 1, 1)
    assert by_api.embeddings == 2
    assert stats.counters.requests == 5
    assert (stats.counters.completed, stats.counters.bad_requests) == (4, 1)
    assert stats.quota_used == (PROMPT_TOKENS + 1) + 2 * (1 + 1) + 1
