"""Fixtures: the real ``openai.AsyncOpenAI`` client against the in-process mock provider."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import httpx2
import openai
import pytest

from mockprovider.app import MockConfig, create_app
from semisched.clock import ScaledClock

#: Virtual seconds per wall second in runtime tests: the mock's physics and the
#: scheduler's clock run at the same compressed pace.
SCALE = 200.0


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@asynccontextmanager
async def mock_client(
    **config: Any,
) -> AsyncIterator[tuple[openai.AsyncOpenAI, httpx2.AsyncClient]]:
    """An AsyncOpenAI client wired to a fresh in-process mock provider."""
    config.setdefault("time_scale", SCALE)
    app = create_app(MockConfig(**config))
    async with httpx2.AsyncClient(
        transport=httpx2.ASGITransport(app=app), base_url="http://mock"
    ) as http:
        client = openai.AsyncOpenAI(base_url="http://mock/v1", api_key="test-key", http_client=http)
        yield client, http


@pytest.fixture
def clock() -> ScaledClock:
    return ScaledClock(SCALE)


def chat(content: str = "hello", **kwargs: Any) -> dict[str, Any]:
    """Arguments of a small chat call."""
    return {"model": "mock-1", "messages": [{"role": "user", "content": content}], **kwargs}


Factory = Callable[..., Any]
