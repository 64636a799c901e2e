"""``semisched batch``'s forecast: ``--dry-run``, the makespan floor, the ETA, the priors line.

Virtual time (``conftest.py``): the in-process mock provider and the run wait
only on trio's ``MockClock``. The learned model is never loaded here: its
loader (``predictors.learned.load_default``) is replaced by a fake.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from batch_testkit import batch_options, chat_line, cli_args, provider, write_lines

from semisched.batch import BatchRun, eta_s
from semisched.batch.cli import main, main_async
from semisched.core import Prior, Request, makespan_floor

pytestmark = pytest.mark.anyio


# -- the ETA -------------------------------------------------------------------------------

ETA_TABLE = [
    # (to_send, done, elapsed_s, floor_s, eta_s): what the progress line shows
    pytest.param(1000, 0, 0.0, 600.0, 600.0, id="start: the floor"),
    pytest.param(1000, 1, 2.0, 600.0, 598.0, id="one early result: the floor's remainder"),
    pytest.param(1000, 99, 20.0, 600.0, 580.0, id="under 10% and 30 s: still the floor"),
    pytest.param(1000, 100, 90.0, 600.0, 810.0, id="10% done: the observed rate"),
    pytest.param(1000, 50, 30.0, 600.0, 570.0, id="30 s: observed 570 equals the remainder"),
    pytest.param(1000, 50, 40.0, 600.0, 760.0, id="30 s: the observed rate when slower"),
    pytest.param(1000, 500, 100.0, 600.0, 500.0, id="faster than the floor: its remainder"),
    pytest.param(1000, 900, 700.0, 600.0, 77.8, id="past the floor: the observed rate"),
    pytest.param(6, 0, 10.0, 5.0, None, id="past the floor, no answer yet: unknown"),
    pytest.param(6, 1, 6.0, 5.0, 30.0, id="past the floor, 1 of 6 answered: the observed rate"),
    pytest.param(
        300, 1, 6.5, 6.1, None, id="past the floor, 1 of 300 answered: unknown, not 299 x 6.5 s"
    ),
    pytest.param(1000, 1000, 700.0, 600.0, 0.0, id="all answered: 0"),
    pytest.param(0, 0, 0.0, None, 0.0, id="nothing to send: 0"),
    pytest.param(10, 0, 0.0, None, None, id="no floor, no answer: unknown"),
]


@pytest.mark.parametrize(("to_send", "done", "elapsed", "floor", "expected"), ETA_TABLE)
def test_the_eta_starts_from_the_floor_and_never_extrapolates_one_early_result(
    to_send: int, done: int, elapsed: float, floor: float | None, expected: float | None
) -> None:
    got = eta_s(to_send=to_send, done=done, elapsed_s=elapsed, floor_s=floor)
    assert got == (None if expected is None else pytest.approx(expected, abs=0.05))


RATE_BOUND = [
    # 60 lines at 30 rpm: steady-rate floor 120 s, the first 30 at once, the rest at 60 s
    pytest.param(1.0, 0, 60, None, 59.0, id="start: to the last window, not the floor"),
    pytest.param(10.0, 30, 30, 5.0, 55.0, id="burst answered: the window, plus an answer"),
    pytest.param(62.0, 30, 10, 5.0, 5.0, id="last window: what is left goes at once"),
    pytest.param(130.0, 20, 35, 5.0, 15.0, id="late: a window's worth at once, the rest at rate"),
]


@pytest.mark.parametrize(("elapsed", "done", "unsent", "latency", "expected"), RATE_BOUND)
def test_a_rate_bound_eta_counts_the_first_windows_burst(
    elapsed: float, done: int, unsent: int, latency: float | None, expected: float
) -> None:
    got = eta_s(to_send=60, done=done, elapsed_s=elapsed, floor_s=120.0, binding="requests",
                window_s=60.0, unsent=unsent, latency_s=latency)  # fmt: skip
    assert got == pytest.approx(expected, abs=0.05)


# -- the floor of a run --------------------------------------------------------------------


async def test_the_summary_reports_the_floor_of_the_lines_it_sent(tmp_path: Path) -> None:
    # 60 requests of 20 words (99 bytes: 25 prompt tokens at 4 bytes per token) and
    # max_tokens 200 (the heuristic's p50/p90: 200) at 20 rpm / 3000 tpm; 5 already answered.
    write_lines(tmp_path / "in.jsonl", [chat_line(i) for i in range(65)])
    async with provider() as (client, _):
        await BatchRun(batch_options(tmp_path, input=_first(tmp_path, 5)), client=client).run()
    async with provider(rpm=20, tpm=3000) as (client, _):
        summary = await BatchRun(batch_options(tmp_path, rpm=20, tpm=3000), client=client).run()
    sent = [
        Request(id=f"req-{i}", klass="any", prior=Prior(p50=200.0, p90=200.0),
                input_tokens=25.0, max_output_tokens=200)
        for i in range(5, 65)
    ]  # fmt: skip
    floor = makespan_floor(sent, rpm=20, tpm=3000, max_inflight=32)
    assert summary.to_send == 60 and summary.succeeded == 60
    assert (summary.floor_s, summary.floor_binding) == (floor.floor_s, floor.binding)
    assert (floor.floor_s, floor.binding) == (60 * 225 / 3000 * 60, "tokens")
    # The rate bounds give no credit for the first window's burst: a paced run ends
    # within a window of the floor (here a little before it).
    assert summary.floor_ratio == summary.elapsed_s / floor.floor_s
    assert 0.85 < summary.floor_ratio < 1.05


def _first(tmp_path: Path, n: int) -> Path:
    """An input of the first ``n`` lines of ``in.jsonl`` (their answers land in out.jsonl)."""
    head = (tmp_path / "in.jsonl").read_text().splitlines(keepends=True)[:n]
    path = tmp_path / "head.jsonl"
    path.write_text("".join(head))
    return path


async def test_a_run_announces_the_floor_and_its_first_eta_comes_from_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write_lines(tmp_path / "in.jsonl", [chat_line(i) for i in range(40)])
    args = cli_args(tmp_path, "--rpm", "10", "--progress-every", "0")
    async with provider() as (client, _):
        assert await main_async(args, client=client) == 0
    err = capsys.readouterr().err
    assert "priors: heuristic (--priors heuristic)" in err
    assert "makespan floor 240.0 s (requests bound) for 40 requests" in err
    lines = [(int(at), int(eta)) for at, eta in re.findall(r"\| (\d+)s in \| ETA (\d+)s", err)]
    end = float(re.search(r"makespan (\d+\.\d) s = ", err).group(1))  # type: ignore[union-attr]
    # The first 10 go at once, the last 10 three windows later (180 s), not at the
    # steady-rate floor (240 s); and the first result, within seconds, is not 39 x those
    # seconds away. Every line's ETA is within one answer's time of the true end.
    assert 170 <= lines[0][1] <= 200 and lines[-1][1] == 0
    assert all(abs(at + eta - end) <= 15 for at, eta in lines), (lines, end)
    assert re.search(
        r"makespan 1\d\d\.\d s = 0\.\d\d x the steady-rate floor 240\.0 s \(requests bound; "
        r"the first 60 s window's budget went at once\)",
        err,
    )


# -- the dry run ---------------------------------------------------------------------------


async def test_a_dry_run_prints_the_floor_and_sends_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write_lines(tmp_path / "in.jsonl", [chat_line(i) for i in range(30)])
    args = cli_args(tmp_path, "--rpm", "20", "--tpm", "3000", "--dry-run")
    async with provider() as (client, stats):
        code = await main_async(args, client=client)
        assert stats().counters.requests == 0  # no request reached the provider
    err = capsys.readouterr().err
    assert code == 0
    assert not (tmp_path / "out.jsonl").exists()
    assert "dry run: the input is valid; nothing was sent\nto send: 30 requests (0 already" in err
    assert "makespan floor: 135.0 s (2.2 min), bound by tokens" in err
    assert re.search(r"requests +90\.0 s  30 requests / 20 per 60 s", err)
    assert re.search(r"tokens +135\.0 s  6750 tokens / 3000 per 60 s", err)
    assert re.search(r"serving +3\.7 s  predicted output \(p50\) at 18\.7 ms/token", err)
    assert "expected makespan: about the floor, 135.0 s (2.2 min)" in err


async def test_a_dry_run_against_a_compressed_mock_shows_the_wall_time_too(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write_lines(tmp_path / "in.jsonl", [chat_line(i) for i in range(30)])
    assert (
        await main_async(cli_args(tmp_path, "--rpm", "10", "--time-scale", "50", "--dry-run")) == 0
    )
    err = capsys.readouterr().err
    assert "makespan floor: 180.0 s (3.0 min; 3.6 s of wall time at --time-scale 50)" in err


async def test_a_dry_run_skips_answered_lines_and_changes_no_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write_lines(tmp_path / "in.jsonl", [chat_line(i) for i in range(10)])
    async with provider(error_rate=1.0) as (client, _):
        opts = batch_options(tmp_path, input=_first(tmp_path, 4), max_attempts=1)
        await BatchRun(opts, client=client).run()  # 4 error records
    out = tmp_path / "out.jsonl"
    torn = out.read_bytes() + b'{"id": "batch_req_x", "cust'
    out.write_bytes(torn)
    for extra, to_send in (((), 6), (("--retry-failed",), 10)):
        assert await main_async(cli_args(tmp_path, "--dry-run", *extra)) == 0
        assert f"to send: {to_send} requests (" in capsys.readouterr().err
        assert out.read_bytes() == torn  # not cut, not rewritten


@pytest.mark.parametrize(
    "lines",
    [
        pytest.param([chat_line(0), "{", chat_line(0)], id="invalid lines"),
        pytest.param(None, id="unreadable input"),
    ],
)
def test_a_dry_run_refuses_what_a_run_refuses_with_the_same_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], lines: list[object] | None
) -> None:
    if lines is not None:
        write_lines(tmp_path / "in.jsonl", lines)
    args = ["batch", str(tmp_path / "in.jsonl"), "-o", str(tmp_path / "o.jsonl"),
            "--base-url", "http://127.0.0.1:9/v1"]  # fmt: skip
    assert main(args) == 2
    real = capsys.readouterr().err
    assert main([*args, "--dry-run"]) == 2
    assert capsys.readouterr().err == real
    assert not (tmp_path / "o.jsonl").exists()


def test_a_dry_run_refuses_an_output_a_run_could_not_write(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write_lines(tmp_path / "in.jsonl", [chat_line(0)])
    out = tmp_path / "no-such-dir" / "out.jsonl"
    code = main(["batch", str(tmp_path / "in.jsonl"), "-o", str(out), "--dry-run",
                 "--base-url", "http://127.0.0.1:9/v1", "--priors", "heuristic"])  # fmt: skip
    assert code == 2 and "cannot write output" in capsys.readouterr().err


def test_time_scale_is_documented_in_help(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["batch", "--help"])
    help_text = " ".join(capsys.readouterr().out.split())
    assert "--time-scale FACTOR" in help_text
    assert "for a compressed-time mock" in help_text and "pass the same N" in help_text
    assert "--dry-run" in help_text
