"""A ``semisched batch`` run: the job deadline, stopping (Ctrl-C) and its grace.

Virtual time (``conftest.py``): the in-process mock provider and the run's
scheduler both wait on trio's ``MockClock``, so minutes of virtual time take
milliseconds and every timer fires exactly on time.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
from batch_testkit import batch_options, chat_line, provider, records, write_lines

from semisched.batch import BatchFailures, BatchProgress, BatchRun

pytestmark = pytest.mark.anyio


async def test_the_job_deadline_ends_unsent_requests_as_deadline_errors(tmp_path: Path) -> None:
    write_lines(tmp_path / "in.jsonl", [chat_line(i) for i in range(30)])
    opts = batch_options(tmp_path, rpm=10, deadline_s=30.0)
    async with provider() as (client, _):
        summary = await BatchRun(opts, client=client).run()
    # 10 per minute: the first 10 go at once, the next would wait past the 30 s deadline
    assert summary.succeeded == 10
    assert summary.failed == BatchFailures(deadline_exceeded=20)
    ids = Counter(r["custom_id"] for r in records(opts.output))
    assert ids == Counter({f"req-{i}": 1 for i in range(30)})
    codes = Counter(r["error"]["code"] for r in records(opts.output) if r["error"])
    assert codes == Counter({"deadline_exceeded": 20})


async def test_progress_is_reported_after_each_result(tmp_path: Path) -> None:
    write_lines(tmp_path / "in.jsonl", [chat_line(i, out=20 + i) for i in range(8)])
    seen: list[BatchProgress] = []
    async with provider() as (client, _):
        run = BatchRun(batch_options(tmp_path), client=client, on_result=seen.append)
        summary = await run.run()
    assert [p.finished for p in seen] == list(range(1, 9))
    assert all(p.to_send == 8 and p.total == 8 for p in seen)
    assert seen[-1].completion_tokens == sum(20 + i for i in range(8))
    assert summary.completion_tokens == seen[-1].completion_tokens
    assert summary.elapsed_s >= seen[-1].elapsed_s > 0
    assert len(summary.latencies_s) == 8 and summary.latency_percentile(50) is not None


async def _stopped_run(tmp_path: Path, grace_s: float) -> tuple[int, BatchProgress]:
    """Run 40 requests, 4 at a time, stopping after the 5th result."""
    write_lines(tmp_path / "in.jsonl", [chat_line(i, out=40 + 7 * i) for i in range(40)])
    opts = batch_options(tmp_path, max_concurrency=4, grace_s=grace_s)

    def stop_after_five(progress: BatchProgress) -> None:
        if progress.finished == 5:
            run.stop()

    async with provider() as (client, stats):
        run = BatchRun(opts, client=client, on_result=stop_after_five)
        summary = await run.run()
        sent = stats().counters.requests
    return sent, summary


async def test_stop_lets_calls_in_flight_finish_and_sends_nothing_more(tmp_path: Path) -> None:
    sent, summary = await _stopped_run(tmp_path, grace_s=60.0)
    assert summary.interrupted
    # in flight at the stop: finished and recorded; nothing more was sent
    assert summary.finished == len(records(tmp_path / "out.jsonl")) == sent
    assert 5 < sent < 40
    async with provider() as (client, stats):
        rest = await BatchRun(batch_options(tmp_path), client=client).run()
        assert stats().counters.requests == 40 - sent
    assert not rest.interrupted and rest.already_done == sent
    ids = Counter(r["custom_id"] for r in records(tmp_path / "out.jsonl"))
    assert ids == Counter({f"req-{i}": 1 for i in range(40)})


async def test_calls_still_in_flight_after_the_grace_are_abandoned(tmp_path: Path) -> None:
    sent, summary = await _stopped_run(tmp_path, grace_s=0.0)
    assert summary.interrupted and summary.finished == 5
    assert len(records(tmp_path / "out.jsonl")) == 5 < sent  # no result: sent again later


async def test_a_stop_before_the_run_sends_nothing(tmp_path: Path) -> None:
    write_lines(tmp_path / "in.jsonl", [chat_line(i) for i in range(3)])
    async with provider() as (client, stats):
        run = BatchRun(batch_options(tmp_path), client=client)
        run.stop()
        summary = await run.run()
        assert stats().counters.requests == 0
    assert summary.interrupted and summary.finished == 0 and summary.to_send == 3
