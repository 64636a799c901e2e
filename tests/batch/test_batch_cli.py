"""The ``semisched batch`` command: exit statuses, progress lines, clear errors.

The runs await :func:`semisched.batch.cli.main_async` with an in-process mock
provider in virtual time (``conftest.py``); the error cases call the real
entry point, :func:`semisched.batch.cli.main`, which sends nothing.
"""

from __future__ import annotations

import itertools
import re
from pathlib import Path

import openai
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
    assert "6 succeeded, 0 failed, 0 invalid lines (6 to send" in err and "failed: none" in err
    assert len(records(tmp_path / "out.jsonl")) == 6


async def test_a_piped_run_prints_progress_every_period_while_it_waits_for_a_window(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Virtual time: 60 lines at 30 rpm go as 30 at once, then 30 when the window frees
    # 60 s later; nothing is answered in between, yet a line comes every 10 s.
    write_lines(tmp_path / "in.jsonl", [chat_line(i) for i in range(60)])
    args = cli_args(tmp_path, "--rpm", "30", "--progress-every", "10")
    async with provider() as (client, _):
        assert await main_async(args, client=client) == 0
    err = capsys.readouterr().err
    lines = [(int(at), int(eta)) for at, eta in re.findall(r"\| (\d+)s in \| ETA (\d+)s", err)]
    end = float(re.search(r"makespan (\d+\.\d) s = ", err).group(1))  # type: ignore[union-attr]
    times = [0, *(at for at, _ in lines), end]
    assert max(b - a for a, b in itertools.pairwise(times)) <= 11, times
    assert len([at for at, _ in lines if 15 <= at <= 55]) >= 4  # the wait for the window
    # Each ETA is within one answer's time of the true end: the window, not the answers
    # of the first burst, paces the run.
    assert all(abs(at + eta - end) <= 15 for at, eta in lines), (lines[5:], end)
    assert "x the steady-rate floor 120.0 s (requests bound; the first 60 s window's" in err


async def test_failed_requests_exit_1_and_are_named_in_the_summary(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write_lines(tmp_path / "in.jsonl", [chat_line(i) for i in range(3)])
    async with provider(error_rate=1.0) as (client, _):
        code = await main_async(cli_args(tmp_path), client=client)
    err = capsys.readouterr().err
    assert code == 1
    # What happened, named: none of the three succeeded (not "3 of 3 answered").
    assert "0 succeeded, 3 failed, 0 invalid lines" in err
    assert "failed: provider_error 3" in err
    assert "retries 15" in err  # 6 attempts each: the scheduler's retries


async def test_a_rerun_with_nothing_left_sends_nothing_and_exits_0(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write_lines(tmp_path / "in.jsonl", [chat_line(0)])
    async with provider() as (client, stats):
        assert await main_async(cli_args(tmp_path), client=client) == 0
        assert await main_async(cli_args(tmp_path), client=client) == 0
        assert stats().counters.requests == 1
    assert "0 succeeded, 0 failed, 0 invalid lines (0 to send, 1 already" in capsys.readouterr().err


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


@pytest.mark.parametrize(
    ("option", "value", "message"),
    [
        ("--state", "garbage", "state='garbage': must start with redis://"),
        ("--state", "redis://127.0.0.1:abc/0", "the port must be a number"),
        ("--state", "redis://:secret@127.0.0.1:6379/x", "the database must be a number"),
        ("--namespace", "bad:ns", "namespace='bad:ns' must be a non-empty str without ':'"),
    ],
)
@pytest.mark.parametrize("dry_run", [False, True])
def test_a_bad_state_or_namespace_exits_2_in_one_line_and_writes_nothing(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    option: str,
    value: str,
    message: str,
    dry_run: bool,
) -> None:
    write_lines(tmp_path / "in.jsonl", [chat_line(0)])
    args = ["batch", str(tmp_path / "in.jsonl"), "-o", str(tmp_path / "o.jsonl"),
            "--base-url", "http://127.0.0.1:9/v1", "--priors", "heuristic",
            option, value]  # fmt: skip
    code = main([*args, "--dry-run"] if dry_run else args)
    err = capsys.readouterr().err
    assert code == 2
    assert err.strip().splitlines() == [err.strip()] and message in err  # one line, no traceback
    assert "secret" not in err
    assert not (tmp_path / "o.jsonl").exists()


async def test_a_duplicate_custom_id_skipped_as_invalid_leaves_one_record_for_that_id(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write_lines(tmp_path / "in.jsonl", [chat_line(0), chat_line(1), chat_line(0)])
    async with provider() as (client, _):
        assert await main_async(cli_args(tmp_path, "--skip-invalid"), client=client) == 1
        for_req_0 = [r for r in records(tmp_path / "out.jsonl") if r["custom_id"] == "req-0"]
        assert len(for_req_0) == 1 and for_req_0[0]["error"] is None
        # --retry-failed drops the invalid line's record and writes it again: still one.
        args = cli_args(tmp_path, "--skip-invalid", "--retry-failed")
        assert await main_async(args, client=client) == 1
    out = records(tmp_path / "out.jsonl")
    assert [r["custom_id"] for r in out].count("req-0") == 1
    (invalid,) = [r for r in out if r["error"] is not None]
    assert invalid["custom_id"] is None and "line 3: duplicate custom_id" in str(invalid["error"])
    assert "2 succeeded, 0 failed, 1 invalid lines" in capsys.readouterr().err


async def test_a_refused_key_stops_the_job_with_exit_2_and_a_rerun_resumes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write_lines(tmp_path / "in.jsonl", [chat_line(i) for i in range(40)])
    async with provider(api_key="not-the-clients-key") as (client, stats):  # every call: 401
        code = await main_async(cli_args(tmp_path), client=client)
        sent = stats().counters.requests
    err = capsys.readouterr().err
    assert code == 2 and "authentication failed: 3 answers in a row were 401s" in err
    assert sent < 40  # it stopped sending
    assert not (tmp_path / "out.jsonl").exists() or records(tmp_path / "out.jsonl") == []
    async with provider() as (client, _):  # the right key: the rerun sends every line
        assert await main_async(cli_args(tmp_path), client=client) == 0
    out = records(tmp_path / "out.jsonl")
    assert len(out) == 40 and all(r["error"] is None for r in out)


async def test_a_refused_key_says_how_many_were_refused_and_how_many_not_sent(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write_lines(tmp_path / "in.jsonl", [chat_line(i) for i in range(40)])
    args = cli_args(tmp_path, "--api-key-env", "TEAM_KEY")
    async with provider(api_key="not-the-clients-key") as (client, stats):  # every call: 401
        assert await main_async(args, client=client) == 2
        refused = stats().counters.unauthorized
    err = capsys.readouterr().err
    assert 0 < refused < 40
    # Not "40 requests left unsent": some were sent and refused, none of them recorded.
    assert f"40 requests without a record ({refused} refused, {40 - refused} not sent)" in err
    assert "Check the key in TEAM_KEY" in err


def test_version_prints_the_installed_version(capsys: pytest.CaptureFixture[str]) -> None:
    from importlib.metadata import version

    from semisched.command import main as command

    assert command(["--version"]) == 0
    assert capsys.readouterr().out == f"semisched {version('semisched')}\n"
    with pytest.raises(SystemExit) as info:  # also beside a subcommand: argparse's own
        main(["--version", "batch"])
    assert info.value.code == 0 and capsys.readouterr().out == f"semisched {version('semisched')}\n"


@pytest.mark.parametrize(
    ("flag", "env", "expected"),
    [
        (["--base-url", "http://flag/v1"], "http://env/v1", "http://flag/v1"),
        ([], "http://env/v1", "http://env/v1"),
        ([], None, "https://api.openai.com/v1"),
    ],
)
async def test_the_base_url_is_the_flag_else_openai_base_url_else_openais(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    flag: list[str],
    env: str | None,
    expected: str,
) -> None:
    if env is None:
        monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    else:
        monkeypatch.setenv("OPENAI_BASE_URL", env)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    write_lines(tmp_path / "in.jsonl", [chat_line(0)])
    args = ["batch", str(tmp_path / "in.jsonl"), "-o", str(tmp_path / "out.jsonl"),
            "--priors", "heuristic", *flag]  # fmt: skip
    seen: list[str] = []
    async with provider() as (client, _):

        def make_client(base_url: str, api_key: str) -> object:
            seen.append(base_url)
            return client

        assert await main_async(args, make_client=make_client) == 0
    assert seen == [expected]


def test_batch_help_names_openai_base_url(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["batch", "--help"])
    assert "$OPENAI_BASE_URL" in " ".join(capsys.readouterr().out.split())


async def test_a_base_url_without_v1_is_named_once_in_the_summary(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    write_lines(tmp_path / "in.jsonl", [chat_line(i) for i in range(3)])
    args = [*cli_args(tmp_path)]
    args[args.index("http://mock/v1")] = "http://mock"  # every call answers 404
    async with provider() as (client, _):
        http = client._client  # the in-process transport, under the base URL the job names

        def make_client(base_url: str, api_key: str) -> openai.AsyncOpenAI:
            return openai.AsyncOpenAI(base_url=base_url, api_key=api_key, http_client=http)

        assert await main_async(args, make_client=make_client) == 1
    err = capsys.readouterr().err
    hint = ("  hint: http://mock/chat/completions answered 404 and the base URL http://mock "
            "does not end in /v1: OpenAI-compatible servers answer under .../v1")  # fmt: skip
    assert err.count(hint) == 1
    assert "  failed: provider_error 3\n" + hint + "\n" in err
