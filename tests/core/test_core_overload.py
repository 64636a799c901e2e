"""Overload control: the paper's thresholds, the bucket cost ladder, bounded deferral."""

from __future__ import annotations

import pytest

from semisched.core import (
    AllocationConfig,
    Bucket,
    BucketCounts,
    Defer,
    Engine,
    OrderingConfig,
    OverloadConfig,
    Prior,
    Reject,
    Request,
    SchedulerConfig,
    Send,
)
from semisched.core.overload import OverloadController, Verdict

A, D, R = Verdict.ADMIT, Verdict.DEFER, Verdict.REJECT

# Severities probing each side of the paper's thresholds 0.45 / 0.65 / 0.80.
SEVERITIES = (0.0, 0.449, 0.45, 0.649, 0.65, 0.799, 0.80, 1.0)
# What a request of a ladder level gets at each of SEVERITIES.
BY_LEVEL = {
    None: (A, A, A, A, A, A, A, A),  # never shed (short; everything under "none")
    0: (A, A, A, A, A, A, A, A),
    1: (A, A, D, D, D, D, R, R),  # defer at 0.45, reject at 0.80
    2: (A, A, D, D, R, R, R, R),  # defer at 0.45, reject at 0.65
}
S, M, L, X, U = Bucket.SHORT, Bucket.MEDIUM, Bucket.LONG, Bucket.XLONG, Bucket.UNKNOWN
LEVELS = {
    "ladder": {S: None, M: 0, L: 1, X: 2, U: 1},
    "uniform_mild": {S: None, M: 1, L: 1, X: 1, U: 1},
    "uniform_harsh": {S: None, M: 2, L: 2, X: 2, U: 2},
    "reverse": {S: None, M: 0, L: 2, X: 1, U: 1},
    "none": {S: None, M: None, L: None, X: None, U: None},
}
CASES = [
    pytest.param(policy, bucket, severity, BY_LEVEL[level][i], id=f"{policy}-{bucket}-{severity}")
    for policy, levels in LEVELS.items()
    for bucket, level in levels.items()
    for i, severity in enumerate(SEVERITIES)
]


@pytest.mark.parametrize(("policy", "bucket", "severity", "verdict"), CASES)
def test_verdict_table(policy: str, bucket: Bucket, severity: float, verdict: Verdict) -> None:
    controller = OverloadController(OverloadConfig(policy=policy))
    decision = controller.decide(bucket, severity, now=100.0, defers=0)
    assert decision.verdict is verdict
    if verdict is D:
        assert decision.until == pytest.approx(102.0)  # backoff_s = 2
    if verdict is R:
        assert decision.retry_after == 30.0
        assert str(bucket) in decision.reason
        assert f"{severity:.2f}" in decision.reason


@pytest.mark.parametrize(
    ("defers", "until"),
    [(0, 12.0), (1, 14.0), (2, 18.0), (3, 26.0), (4, 40.0), (5, 40.0)],
)
def test_backoff_doubles_up_to_the_cap(defers: int, until: float) -> None:
    cfg = OverloadConfig(backoff_s=2.0, max_backoff_s=30.0, max_defers=10)
    decision = OverloadController(cfg).decide(Bucket.LONG, 0.5, now=10.0, defers=defers)
    assert decision.verdict is D
    assert decision.until == pytest.approx(until)


def test_deferral_is_bounded_but_rejection_is_not() -> None:
    controller = OverloadController(OverloadConfig(max_defers=3))
    assert controller.decide(Bucket.LONG, 0.5, now=0.0, defers=2).verdict is D
    assert controller.decide(Bucket.LONG, 0.5, now=0.0, defers=3).verdict is A
    assert controller.decide(Bucket.LONG, 0.9, now=0.0, defers=3).verdict is R


def test_custom_thresholds_move_the_boundaries() -> None:
    cfg = OverloadConfig(defer_threshold=0.2, reject_xlong_threshold=0.3, reject_long_threshold=0.4)
    controller = OverloadController(cfg)
    assert controller.decide(Bucket.LONG, 0.25, now=0.0, defers=0).verdict is D
    assert controller.decide(Bucket.XLONG, 0.3, now=0.0, defers=0).verdict is R
    assert controller.decide(Bucket.LONG, 0.4, now=0.0, defers=0).verdict is R


# -- through the engine ----------------------------------------------------------------------
# Severity is made exact by weighting only the provider-load signal: with max_inflight=4,
# k requests in flight give severity k/4.


def load_engine(**overload: object) -> Engine:
    cfg = SchedulerConfig(
        max_inflight=4,
        allocation=AllocationConfig(policy="fifo"),
        ordering=OrderingConfig(policy="fifo"),
        overload=OverloadConfig(w_load=1.0, w_queue=0.0, w_tail=0.0, **overload),  # type: ignore[arg-type]
    )
    return Engine(cfg)


def req(rid: str, p50: float, deadline: float | None = None, arrival: float = 0.0) -> Request:
    return Request(
        id=rid, klass="batch", prior=Prior(p50=p50, p90=p50), arrival=arrival, deadline=deadline
    )


def with_inflight(k: int, **overload: object) -> Engine:
    engine = load_engine(**overload)
    for i in range(k):
        assert isinstance(engine.submit(req(f"short{i}", 10), 0.0)[0], Send)
    return engine


@pytest.mark.parametrize(
    ("inflight", "p50", "action"),
    [
        (1, 2000, Send),  # 0.25: below every threshold
        (2, 60, Send),  # 0.50: short is never shed
        (2, 200, Send),  # 0.50: medium is level 0 on the ladder
        (2, 500, Defer),  # 0.50: long deferred
        (2, 2000, Defer),  # 0.50: xlong deferred
        (3, 500, Defer),  # 0.75: long still deferred
        (3, 2000, Reject),  # 0.75: xlong rejected from 0.65
        (4, 500, Reject),  # 1.00: long rejected from 0.80
        (4, 60, None),  # 1.00: short admitted, queued (no free slot), never rejected
    ],
)
def test_engine_applies_the_ladder(inflight: int, p50: float, action: type | None) -> None:
    engine = with_inflight(inflight)
    actions = engine.submit(req("x", p50), 1.0)
    decisive = [a for a in actions if isinstance(a, Send | Defer | Reject)]
    if action is None:
        assert decisive == []
        assert engine.statistics().queued["batch"] == 1
    else:
        assert [type(a) for a in decisive] == [action]


def test_engine_rejection_explains_itself() -> None:
    engine = with_inflight(4, retry_after_s=12.5)
    (reject,) = engine.submit(req("x", 5000), 1.0)
    assert isinstance(reject, Reject)
    assert reject.retry_after == 12.5
    assert reject.severity == pytest.approx(1.0)
    assert "xlong" in reject.reason
    stats = engine.statistics()
    assert stats.counters.rejected == 1
    assert stats.rejects_by_bucket == BucketCounts(xlong=1)
    assert len(engine) == 4  # the rejected request is gone


def test_overload_policy_none_admits_everything_at_full_severity() -> None:
    engine = with_inflight(4, policy="none")
    for i, p50 in enumerate((60, 200, 500, 5000)):
        actions = engine.submit(req(f"x{i}", p50), 1.0)
        assert not [a for a in actions if isinstance(a, Defer | Reject)]
    assert engine.statistics().queued["batch"] == 4
