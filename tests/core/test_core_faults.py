"""Upstream faults in the core: a long ``retry-after`` is capped and probed, a refused key
takes its endpoint out (circuit reason ``auth``) and its work goes elsewhere."""

from __future__ import annotations

import pytest

from semisched.core import (
    AllocationConfig,
    BudgetConfig,
    ClassSpec,
    EndpointSpec,
    Engine,
    Fail,
    FailureKind,
    OrderingConfig,
    OverloadConfig,
    Pause,
    Prior,
    Request,
    Retry,
    RetryPolicy,
    RoutingConfig,
    SchedulerConfig,
    Send,
)
from semisched.core.lifecycle import decide_retry
from semisched.core.stats import EndpointStats

K = FailureKind


def engine(*names: str, budget: bool = False, cap_s: float = 30.0, **routing: object) -> Engine:
    config = SchedulerConfig(
        classes=(ClassSpec(name="batch"),),
        max_inflight=None,
        allocation=AllocationConfig(policy="fifo"),
        ordering=OrderingConfig(policy="fifo"),
        overload=OverloadConfig(policy="none"),
        retry=RetryPolicy(jitter=0.0, max_retry_after_s=cap_s),
        # the fixed limits (none) unless a test asks: the learned ones are tested on their own
        routing=RoutingConfig(**{"policy": "round_robin", "concurrency": "fixed", **routing}),  # type: ignore[arg-type]
    )
    own = BudgetConfig(rpm=1000) if budget else None
    return Engine(config, endpoints=[EndpointSpec(name=n, budget=own) for n in names])


def req(rid: str, deadline: float | None = None) -> Request:
    return Request(id=rid, klass="batch", prior=Prior(p50=10, p90=20), deadline=deadline)


def where(actions: list[object]) -> list[str]:
    return [a.endpoint for a in actions if isinstance(a, Send)]


def one(kind: type, actions: list[object]) -> object:
    (found,) = [a for a in actions if isinstance(a, kind)]
    return found


def stats(e: Engine, name: str) -> EndpointStats:
    return {s.name: s for s in e.statistics().endpoints}[name]


# -- a 429's retry-after: capped, then a probe -------------------------------------------------


@pytest.mark.parametrize(
    ("hint", "cap_s", "paused_until", "retry_at", "circuit"),
    [
        (2.0, 30.0, 12.0, 12.0, ("closed", "")),  # within the cap: honoured as given
        (30.0, 30.0, 40.0, 40.0, ("closed", "")),
        (120.0, 30.0, 40.0, 40.0, ("open", "rate_limited")),  # capped: then a probe
        (120.0, 60.0, 70.0, 70.0, ("open", "rate_limited")),  # the cap is configurable
    ],
)
def test_a_429s_pause_and_retry_are_capped(
    hint: float, cap_s: float, paused_until: float, retry_at: float, circuit: tuple[str, str]
) -> None:
    e = engine("a", budget=True, cap_s=cap_s)
    e.submit(req("r"), 10.0)
    actions = e.failed("r", 10.0, K.RATE_LIMITED, retry_after=hint)
    pause = one(Pause, actions)
    retry = one(Retry, actions)
    assert (pause.until, pause.cause, retry.at) == (paused_until, "rate_limited", retry_at)  # type: ignore[attr-defined]
    a = stats(e, "a")
    assert (a.circuit, a.circuit_reason) == circuit
    assert a.budget is not None and a.budget.paused_until == paused_until


def test_after_the_cap_one_request_goes_as_a_probe_and_its_success_resumes_the_endpoint() -> None:
    e = engine("a")
    e.submit(req("first"), 0.0)
    e.failed("first", 0.0, K.RATE_LIMITED, retry_after=120.0)
    for rid in ("x", "y", "z"):
        assert where(e.submit(req(rid), 1.0)) == []  # the endpoint is off until the cap
    probe = [a for a in e.poll(30.0) if isinstance(a, Send)]
    assert len(probe) == 1  # one request only: the probe
    assert stats(e, "a").circuit == "half_open"
    resumed = where(e.completed(probe[0].request.id, 31.0, output_tokens=1))
    assert resumed == ["a", "a", "a"]  # the others flow again
    assert (stats(e, "a").circuit, stats(e, "a").circuit_reason) == ("closed", "")


def test_a_probe_that_meets_another_429_pauses_the_endpoint_again_capped() -> None:
    e = engine("a")
    e.submit(req("first"), 0.0)
    e.failed("first", 0.0, K.RATE_LIMITED, retry_after=120.0)
    e.submit(req("x"), 1.0)
    probe = one(Send, e.poll(30.0))
    pause = one(Pause, e.failed(probe.request.id, 31.0, K.RATE_LIMITED, retry_after=5.0))  # type: ignore[attr-defined]
    assert pause.until == 36.0  # type: ignore[attr-defined]
    assert stats(e, "a").circuit == "open" and where(e.submit(req("y"), 32.0)) == []
    assert len(where(e.poll(36.0))) == 1  # the next probe, and only it


def test_elsewhere_a_capped_429_sends_the_work_to_the_other_endpoint_until_the_probe() -> None:
    e = engine("a", "b")
    e.submit(req("r"), 0.0)  # a
    assert where(e.failed("r", 0.0, K.RATE_LIMITED, retry_after=120.0)) == ["b"]
    assert [where(e.submit(req(f"n{i}"), 1.0))[0] for i in range(3)] == ["b"] * 3
    later = [where(e.submit(req(f"p{i}"), 30.0))[0] for i in range(4)]
    assert later.count("a") == 1  # one probe; the rest wait for its answer


def test_retry_policy_checks_the_cap() -> None:
    with pytest.raises(ValueError, match="max_retry_after_s"):
        RetryPolicy(max_retry_after_s=0.0)


# -- a refused key: the circuit opens for ``auth`` and the work goes elsewhere ------------------


@pytest.mark.parametrize(
    ("elsewhere", "retried", "rule"),
    [(True, True, "retry.failover"), (False, False, "retry.not_retryable")],
)
def test_a_refused_key_is_retried_only_elsewhere(elsewhere: bool, retried: bool, rule: str) -> None:
    verdict = decide_retry(RetryPolicy(), K.AUTH, now=0.0, attempts=1, deadline=None,
                           retry_after=None, draw=None, elsewhere=elsewhere)  # fmt: skip
    assert ((verdict.retry_at is not None), verdict.rule) == (retried, rule)


def test_auth_is_never_retried_at_the_same_endpoint() -> None:
    with pytest.raises(ValueError, match="auth"):
        RetryPolicy(retry_on=frozenset({K.AUTH}))


def test_a_refused_key_takes_the_endpoint_out_and_its_attempt_goes_elsewhere() -> None:
    e = engine("a", "b", auth_cooloff_s=600.0)
    e.submit(req("r"), 0.0)  # a
    actions = e.failed("r", 1.0, K.AUTH)
    assert where(actions) == ["b"] and one(Retry, actions).failover  # type: ignore[attr-defined]
    pause = one(Pause, actions)
    assert (pause.endpoint, pause.until) == ("a", 601.0)  # type: ignore[attr-defined]
    a = stats(e, "a")
    assert (a.circuit, a.circuit_reason, a.state) == ("open", "auth", "active")
    # Successes elsewhere change nothing: a stays out until its probe time.
    for i in range(5):
        assert where(e.submit(req(f"n{i}"), 2.0 + i)) == ["b"]
        e.completed(f"n{i}", 2.5 + i, output_tokens=1)
    assert stats(e, "a").circuit == "open"
    assert e.statistics().failures.auth == 1
    # After the long cool-off, one probe: refused again, out again for as long.
    e.completed("r", 10.0, output_tokens=1)
    later = {f"p{i}": where(e.submit(req(f"p{i}"), 601.0))[0] for i in range(4)}
    assert list(later.values()).count("a") == 1  # one probe
    (probe,) = [rid for rid, name in later.items() if name == "a"]
    assert one(Pause, e.failed(probe, 602.0, K.AUTH)).until == 1202.0  # type: ignore[attr-defined]
    assert stats(e, "a").circuit == "open"


def test_a_lone_endpoints_refused_key_reaches_the_caller_at_once() -> None:
    e = engine("a")
    e.submit(req("r"), 0.0)
    fail = one(Fail, e.failed("r", 0.0, K.AUTH))
    assert (fail.kind, fail.attempts) == (K.AUTH, 1)  # type: ignore[attr-defined]
    assert stats(e, "a").circuit == "closed"  # nowhere else: no circuit, the next one is tried
    assert where(e.submit(req("s"), 1.0)) == ["a"]


def test_when_every_key_is_refused_the_last_endpoint_stays_closed_and_requests_fail() -> None:
    e = engine("a", "b")
    e.submit(req("r"), 0.0)  # a
    assert where(e.failed("r", 0.0, K.AUTH)) == ["b"]
    fail = one(Fail, e.failed("r", 0.0, K.AUTH))  # b refuses too: nowhere left
    assert fail.kind is K.AUTH  # type: ignore[attr-defined]
    assert (stats(e, "a").circuit, stats(e, "b").circuit) == ("open", "closed")


def test_routing_config_checks_the_auth_cooloff() -> None:
    with pytest.raises(ValueError, match="auth_cooloff_s"):
        RoutingConfig(auth_cooloff_s=0.0)


# -- a lone endpoint's failures: no circuit, a visible run ------------------------------------


def test_a_lone_endpoint_failing_keeps_its_circuit_closed_and_shows_the_run() -> None:
    e = engine("a", failure_threshold=2)
    e.submit(req("r"), 0.0)
    actions = e.failed("r", 0.0, K.SERVER_ERROR)
    e.poll(one(Retry, actions).at)  # type: ignore[attr-defined]
    e.failed("r", 5.0, K.SERVER_ERROR)
    a = stats(e, "a")
    assert (a.circuit, a.circuit_reason, a.consecutive_failures) == ("closed", "", 2)
