"""Helpers of the HTTP app tests: an in-process mock in virtual time, and the pure physics run
by hand for the expected times. Not a test module (no ``test_`` prefix).

``serve`` builds ``create_app(config, clock=anyio.current_time)`` behind
``httpx2.ASGITransport`` with the real openai client; under the autojumping ``MockClock`` of
``conftest.py`` every latency is exact.
"""

from __future__ import annotations

import math
from collections.abc import AsyncIterator, Iterable
from contextlib import asynccontextmanager
from typing import Any

import anyio
import httpx2
import openai
import pytest
from openai import AsyncStream
from openai.types.chat import ChatCompletion, ChatCompletionChunk
from starlette.applications import Starlette

from mockprovider import MockConfig, MockStats, create_app, profile
from mockprovider.physics import EventKind, PhysicsParams, ProviderPhysics

MESSAGES: Any = [{"role": "user", "content": "Say something."}]
PROMPT_TOKENS = 4  # "Say something.": 14 UTF-8 bytes / 4, rounded up
DEFAULT = profile("default")

#: The clients leave async generators unexhausted: openai's AsyncStream breaks out of its SSE
#: generators at [DONE], and a cancelled call drops httpx2's body iterator. trio (unlike
#: asyncio) closes such generators itself and says so with this warning.
CLIENT_GENERATORS = pytest.mark.filterwarnings(
    "ignore:Async generator '(openai._streaming|httpx2._models).:ResourceWarning"
)


def completion_times(
    params: PhysicsParams,
    submits: Iterable[tuple[float, str, int]],
    cancels: Iterable[tuple[float, str]] = (),
) -> dict[str, float]:
    """When each request completes in the pure physics: ``(time, id, output tokens)`` submits
    of the test prompt and ``(time, id)`` cancels, replayed in time order."""
    physics = ProviderPhysics(params)
    done: dict[str, float] = {}

    def run_until(t: float) -> None:
        while (nxt := physics.next_event_time()) is not None and nxt <= t:
            for event in physics.advance(nxt):
                if event.kind is EventKind.COMPLETED:
                    done[event.request_id] = event.time

    script = [(t, 0, rid, out) for t, rid, out in submits] + [(t, 1, rid, 0) for t, rid in cancels]
    for t, op, rid, out in sorted(script):
        run_until(t)
        if op == 0:
            physics.submit(t, rid, PROMPT_TOKENS, out)
        else:
            physics.cancel(t, rid)
    run_until(math.inf)
    return done


def lone_time(output_tokens: int, params: PhysicsParams = DEFAULT) -> float:
    """Latency of one request of the test prompt alone in the physics."""
    return completion_times(params, [(0.0, "a", output_tokens)])["a"]


def asgi_scope(path: str, headers: dict[str, str]) -> dict[str, Any]:
    """An HTTP ``POST`` scope for calling the ASGI app directly."""
    raw = [
        (k.encode(), v.encode()) for k, v in {"content-type": "application/json", **headers}.items()
    ]
    return {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "root_path": "",
        "headers": raw,
        "server": ("mock", 80),
        "client": ("test", 1),
    }


class Mock:
    """An app plus the two clients that talk to it."""

    def __init__(self, app: Starlette, http: httpx2.AsyncClient, client: openai.AsyncOpenAI):
        self.app = app
        self.http = http
        self.client = client

    async def stats(self) -> MockStats:
        """The stats over HTTP, checked against ``app.state.mock_stats()`` at the same instant."""
        response = await self.http.get("/v1/mock/stats", headers={"authorization": "Bearer k"})
        assert response.status_code == 200
        stats = MockStats.from_json(response.json())
        assert stats == self.app.state.mock_stats()
        return stats

    async def chat(self, output: int | None = None, **kwargs: Any) -> ChatCompletion:
        headers = {} if output is None else {"x-mock-output-tokens": str(output)}
        headers.update(kwargs.pop("extra_headers", {}))
        result: ChatCompletion = await self.client.chat.completions.create(
            model="m", messages=MESSAGES, extra_headers=headers, **kwargs
        )
        return result

    async def timed_chat(self, output: int, **kwargs: Any) -> float:
        """The latency of one chat call, in (virtual) seconds."""
        start = anyio.current_time()
        await self.chat(output, **kwargs)
        return anyio.current_time() - start

    async def stream(self, output: int, **kwargs: Any) -> AsyncStream[ChatCompletionChunk]:
        result: AsyncStream[ChatCompletionChunk] = await self.client.chat.completions.create(
            model="m",
            messages=MESSAGES,
            extra_headers={"x-mock-output-tokens": str(output)},
            stream=True,
            **kwargs,
        )
        return result

    async def stream_all(self, output: int, **kwargs: Any) -> list[ChatCompletionChunk]:
        return [chunk async for chunk in await self.stream(output, **kwargs)]


@asynccontextmanager
async def serve(config: MockConfig, api_key: str = "k") -> AsyncIterator[Mock]:
    app = create_app(config, clock=anyio.current_time)
    transport = httpx2.ASGITransport(app=app)
    async with httpx2.AsyncClient(transport=transport, base_url="http://mock") as http:
        client = openai.AsyncOpenAI(
            base_url="http://mock/v1", api_key=api_key, http_client=http, max_retries=0
        )
        yield Mock(app, http, client)
