"""The auth guard's rules (semisched.batch.auth): 401/403s held back, released by a
success, dropped once enough come in a row."""

from __future__ import annotations

from pathlib import Path

import pytest
from batch_testkit import chat_line, mock_fleet, records, write_lines

from semisched.batch.auth import AuthGuard
from semisched.batch.cli import main_async
from semisched.batch.output import ErrorCode

E = ErrorCode.PROVIDER_ERROR


def test_other_failures_are_written_at_once_and_do_not_count() -> None:
    guard = AuthGuard(limit=2)
    assert not guard.hold({"id": 1}, E, 500) and not guard.hold({"id": 2}, E, None)
    assert not guard.tripped and guard.release() == []


def test_a_success_releases_what_was_held_and_starts_the_count_again() -> None:
    guard = AuthGuard(limit=2)
    assert guard.hold({"id": 1}, E, 403)
    assert guard.release() == [({"id": 1}, E)]  # the key works: an ordinary failure
    assert guard.hold({"id": 2}, E, 401) and not guard.tripped


def test_limit_refusals_in_a_row_trip_it_and_nothing_of_them_is_kept() -> None:
    guard = AuthGuard(limit=3)
    for i in range(3):
        assert guard.hold({"id": i}, E, 401)
    assert guard.tripped and guard.status == 401
    assert guard.hold({"id": 9}, E, 401) and guard.release() == []


# -- over a fleet: a refused key takes its endpoint out, the job goes on elsewhere -----------


@pytest.mark.anyio
async def test_a_fleet_with_one_refused_key_answers_every_line_from_the_others(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("EAST_KEY", "sk-east")
    monkeypatch.setenv("WEST_KEY", "sk-wrong")  # west refuses it: every call there is a 401
    write_lines(tmp_path / "in.jsonl", [chat_line(i, out=20) for i in range(16)])
    argv = ["batch", str(tmp_path / "in.jsonl"), "-o", str(tmp_path / "out.jsonl"),
            "--priors", "heuristic", "--routing", "round_robin",
            "--endpoint", "east=http://east/v1,key-env=EAST_KEY",
            "--endpoint", "west=http://west/v1,key-env=WEST_KEY"]  # fmt: skip
    async with mock_fleet(east={"api_key": "sk-east"}, west={"api_key": "sk-west"}) as fleet:
        code = await main_async(argv, make_client=fleet.client)
        east, west = fleet.stats("east").counters, fleet.stats("west").counters
    err = capsys.readouterr().err
    assert code == 0, err
    out = records(tmp_path / "out.jsonl")
    assert len(out) == 16 and all(r["error"] is None for r in out)
    assert east.completed == 16
    assert 1 <= west.unauthorized <= 2  # what was in flight there when the first refusal came


def test_the_summary_of_a_refused_key_says_so_in_its_first_word() -> None:
    from semisched.batch.summary import BatchSummary

    summary = BatchSummary(total=5, already_done=0, invalid=0, to_send=5, elapsed_s=1.5,
                           interrupted=True, auth_status=401, auth_refused=3)  # fmt: skip
    assert summary.lines()[0].startswith(
        "stopped on an authentication error (401: the key was refused) in 1.5 s: 0 succeeded"
    )
    assert BatchSummary(total=1, already_done=0, invalid=0, to_send=1, interrupted=True
                        ).lines()[0].startswith("interrupted in")  # fmt: skip
