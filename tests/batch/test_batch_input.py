"""``semisched batch`` input: every line is validated, with its number, before anything is sent.

Virtual time (``conftest.py``): the in-process mock provider and the run wait
only on trio's ``MockClock``.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from batch_testkit import batch_options, chat_line, provider, records, write_lines

from semisched.batch import (
    BatchFailures,
    BatchProgress,
    BatchRun,
    InvalidInput,
    check_body,
    read_input,
)

pytestmark = pytest.mark.anyio

BAD_LINES = [
    ("{not json", "not valid JSON"),
    ("[1, 2]", "must be a JSON object"),
    (json.dumps({"method": "POST", "url": "/v1/chat/completions", "body": {}}), "custom_id"),
    (json.dumps({**chat_line(90), "url": "/v1/files"}), "'/v1/files' is not supported"),
    (json.dumps({**chat_line(91), "url": "/v1/embeddings"}), "this url needs 'input' in the body"),
    (json.dumps({**chat_line(91), "method": "GET"}), "'method' must be 'POST'"),
    (json.dumps({**chat_line(92), "body": "text"}), "'body' must be a JSON object"),
    (json.dumps({**chat_line(93), "body": {"messages": []}}), "'body.model' is missing"),
    (
        json.dumps({**chat_line(94), "body": {**chat_line(0)["body"], "colour": "red"}}),
        "unknown keyword argument",
    ),
    (
        json.dumps({**chat_line(95), "body": {"model": "m", "prompt": "hi"}}),
        "needs 'messages'",
    ),
    (json.dumps({**chat_line(96), "body": {**chat_line(0)["body"], "stream": True}}), "stream"),
    (json.dumps(chat_line(0)), "duplicate custom_id 'req-0' (first on line 1)"),
    (
        json.dumps({**chat_line(97), "body": {**chat_line(0)["body"], "deadline": 5}}),
        "['deadline'] are scheduler arguments, not API parameters",
    ),
    (
        json.dumps({**chat_line(98), "body": {**chat_line(0)["body"], "max_completion_tokens": 9}}),
        "max_completion_tokens=9 and max_tokens=200 disagree",
    ),
    (
        json.dumps({**chat_line(99), "body": {"model": "m", "messages": [{"content": "x"}]}}),
        "must be a dict with a 'role'",
    ),
]


@pytest.mark.parametrize(("bad", "message"), BAD_LINES)
async def test_an_invalid_line_is_reported_with_its_number_and_nothing_is_sent(
    tmp_path: Path, bad: str, message: str
) -> None:
    write_lines(tmp_path / "in.jsonl", [chat_line(0), chat_line(1), bad, chat_line(2)])
    async with provider() as (client, stats):
        with pytest.raises(InvalidInput) as info:
            await BatchRun(batch_options(tmp_path), client=client).run()
        assert stats().counters.requests == 0
    problems = info.value.problems
    assert [p.line for p in problems] == [3]
    assert message in str(problems[0])
    assert "line 3" in str(info.value)
    assert not (tmp_path / "out.jsonl").exists()


def test_bodies_are_checked_without_a_client_or_an_event_loop(tmp_path: Path) -> None:
    lines = [chat_line(0), {**chat_line(1), "body": {**chat_line(1)["body"], "tempo": 1}}]
    write_lines(tmp_path / "in.jsonl", lines)
    valid, invalid = read_input(tmp_path / "in.jsonl")
    assert [line.custom_id for line in valid] == ["req-0"]
    assert [(p.line, p.custom_id) for p in invalid] == [(2, "req-1")]
    check_body("completions", {"model": "m", "prompt": "hi", "max_tokens": 5})
    with pytest.raises(ValueError, match="needs 'prompt'"):
        check_body("completions", {"model": "m", "messages": [{"role": "user"}]})


def test_model_fills_bodies_that_name_none(tmp_path: Path) -> None:
    body = {k: v for k, v in chat_line(0)["body"].items() if k != "model"}
    write_lines(tmp_path / "in.jsonl", [{**chat_line(0), "body": body}])
    assert read_input(tmp_path / "in.jsonl", default_model="m")[1] == []
    assert "'body.model' is missing" in str(read_input(tmp_path / "in.jsonl")[1][0])


async def test_skip_invalid_records_bad_lines_once_and_sends_the_rest(tmp_path: Path) -> None:
    lines = [chat_line(0), "{oops", chat_line(1), json.dumps(chat_line(0))]
    write_lines(tmp_path / "in.jsonl", lines)
    opts = batch_options(tmp_path, skip_invalid=True)
    async with provider() as (client, stats):
        summary = await BatchRun(opts, client=client).run()
        assert stats().counters.requests == 2
        again = await BatchRun(opts, client=client).run()  # a rerun writes nothing twice
        assert stats().counters.requests == 2
    assert summary.succeeded == 2 and summary.invalid == 2
    assert again.to_send == 0
    out = records(tmp_path / "out.jsonl")
    assert len(out) == 4
    errors = {r["id"]: r for r in out if r["error"] is not None}
    assert set(errors) == {"batch_req_invalid_line_2", "batch_req_invalid_line_4"}
    # A duplicate's record names its line, not the id: req-0's one record is its answer.
    assert errors["batch_req_invalid_line_4"]["custom_id"] is None
    assert errors["batch_req_invalid_line_4"]["error"]["code"] == "invalid_line"
    assert "duplicate" in errors["batch_req_invalid_line_4"]["error"]["message"]
    ok = [r for r in out if r["error"] is None]
    assert sorted(r["custom_id"] for r in ok) == ["req-0", "req-1"]
    assert all(r["response"]["status_code"] == 200 for r in ok)
    assert ok[0]["response"]["body"]["object"] == "chat.completion"


async def test_completions_lines_are_supported(tmp_path: Path) -> None:
    line = {
        "custom_id": "c-1",
        "method": "POST",
        "url": "/v1/completions",
        "body": {"model": "mock-1", "prompt": "Say hi", "max_tokens": 5},
    }
    write_lines(tmp_path / "in.jsonl", [line])
    async with provider() as (client, _):
        summary = await BatchRun(batch_options(tmp_path), client=client).run()
    assert summary.succeeded == 1
    assert records(tmp_path / "out.jsonl")[0]["response"]["body"]["object"] == "text_completion"


async def test_a_line_changed_after_validation_is_recorded_as_input_changed(
    tmp_path: Path,
) -> None:
    path = write_lines(tmp_path / "in.jsonl", [chat_line(0), chat_line(1)])

    def edit(progress: BatchProgress) -> None:
        if progress.finished == 1:  # line 2 is read when its turn comes: after this
            write_lines(path, [chat_line(0), chat_line(7)])  # the same sizes

    async with provider() as (client, stats):
        run = BatchRun(batch_options(tmp_path, window=1), client=client, on_result=edit)
        summary = await run.run()
        assert stats().counters.requests == 1
    assert summary.failed == BatchFailures(input_changed=1)
    last = records(tmp_path / "out.jsonl")[1]
    assert last["custom_id"] == "req-1" and last["error"]["code"] == "input_changed"
    assert "input line 2 changed since it was validated" in last["error"]["message"]
