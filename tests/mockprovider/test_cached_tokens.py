"""Cached prompt tokens (mockprovider.prefix_cache): the usage of chat, legacy completions,
Responses and batch lines reports the longest prefix seen before, in whole blocks of 128
tokens, from 1024 tokens on; driven by the real openai client in virtual time.
"""

from __future__ import annotations

import json
from typing import Any

import anyio
import openai
import pytest
from served import CLIENT_GENERATORS, Mock, serve

from mockprovider import MockConfig
from mockprovider.prefix_cache import MAX_BLOCKS, PrefixCache

pytestmark = [pytest.mark.anyio, CLIENT_GENERATORS]

LONG = "".join(f"{i:04d} " for i in range(1000))  # 5000 bytes: 1250 tokens, 9 whole blocks
CACHED = 9 * 128  # 1152


def messages(text: str) -> Any:
    return [{"role": "user", "content": text}]


async def chat_cached(mock: Mock, text: str, **headers: str) -> int:
    answer = await mock.client.chat.completions.create(
        model="m", messages=messages(text), extra_headers={"x-mock-output-tokens": "2", **headers}
    )
    assert answer.usage is not None and answer.usage.prompt_tokens_details is not None
    cached = answer.usage.prompt_tokens_details.cached_tokens
    assert isinstance(cached, int)
    return cached


def test_the_rule_blocks_minimum_cap_and_token_ids() -> None:
    cache = PrefixCache()
    assert cache.cached_tokens(LONG, 1250) == 0
    cache.remember(LONG)
    assert len(cache) == 9
    assert cache.cached_tokens(LONG, 1250) == CACHED
    assert cache.cached_tokens(LONG + "more", 1251) == CACHED
    assert cache.cached_tokens(LONG[:4608] + "x" * 392, 1250) == CACHED  # 9 blocks alike
    assert cache.cached_tokens(LONG[:4607] + "x" * 393, 1250) == 8 * 128
    assert cache.cached_tokens(LONG[:3584] + "x" * 1416, 1250) == 0  # 7 blocks: under 1024
    assert cache.cached_tokens("y" + LONG[1:], 1250) == 0  # a prefix, not any block
    assert cache.cached_tokens(LONG, 1000) == 1000  # never more than the prompt (a hint)
    assert MAX_BLOCKS >= 100_000


async def test_a_repeated_prefix_is_reported_as_cached_on_every_api() -> None:
    async with serve(MockConfig()) as mock:
        first = await chat_cached(mock, LONG)
        again = await chat_cached(mock, LONG)
        longer = await chat_cached(mock, LONG + " and a new question")
        short = await chat_cached(mock, "Say something.")
        legacy = await mock.client.completions.create(model="m", prompt=LONG, max_tokens=2)
        response = await mock.client.responses.create(model="m", input=LONG, max_output_tokens=2)
        stream = await mock.client.chat.completions.create(
            model="m",
            messages=messages(LONG),
            max_tokens=2,
            stream=True,
            stream_options={"include_usage": True},
        )
        chunks = [chunk async for chunk in stream]
    assert (first, again, longer, short) == (0, CACHED, CACHED, 0)
    assert legacy.usage is not None and legacy.usage.prompt_tokens_details is not None
    assert legacy.usage.prompt_tokens_details.cached_tokens == CACHED
    assert legacy.usage.prompt_tokens == 1250  # the other fields as before
    assert response.usage is not None
    assert response.usage.input_tokens_details.cached_tokens == CACHED
    usage = chunks[-1].usage
    assert usage is not None and usage.prompt_tokens_details is not None
    assert usage.prompt_tokens_details.cached_tokens == CACHED


async def test_only_a_served_request_fills_the_cache() -> None:
    async with serve(MockConfig(rpm=1)) as mock:
        await chat_cached(mock, "Say something.")  # spends the minute's one request
        with pytest.raises(openai.RateLimitError):
            await chat_cached(mock, LONG)
        await anyio.sleep(60)
        with pytest.raises(openai.InternalServerError):
            await chat_cached(mock, LONG, **{"x-mock-fault": "error"})
        await anyio.sleep(60)
        served = await chat_cached(mock, LONG)
        await anyio.sleep(60)
        after = await chat_cached(mock, LONG)
    assert (served, after) == (0, CACHED)


async def test_batch_lines_enter_the_cache_in_file_order() -> None:
    lines = [
        {
            "custom_id": f"r{i}",
            "method": "POST",
            "url": "/v1/chat/completions",
            "body": {"model": "m", "messages": messages(LONG), "max_tokens": 2},
        }
        for i in range(3)
    ]
    data = "".join(json.dumps(x) + "\n" for x in lines).encode()
    async with serve(MockConfig(batch_turnaround_s=100, batch_turnaround_sigma=0)) as mock:
        uploaded = await mock.client.files.create(file=("in.jsonl", data), purpose="batch")
        batch = await mock.client.batches.create(
            input_file_id=uploaded.id, endpoint="/v1/chat/completions", completion_window="24h"
        )
        await anyio.sleep(100)
        done = await mock.client.batches.retrieve(batch.id)
        assert done.output_file_id is not None
        output = (await mock.client.files.content(done.output_file_id)).text.splitlines()
        after = await chat_cached(mock, LONG)
    usages = [json.loads(x)["response"]["body"]["usage"] for x in output]
    assert [u["prompt_tokens_details"]["cached_tokens"] for u in usages] == [0, CACHED, CACHED]
    assert done.usage is not None
    assert done.usage.input_tokens_details.cached_tokens == 2 * CACHED
    assert after == CACHED
