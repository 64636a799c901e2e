"""``semisched batch`` under rate budgets against a rate-limited provider, in virtual time.

Runs of several virtual minutes take milliseconds (``conftest.py``: trio's
``MockClock``; the mock provider and the run's scheduler share its time).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from batch_testkit import batch_options, chat_line, mixed_lines, provider, records, write_lines

from semisched.batch import BatchRun

pytestmark = pytest.mark.anyio


async def test_with_the_budget_at_the_providers_limits_the_run_sees_no_429(tmp_path: Path) -> None:
    # 60 requests of (~26 prompt + 200 max_tokens) against 20 rpm / 3000 tpm: both
    # limits bind (the token limit admits ~13 per minute), so a run takes minutes.
    write_lines(tmp_path / "in.jsonl", [chat_line(i, out=30 + i) for i in range(60)])
    opts = batch_options(tmp_path, rpm=20, tpm=3000)
    async with provider(rpm=20, tpm=3000) as (client, stats):
        summary = await BatchRun(opts, client=client).run()
        counters = stats().counters
    assert counters.rate_limited_requests == 0 and counters.rate_limited_tokens == 0
    assert summary.succeeded == 60 and summary.rate_limited == 0
    # 60 x ~226 tokens at 3000 per minute: paced, not burst.
    assert summary.elapsed_s > 4 * 60


async def test_a_file_of_chat_responses_and_embeddings_runs_at_the_floor_without_429(
    tmp_path: Path,
) -> None:
    # One key spent by three APIs: each line is charged what its API costs (prompt plus
    # cap; an embedding its input alone), so the budget at the limits meets no 429.
    write_lines(tmp_path / "in.jsonl", mixed_lines(60))
    opts = batch_options(tmp_path, rpm=20, tpm=3000)
    async with provider(rpm=20, tpm=3000) as (client, stats):
        summary = await BatchRun(opts, client=client).run()
        mock = stats()
    assert mock.counters.rate_limited_requests == 0 and mock.counters.rate_limited_tokens == 0
    assert summary.succeeded == 60 and summary.rate_limited == 0
    by_api = mock.requests_by_api
    assert (by_api.chat_completions, by_api.responses, by_api.embeddings) == (20, 20, 20)
    assert summary.floor_ratio is not None and summary.floor_ratio <= 1.10
    kinds = {r["response"]["body"]["object"] for r in records(tmp_path / "out.jsonl")}
    assert kinds == {"chat.completion", "response", "list"}  # each API's own answer


async def test_a_budget_above_the_providers_limit_adapts_to_its_headers(tmp_path: Path) -> None:
    write_lines(tmp_path / "in.jsonl", [chat_line(i) for i in range(40)])
    opts = batch_options(tmp_path, rpm=1000)
    async with provider(rpm=10) as (client, stats):
        batch = BatchRun(opts, client=client)
        summary = await batch.run()
        counters = stats().counters
    assert summary.succeeded == 40
    assert batch.scheduler is not None
    budget = batch.scheduler.statistics().engine.budget
    assert budget is not None and budget.limit_requests == 10  # learned from the headers
    # The first answer teaches the limit: only requests already sent before it are refused
    # (a handful, not the 30 a client without the headers would send into a full window).
    assert counters.rate_limited_requests < 10
