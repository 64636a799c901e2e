"""Ordering: which request of a class goes next (fifo, feasible-set scoring).

The harness keeps the single send slot busy with a blocker, queues candidates,
then cancels the blocker: the Send that follows is the ordering decision.
Cancelling (rather than completing) leaves the latency estimate at its initial
18.7 ms/token, so feasibility and urgency are exact.
"""

from __future__ import annotations

import pytest

from semisched.core import (
    AllocationConfig,
    ClassSpec,
    Engine,
    OrderingConfig,
    OverloadConfig,
    Prior,
    Request,
    SchedulerConfig,
    Send,
)

S_PER_TOKEN = 0.0187  # SignalsConfig.initial_s_per_token


def engine(policy: str = "feasible_set", **ordering: object) -> Engine:
    cfg = SchedulerConfig(
        max_inflight=1,
        classes=(ClassSpec(name="batch"),),
        allocation=AllocationConfig(policy="fifo"),
        ordering=OrderingConfig(policy=policy, urgent_candidates=4, **ordering),  # type: ignore[arg-type]
        overload=OverloadConfig(policy="none"),
    )
    e = Engine(cfg)
    e.submit(req("blocker", 10, arrival=0.0), 0.0)
    return e


def req(rid: str, cost: float, *, arrival: float, deadline: float | None = None) -> Request:
    return Request(
        id=rid, klass="batch", prior=Prior(p50=cost, p90=cost), arrival=arrival, deadline=deadline
    )


def next_sent(e: Engine, free: str, now: float) -> str:
    sends = [a for a in e.cancel(free, now) if isinstance(a, Send)]
    assert len(sends) == 1
    return sends[0].request.id


def drain(e: Engine, first: str, now: float) -> list[str]:
    order, current = [], first
    while True:
        sends = [a for a in e.cancel(current, now) if isinstance(a, Send)]
        if not sends:
            return order
        current = sends[0].request.id
        order.append(current)


def test_fifo_ordering_is_enqueue_order_whatever_the_size() -> None:
    e = engine("fifo")
    for i, cost in enumerate((5000, 10, 800, 10, 3000)):
        e.submit(req(f"r{i}", cost, arrival=0.0), 0.0)
    assert drain(e, "blocker", 1.0) == ["r0", "r1", "r2", "r3", "r4"]


@pytest.mark.parametrize("big_first", [True, False])
def test_feasible_set_prefers_smaller_at_equal_wait(big_first: bool) -> None:
    e = engine()
    pair = [req("big", 4000, arrival=0.0), req("small", 100, arrival=0.0)]
    for r in pair if big_first else pair[::-1]:
        e.submit(r, 0.0)
    assert next_sent(e, "blocker", 5.0) == "small"


def test_feasible_set_prefers_older_at_equal_size() -> None:
    e = engine()
    e.submit(req("old", 500, arrival=0.0), 0.0)
    e.submit(req("new", 500, arrival=3.0), 3.0)
    assert drain(e, "blocker", 5.0) == ["old", "new"]


@pytest.mark.parametrize(
    ("small_arrives", "winner"),
    [
        # score = wait/rel - rel with rel = cost/1024: the 2048-token job scores wait/2 - 2,
        # a fresh 64-token job -1/16, so the big job overtakes after 3.875 s of waiting.
        (1.0, "small"),
        (3.5, "small"),
        (4.5, "big"),
        (60.0, "big"),
    ],
)
def test_aging_lets_a_big_job_overtake_a_fresh_small_one(small_arrives: float, winner: str) -> None:
    e = engine()
    e.submit(req("big", 2048, arrival=0.0), 0.0)
    e.submit(req("small", 64, arrival=small_arrives), small_arrives)
    assert next_sent(e, "blocker", small_arrives) == winner


@pytest.mark.parametrize(
    ("slack", "winner"),
    [
        (None, "older"),  # no deadline: the older equal-sized request goes first
        (100.0, "older"),  # deadline far beyond the urgency horizon (30 s)
        (1.0, "urgent"),  # 1 s of slack: urgency ~0.97 outweighs 0.5 s of extra wait
    ],
)
def test_urgency_raises_a_near_deadline_request(slack: float | None, winner: str) -> None:
    e = engine()
    now = 1.0
    e.submit(req("older", 1024, arrival=0.0), 0.0)
    deadline = None if slack is None else now + 1024 * S_PER_TOKEN + slack
    e.submit(req("urgent", 1024, arrival=0.5, deadline=deadline), 0.5)
    assert next_sent(e, "blocker", now) == winner


def test_infeasible_request_ranks_last_but_is_still_sent_alone() -> None:
    e = engine()
    # 1024 tokens take ~19 s; a 10 s deadline cannot be met. It is older, bigger-band and
    # maximally urgent, so it would win on score alone (2.0 against ~0.54).
    e.submit(req("doomed", 1024, arrival=0.0, deadline=10.0), 0.0)
    e.submit(req("ok", 500, arrival=0.5), 0.5)
    assert next_sent(e, "blocker", 1.0) == "ok"
    assert e.statistics().counters.infeasible_sends == 0
    # Nothing feasible is left in its class: it is sent (not dropped), and counted.
    assert next_sent(e, "ok", 2.0) == "doomed"
    assert e.statistics().counters.infeasible_sends == 1


@pytest.mark.parametrize(
    ("doomed", "lookahead", "winner"),
    [
        (1, 16, "ok"),  # the default look-ahead finds the feasible peer behind the head
        (3, 3, "ok"),  # exactly within reach
        (3, 2, "doomed0"),  # documented limit: beyond the look-ahead the head goes first
        (1, 0, "doomed0"),  # look-ahead off: band heads and urgent candidates only
    ],
)
def test_infeasible_band_head_does_not_hide_a_feasible_peer(
    doomed: int, lookahead: int, winner: str
) -> None:
    e = engine(infeasible_lookahead=lookahead)
    for i in range(doomed):
        e.submit(req(f"doomed{i}", 1024, arrival=0.0, deadline=10.0), 0.0)
    e.submit(req("ok", 1024, arrival=0.5), 0.5)  # same cost band, queued behind them
    assert next_sent(e, "blocker", 1.0) == winner


def test_feasible_set_does_not_reorder_within_a_band_without_a_reason() -> None:
    # Same size, no deadlines: a FIFO among equals, like fifo ordering.
    e = engine()
    for i in range(6):
        e.submit(req(f"r{i}", 300, arrival=float(i)), float(i))
    assert drain(e, "blocker", 10.0) == [f"r{i}" for i in range(6)]


def test_longest_first_sends_the_longest_predicted_work_first_then_fifo_within_a_size() -> None:
    e = engine("longest_first")
    for rid, cost in (("s1", 20), ("l1", 900), ("m1", 200), ("l2", 900), ("s2", 20)):
        e.submit(req(rid, cost, arrival=1.0), 1.0)
    assert drain(e, "blocker", 2.0) == ["l1", "l2", "m1", "s1", "s2"]


def test_longest_first_sends_what_can_meet_its_deadline_before_what_cannot() -> None:
    e = engine("longest_first")
    e.submit(req("long_late", 900, arrival=1.0, deadline=2.0), 1.0)  # 900 x 18.7 ms > 1 s
    e.submit(req("short_ok", 20, arrival=1.0, deadline=100.0), 1.0)
    assert next_sent(e, "blocker", 1.0) == "short_ok"


@pytest.mark.parametrize(("quantile", "winner"), [(0.25, "unsure"), (0.5, "ok")])
def test_an_uncertain_request_is_not_given_up_while_its_optimistic_length_fits(
    quantile: float, winner: str
) -> None:
    e = engine(feasibility_quantile=quantile)
    # p50 600 tokens (~11 s) misses a 9 s deadline; its 25th percentile (p50 / 3.3 with
    # p90 = 4 x p50) fits. Read at p50 it is infeasible and waits behind "ok".
    unsure = Prior(p50=600.0, p90=2400.0)
    assert unsure.p50 * S_PER_TOKEN + 1.0 > 9.0 and unsure.quantile(-0.6745) * S_PER_TOKEN < 8.0
    e.submit(Request(id="unsure", klass="batch", prior=unsure, arrival=0.0, deadline=10.0), 0.0)
    e.submit(req("ok", 500, arrival=0.5), 0.5)
    assert next_sent(e, "blocker", 1.0) == winner


@pytest.mark.parametrize("quantile", [0.0, 1.0, -0.1, True])
def test_feasibility_quantile_must_be_inside_zero_one(quantile: object) -> None:
    with pytest.raises(ValueError, match=r"^feasibility_quantile="):
        OrderingConfig(feasibility_quantile=quantile)  # type: ignore[arg-type]
