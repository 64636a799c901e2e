"""``semisched batch`` output: a rerun sends only what has no result; ``--retry-failed``.

Virtual time (``conftest.py``). The real-process crash tests (``kill -9``,
Ctrl-C) are in ``test_batch_crash.py``.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
from batch_testkit import batch_options, chat_line, provider, records, write_lines

from semisched.batch import Answered, BatchError, BatchFailures, BatchRun, read_answered

pytestmark = pytest.mark.anyio


async def test_a_rerun_sends_only_what_has_no_result(tmp_path: Path) -> None:
    write_lines(tmp_path / "in.jsonl", [chat_line(i) for i in range(12)])
    opts = batch_options(tmp_path)
    async with provider() as (client, stats):
        first = await BatchRun(opts, client=client).run()
        assert first.succeeded == 12 and stats().counters.requests == 12
        # keep 5 results and a torn sixth (a run killed mid-write)
        kept = (tmp_path / "out.jsonl").read_text().splitlines(keepends=True)
        (tmp_path / "out.jsonl").write_text("".join(kept[:5]) + kept[5][:40])
        second = await BatchRun(opts, client=client).run()
        assert stats().counters.requests == 12 + 7
    assert second.already_done == 5 and second.to_send == 7 and second.cut_bytes == 40
    ids = Counter(r["custom_id"] for r in records(tmp_path / "out.jsonl"))
    assert ids == Counter({f"req-{i}": 1 for i in range(12)})


async def test_retry_failed_sends_the_errors_again(tmp_path: Path) -> None:
    write_lines(tmp_path / "in.jsonl", [chat_line(i) for i in range(4)])
    opts = batch_options(tmp_path, max_attempts=1)
    async with provider(error_rate=1.0) as (client, _):
        first = await BatchRun(opts, client=client).run()
    assert first.failed == BatchFailures(provider_error=4)
    assert all(r["error"]["code"] == "provider_error" for r in records(opts.output))
    assert all(r["response"]["status_code"] in (500, 503) for r in records(opts.output))
    async with provider() as (client, stats):
        skipped = await BatchRun(opts, client=client).run()
        assert skipped.to_send == 0 and stats().counters.requests == 0
        retried = await BatchRun(batch_options(tmp_path, retry_failed=True), client=client).run()
        assert stats().counters.requests == 4
    assert retried.succeeded == 4
    out = records(opts.output)
    assert len(out) == 4 and all(r["error"] is None for r in out)


def test_read_answered_refuses_a_file_that_is_not_a_result_file(tmp_path: Path) -> None:
    (tmp_path / "x.jsonl").write_text("hello\n")
    with pytest.raises(BatchError, match="not a result record"):
        read_answered(tmp_path / "x.jsonl")


def test_read_answered_counts_invalid_lines_by_record_id(tmp_path: Path) -> None:
    (tmp_path / "out.jsonl").write_text(
        '{"id": "batch_req_1", "custom_id": "a", "error": null}\n'
        '{"id": "batch_req_invalid_line_3", "custom_id": "b", "error": {}}\n'
        '{"id": "batch_req_2", "cust'
    )
    answered = read_answered(tmp_path / "out.jsonl")
    assert answered == Answered(
        custom_ids=frozenset({"a"}),
        record_ids=frozenset({"batch_req_1", "batch_req_invalid_line_3"}),
        cut_bytes=len('{"id": "batch_req_2", "cust'),
    )
    assert answered.has_invalid_line(3) and not answered.has_invalid_line(2)
    assert (tmp_path / "out.jsonl").read_text().endswith("}\n")  # the torn line is gone
    assert read_answered(tmp_path / "missing.jsonl") == Answered()
