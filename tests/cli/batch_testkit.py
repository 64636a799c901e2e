"""Helpers of the ``semisched batch`` tests: input lines, output records, an in-process provider.

The in-process mock provider runs in virtual time when given
``clock=anyio.current_time`` under trio's autojumping ``MockClock`` (see
``conftest.py``), or in compressed real time when given a ``time_scale``.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
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
