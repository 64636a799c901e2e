"""Named statistics of the mock provider and their JSON form (mockprovider.stats)."""

from __future__ import annotations

import json
from dataclasses import asdict, fields
from typing import Any, get_args

import pytest

from mockprovider.faults import WindowState
from mockprovider.physics import PhysicsStats
from mockprovider.stats import ApiRequests, CounterName, MockCounters, MockStats, Tally


def sample(**changes: Any) -> MockStats:
    base: dict[str, Any] = {
        "virtual_time": 12.5,
        "time_scale": 100.0,
        "physics": PhysicsStats(
            active=2,
            queued=1,
            slots=8,
            submitted=9,
            completed=5,
            timed_out=1,
            cancelled=0,
            iteration_ms=20.1,
        ),
        "counters": MockCounters(requests=11, completed=5, rate_limited_tokens=2),
        "requests_window": WindowState(60, 51, 47.5),
        "tokens_window": None,
        "quota_limit": None,
        "quota_used": 700,
        "capacity_loss_applied_at": 10.0,
    }
    return MockStats(**{**base, **changes})


@pytest.mark.parametrize(
    "stats",
    [
        sample(),
        sample(requests_window=None, tokens_window=WindowState(1000, 0, 0.25)),
        sample(requests_by_api=ApiRequests(chat_completions=3, responses=5, embeddings=3)),
    ],
)
def test_json_round_trip_gives_the_same_dataclass(stats: MockStats) -> None:
    wire = json.loads(json.dumps(asdict(stats)))
    assert MockStats.from_json(wire) == stats


@pytest.mark.parametrize(
    ("edit", "where"),
    [
        (lambda d: d.pop("quota_used"), "stats"),
        (lambda d: d.update(extra=1), "stats"),
        (lambda d: d["counters"].pop("timeouts"), "counters"),
        (lambda d: d["physics"].update(new_field=0), "physics"),
        (lambda d: d.update(tokens_window=[1, 2, 3]), "tokens_window"),
        (lambda d: d["requests_by_api"].update(batches=1), "requests_by_api"),
        (lambda d: d["requests_by_api"].pop("responses"), "requests_by_api"),
    ],
)
def test_from_json_refuses_a_shape_it_does_not_know(edit: Any, where: str) -> None:
    wire = json.loads(json.dumps(asdict(sample())))
    edit(wire)
    with pytest.raises(ValueError, match=where):
        MockStats.from_json(wire)


def test_the_tally_counts_exactly_the_named_counters() -> None:
    assert get_args(CounterName) == tuple(f.name for f in fields(MockCounters))
    tally = Tally()
    assert tally.snapshot() == MockCounters()
    names: tuple[CounterName, ...] = ("requests", "requests", "rate_limited_requests")
    for name in (*names, "rate_limited_tokens"):
        tally.add(name)
    counters = tally.snapshot()
    assert (counters.requests, counters.rate_limited) == (2, 2)
    assert "requests=2" in repr(tally)


def test_from_json_reads_the_stats_of_a_mock_without_requests_by_api() -> None:
    wire = json.loads(json.dumps(asdict(sample())))
    del wire["requests_by_api"]  # what a mock before the per-API counts served
    assert MockStats.from_json(wire) == sample()
    assert MockStats.from_json(wire).requests_by_api == ApiRequests()


def test_the_tally_counts_requests_per_api_into_the_requests_counter() -> None:
    tally = Tally()
    for api in ("chat.completions", "responses", "responses", "embeddings"):
        tally.received(api)
    assert tally.apis() == ApiRequests(chat_completions=1, responses=2, embeddings=1)
    assert tally.snapshot().requests == 4
