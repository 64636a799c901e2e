"""``semisched batch`` under rate budgets, in compressed real time (marked ``wallclock``).

These tests build their scheduler with a :class:`~semisched.clock.ScaledClock`
(``SCALE`` times the wall) against an in-process mock provider in the same
compressed time, so they wait on real time. Everything else about batch runs
in virtual time: ``test_batch_input.py``, ``test_batch_resume.py``,
``test_batch_run.py`` and ``test_batch_cli.py``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx2
import openai
import pytest
from batch_testkit import batch_options, chat_line, write_lines

from mockprovider.app import MockConfig, create_app
from semisched.batch import BatchOptions, BatchRun, BatchSummary
from semisched.clock import ScaledClock

SCALE = 200.0
pytestmark = [pytest.mark.anyio, pytest.mark.wallclock]


@asynccontextmanager
async def provider(**config: Any) -> AsyncIterator[tuple[openai.AsyncOpenAI, Any]]:
    """A client of an in-process mock provider in compressed real time, and its stats JSON."""
    config.setdefault("time_scale", SCALE)
    app = create_app(MockConfig(**config))
    async with httpx2.AsyncClient(
        transport=httpx2.ASGITransport(app=app), base_url="http://mock"
    ) as http:
        client = openai.AsyncOpenAI(
            base_url="http://mock/v1", api_key="k", http_client=http, max_retries=0
        )
        yield client, app.state.mock_snapshot


def options(tmp_path: Path, **changes: Any) -> BatchOptions:
    return batch_options(tmp_path, **{"time_scale": SCALE, **changes})


async def run(opts: BatchOptions, client: Any) -> BatchSummary:
    return await BatchRun(opts, client=client, clock=ScaledClock(SCALE)).run()


# -- budgets -----------------------------------------------------------------------------------


async def test_with_the_budget_at_the_providers_limits_the_run_sees_no_429(tmp_path: Path) -> None:
    from mockprovider.stats import MockStats

    # 60 requests of (~26 prompt + 200 max_tokens) against 20 rpm / 3000 tpm: both
    # limits bind (the token limit admits ~13 per minute), so a run takes minutes.
    write_lines(tmp_path / "in.jsonl", [chat_line(i, out=30 + i) for i in range(60)])
    opts = options(tmp_path, rpm=20, tpm=3000)
    async with provider(rpm=20, tpm=3000) as (client, stats):
        summary = await run(opts, client)
        counters = MockStats.from_json(stats()).counters
    assert counters.rate_limited_requests == 0 and counters.rate_limited_tokens == 0
    assert summary.succeeded == 60 and summary.rate_limited == 0
    assert summary.elapsed_s > 4 * 60  # 60 x 226 tokens at 3000 per minute: paced, not burst


async def test_a_budget_above_the_providers_limit_adapts_to_its_headers(tmp_path: Path) -> None:
    from mockprovider.stats import MockStats

    write_lines(tmp_path / "in.jsonl", [chat_line(i) for i in range(40)])
    opts = options(tmp_path, rpm=1000)
    async with provider(rpm=10) as (client, stats):
        batch = BatchRun(opts, client=client, clock=ScaledClock(SCALE))
        summary = await batch.run()
        counters = MockStats.from_json(stats()).counters
    assert summary.succeeded == 40
    assert batch.scheduler is not None
    budget = batch.scheduler.statistics().engine.budget
    assert budget is not None and budget.limit_requests == 10  # learned from the headers
    # The first answer teaches the limit: only requests already sent before it can be refused.
    assert counters.rate_limited_requests <= 32
