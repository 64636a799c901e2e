"""``semisched batch``: validation, resume, budgets (in-process mock provider, compressed time)."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx2
import openai
import pytest

from mockprovider.app import MockConfig, create_app
from semisched.batch import (
    BatchOptions,
    BatchRun,
    BatchSummary,
    InvalidInput,
    read_answered,
)
from semisched.cli import main
from semisched.clock import ScaledClock

SCALE = 200.0
pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def chat_line(i: int, *, out: int = 50, max_tokens: int = 200, words: int = 20) -> dict[str, Any]:
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


def write_lines(path: Path, lines: list[Any]) -> Path:
    path.write_text(
        "".join((line if isinstance(line, str) else json.dumps(line)) + "\n" for line in lines)
    )
    return path


def records(path: Path) -> list[dict[str, Any]]:
    return [json.loads(raw) for raw in path.read_text().splitlines() if raw.strip()]


@asynccontextmanager
async def provider(**config: Any) -> AsyncIterator[tuple[openai.AsyncOpenAI, Any]]:
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
    base: dict[str, Any] = {
        "input": tmp_path / "in.jsonl",
        "output": tmp_path / "out.jsonl",
        "base_url": "http://mock/v1",
        "priors": "heuristic",
        "time_scale": SCALE,
    }
    base.update(changes)
    return BatchOptions(**base)


async def run(opts: BatchOptions, client: Any) -> BatchSummary:
    return await BatchRun(opts, client=client, clock=ScaledClock(SCALE)).run()


# -- validation before anything is sent ---------------------------------------------------


BAD_LINES = [
    ("{not json", "not valid JSON"),
    ("[1, 2]", "must be a JSON object"),
    (json.dumps({"method": "POST", "url": "/v1/chat/completions", "body": {}}), "custom_id"),
    (json.dumps({**chat_line(90), "url": "/v1/embeddings"}), "'/v1/embeddings' is not supported"),
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
]


@pytest.mark.parametrize(("bad", "message"), BAD_LINES)
async def test_an_invalid_line_is_reported_with_its_number_and_nothing_is_sent(
    tmp_path: Path, bad: str, message: str
) -> None:
    write_lines(tmp_path / "in.jsonl", [chat_line(0), chat_line(1), bad, chat_line(2)])
    async with provider() as (client, stats):
        with pytest.raises(InvalidInput) as info:
            await run(options(tmp_path), client)
        assert stats()["counters"]["requests"] == 0
    problems = info.value.problems
    assert [p.line for p in problems] == [3]
    assert message in str(problems[0])
    assert "line 3" in str(info.value)
    assert not (tmp_path / "out.jsonl").exists()


async def test_skip_invalid_records_bad_lines_once_and_sends_the_rest(tmp_path: Path) -> None:
    lines = [chat_line(0), "{oops", chat_line(1), json.dumps(chat_line(0))]
    write_lines(tmp_path / "in.jsonl", lines)
    opts = options(tmp_path, skip_invalid=True)
    async with provider() as (client, stats):
        summary = await run(opts, client)
        assert stats()["counters"]["requests"] == 2
        again = await run(opts, client)  # a rerun writes nothing twice
        assert stats()["counters"]["requests"] == 2
    assert summary.succeeded == 2 and summary.invalid == 2
    assert again.to_send == 0
    out = records(tmp_path / "out.jsonl")
    assert len(out) == 4
    errors = {r["id"]: r for r in out if r["error"] is not None}
    assert set(errors) == {"batch_req_invalid_line_2", "batch_req_invalid_line_4"}
    assert errors["batch_req_invalid_line_4"]["custom_id"] == "req-0"
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
        summary = await run(options(tmp_path), client)
    assert summary.succeeded == 1
    assert records(tmp_path / "out.jsonl")[0]["response"]["body"]["object"] == "text_completion"


# -- resume ---------------------------------------------------------------------------------


async def test_a_rerun_sends_only_what_has_no_result(tmp_path: Path) -> None:
    write_lines(tmp_path / "in.jsonl", [chat_line(i) for i in range(12)])
    opts = options(tmp_path)
    async with provider() as (client, stats):
        first = await run(opts, client)
        assert first.succeeded == 12 and stats()["counters"]["requests"] == 12
        # keep 5 results and a torn sixth (a run killed mid-write)
        kept = (tmp_path / "out.jsonl").read_text().splitlines(keepends=True)
        (tmp_path / "out.jsonl").write_text("".join(kept[:5]) + kept[5][:40])
        second = await run(opts, client)
        assert stats()["counters"]["requests"] == 12 + 7
    assert second.already_done == 5 and second.to_send == 7 and second.cut_bytes == 40
    ids = Counter(r["custom_id"] for r in records(tmp_path / "out.jsonl"))
    assert ids == Counter({f"req-{i}": 1 for i in range(12)})


async def test_retry_failed_sends_the_errors_again(tmp_path: Path) -> None:
    write_lines(tmp_path / "in.jsonl", [chat_line(i) for i in range(4)])
    opts = options(tmp_path, max_attempts=1)
    async with provider(error_rate=1.0) as (client, _):
        first = await run(opts, client)
    assert first.failed == Counter({"provider_error": 4})
    assert all(r["error"]["code"] == "provider_error" for r in records(opts.output))
    assert all(r["response"]["status_code"] in (500, 503) for r in records(opts.output))
    async with provider() as (client, stats):
        skipped = await run(opts, client)
        assert skipped.to_send == 0 and stats()["counters"]["requests"] == 0
        retried = await run(options(tmp_path, retry_failed=True), client)
        assert stats()["counters"]["requests"] == 4
    assert retried.succeeded == 4
    out = records(opts.output)
    assert len(out) == 4 and all(r["error"] is None for r in out)


def test_read_answered_refuses_a_file_that_is_not_a_result_file(tmp_path: Path) -> None:
    from semisched.batch import BatchError

    (tmp_path / "x.jsonl").write_text("hello\n")
    with pytest.raises(BatchError, match="not a result record"):
        read_answered(tmp_path / "x.jsonl")


# -- budgets -----------------------------------------------------------------------------------


async def test_with_the_budget_at_the_providers_limits_the_run_sees_no_429(tmp_path: Path) -> None:
    # 60 requests of (~26 prompt + 200 max_tokens) against 20 rpm / 3000 tpm: both
    # limits bind (the token limit admits ~13 per minute), so a run takes minutes.
    write_lines(tmp_path / "in.jsonl", [chat_line(i, out=30 + i) for i in range(60)])
    opts = options(tmp_path, rpm=20, tpm=3000)
    async with provider(rpm=20, tpm=3000) as (client, stats):
        summary = await run(opts, client)
        counters = stats()["counters"]
    assert counters["rate_limited_requests"] == 0 and counters["rate_limited_tokens"] == 0
    assert summary.succeeded == 60 and summary.rate_limited == 0
    assert summary.elapsed_s > 4 * 60  # 60 x 226 tokens at 3000 per minute: paced, not burst


async def test_a_budget_above_the_providers_limit_adapts_to_its_headers(tmp_path: Path) -> None:
    write_lines(tmp_path / "in.jsonl", [chat_line(i) for i in range(40)])
    opts = options(tmp_path, rpm=1000)
    async with provider(rpm=10) as (client, stats):
        batch = BatchRun(opts, client=client, clock=ScaledClock(SCALE))
        summary = await batch.run()
        counters = stats()["counters"]
    assert summary.succeeded == 40
    assert batch.scheduler is not None
    budget = batch.scheduler.statistics().engine.budget
    assert budget is not None and budget.limit_requests == 10  # learned from the headers
    # The first answer teaches the limit: only requests already sent before it can be refused.
    assert counters["rate_limited_requests"] <= 32


async def test_the_job_deadline_ends_unsent_requests_as_deadline_errors(tmp_path: Path) -> None:
    write_lines(tmp_path / "in.jsonl", [chat_line(i) for i in range(30)])
    opts = options(tmp_path, rpm=10, deadline_s=30.0)
    async with provider() as (client, _):
        summary = await run(opts, client)
    # 10 per minute: the first 10 go at once, the next would wait past the 30 s deadline
    assert summary.succeeded == 10
    assert summary.failed == Counter({"deadline_exceeded": 20})
    ids = Counter(r["custom_id"] for r in records(opts.output))
    assert ids == Counter({f"req-{i}": 1 for i in range(30)})


# -- the command's errors ---------------------------------------------------------------------


def test_unreadable_input_is_a_clear_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(["batch", str(tmp_path / "missing.jsonl"), "-o", str(tmp_path / "o.jsonl"),
                 "--base-url", "http://127.0.0.1:9/v1"])  # fmt: skip
    err = capsys.readouterr().err
    assert code == 2
    assert "cannot read input" in err and "missing.jsonl" in err
    assert "Traceback" not in err


def test_unwritable_output_is_a_clear_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "k")
    write_lines(tmp_path / "in.jsonl", [chat_line(0)])
    out = tmp_path / "no-such-dir" / "out.jsonl"
    code = main(["batch", str(tmp_path / "in.jsonl"), "-o", str(out),
                 "--base-url", "http://127.0.0.1:9/v1", "--priors", "heuristic"])  # fmt: skip
    err = capsys.readouterr().err
    assert code == 2 and "cannot write output" in err and "Traceback" not in err


def test_a_missing_api_key_is_a_clear_error_and_nothing_is_written(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("MY_KEY", raising=False)
    write_lines(tmp_path / "in.jsonl", [chat_line(0)])
    code = main(["batch", str(tmp_path / "in.jsonl"), "-o", str(tmp_path / "o.jsonl"),
                 "--base-url", "http://127.0.0.1:9/v1", "--api-key-env", "MY_KEY",
                 "--priors", "heuristic"])  # fmt: skip
    err = capsys.readouterr().err
    assert code == 2 and "MY_KEY is not set" in err
    assert not (tmp_path / "o.jsonl").exists()


def test_invalid_input_exits_2_listing_line_numbers(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write_lines(tmp_path / "in.jsonl", [chat_line(0), "{", chat_line(0)])
    code = main(["batch", str(tmp_path / "in.jsonl"), "-o", str(tmp_path / "o.jsonl"),
                 "--base-url", "http://127.0.0.1:9/v1"])  # fmt: skip
    err = capsys.readouterr().err
    assert code == 2
    assert "line 2: not valid JSON" in err
    assert "line 3: duplicate custom_id 'req-0' (first on line 1)" in err
    assert not (tmp_path / "o.jsonl").exists()


def test_bad_arguments_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["batch", "in.jsonl", "-o", "o.jsonl", "--base-url", "u", "--rpm", "0"])
    assert code == 2 and "rpm=0" in capsys.readouterr().err
