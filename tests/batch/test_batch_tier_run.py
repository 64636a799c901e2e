"""``semisched batch --tier batch|auto`` against the in-process mock's Batch API, in virtual time.

The mock's batches run on the loop's clock (``conftest.py``): a turnaround of an hour
takes microseconds, so these tests assert on counts and ids, never on timings.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import anyio
import pytest
from batch_testkit import batch_options, chat_line, embeddings_line, provider, records, write_lines

from semisched import Price
from semisched.batch import BatchRun
from semisched.batch.journal import journal_path, read_journal

pytestmark = pytest.mark.anyio

PRICE = Price(input=1.0, output=2.0)


def due(line: dict[str, Any], seconds: float) -> dict[str, Any]:
    """``line`` due ``seconds`` after the job's start."""
    line["body"].setdefault("metadata", {})["deadline_s"] = str(seconds)
    return line


def mock(**config: Any) -> Any:
    return provider(batch_turnaround_s=600.0, batch_turnaround_sigma=0.0, **config)


async def test_auto_splits_by_deadline_and_records_tier_and_cost(tmp_path: Path) -> None:
    urgent = [due(chat_line(i), 120) for i in range(4)]
    relaxed = [due(chat_line(i), 86_400) for i in range(4, 10)]
    write_lines(tmp_path / "in.jsonl", [*urgent, *relaxed, embeddings_line(10)])
    opts = batch_options(tmp_path, tier="auto", batch_turnaround_s=600.0, price=PRICE)
    async with mock() as (client, stats):
        summary = await BatchRun(opts, client=client).run()
        counts = stats()
    assert summary.succeeded == 11 and summary.failed.total == 0
    assert counts.counters.requests == 4  # the urgent lines, real-time
    assert counts.batches.batches == 2 and counts.batches.lines_completed == 7  # chat, embeddings
    out = {r["custom_id"]: r for r in records(opts.output)}
    assert {out[f"req-{i}"]["tier"] for i in range(4)} == {"realtime"}
    assert {out[f"req-{i}"]["tier"] for i in range(4, 11)} == {"batch"}
    for record in out.values():
        usage = record["response"]["body"]["usage"]
        full = PRICE.cost(usage["prompt_tokens"], usage.get("completion_tokens", 0))
        assert record["cost_usd"] == pytest.approx(full / 2 if record["tier"] == "batch" else full)
    tiers = summary.tiers
    assert (tiers.realtime_lines, tiers.batch_lines) == (4, 7)
    assert tiers.deadlines_met == 10 and tiers.deadlines_missed == 0
    assert read_journal(journal_path(opts.output)).open_uploads() == []


async def test_tier_batch_sends_every_line_through_the_batch_api(tmp_path: Path) -> None:
    write_lines(tmp_path / "in.jsonl", [due(chat_line(i), 60) for i in range(5)])
    opts = batch_options(tmp_path, tier="batch")
    async with mock() as (client, stats):
        summary = await BatchRun(opts, client=client).run()
        counts = stats()
    assert counts.counters.requests == 0 and counts.batches.lines_completed == 5
    assert summary.tiers.batch_lines == 5 and summary.tiers.deadlines_missed == 5
    assert all(r["tier"] == "batch" and r["cost_usd"] is None for r in records(opts.output))


async def test_a_batch_whose_slack_runs_out_is_cancelled_and_the_rest_sent_realtime(
    tmp_path: Path,
) -> None:
    # The tier plans with a 10 s turnaround; the mock takes an hour: at the slack's end the
    # batch is cancelled, the lines it finished are kept and the rest go real-time.
    write_lines(tmp_path / "in.jsonl", [due(chat_line(i), 1800) for i in range(20)])
    opts = batch_options(tmp_path, tier="auto", batch_turnaround_s=10.0, batch_poll_s=30.0)
    async with provider(batch_turnaround_s=3600.0, batch_turnaround_sigma=0.0) as (client, stats):
        run = BatchRun(opts, client=client)
        summary = await run.run()
        counts = stats()
    assert counts.batches.batches == 1 and counts.batches.cancelled == 1
    kept = counts.batches.lines_completed
    assert 0 < kept < 20
    assert counts.counters.requests == 20 - kept
    out = records(opts.output)
    assert Counter(r["custom_id"] for r in out) == Counter({f"req-{i}": 1 for i in range(20)})
    assert Counter(r["tier"] for r in out) == Counter({"batch": kept, "realtime": 20 - kept})
    assert summary.succeeded == 20 and summary.tiers.deadlines_missed == 0


async def test_a_resumed_job_takes_its_batch_back_and_never_uploads_a_line_twice(
    tmp_path: Path,
) -> None:
    write_lines(tmp_path / "in.jsonl", [chat_line(i) for i in range(8)])
    opts = batch_options(tmp_path, tier="auto")
    async with mock() as (client, stats):
        with anyio.move_on_after(100):  # killed after the upload, before the batch ends
            await BatchRun(opts, client=client).run()
        assert stats().batches.batches == 1 and not records(opts.output)
        summary = await BatchRun(opts, client=client).run()
        counts = stats()
    assert counts.batches.batches == 1 and counts.batches.lines_completed == 8
    assert counts.counters.requests == 0
    assert summary.tiers.batch_lines == 8
    assert Counter(r["custom_id"] for r in records(opts.output)) == Counter(
        {f"req-{i}": 1 for i in range(8)}
    )


async def test_an_upload_whose_batch_id_was_never_journaled_is_found_by_its_metadata(
    tmp_path: Path,
) -> None:
    write_lines(tmp_path / "in.jsonl", [chat_line(i) for i in range(6)])
    opts = batch_options(tmp_path, tier="batch")
    journal = journal_path(opts.output)
    async with mock() as (client, stats):
        with anyio.move_on_after(100):
            await BatchRun(opts, client=client).run()
        # a kill between creating the batch and journaling its id
        entries = journal.read_text().splitlines(keepends=True)
        journal.write_text("".join(e for e in entries if '"event":"batch"' not in e))
        await BatchRun(opts, client=client).run()
        counts = stats()
    assert counts.batches.batches == 1 and counts.batches.lines_completed == 6
    assert counts.counters.requests == 0
    assert len(records(opts.output)) == 6


async def test_an_upload_no_batch_was_made_of_frees_its_lines(tmp_path: Path) -> None:
    write_lines(tmp_path / "in.jsonl", [chat_line(i) for i in range(4)])
    opts = batch_options(tmp_path, tier="batch")
    journal = journal_path(opts.output)
    # a kill after journaling the upload, before the file reached the provider
    journal.write_text(
        '{"event":"start","started_unix":0}\n'
        '{"event":"upload","upload":"semisched-lost","url":"/v1/chat/completions",'
        '"custom_ids":["req-0","req-1"]}\n'
    )
    async with mock() as (client, stats):
        await BatchRun(opts, client=client).run()
        counts = stats()
    assert counts.batches.batches == 1 and counts.batches.lines_completed == 4
    assert '"event":"abandoned","upload":"semisched-lost"' in journal.read_text()
    assert len(records(opts.output)) == 4
