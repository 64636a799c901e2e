"""Explained decisions: every reject, defer, expire, retry, failover and fail says why.

A real Engine, driven into each rule of :mod:`semisched.core.explain`; each
action's explanation names the rule, the severity and signals it was decided
at, the threshold and level when overload control decided, and the hint of
when trying again makes sense. ``statistics().decisions`` counts the rules.
"""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from semisched.core import (
    Action,
    AllocationConfig,
    BudgetConfig,
    Defer,
    EndpointSpec,
    Engine,
    Expire,
    Fail,
    FailureKind,
    OrderingConfig,
    OverloadConfig,
    Prior,
    Reject,
    Request,
    Retry,
    RetryPolicy,
    SchedulerConfig,
    Send,
)
from semisched.core.explain import RULES, Decision, DecisionCounts, Explanation
from semisched.core.tenants.config import TenantConfig, TenantSpec


def engine(**changes: object) -> Engine:
    cfg = SchedulerConfig(
        max_inflight=4,
        allocation=AllocationConfig(policy="fifo"),
        ordering=OrderingConfig(policy="fifo"),
        # Severity = in flight / 4 exactly.
        overload=OverloadConfig(w_load=1.0, w_queue=0.0, w_tail=0.0),
    )
    return Engine(cfg.with_(**changes) if changes else cfg)


def req(rid: str, p50: float = 100.0, *, deadline: float | None = None, **kw: object) -> Request:
    return Request(id=rid, klass="batch", prior=Prior(p50=p50, p90=p50), deadline=deadline, **kw)  # type: ignore[arg-type]


def why(kind: type, actions: Sequence[Action]) -> Explanation:
    (action,) = [a for a in actions if isinstance(a, kind)]
    assert action.explanation is not None, action
    return action.explanation  # type: ignore[no-any-return]


def fill(e: Engine, n: int) -> None:
    for i in range(n):
        assert any(isinstance(a, Send) for a in e.submit(req(f"s{i}", 10.0), 0.0))


def test_an_overload_deferral_names_its_rule_threshold_level_and_back_off() -> None:
    e = engine()
    fill(e, 2)  # severity 0.5: defers level >= 1
    defer = why(Defer, e.submit(req("long", 500.0), 1.0))
    assert (defer.decision, defer.rule) == (Decision.DEFER, "overload.defer")
    assert defer.severity == pytest.approx(0.5)
    assert defer.signals.provider_load == pytest.approx(0.5)
    assert (defer.threshold, defer.level, defer.bucket) == (0.45, 1, "long")
    assert defer.retry_after == pytest.approx(2.0)  # the first back-off
    assert defer.reason == "overload: severity 0.50 >= 0.45 defers level-1 (long) requests"


def test_an_explanation_shows_the_signals_its_severity_was_computed_from() -> None:
    # All three signals weigh in: load, queue pressure and the tail (a slow answer).
    e = engine(overload=OverloadConfig(w_load=0.5, w_queue=0.3, w_tail=0.2))
    fill(e, 4)
    for rid in ("s0", "s1", "s2"):
        e.completed(rid, 1.0, output_tokens=10)  # fast answers
    for i in range(4, 7):
        e.submit(req(f"s{i}", 10.0), 1.0)  # they take the freed places
    e.completed("s3", 30.0, output_tokens=10)  # a slow one: the tail signal rises
    for i in range(7, 15):
        e.submit(req(f"s{i}", 10.0), 30.0)  # queued behind the full flight
    actions = e.submit(req("long", 500.0), 30.0)
    shed = [a for a in actions if isinstance(a, (Defer, Reject))]
    assert shed, actions
    why_ = shed[0].explanation
    assert why_ is not None
    now = e.signals()  # a deferral or rejection changes none of the signals' inputs
    assert why_.signals == now and why_.severity == pytest.approx(now.severity)
    assert now.provider_load > 0 and now.queue_pressure > 0 and now.tail_latency_ratio > 0


def test_an_explanation_read_later_still_shows_the_moment_it_was_decided() -> None:
    # Explanations are built when first read; what they show must not drift with
    # what happened since.
    e = engine()
    fill(e, 2)  # severity 0.5: defers level >= 1
    (deferral,) = [a for a in e.submit(req("long", 500.0), 1.0) if isinstance(a, Defer)]
    fill_more = [req(f"t{i}", 10.0) for i in range(2)]
    for r in fill_more:
        e.submit(r, 2.0)  # severity 1.0 now
    assert e.signals().severity == pytest.approx(1.0)
    later = deferral.explanation
    assert later is not None and later.severity == pytest.approx(0.5)
    assert later.signals.provider_load == pytest.approx(0.5)
    assert deferral.explanation is later  # built once


def test_an_overload_rejection_and_a_deferral_past_the_deadline() -> None:
    e = engine()
    fill(e, 3)  # severity 0.75: rejects level >= 2 (xlong)
    reject = why(Reject, e.submit(req("xl", 2000.0), 0.0))
    assert (reject.decision, reject.rule, reject.level) == (
        Decision.REJECT,
        "overload.reject_xlong",
        2,
    )
    assert reject.threshold == 0.65 and reject.retry_after == 30.0
    late = why(Reject, e.submit(req("long", 500.0, deadline=1.0), 0.0))
    assert late.rule == "overload.defer_past_deadline" and late.retry_after is None


def test_deadlines_at_submission_while_waiting_and_in_flight() -> None:
    e = engine(max_inflight=1, overload=OverloadConfig(policy="none"))
    assert why(Expire, e.submit(req("gone", deadline=1.0), 2.0)).rule == "deadline.at_submit"
    e.submit(req("a", deadline=100.0), 2.0)
    e.submit(req("b", deadline=5.0), 2.0)
    waiting = why(Expire, e.poll(5.0))
    assert (waiting.decision, waiting.rule) == (Decision.EXPIRE, "deadline.waiting")
    flight = why(Expire, e.expire("a", 100.0))
    assert (flight.rule, flight.endpoint) == ("deadline.in_flight", "default")
    assert e.statistics().counters.expired == 3 and e.statistics().counters.cancelled == 0


def test_the_retry_policy_explains_back_off_failover_and_giving_up() -> None:
    specs = [EndpointSpec(name="a"), EndpointSpec(name="b")]
    cfg = SchedulerConfig(max_inflight=4, overload=OverloadConfig(policy="none"),
                          retry=RetryPolicy(max_attempts=3))  # fmt: skip
    e = Engine(cfg, endpoints=specs)
    e.submit(req("r"), 0.0)
    first = why(Retry, e.failed("r", 1.0, FailureKind.SERVER_ERROR))
    assert (first.decision, first.rule) == (Decision.FAILOVER, "retry.failover")
    assert first.endpoint in ("a", "b") and first.retry_after == 0.0
    second = why(Retry, e.failed("r", 2.0, FailureKind.SERVER_ERROR))
    assert second.rule == "retry.failover" and second.endpoint != first.endpoint
    spent = why(Fail, e.failed("r", 3.0, FailureKind.SERVER_ERROR, retry_after=7.0))
    assert (spent.decision, spent.rule, spent.retry_after) == (
        Decision.FAIL,
        "retry.attempts_spent",
        7.0,
    )
    e.submit(req("bad"), 4.0)
    assert why(Fail, e.failed("bad", 5.0, FailureKind.BAD_REQUEST)).rule == "retry.not_retryable"


def test_a_back_off_retry_and_a_retry_past_the_deadline() -> None:
    retry = RetryPolicy(max_attempts=5, max_retry_after_s=300.0)  # 100 s is honoured
    e = engine(overload=OverloadConfig(policy="none"), retry=retry)
    e.submit(req("r", deadline=50.0), 0.0)
    backoff = why(Retry, e.failed("r", 1.0, FailureKind.SERVER_ERROR, retry_after=4.0))
    assert (backoff.decision, backoff.rule, backoff.retry_after) == (
        Decision.RETRY,
        "retry.backoff",
        4.0,
    )
    e.poll(5.0)
    late = why(Expire, e.failed("r", 6.0, FailureKind.SERVER_ERROR, retry_after=100.0))
    assert late.rule == "retry.past_deadline"


def test_no_endpoint_and_a_tenant_cap_that_can_never_pay() -> None:
    e = engine(budget=BudgetConfig(tpm=100))
    assert why(Reject, e.submit(req("huge", 500.0), 0.0)).rule == "routing.no_endpoint"
    tenants = TenantConfig(tenants=(TenantSpec(name="t", tpm=50),))
    capped = why(Reject, engine(tenants=tenants).submit(req("big", 400.0, tenant="t"), 0.0))
    assert (capped.rule, capped.tenant) == ("tenant.tpm_cap", "t")


def test_statistics_count_every_rule_and_explanations_hold_no_request_content() -> None:
    e = engine()
    fill(e, 3)
    secret = Request(id="q-secret-1", klass="batch", prior=Prior(p50=2000.0, p90=2000.0),
                     model="gpt-x")  # fmt: skip
    reject = why(Reject, e.submit(secret, 0.0))
    for _ in range(2):
        e.submit(req(f"d{_}", 500.0), 0.0)
    counts = e.statistics().decisions
    assert counts.overload_reject_xlong == 1 and counts.of("overload.defer") == 2
    assert sum(counts.of(r) for r in RULES) == 3
    with pytest.raises(KeyError):
        counts.of("nope")
    flat = reject.as_dict()
    assert set(flat) >= {"decision", "rule", "reason", "severity", "bucket", "tenant"}
    assert "q-secret-1" not in repr(flat) and "gpt-x" not in repr(flat)
    assert DecisionCounts.from_counts({"retry.backoff": 2}).retry_backoff == 2
