"""Compress-and-route in the SDK: a borderline prompt is compressed once at submit and sent
compressed only to the short pool, with the real openai client against in-process mock
endpoints in virtual time."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import anyio
import httpx2
import openai
import pytest

from mockprovider.app import MockConfig, create_app
from semisched import Endpoint, RuntimeOptions, Scheduler
from semisched.compress import runtime as compression_module
from semisched.compress.runtime import CompressionStats
from semisched.core.config import RoutingConfig
from semisched.runtime.calls import scheduler_config

pytestmark = pytest.mark.anyio

B_SHORT, CAP = 1024, 128  # the short pool's context; every call's max_tokens
SYSTEM = "You are a careful analyst. Answer in three bullet points."
CODE = "```python\ndef total(rows):\n    return sum(r.amount for r in rows)\n```"
TOPICS = ["latency", "throughput", "billing", "storage", "routing", "caching", "quotas"]


def prose(sentences: int, seed: int = 0) -> str:
    """Distinct sentences of plain prose (about 70 bytes each)."""
    return " ".join(
        f"Note {seed}.{i}: the {TOPICS[(i + seed) % 7]} figures moved by {(i * 37) % 90 + 3} "
        f"percent in week {i % 13 + 1}."
        for i in range(sentences)
    )


def borderline(sentences: int = 64) -> list[dict[str, Any]]:
    """A system prompt and a question with a code block in prose: ~1.2k estimated tokens,
    which with ``max_tokens=128`` is in (1024, 1536]."""
    question = f"{prose(sentences // 2)}\n\n{CODE}\n\n{prose(sentences // 2, 1)} What changed?"
    return [{"role": "system", "content": SYSTEM}, {"role": "user", "content": question}]


def estimated_tokens(messages: list[dict[str, Any]]) -> int:
    """The scheduler's starting estimate: 4 bytes a token of the joined texts."""
    return -(-len("\n".join(m["content"] for m in messages).encode()) // 4)


@dataclass
class Capture(httpx2.AsyncBaseTransport):
    """Writes down the JSON body of every completion request an endpoint gets."""

    inner: httpx2.AsyncBaseTransport
    bodies: list[dict[str, Any]] = field(default_factory=list)

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        if request.url.path.endswith("completions"):
            await request.aread()
            self.bodies.append(json.loads(request.content))
        return await self.inner.handle_async_request(request)


@asynccontextmanager
async def two_pools(**routing: Any) -> AsyncIterator[tuple[Scheduler, Capture, Capture]]:
    """A scheduler over a short endpoint (context ``B_SHORT``) and a long one (8k)."""
    async with (
        httpx2.AsyncClient(transport=(short := Capture(_mock()))) as h1,
        httpx2.AsyncClient(transport=(long := Capture(_mock()))) as h2,
    ):
        fleet = [
            Endpoint("short", _client(h1), pool="short", context_tokens=B_SHORT),
            Endpoint("long", _client(h2), pool="long", context_tokens=8192),
        ]
        config = RoutingConfig(policy="token_budget", short_pool_tokens=B_SHORT, **routing)
        async with Scheduler(
            endpoints=fleet,
            config=scheduler_config("final_adrr_olc", routing=config),
            options=RuntimeOptions(seed=0),
        ) as s:
            yield s, short, long


def _mock() -> httpx2.AsyncBaseTransport:
    return httpx2.ASGITransport(app=create_app(MockConfig(), clock=anyio.current_time))


def _client(http: httpx2.AsyncClient) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url="http://mock/v1", api_key="k", http_client=http)


async def test_off_by_default_a_borderline_request_goes_long_verbatim() -> None:
    messages = borderline()
    assert B_SHORT < estimated_tokens(messages) + CAP <= 1.5 * B_SHORT
    async with two_pools() as (s, short, long):
        await s.submit(model="mock-1", messages=messages, max_tokens=CAP)
        stats = s.statistics()
    assert short.bodies == []
    assert [b["messages"] for b in long.bodies] == [messages]
    assert stats.compression is None  # compress_band 1.0: off


async def test_a_borderline_prose_request_is_sent_compressed_to_the_short_pool() -> None:
    messages = borderline()
    async with two_pools(compress_band=1.5) as (s, short, long):
        response = await s.submit(model="mock-1", messages=messages, max_tokens=CAP)
        stats = s.statistics()
    assert long.bodies == []
    (body,) = short.bodies
    system, user = body["messages"]
    assert system == messages[0]  # the system prompt, verbatim
    assert CODE in user["content"]  # the code block, verbatim
    assert user["content"].endswith("What changed?")  # the question itself stays
    sent = estimated_tokens(body["messages"])
    assert sent <= B_SHORT - CAP < estimated_tokens(messages)  # cut to the budget
    assert response.usage.prompt_tokens <= B_SHORT - CAP  # the provider counted it so too
    assert stats.compression == CompressionStats(
        prepared=1, sent_compressed=1, tokens_removed=estimated_tokens(messages) - sent
    )
    # The estimator learned from the bytes it sent, not the original's: ~4 bytes a token.
    (category,) = stats.estimator.categories
    assert category.mean == pytest.approx(4.0, abs=0.05)


async def test_a_borderline_request_that_cannot_be_cut_enough_goes_long_whole() -> None:
    code = "```python\n" + "".join(f"x_{i} = compute({i}, {i * 7})\n" for i in range(160)) + "```"
    messages = [{"role": "user", "content": f"{prose(3)}\n\n{code}\n\nWhy is this slow?"}]
    assert B_SHORT < estimated_tokens(messages) + CAP <= 1.5 * B_SHORT
    async with two_pools(compress_band=1.5) as (s, short, long):
        await s.submit(model="mock-1", messages=messages, max_tokens=CAP)
        stats = s.statistics()
    assert short.bodies == []
    assert [b["messages"] for b in long.bodies] == [messages]
    assert stats.compression == CompressionStats(not_fitting=1)


async def test_short_and_long_requests_are_not_touched() -> None:
    small = [{"role": "user", "content": prose(10)}]  # ~180 tokens: short, whole
    large = [{"role": "user", "content": prose(140)}]  # ~2.5k tokens: beyond the band
    async with two_pools(compress_band=1.5) as (s, short, long):
        await s.submit(model="mock-1", messages=small, max_tokens=CAP)
        await s.submit(model="mock-1", messages=large, max_tokens=CAP)
        stats = s.statistics()
    assert [b["messages"] for b in short.bodies] == [small]
    assert [b["messages"] for b in long.bodies] == [large]
    assert stats.compression == CompressionStats()


async def test_a_request_spilled_to_the_long_pool_is_sent_whole() -> None:
    messages = borderline()
    async with two_pools(compress_band=1.5, spill_outstanding=1) as (s, short, long):
        async with anyio.create_task_group() as tg:  # ~10 s of decoding on the short pool
            tg.start_soon(lambda: s.submit(model="mock-1", messages=[{"role": "user",
                                           "content": "fill"}], max_tokens=500))  # fmt: skip
            await anyio.sleep(1.0)
            await s.submit(model="mock-1", messages=messages, max_tokens=CAP)
            assert s.statistics().inflight == 1  # the fill is still running: it did spill
        stats = s.statistics()
    assert [b["messages"][0]["content"] for b in short.bodies] == ["fill"]
    assert [b["messages"] for b in long.bodies] == [messages]  # the original prompt
    assert stats.compression == CompressionStats(prepared=1, spilled=1)


async def test_a_large_prompt_is_compressed_in_a_worker_thread(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    ran: list[str] = []
    run_sync = anyio.to_thread.run_sync

    async def recorded(function: Any, *args: Any) -> Any:
        ran.append(function.__name__)
        return await run_sync(function, *args)

    monkeypatch.setattr(compression_module, "OFFLOAD_BYTES", 1024)
    monkeypatch.setattr(anyio.to_thread, "run_sync", recorded)
    async with two_pools(compress_band=1.5) as (s, short, long):  # nothing else has a timer
        await s.submit(model="mock-1", messages=borderline(), max_tokens=CAP)
        stats = s.statistics()
    assert ran == ["_compress"]
    assert len(short.bodies) == 1 and long.bodies == []
    assert stats.compression is not None and stats.compression.sent_compressed == 1
