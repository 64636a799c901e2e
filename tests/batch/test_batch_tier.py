"""The Batch API tier's pure parts: the tier rule, the turnaround estimate, the slack rule,
grouping, deadlines in lines, ``--price`` and the journal."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from batch_testkit import chat_line, write_lines

from semisched import Price
from semisched.batch import read_input
from semisched.batch.deadlines import Deadlines, take_deadline
from semisched.batch.journal import Journal, journal_path, read_journal
from semisched.batch.ledger import TierTally
from semisched.batch.tier import (
    Turnaround,
    choose_tier,
    group_lines,
    must_cancel,
    realtime_need_s,
)
from semisched.batch.tier_args import parse_price


def test_auto_sends_a_line_through_the_batch_api_only_when_its_slack_exceeds_the_turnaround() -> (
    None
):
    assert choose_tier("auto", deadline=10_000.0, now=0.0, turnaround_s=5400.0) == "batch"
    assert choose_tier("auto", deadline=5000.0, now=0.0, turnaround_s=5400.0) == "realtime"
    assert choose_tier("auto", deadline=7000.0, now=2000.0, turnaround_s=5400.0) == "realtime"
    assert choose_tier("auto", deadline=None, now=0.0, turnaround_s=5400.0) == "batch"


def test_the_batch_and_realtime_tiers_ignore_deadlines() -> None:
    assert choose_tier("batch", deadline=1.0, now=0.0, turnaround_s=5400.0) == "batch"
    assert choose_tier("realtime", deadline=None, now=0.0, turnaround_s=5400.0) == "realtime"


def test_the_turnaround_starts_at_the_prior_times_the_safety_factor() -> None:
    turnaround = Turnaround(3600.0, 1.5)
    assert turnaround.typical_s == 3600.0 and turnaround.estimate_s == 5400.0


def test_one_fast_batch_moves_the_estimate_only_a_little() -> None:
    turnaround = Turnaround(3600.0, 1.0)
    turnaround.observe(600.0)
    assert turnaround.typical_s == pytest.approx((2 * 3600 + 600) / 3)
    for _ in range(30):
        turnaround.observe(600.0)
    assert turnaround.typical_s < 1000.0


def test_a_slow_batch_is_believed_at_once() -> None:
    turnaround = Turnaround(3600.0, 1.0)
    turnaround.observe(600.0)
    turnaround.observe(9000.0)
    assert turnaround.typical_s == 9000.0


def test_a_batch_unfinished_after_t_seconds_counts_as_at_least_t() -> None:
    turnaround = Turnaround(600.0, 1.0)
    turnaround.at_least(2000.0)
    assert turnaround.typical_s == 2000.0
    turnaround.at_least(100.0)
    assert turnaround.typical_s == 2000.0


def test_the_turnaround_refuses_a_safety_factor_under_one() -> None:
    with pytest.raises(ValueError, match="safety"):
        Turnaround(3600.0, 0.5)


def test_a_batch_is_cancelled_when_its_slack_comes_within_one_poll() -> None:
    need = realtime_need_s(100.0)
    assert need == 2 * 100.0 + 60.0
    assert not must_cancel(1000.0, now=0.0, need_s=need, poll_s=60.0)
    assert must_cancel(1000.0, now=700.0, need_s=need, poll_s=60.0)
    assert not must_cancel(None, now=10**6, need_s=need, poll_s=60.0)
    assert realtime_need_s(100.0, typical_s=3600.0) == need + 360.0


def test_lines_are_grouped_by_url_within_the_limits() -> None:
    lines = [("/v1/chat/completions", 10)] * 5 + [("/v1/embeddings", 10)] * 2
    groups = group_lines(lines, url=lambda x: x[0], size=lambda x: x[1], max_lines=2)
    assert [len(g) for g in groups] == [2, 2, 1, 2]
    assert {g[0][0] for g in groups} == {"/v1/chat/completions", "/v1/embeddings"}
    by_bytes = group_lines(lines[:5], url=lambda x: x[0], size=lambda x: x[1], max_bytes=25)
    assert [len(g) for g in by_bytes] == [2, 2, 1]


def test_a_line_deadline_is_taken_out_of_its_metadata() -> None:
    body = {"model": "m", "metadata": {"deadline_s": "600", "tag": "x"}}
    assert take_deadline(body) == 600.0 and body["metadata"] == {"tag": "x"}
    body = {"model": "m", "metadata": {"deadline_s": 30}}
    assert take_deadline(body) == 30.0 and "metadata" not in body
    with pytest.raises(ValueError, match="deadline_s"):
        take_deadline({"metadata": {"deadline_s": "soon"}})


def test_the_earlier_of_a_lines_deadline_and_the_jobs_applies() -> None:
    deadlines = Deadlines(start=100.0, job_s=3600.0)
    assert deadlines.of(60.0) == 160.0
    assert deadlines.of(None) == 3700.0
    assert deadlines.of(7200.0) == 3700.0
    assert Deadlines(start=0.0).of(None) is None


def test_an_input_line_with_a_bad_deadline_is_invalid(tmp_path: Path) -> None:
    good, bad = chat_line(0), chat_line(1)
    good["body"]["metadata"]["deadline_s"] = "90"
    bad["body"]["metadata"]["deadline_s"] = "-1"
    lines, invalid = read_input(write_lines(tmp_path / "in.jsonl", [good, bad]))
    assert [line.deadline_s for line in lines] == [90.0]
    assert len(invalid) == 1 and "deadline_s" in invalid[0].message


def test_price_flag() -> None:
    assert parse_price("input=0.15,output=0.6") == Price(input=0.15, output=0.6)
    assert parse_price("input=1,output=2,cached-input=0.5,batch_discount=0.4") == Price(
        input=1.0, output=2.0, cached_input=0.5, batch_discount=0.4
    )
    with pytest.raises(ValueError, match="output"):
        parse_price("input=1")
    with pytest.raises(ValueError, match="not a number"):
        parse_price("input=x,output=1")


def test_the_tally_counts_lines_spend_and_deadlines_by_tier() -> None:
    tally = TierTally().plus("realtime", 0.25, True).plus("batch", 0.5, False)
    tally = tally.plus("batch", None, None)
    assert (tally.realtime_lines, tally.batch_lines) == (1, 2)
    assert tally.spent_usd == 0.75 and tally.priced
    assert (tally.deadlines_met, tally.deadlines_missed) == (1, 1)
    assert any("deadlines: 1 met, 1 missed" in line for line in tally.lines())


def test_the_journal_keeps_open_uploads_and_ignores_a_torn_last_line(tmp_path: Path) -> None:
    output = tmp_path / "out.jsonl"
    journal = Journal(output, wall=1000.0)
    journal.upload("u1", "/v1/chat/completions", ["a", "b"])
    journal.batch("u1", "batch_1")
    journal.upload("u2", "/v1/embeddings", ["c"])
    journal.closed("u2")
    journal.upload("u3", "/v1/chat/completions", ["d"])
    journal.close()
    path = journal_path(output)
    with path.open("a") as handle:
        handle.write('{"event":"batch","upload":"u3","bat')  # a kill mid-write
    state = read_journal(path)
    assert state.started_unix == 1000.0
    assert [u.upload for u in state.open_uploads()] == ["u1", "u3"]
    assert state.uploads["u1"].batch_id == "batch_1" and state.uploads["u3"].batch_id is None
    assert state.claimed() == frozenset({"a", "b", "d"})
    again = Journal(output)  # cuts the torn line, keeps the start
    again.abandoned("u3")
    again.close()
    entries = [json.loads(x) for x in path.read_text().splitlines()]
    assert entries[-1] == {"event": "abandoned", "upload": "u3"}
    assert read_journal(path).claimed() == frozenset({"a", "b"})
