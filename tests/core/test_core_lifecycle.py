"""The request lifecycle in the core: which failures are retried, when, and when not."""

from __future__ import annotations

import random

import pytest

from semisched.core import (
    AllocationConfig,
    ClassSpec,
    Engine,
    Expire,
    Fail,
    FailureKind,
    OrderingConfig,
    OverloadConfig,
    Prior,
    Request,
    Retry,
    RetryPolicy,
    SchedulerConfig,
    Send,
)
from semisched.core.lifecycle import DEFAULT_RETRY_ON, decide_retry

K = FailureKind
NO_JITTER = RetryPolicy(jitter=0.0)


def engine(retry: RetryPolicy = NO_JITTER, *, jitter: random.Random | None = None) -> Engine:
    cfg = SchedulerConfig(
        classes=(ClassSpec(name="batch"),),
        max_inflight=1,
        allocation=AllocationConfig(policy="fifo"),
        ordering=OrderingConfig(policy="fifo"),
        overload=OverloadConfig(policy="none"),
        retry=retry,
    )
    return Engine(cfg, jitter=None if jitter is None else jitter.random)


def req(rid: str, deadline: float | None = None) -> Request:
    return Request(
        id=rid, klass="batch", prior=Prior(p50=100, p90=200), arrival=0.0, deadline=deadline
    )


def only(actions: list[object], kind: type) -> object:
    (found,) = [a for a in actions if isinstance(a, kind)]
    return found


# -- which kinds are retried ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kind", "retried"),
    [
        (K.RATE_LIMITED, True),
        (K.SERVER_ERROR, True),
        (K.TIMEOUT, True),
        (K.CONNECTION, True),
        (K.QUOTA_EXHAUSTED, False),
        (K.BAD_REQUEST, False),
        (K.UNKNOWN, False),
    ],
)
def test_transient_failures_are_retried_and_the_rest_fail_at_once(
    kind: FailureKind, retried: bool
) -> None:
    e = engine()
    e.submit(req("a"), 0.0)
    actions = e.failed("a", 1.0, kind)
    if retried:
        retry = only(actions, Retry)
        assert isinstance(retry, Retry)
        assert (retry.at, retry.kind, retry.attempts) == (1.5, kind, 1)  # base back-off 0.5 s
        assert len(e) == 1
    else:
        fail = only(actions, Fail)
        assert isinstance(fail, Fail)
        assert (fail.kind, fail.attempts) == (kind, 1)
        assert "not retried" in fail.reason
        assert len(e) == 0
    stats = e.statistics()
    assert stats.failures.of(kind) == 1
    assert stats.counters.throttled == (1 if kind is K.RATE_LIMITED else 0)


def test_a_retry_is_sent_again_at_its_time_as_the_next_attempt() -> None:
    e = engine()
    e.submit(req("a"), 0.0)
    e.failed("a", 1.0, K.SERVER_ERROR)
    assert [a for a in e.poll(1.4) if isinstance(a, Send)] == []
    send = only(e.poll(1.5), Send)
    assert isinstance(send, Send)
    assert (send.request.id, send.attempt) == ("a", 2)


# -- when: back-off, retry-after, jitter ---------------------------------------------------------


def test_backoff_doubles_per_attempt_up_to_its_cap() -> None:
    policy = RetryPolicy(max_attempts=8, base_delay_s=1.0, max_delay_s=5.0, jitter=0.0)
    e = engine(policy)
    e.submit(req("a"), 0.0)
    now, delays = 0.0, []
    for _ in range(6):
        retry = only(e.failed("a", now, K.TIMEOUT), Retry)
        assert isinstance(retry, Retry)
        delays.append(retry.at - now)
        now = retry.at
        e.poll(now)
    assert delays == [1.0, 2.0, 4.0, 5.0, 5.0, 5.0]


def test_the_providers_retry_after_is_honoured_exactly() -> None:
    e = engine(RetryPolicy(jitter=0.5))
    e.submit(req("a"), 0.0)
    retry = only(e.failed("a", 1.0, K.RATE_LIMITED, retry_after=7.25), Retry)
    assert isinstance(retry, Retry) and retry.at == 8.25


def test_retry_after_can_be_ignored_by_policy() -> None:
    e = engine(RetryPolicy(jitter=0.0, honour_retry_after=False))
    e.submit(req("a"), 0.0)
    retry = only(e.failed("a", 1.0, K.RATE_LIMITED, retry_after=7.25), Retry)
    assert isinstance(retry, Retry) and retry.at == 1.5


def jittered_delays(seed: int) -> list[float]:
    policy = RetryPolicy(max_attempts=20, base_delay_s=1.0, max_delay_s=1.0, jitter=0.5)
    e = engine(policy, jitter=random.Random(seed))
    e.submit(req("a"), 0.0)
    now, delays = 0.0, []
    for _ in range(12):
        retry = only(e.failed("a", now, K.SERVER_ERROR), Retry)
        assert isinstance(retry, Retry)
        delays.append(retry.at - now)
        now = retry.at
        e.poll(now)
    return delays


def test_jitter_stays_in_its_band_and_the_same_seed_gives_the_same_waits() -> None:
    first = jittered_delays(7)
    assert all(0.5 <= d <= 1.5 for d in first)
    assert len(set(first)) > 1  # it does jitter
    assert jittered_delays(7) == first
    assert jittered_delays(8) != first


# -- when not: attempts and deadlines ------------------------------------------------------------


def test_attempts_are_bounded() -> None:
    e = engine(RetryPolicy(max_attempts=3, jitter=0.0))
    e.submit(req("a"), 0.0)
    now = 0.0
    for _ in range(2):
        retry = only(e.failed("a", now, K.CONNECTION), Retry)
        assert isinstance(retry, Retry)
        now = retry.at
        e.poll(now)
    fail = only(e.failed("a", now, K.CONNECTION), Fail)
    assert isinstance(fail, Fail)
    assert fail.attempts == 3 and "gave up after 3 attempts" in fail.reason
    stats = e.statistics()
    assert (stats.counters.sent, stats.counters.retries, stats.counters.failed) == (3, 2, 1)


def test_no_retry_is_scheduled_past_the_deadline() -> None:
    e = engine()
    e.submit(req("a", deadline=10.0), 0.0)
    expire = only(e.failed("a", 9.0, K.RATE_LIMITED, retry_after=2.0), Expire)
    assert isinstance(expire, Expire) and "deadline" in expire.reason
    assert e.statistics().counters.expired == 1 and len(e) == 0


def test_a_429_with_a_rate_budget_holds_every_send_until_the_retry() -> None:
    from semisched.core import BudgetConfig

    cfg = SchedulerConfig(
        classes=(ClassSpec(name="batch"),),
        max_inflight=None,
        overload=OverloadConfig(policy="none"),
        budget=BudgetConfig(rpm=1000),
        retry=NO_JITTER,
    )
    e = Engine(cfg)
    e.submit(req("a"), 0.0)
    e.failed("a", 1.0, K.RATE_LIMITED)  # no hint: the back-off (0.5 s) is the pause
    assert [a for a in e.submit(req("b"), 1.2) if isinstance(a, Send)] == []
    sends = [a.request.id for a in e.poll(1.5) if isinstance(a, Send)]
    assert sorted(sends) == ["a", "b"]


# -- the policy itself ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("changes", "match"),
    [
        ({"max_attempts": 0}, "max_attempts=0"),
        ({"max_attempts": True}, "max_attempts=True"),
        ({"base_delay_s": -1.0}, "base_delay_s=-1.0"),
        ({"base_delay_s": 2.0, "max_delay_s": 1.0}, "max_delay_s=1.0"),
        ({"jitter": 1.0}, "jitter=1.0"),
        ({"retry_on": frozenset({K.QUOTA_EXHAUSTED})}, "never retried"),
        ({"retry_on": {K.TIMEOUT}}, "retry_on="),
    ],
)
def test_a_bad_policy_is_refused_naming_the_field(changes: dict[str, object], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        RetryPolicy(**changes)  # type: ignore[arg-type]


def test_decide_retry_without_an_engine() -> None:
    d = decide_retry(
        RetryPolicy(jitter=0.0),
        K.SERVER_ERROR,
        now=10.0,
        attempts=2,
        deadline=None,
        retry_after=None,
        draw=None,
    )
    assert (d.retry_at, d.expired, d.reason) == (11.0, False, "")
    assert K.QUOTA_EXHAUSTED not in DEFAULT_RETRY_ON and K.BAD_REQUEST not in DEFAULT_RETRY_ON
