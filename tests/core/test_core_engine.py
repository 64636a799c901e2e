"""The sans-I/O Engine: events with an explicit ``now`` in, actions out (rules 1-7)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence

import pytest

from semisched.core import (
    Action,
    AllocationConfig,
    BucketCounts,
    ClassSpec,
    Defer,
    Engine,
    Expire,
    FailureKind,
    OrderingConfig,
    OverloadConfig,
    Prior,
    Reject,
    Request,
    RoutingConfig,
    SchedulerConfig,
    Send,
    Wake,
)

FIXED = RoutingConfig(concurrency="fixed")

BAD = FailureKind.BAD_REQUEST  # never retried: a terminal failure
SERVER = FailureKind.SERVER_ERROR  # retried

CLASSES = (ClassSpec(name="interactive", interactive=True), ClassSpec(name="batch"))


def engine(max_inflight: int | None = 1, **changes: object) -> Engine:
    """FIFO everywhere and no overload control: the mechanism alone."""
    cfg = SchedulerConfig(
        classes=CLASSES,
        max_inflight=max_inflight,
        routing=FIXED,  # the scheduler's cap alone, no learned endpoint limit
        allocation=AllocationConfig(policy="fifo"),
        ordering=OrderingConfig(policy="fifo"),
        overload=OverloadConfig(policy="none"),
    )
    return Engine(cfg.with_(**changes) if changes else cfg)


def load_engine(**overload: object) -> Engine:
    """Overload control on, severity = in-flight / 4 exactly (only the load signal counts)."""
    return engine(
        max_inflight=4,
        overload=OverloadConfig(w_load=1.0, w_queue=0.0, w_tail=0.0, **overload),  # type: ignore[arg-type]
    )


def req(
    rid: str,
    p50: float = 100,
    *,
    p90: float | None = None,
    klass: str = "batch",
    arrival: float = 0.0,
    deadline: float | None = None,
    input_tokens: float = 0.0,
) -> Request:
    return Request(
        id=rid,
        klass=klass,
        prior=Prior(p50=p50, p90=p50 if p90 is None else p90),
        input_tokens=input_tokens,
        arrival=arrival,
        deadline=deadline,
    )


def sent(actions: Sequence[Action]) -> list[str]:
    return [a.request.id for a in actions if isinstance(a, Send)]


def of(kind: type, actions: Sequence[Action]) -> list[str]:
    return [a.request.id for a in actions if isinstance(a, kind) and not isinstance(a, Wake)]


def wakes(actions: Sequence[Action]) -> list[float]:
    return [a.at for a in actions if isinstance(a, Wake)]


def fill(e: Engine, n: int, now: float = 0.0, prefix: str = "s") -> None:
    """Put n short requests in flight."""
    for i in range(n):
        assert sent(e.submit(req(f"{prefix}{i}", 10), now)) == [f"{prefix}{i}"]


def assert_counters_add_up(e: Engine) -> None:
    c = e.statistics().counters
    terminal = c.completed + c.rejected + c.expired + c.failed + c.cancelled
    assert terminal == c.terminal
    assert c.submitted == terminal + len(e)


# -- sending and capacity -----------------------------------------------------------------------


def test_submit_sends_at_once_when_there_is_capacity() -> None:
    e = engine(max_inflight=1, input_token_weight=0.5)
    actions = e.submit(req("a", 100, p90=300, input_tokens=40), 0.0)
    (send,) = actions
    assert isinstance(send, Send)
    assert (send.request.id, send.attempt, send.cost) == ("a", 1, 120.0)  # p50 + 0.5 * input
    stats = e.statistics()
    assert (stats.inflight, stats.inflight_tokens) == (1, 320.0)  # p90 + 0.5 * input reserved


@pytest.mark.parametrize("max_inflight", [1, 3, 8])
def test_max_inflight_is_respected_and_completion_dispatches_the_next(max_inflight: int) -> None:
    e = engine(max_inflight=max_inflight)
    out: list[str] = []
    for i in range(10):
        out += sent(e.submit(req(f"r{i}"), 0.0))
    assert out == [f"r{i}" for i in range(max_inflight)]
    assert e.statistics().queued["batch"] == 10 - max_inflight
    now = 0.0
    while out:
        now += 1.0
        assert e.statistics().inflight <= max_inflight
        out += sent(e.completed(out.pop(0), now, output_tokens=100))
        assert e.statistics().inflight == min(max_inflight, len(e))
    assert len(e) == 0
    assert e.statistics().counters.completed == 10


def test_unlimited_inflight_sends_everything_on_arrival() -> None:
    e = engine(max_inflight=None)
    assert sum(len(sent(e.submit(req(f"r{i}"), 0.0))) for i in range(100)) == 100


def test_inflight_token_budget() -> None:
    e = engine(max_inflight=10, max_inflight_tokens=1000.0)
    assert sent(e.submit(req("a", 100, p90=400), 0.0)) == ["a"]
    assert sent(e.submit(req("b", 100, p90=400), 0.0)) == ["b"]
    assert sent(e.submit(req("c", 100, p90=400), 0.0)) == []  # 1200 > 1000 reserved
    assert e.statistics().inflight_tokens == 800.0
    assert sent(e.completed("a", 1.0, output_tokens=100)) == ["c"]
    # An oversized request waits while anything flies, then goes alone.
    assert sent(e.submit(req("huge", 2000, p90=5000), 1.0)) == []
    assert sent(e.completed("b", 2.0, output_tokens=100)) == []
    assert sent(e.completed("c", 3.0, output_tokens=100)) == ["huge"]
    assert sent(e.submit(req("d", 10, p90=10), 3.0)) == []  # nothing joins the oversized one
    assert sent(e.completed("huge", 4.0, output_tokens=2000)) == ["d"]


# -- deadlines ----------------------------------------------------------------------------------


def test_queued_request_expires_at_its_deadline_via_the_wake() -> None:
    e = engine(max_inflight=1)
    fill(e, 1)
    actions = e.submit(req("late", deadline=5.0), 0.0)
    assert wakes(actions) == [5.0]
    assert of(Expire, e.poll(4.999)) == []
    expired = e.poll(5.0)
    assert of(Expire, expired) == ["late"]
    (expire,) = [a for a in expired if isinstance(a, Expire)]
    assert expire.reason
    # It is gone: the freed slot does not send it.
    assert sent(e.completed("s0", 6.0, output_tokens=10)) == []
    assert e.statistics().counters.expired == 1
    assert len(e) == 0


def test_expiry_is_reported_by_whatever_call_comes_first() -> None:
    e = engine(max_inflight=1)
    fill(e, 1)
    e.submit(req("late", deadline=5.0), 0.0)
    e.submit(req("next"), 0.0)
    actions = e.completed("s0", 7.0, output_tokens=10)
    assert of(Expire, actions) == ["late"]
    assert sent(actions) == ["next"]


def test_deferred_request_whose_deadline_passes_before_readmission_expires() -> None:
    e = load_engine()
    fill(e, 2)  # severity 0.5: long requests are deferred for 2 s
    actions = e.submit(req("long", 500, deadline=3.0), 0.0)
    assert of(Defer, actions) == ["long"]
    e.completed("s0", 0.5, output_tokens=10)
    e.completed("s1", 0.5, output_tokens=10)  # calm again, but the shell polls late
    actions = e.poll(3.5)
    assert of(Expire, actions) == ["long"]
    assert sent(actions) == []
    assert len(e) == 0


def test_deferred_request_polled_late_under_stress_expires_rather_than_rejects() -> None:
    # Rule 5: the deadline passed while it was deferred, so the outcome is Expire, even
    # though re-admitting it at the late call's `now` would defer it past the deadline.
    e = load_engine()
    fill(e, 2)
    e.submit(req("long", 500, deadline=3.0), 0.0)  # deferred until 2.0
    actions = e.poll(3.5)  # still severity 0.5
    assert of(Reject, actions) == []
    assert of(Expire, actions) == ["long"]
    assert e.statistics().counters.rejected == 0


@pytest.mark.parametrize("now", [5.0, 10.0], ids=["at-deadline", "after-deadline"])
def test_request_submitted_after_its_deadline_is_not_sent(now: float) -> None:
    # Rule 5 at the earliest possible call: the submit itself.
    e = engine(max_inflight=1)
    actions = e.submit(req("stale", arrival=0.0, deadline=5.0), now)
    assert sent(actions) == []
    assert of(Expire, actions) == ["stale"]
    assert len(e) == 0
    assert_counters_add_up(e)
    assert sent(e.submit(req("fresh"), now)) == ["fresh"]  # the slot is still free


@pytest.mark.parametrize("cancelled", ["other", "unknown"])
def test_cancel_is_a_call_that_reports_due_expiries(cancelled: str) -> None:
    # Rule 5: "the first call at or after the deadline" includes a cancel of anything.
    e = engine(max_inflight=1)
    fill(e, 1)
    e.submit(req("late", deadline=5.0), 0.0)
    e.submit(req("other"), 0.0)
    actions = e.cancel(cancelled, 6.0)
    assert of(Expire, actions) == ["late"]
    assert all(w > 6.0 for w in wakes(actions))  # never a wake-up in the past


def test_cancel_of_a_request_whose_deadline_passed_reports_the_expiry() -> None:
    e = engine(max_inflight=1)
    fill(e, 1)
    e.submit(req("late", deadline=5.0), 0.0)
    assert of(Expire, e.cancel("late", 6.0)) == ["late"]  # it ended before the cancel
    c = e.statistics().counters
    assert (c.expired, c.cancelled) == (1, 0)


# -- overload: defer, wake, re-admit ------------------------------------------------------------


def test_defer_then_wake_then_readmission() -> None:
    e = load_engine()
    fill(e, 2)
    actions = e.submit(req("long", 500), 1.0)
    (defer,) = [a for a in actions if isinstance(a, Defer)]
    assert defer.until == pytest.approx(3.0)
    assert defer.severity == pytest.approx(0.5)
    assert "long" in defer.reason
    assert wakes(actions) == [3.0]
    stats = e.statistics()
    assert (stats.deferred, stats.counters.deferrals, stats.defers_by_bucket) == (
        1,
        1,
        BucketCounts(long=1),
    )
    e.completed("s0", 2.0, output_tokens=10)
    e.completed("s1", 2.0, output_tokens=10)
    assert sent(e.poll(2.9)) == []  # polling early is harmless
    assert sent(e.poll(3.0)) == ["long"]
    assert e.statistics().deferred == 0


def test_deferral_backs_off_then_admits_after_max_defers() -> None:
    e = load_engine(backoff_s=2.0, max_backoff_s=5.0, max_defers=3)
    fill(e, 2)  # stays at severity 0.5 throughout
    untils, now = [], 0.0
    actions = e.submit(req("long", 500), now)
    while not sent(actions):
        (defer,) = [a for a in actions if isinstance(a, Defer)]
        untils.append(defer.until)
        assert wakes(actions) == [defer.until]
        now = defer.until
        actions = e.poll(now)
    assert untils == pytest.approx([2.0, 6.0, 11.0])  # 2, 4, then 8 capped at 5
    assert sent(actions) == ["long"]  # bounded delay, never a silent drop


def test_deferral_that_would_outlast_the_deadline_is_a_reject() -> None:
    e = load_engine()
    fill(e, 2)
    actions = e.submit(req("long", 500, deadline=1.5), 0.0)  # a 2 s deferral ends too late
    (reject,) = [a for a in actions if isinstance(a, Reject)]
    assert reject.request.id == "long"
    assert "deadline" in reject.reason
    assert e.statistics().counters.rejected == 1
    assert e.statistics().deferred == 0
    assert len(e) == 2


# -- cancel -------------------------------------------------------------------------------------


def test_cancel_queued_request_is_never_sent() -> None:
    e = engine(max_inflight=1)
    fill(e, 1)
    e.submit(req("q"), 0.0)
    e.cancel("q", 1.0)
    assert e.statistics().queued["batch"] == 0
    assert sent(e.completed("s0", 2.0, output_tokens=10)) == []
    assert e.statistics().counters.cancelled == 1
    assert len(e) == 0


def test_cancel_deferred_request_is_never_readmitted() -> None:
    e = load_engine()
    fill(e, 2)
    e.submit(req("long", 500), 0.0)
    e.cancel("long", 1.0)
    assert e.statistics().deferred == 0
    e.completed("s0", 1.5, output_tokens=10)
    assert sent(e.poll(2.0)) == []
    assert e.statistics().counters.cancelled == 1
    assert len(e) == 1


def test_cancel_inflight_request_frees_its_slot() -> None:
    e = engine(max_inflight=1)
    fill(e, 1)
    e.submit(req("next"), 0.0)
    assert sent(e.cancel("s0", 1.0)) == ["next"]
    with pytest.raises(ValueError, match="not in flight"):
        e.completed("s0", 2.0, output_tokens=10)  # a late answer for it is misuse
    assert e.statistics().counters.cancelled == 1


def test_cancel_unknown_or_finished_is_a_noop() -> None:
    e = engine(max_inflight=1)
    fill(e, 1)
    e.completed("s0", 1.0, output_tokens=10)
    before = e.statistics().counters
    for rid in ("s0", "never-submitted"):
        assert of(Send, e.cancel(rid, 2.0)) == []
    assert e.statistics().counters == before


# -- failures and retries -----------------------------------------------------------------------


def test_terminal_failure_frees_the_slot() -> None:
    e = engine(max_inflight=1)
    fill(e, 1)
    e.submit(req("next"), 0.0)
    assert sent(e.failed("s0", 1.0, BAD)) == ["next"]
    assert e.statistics().counters.failed == 1
    assert_counters_add_up(e)


def test_retry_is_resent_later_without_an_overload_check() -> None:
    e = load_engine()
    assert sent(e.submit(req("long", 500), 0.0)) == ["long"]  # calm: sent at once
    fill(e, 3)  # now 4 in flight
    actions = e.failed("long", 1.0, SERVER, retry_after=3.0)
    assert sent(actions) == []
    assert wakes(actions) == [4.0]
    # Severity is 0.75 now: a fresh long request is deferred ...
    assert of(Defer, e.submit(req("fresh", 500), 2.0)) == ["fresh"]
    # ... but the retry skips admission and goes out as attempt 2.
    actions = e.poll(4.0)
    (send,) = [a for a in actions if isinstance(a, Send)]
    assert (send.request.id, send.attempt) == ("long", 2)
    stats = e.statistics()
    assert (stats.counters.retries, stats.counters.failed) == (1, 0)
    e.completed("long", 5.0, output_tokens=500)
    assert e.statistics().counters.completed == 1
    assert_counters_add_up(e)


@pytest.mark.parametrize("retry_after", [9.0, 11.0], ids=["at-deadline", "after-deadline"])
def test_retry_that_cannot_start_before_the_deadline_expires_at_once(retry_after: float) -> None:
    e = engine(max_inflight=1)
    e.submit(req("a", deadline=10.0), 0.0)
    actions = e.failed("a", 1.0, SERVER, retry_after=retry_after)
    assert of(Expire, actions) == ["a"]
    assert e.statistics().counters.expired == 1
    assert len(e) == 0


def test_retried_request_still_expires_at_its_deadline() -> None:
    # Rule 5 for retries: a retried request waiting in the queue at its deadline is expired,
    # not sent late as attempt 2.
    e = engine(max_inflight=1)
    e.submit(req("a", deadline=10.0), 0.0)
    e.submit(req("b"), 0.0)
    assert sent(e.failed("a", 1.0, SERVER, retry_after=1.0)) == ["b"]
    e.poll(2.0)  # "a" is back in the queue behind "b"
    assert of(Expire, e.poll(11.0)) == ["a"]
    assert sent(e.completed("b", 12.0, output_tokens=100)) == []


@pytest.mark.parametrize("retry_after", [float("nan"), float("inf"), -1.0])
def test_non_finite_or_negative_retry_after_is_misuse(retry_after: float) -> None:
    e = engine(max_inflight=1)
    fill(e, 1)
    with pytest.raises(ValueError, match=r"retry_after="):
        e.failed("s0", 1.0, SERVER, retry_after=retry_after)
    with pytest.raises(TypeError, match=r"kind="):
        e.failed("s0", 1.0, "server_error")  # type: ignore[arg-type]
    assert e.statistics().inflight == 1  # nothing happened


def test_throttled_failure_raises_the_tail_signal() -> None:
    e = engine(max_inflight=2)
    fill(e, 2)
    e.failed("s0", 1.0, BAD)  # an ordinary failure says nothing about congestion
    assert e.signals().tail_latency_ratio == 0.0
    e.failed("s1", 1.0, FailureKind.RATE_LIMITED)
    assert e.signals().tail_latency_ratio == 1.0
    assert e.statistics().signals.severity >= OverloadConfig().w_tail


def test_exhausted_rate_limit_window_raises_severity() -> None:
    e = engine(max_inflight=2)
    calm = e.signals().severity
    e.observe_headroom(0.0, 1.0)
    assert e.signals().tail_latency_ratio == 1.0
    assert e.signals().severity == pytest.approx(calm + OverloadConfig().w_tail)
    with pytest.raises(ValueError, match=r"^now="):
        e.observe_headroom(1.0, 0.5)


# -- misuse -------------------------------------------------------------------------------------


BACKWARDS: list[tuple[str, Callable[[Engine, float], object]]] = [
    ("submit", lambda e, t: e.submit(req("new"), t)),
    ("completed", lambda e, t: e.completed("s0", t, output_tokens=10)),
    ("failed", lambda e, t: e.failed("s0", t, BAD)),
    ("cancel", lambda e, t: e.cancel("s0", t)),
    ("poll", lambda e, t: e.poll(t)),
]


@pytest.mark.parametrize("call", [c for _, c in BACKWARDS], ids=[n for n, _ in BACKWARDS])
@pytest.mark.parametrize("when", [4.999, float("nan")])
def test_time_going_backwards_raises(call: Callable[[Engine, float], object], when: float) -> None:
    e = engine(max_inflight=1)
    fill(e, 1)
    e.poll(5.0)
    with pytest.raises(ValueError, match=r"^now="):
        call(e, when)
    assert e.statistics().inflight == 1  # nothing happened
    e.completed("s0", 5.0, output_tokens=10)  # equal time is fine


def test_duplicate_live_id_raises_but_a_finished_id_may_be_reused() -> None:
    e = engine(max_inflight=1)
    fill(e, 1)
    e.submit(req("dup"), 0.0)
    with pytest.raises(ValueError, match=r"^id='dup'"):
        e.submit(req("dup"), 1.0)
    with pytest.raises(ValueError, match=r"^id='s0'"):
        e.submit(req("s0"), 1.0)
    e.cancel("dup", 1.0)
    e.submit(req("dup"), 1.0)  # no longer pending
    assert e.statistics().counters.submitted == 3


def test_unknown_class_raises_listing_the_classes() -> None:
    e = engine()
    with pytest.raises(ValueError, match=r"^klass='gold' must be one of") as info:
        e.submit(req("a", klass="gold"), 0.0)
    assert "interactive" in str(info.value)
    assert len(e) == 0


@pytest.mark.parametrize("rid", ["queued", "unknown", "done"])
def test_completing_or_failing_a_request_not_in_flight_raises(rid: str) -> None:
    e = engine(max_inflight=1)
    e.submit(req("done"), 0.0)
    e.completed("done", 1.0, output_tokens=10)
    fill(e, 1, now=1.0)
    e.submit(req("queued"), 1.0)
    with pytest.raises(ValueError, match="not in flight"):
        e.completed(rid, 2.0, output_tokens=10)
    with pytest.raises(ValueError, match="not in flight"):
        e.failed(rid, 2.0, BAD)
    assert_counters_add_up(e)
    assert len(e) == 2


def test_rejected_completion_leaves_the_request_in_flight() -> None:
    # Misuse raises before anything changes: the request can still be completed properly.
    e = engine(max_inflight=1)
    fill(e, 1)
    e.submit(req("next"), 0.0)
    with pytest.raises(ValueError, match="output_tokens"):
        e.completed("s0", 1.0, output_tokens=-1)
    assert e.statistics().inflight == 1
    assert_counters_add_up(e)
    assert sent(e.completed("s0", 1.0, output_tokens=10)) == ["next"]


# -- statistics and wake-ups --------------------------------------------------------------------


def test_statistics_is_a_frozen_snapshot() -> None:
    e = engine(max_inflight=1)
    fill(e, 1)
    e.submit(req("q"), 0.0)
    snap = e.statistics()
    with pytest.raises(dataclasses.FrozenInstanceError):
        snap.inflight = 0  # type: ignore[misc]
    e.completed("s0", 1.0, output_tokens=10)
    assert (snap.inflight, snap.queued["batch"], snap.counters.completed) == (1, 1, 0)
    assert e.statistics().counters.completed == 1
    with pytest.raises(dataclasses.FrozenInstanceError):
        snap.counters.completed = 99  # type: ignore[misc]
    assert e.statistics().counters.completed == 1


def test_counters_add_up_through_every_outcome() -> None:
    e = load_engine()
    fill(e, 2)  # two in flight, severity 0.5
    e.submit(req("deferred", 500), 0.0)
    e.submit(req("rejected", 500, deadline=1.0), 0.0)  # deferral would outlast it
    fill(e, 2, prefix="t")  # severity 1.0
    e.submit(req("xl-rejected", 5000), 0.0)
    e.submit(req("queued", 10, deadline=3.0), 0.0)
    e.submit(req("cancelled", 10), 0.0)
    e.completed("s0", 1.0, output_tokens=10)
    e.failed("s1", 1.0, BAD)
    e.cancel("cancelled", 1.0)
    e.failed("t0", 1.0, SERVER, retry_after=1.0)
    e.poll(2.5)
    c = e.statistics().counters
    assert (c.submitted, c.completed, c.failed, c.cancelled) == (9, 1, 1, 1)
    assert c.rejected == 2
    assert_counters_add_up(e)
    assert len(e) == 4  # deferred, queued, t0 (retried), t1


def test_wake_is_emitted_when_the_earliest_timer_moves_earlier() -> None:
    e = engine(max_inflight=1)
    fill(e, 1)
    assert wakes(e.submit(req("a", deadline=10.0), 0.0)) == [10.0]
    assert wakes(e.submit(req("b", deadline=5.0), 1.0)) == [5.0]
    assert wakes(e.submit(req("c", deadline=7.0), 2.0)) == []  # 5 is still the earliest
    assert e.next_wakeup() == 5.0
    actions = e.poll(5.0)
    assert of(Expire, actions) == ["b"]
    assert wakes(actions) == [7.0]  # the next timer, once the reported one has passed


def test_a_request_admitted_after_a_deferral_counts_as_admitted() -> None:
    # Each request passes admission at most once; a deferral only delays it.
    e = load_engine()
    fill(e, 2)
    e.submit(req("long", 500), 0.0)
    e.completed("s0", 1.0, output_tokens=10)
    assert sent(e.poll(2.0)) == ["long"]
    assert e.statistics().counters.admitted == 3
