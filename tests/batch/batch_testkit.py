"""Helpers of the ``semisched batch`` tests: input lines, output records, an in-process provider.

The in-process mock provider runs in virtual time when given
``clock=anyio.current_time`` under trio's autojumping ``MockClock`` (see
``conftest.py``), or in compressed real time when given a ``time_scale``.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx2
import openai

from mockprovider.app import MockConfig, create_app
from mockprovider.stats import MockStats
from semisched.batch import BatchOptions


def chat_line(i: int, *, out: int = 50, max_tokens: int = 200, words: int = 20) -> dict[str, Any]:
    """A Batch API chat line ``req-<i>`` whose answer has ``out`` tokens."""
    return {
        "custom_id": f"req-{i}",
        "method": "POST",
        "url": "/v1/chat/completions",
        "body": {
            "model": "mock-1",
            "messages": [{"role": "user", "content": " ".join(["word"] * words)}],
            "max_tokens": max_tokens,
            "metadata": {"mock_output_tokens": str(out)},
        },
    }


def responses_line(
    i: int, *, out: int = 50, max_tokens: int = 200, words: int = 20
) -> dict[str, Any]:
    """A Batch API Responses line ``req-<i>`` whose answer has ``out`` tokens."""
    return {
        "custom_id": f"req-{i}",
        "method": "POST",
        "url": "/v1/responses",
        "body": {
            "model": "mock-1",
            "input": " ".join(["word"] * words),
            "max_output_tokens": max_tokens,
            "metadata": {"mock_output_tokens": str(out)},
        },
    }


def embeddings_line(i: int, *, inputs: int = 3, words: int = 20) -> dict[str, Any]:
    """A Batch API embeddings line ``req-<i>`` embedding ``inputs`` texts."""
    return {
        "custom_id": f"req-{i}",
        "method": "POST",
        "url": "/v1/embeddings",
        "body": {"model": "mock-1", "input": [" ".join(["word"] * words)] * inputs},
    }


def mixed_lines(n: int, *, out: int = 30) -> list[dict[str, Any]]:
    """``n`` lines cycling through chat, Responses and embeddings."""
    makers = (
        lambda i: chat_line(i, out=out + i),
        lambda i: responses_line(i, out=out + i),
        lambda i: embeddings_line(i),
    )
    return [makers[i % 3](i) for i in range(n)]


def cli_args(tmp_path: Path, *extra: str, priors: str = "heuristic") -> list[str]:
    """``semisched batch`` arguments: ``in.jsonl`` to ``out.jsonl`` in ``tmp_path``, the
    in-process mock's URL, ``--priors``, then ``extra``."""
    return ["batch", str(tmp_path / "in.jsonl"), "-o", str(tmp_path / "out.jsonl"),
            "--base-url", "http://mock/v1", "--priors", priors, *extra]  # fmt: skip


def write_lines(path: Path, lines: list[Any]) -> Path:
    """Write ``lines`` (objects as JSON, strings as they are), one per line."""
    path.write_text(
        "".join((line if isinstance(line, str) else json.dumps(line)) + "\n" for line in lines)
    )
    return path


def records(path: Path) -> list[dict[str, Any]]:
    """The records of an output file."""
    return [json.loads(raw) for raw in path.read_text().splitlines() if raw.strip()]


@asynccontextmanager
async def mock_provider(
    *, clock: Callable[[], float] | None = None, **config: Any
) -> AsyncIterator[tuple[openai.AsyncOpenAI, Callable[[], MockStats]]]:
    """An ``AsyncOpenAI`` wired to a fresh in-process mock provider, and its statistics."""
    app = create_app(MockConfig(**config), clock=clock)
    async with httpx2.AsyncClient(
        transport=httpx2.ASGITransport(app=app), base_url="http://mock"
    ) as http:
        client = openai.AsyncOpenAI(
            base_url="http://mock/v1", api_key="k", http_client=http, max_retries=0
        )
        yield client, app.state.mock_stats


def provider(**config: Any) -> Any:
    """:func:`mock_provider` in virtual time (the event loop's clock, unscaled)."""
    return mock_provider(clock=anyio.current_time, **config)


def batch_options(tmp_path: Path, **changes: Any) -> BatchOptions:
    """Options reading ``tmp_path/in.jsonl`` and writing ``tmp_path/out.jsonl``."""
    base: dict[str, Any] = {
        "input": tmp_path / "in.jsonl",
        "output": tmp_path / "out.jsonl",
        "base_url": "http://mock/v1",
        "priors": "heuristic",
    }
    base.update(changes)
    return BatchOptions(**base)


class MockFleet:
    """In-process mock providers, one per endpoint name, in virtual time.

    :meth:`client` is a ``make_client(base_url, api_key)`` for ``semisched
    batch``: endpoint ``NAME`` answers at ``http://NAME/v1`` and requires
    the key its config names (``api_key``), so a request sent with the wrong
    key would fail with 401.
    """

    def __init__(self, apps: Mapping[str, Any], stack: AsyncExitStack) -> None:
        self._apps = dict(apps)
        self._stack = stack
        self.made: list[tuple[str, str]] = []

    def client(self, base_url: str, api_key: str) -> openai.AsyncOpenAI:
        """The client of the endpoint at ``base_url`` (``http://NAME/v1``)."""
        name = httpx2.URL(base_url).host
        self.made.append((name, api_key))
        transport = httpx2.ASGITransport(app=self._apps[name])
        http = httpx2.AsyncClient(transport=transport, base_url=f"http://{name}")
        self._stack.push_async_callback(http.aclose)
        return openai.AsyncOpenAI(
            base_url=base_url, api_key=api_key, http_client=http, max_retries=0
        )

    def stats(self, name: str) -> MockStats:
        """The statistics of endpoint ``name``'s provider."""
        stats: MockStats = self._apps[name].state.mock_stats()
        return stats


@asynccontextmanager
async def mock_fleet(**configs: Mapping[str, Any]) -> AsyncIterator[MockFleet]:
    """A :class:`MockFleet` with one provider per keyword (its ``MockConfig`` fields)."""
    apps = {
        name: create_app(MockConfig(**config), clock=anyio.current_time)
        for name, config in configs.items()
    }
    async with AsyncExitStack() as stack:
        yield MockFleet(apps, stack)
