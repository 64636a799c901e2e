"""The ``semisched batch`` command: exit statuses, progress lines, clear errors.

The runs await :func:`semisched.batch.cli.main_async` with an in-process mock
provider in virtual time (``conftest.py``); the error cases call the real
entry point, :func:`semisched.batch.cli.main`, which sends nothing.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from batch_testkit import chat_line, cli_args, provider, records, write_lines

from semisched.batch.cli import main, main_async

pytestmark = pytest.mark.anyio


async def test_a_run_shows_progress_per_result_and_exits_0(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write_lines(tmp_path / "in.jsonl", [chat_line(i) for i in range(6)])
    async with provider() as (client, _):
        code = await main_async(cli_args(tmp_path, "--progress-every", "0"), client=client)
    err = capsys.readouterr().err
    assert code == 0
    progress = [line for line in err.splitlines() if " done | failed " in line]
    assert [line.split(" ", 1)[0] for line in progress] == [f"{i}/6" for i in range(1, 7)]
    assert "done: 6 of 6 requests answered" in err and "succeeded 6; failed: none" in err
    assert len(records(tmp_path / "out.jsonl")) == 6


async def test_failed_requests_exit_1_and_are_named_in_the_summary(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write_lines(tmp_path / "in.jsonl", [chat_line(i) for i in range(3)])
    async with provider(error_rate=1.0) as (client, _):
        code = await main_async(cli_args(tmp_path), client=client)
    err = capsys.readouterr().err
    assert code == 1
    assert "succeeded 0; failed: provider_error 3" in err
    assert "retries 15" in err  # 6 attempts each: the scheduler's retries


async def test_a_rerun_with_nothing_left_sends_nothing_and_exits_0(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write_lines(tmp_path / "in.jsonl", [chat_line(0)])
    async with provider() as (client, stats):
        assert await main_async(cli_args(tmp_path), client=client) == 0
        assert await main_async(cli_args(tmp_path), client=client) == 0
        assert stats().counters.requests == 1
    assert "done: 0 of 0 requests answered" in capsys.readouterr().err


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
