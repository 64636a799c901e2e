"""The routing layer in the core: where each send goes, failover, circuits, budgets, drains."""

from __future__ import annotations

import random
from collections import Counter

import pytest

from semisched.core import (
    AllocationConfig,
    BudgetConfig,
    ClassSpec,
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
    RoutingConfig,
    SchedulerConfig,
    Send,
    Wake,
)

K = FailureKind


def config(policy: str = "round_robin", **routing: object) -> SchedulerConfig:
    return SchedulerConfig(
        classes=(ClassSpec(name="batch"),),
        max_inflight=None,
        allocation=AllocationConfig(policy="fifo"),
        ordering=OrderingConfig(policy="fifo"),
        overload=OverloadConfig(policy="none"),
        retry=RetryPolicy(jitter=0.0),
        # the fixed limits (none) unless a test asks: the learned ones are tested on their own
        routing=RoutingConfig(**{"policy": policy, "concurrency": "fixed", **routing}),  # type: ignore[arg-type]
    )


def fleet(
    *names: str, policy: str = "round_robin", seed: int | None = None, **routing: object
) -> Engine:
    specs = [EndpointSpec(name=n) for n in names]
    jitter = None if seed is None else random.Random(seed).random
    return Engine(config(policy, **routing), endpoints=specs, jitter=jitter)


def req(
    rid: str,
    p50: float = 100,
    *,
    model: str = "",
    cap: int | None = None,
    deadline: float | None = None,
    prompt: float = 0.0,
) -> Request:
    return Request(
        id=rid,
        klass="batch",
        prior=Prior(p50=p50, p90=p50 * 2),
        model=model,
        max_output_tokens=cap,
        deadline=deadline,
        input_tokens=prompt,
    )


def sends(actions: list[object]) -> list[Send]:
    return [a for a in actions if isinstance(a, Send)]


def where(actions: list[object]) -> list[str]:
    return [s.endpoint for s in sends(actions)]


# -- one endpoint ---------------------------------------------------------------------------


def test_a_single_client_is_the_default_endpoint() -> None:
    e = Engine(config())
    assert where(e.submit(req("a"), 0.0)) == ["default"]
    assert [s.name for s in e.statistics().endpoints] == ["default"]


def test_fleet_names_must_be_unique_and_present() -> None:
    with pytest.raises(ValueError, match="'a' is already in the fleet"):
        fleet("a", "b", "a")
    with pytest.raises(ValueError, match="at least one endpoint"):
        Engine(config(), endpoints=[])


# -- the policies ---------------------------------------------------------------------------


def test_round_robin_cycles_through_the_fleet_in_order() -> None:
    e = fleet("a", "b", "c")
    got = [where(e.submit(req(f"r{i}"), 0.0))[0] for i in range(7)]
    assert got == ["a", "b", "c", "a", "b", "c", "a"]


def test_least_outstanding_fills_the_least_busy_endpoint() -> None:
    e = fleet("a", "b", policy="least_outstanding")
    e.submit(req("r1"), 0.0)  # a
    e.submit(req("r2"), 0.0)  # b
    e.submit(req("r3"), 0.0)  # a
    e.completed("r2", 1.0, output_tokens=10)
    e.completed("r3", 1.0, output_tokens=10)
    assert where(e.submit(req("r4"), 1.0)) == ["b"]  # a still holds r1


def test_weighted_random_follows_the_weights_and_the_seed() -> None:
    specs = [EndpointSpec(name="a", weight=3.0), EndpointSpec(name="b", weight=1.0)]
    picks = []
    for _ in range(2):
        e = Engine(config("random"), endpoints=specs, jitter=random.Random(7).random)
        picks.append([where(e.submit(req(f"r{i}"), 0.0))[0] for i in range(400)])
    assert picks[0] == picks[1]  # same seed, same choices
    share = Counter(picks[0])["a"] / 400
    assert 0.68 < share < 0.82  # weight 3 of 4


def test_anticipated_load_counts_predicted_work_not_requests() -> None:
    e = fleet("a", "b", policy="anticipated_load")
    assert where(e.submit(req("big", p50=4000), 0.0)) == ["a"]
    # b gets the next ones: two small requests are less work than one big one.
    assert where(e.submit(req("s1", p50=50), 0.0)) == ["b"]
    assert where(e.submit(req("s2", p50=50), 0.0)) == ["b"]
    # least_outstanding would have sent s2 to a (1 vs 1 in flight).
    lo = fleet("a", "b", policy="least_outstanding")
    lo.submit(req("big", p50=4000), 0.0)
    lo.submit(req("s1", p50=50), 0.0)
    assert where(lo.submit(req("s2", p50=50), 0.0)) == ["a"]


def test_anticipated_load_learns_each_endpoints_speed() -> None:
    # Training requests name a model only one endpoint serves; "" may go anywhere.
    specs = [
        EndpointSpec(name="fast", models=frozenset({"f"})),
        EndpointSpec(name="slow", models=frozenset({"s"})),
    ]
    e = Engine(config("anticipated_load"), endpoints=specs)
    now = 0.0
    # fast decodes at 10 ms/token, slow at 40 ms/token, both after a 1 s intercept.
    for i, tokens in enumerate([50, 400, 100, 800, 200, 600] * 3):
        for model, per_token in (("f", 0.01), ("s", 0.04)):
            rid = f"t{i}{model}"
            e.submit(req(rid, p50=tokens, model=model), now)
            now += 1.0 + per_token * tokens
            e.completed(rid, now, output_tokens=tokens)
    stats = {s.name: s for s in e.statistics().endpoints}
    assert stats["fast"].decode_tokens_per_s == pytest.approx(100.0)
    assert stats["slow"].decode_tokens_per_s == pytest.approx(25.0)
    assert stats["slow"].intercept_s == pytest.approx(1.0)
    # Each goes where all the work in flight, its own included, drains soonest: fast
    # takes three or four 300-token requests (9-12 s at 100/s) before slow's first one
    # (12 s at 25/s) is as soon; of six, slow gets one.
    got = [where(e.submit(req(f"x{i}", p50=300), now))[0] for i in range(6)]
    assert got[:3] == ["fast"] * 3 and Counter(got) == {"fast": 5, "slow": 1}


def test_token_budget_splits_pools_and_spills_when_the_preferred_pool_is_full() -> None:
    specs = [
        EndpointSpec(name="s", pool="short", max_concurrency=1),
        EndpointSpec(name="l", pool="long"),
    ]
    e = Engine(config("token_budget", short_pool_tokens=1000), endpoints=specs)
    assert where(e.submit(req("small", cap=200, prompt=100), 0.0)) == ["s"]
    assert where(e.submit(req("large", cap=2000, prompt=100), 0.0)) == ["l"]
    # The short pool is full (its one slot): the next small request spills to the long pool.
    assert where(e.submit(req("small2", cap=200, prompt=100), 0.0)) == ["l"]


def test_token_budget_reads_the_prior_p90_when_no_cap_is_set() -> None:
    specs = [EndpointSpec(name="s", pool="short"), EndpointSpec(name="l", pool="long")]
    e = Engine(config("token_budget", short_pool_tokens=1000), endpoints=specs)
    assert where(e.submit(req("a", p50=300), 0.0)) == ["s"]  # p90 600
    assert where(e.submit(req("b", p50=600), 0.0)) == ["l"]  # p90 1200


# -- what an endpoint can take --------------------------------------------------------------


def test_models_and_context_decide_which_endpoints_can_serve() -> None:
    specs = [
        EndpointSpec(name="m1", models=frozenset({"gpt"}), context_tokens=1000),
        EndpointSpec(name="any"),
    ]
    e = Engine(config(), endpoints=specs)
    assert where(e.submit(req("a", model="other"), 0.0)) == ["any"]
    assert where(e.submit(req("b", model="gpt", cap=50), 0.0)) == ["m1"]
    assert where(e.submit(req("c", model="gpt", cap=5000), 0.0)) == ["any"]
    only = Engine(config(), endpoints=specs[:1])
    (reject,) = only.submit(req("d", model="other"), 0.0)
    assert isinstance(reject, Reject) and "no endpoint serves model 'other'" in reject.reason
    (reject,) = only.submit(req("e", model="gpt", cap=5000), 0.0)
    assert isinstance(reject, Reject) and "exceed every endpoint's context" in reject.reason


def test_max_concurrency_holds_per_endpoint_and_a_completion_frees_it() -> None:
    specs = [EndpointSpec(name="a", max_concurrency=1), EndpointSpec(name="b", max_concurrency=1)]
    e = Engine(config(), endpoints=specs)
    assert where(e.submit(req("r1"), 0.0)) == ["a"]
    assert where(e.submit(req("r2"), 0.0)) == ["b"]
    assert where(e.submit(req("r3"), 0.0)) == []  # both full: it waits
    assert where(e.completed("r1", 1.0, output_tokens=5)) == ["a"]


def test_each_endpoint_has_its_own_budget() -> None:
    specs = [
        EndpointSpec(name="a", budget=BudgetConfig(rpm=1)),
        EndpointSpec(name="b", budget=BudgetConfig(rpm=1)),
    ]
    e = Engine(config(), endpoints=specs)
    assert where(e.submit(req("r1"), 0.0)) == ["a"]
    assert where(e.submit(req("r2"), 0.0)) == ["b"]
    actions = e.submit(req("r3"), 0.0)
    assert where(actions) == []
    (wake,) = [a for a in actions if isinstance(a, Wake)]
    assert wake.at == pytest.approx(61.0)  # a's window (60 s + 1 s margin) frees first
    assert len(where(e.poll(wake.at))) == 1


# -- failures -------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", [K.SERVER_ERROR, K.TIMEOUT, K.CONNECTION, K.RATE_LIMITED])
def test_a_failed_attempt_fails_over_at_once_to_another_endpoint(kind: FailureKind) -> None:
    e = fleet("a", "b")
    assert where(e.submit(req("r"), 0.0)) == ["a"]
    actions = e.failed("r", 2.0, kind, retry_after=5.0 if kind is K.RATE_LIMITED else None)
    (retry,) = [a for a in actions if isinstance(a, Retry)]
    assert retry.failover and retry.at == 2.0 and retry.endpoint == "a"
    assert where(actions) == ["b"]
    assert e.statistics().counters.failovers == 1


def test_without_failover_a_retry_backs_off() -> None:
    e = fleet("a", "b", failover=False)
    e.submit(req("r"), 0.0)
    (retry,) = [a for a in e.failed("r", 2.0, K.SERVER_ERROR) if isinstance(a, Retry)]
    assert not retry.failover and retry.at == 2.5


def test_a_retry_waits_for_the_other_endpoint_rather_than_repeat_the_failure() -> None:
    specs = [EndpointSpec(name="a"), EndpointSpec(name="b", max_concurrency=1)]
    e = Engine(config(), endpoints=specs)
    e.submit(req("busy"), 0.0)  # a
    e.submit(req("r"), 0.0)  # b
    e.completed("busy", 0.5, output_tokens=1)
    # r fails on b; b is free again but r must avoid b only if another endpoint can serve: a can.
    assert where(e.failed("r", 1.0, K.SERVER_ERROR)) == ["a"]


def test_insufficient_quota_takes_the_endpoint_out_and_the_request_goes_elsewhere() -> None:
    e = fleet("a", "b")
    e.submit(req("r"), 0.0)
    assert where(e.failed("r", 1.0, K.QUOTA_EXHAUSTED)) == ["b"]
    assert [where(e.submit(req(f"n{i}"), 1.0)) for i in range(3)] == [["b"]] * 3
    state = {s.name: s.state for s in e.statistics().endpoints}
    assert state == {"a": "insufficient_quota", "b": "active"}
    # With no other endpoint, the quota failure is final.
    lone = Engine(config())
    lone.submit(req("r"), 0.0)
    (fail,) = lone.failed("r", 1.0, K.QUOTA_EXHAUSTED)
    assert isinstance(fail, Fail)


def test_consecutive_failures_open_the_circuit_then_one_probe_half_opens_it() -> None:
    e = fleet("a", "b", failure_threshold=3, cooloff_s=10.0, failover=False)
    now = 0.0
    for i in range(3):  # round robin: a gets r0, r2, r4; all fail
        for rid in (f"r{2 * i}", f"r{2 * i + 1}"):
            e.submit(req(rid), now)
        e.failed(f"r{2 * i}", now, K.SERVER_ERROR)
        e.completed(f"r{2 * i + 1}", now, output_tokens=1)
    a = e.statistics().endpoints[0]
    assert (a.circuit, a.circuit_opens) == ("open", 1)
    assert [where(e.submit(req(f"n{i}"), 1.0))[0] for i in range(4)] == ["b"] * 4
    # After the cool-off one probe goes to a; while it flies, a takes nothing else.
    probe = where(e.submit(req("p"), 11.0))
    more = where(e.submit(req("q"), 11.0))
    assert (probe, more) == (["a"], ["b"])
    e.completed("p", 12.0, output_tokens=1)
    assert e.statistics().endpoints[0].circuit == "closed"


def test_a_failed_probe_opens_the_circuit_again() -> None:
    e = fleet("a", "b", failure_threshold=1, cooloff_s=10.0, failover=False)
    e.submit(req("r"), 0.0)
    e.failed("r", 0.0, K.TIMEOUT)
    e.submit(req("p"), 10.0)  # the probe (a's turn)
    assert e.statistics().endpoints[0].circuit == "half_open"
    e.failed("p", 11.0, K.TIMEOUT)
    a = e.statistics().endpoints[0]
    assert (a.circuit, a.circuit_opens) == ("open", 2)


def test_the_last_closed_circuit_never_opens() -> None:
    e = fleet("a", failure_threshold=1)
    e.submit(req("r"), 0.0)
    e.failed("r", 0.0, K.SERVER_ERROR)
    assert e.statistics().endpoints[0].circuit == "closed"


def test_a_429_pauses_the_endpoint_that_said_it_not_the_fleet() -> None:
    specs = [
        EndpointSpec(name="a", budget=BudgetConfig(rpm=100)),
        EndpointSpec(name="b", budget=BudgetConfig(rpm=100)),
    ]
    e = Engine(config(), endpoints=specs)
    e.submit(req("r"), 0.0)  # a
    assert where(e.failed("r", 1.0, K.RATE_LIMITED, retry_after=20.0)) == ["b"]
    # a is paused until 21: everything goes to b meanwhile.
    assert [where(e.submit(req(f"n{i}"), 2.0))[0] for i in range(3)] == ["b"] * 3


def test_an_outage_loses_no_request_that_another_endpoint_can_serve() -> None:
    e = fleet("down", "up", failure_threshold=2)
    todo: list[object] = []
    seen: list[object] = []
    for i in range(20):
        todo += e.submit(req(f"r{i}", deadline=100.0), float(i))
        while todo:
            action = todo.pop(0)
            seen.append(action)
            if isinstance(action, Send) and action.endpoint == "down":  # refused at once
                todo += e.failed(action.request.id, float(i), K.SERVER_ERROR)
    assert not [a for a in seen if isinstance(a, Fail | Expire | Reject)]
    stats = e.statistics()
    assert {s.name: s.inflight for s in stats.endpoints} == {"down": 0, "up": 20}
    down = stats.endpoints[0]
    assert down.circuit == "open" and down.sent == 2  # two failures, then nothing more


# -- run-time changes and what overload control sees ----------------------------------------


def test_drain_sends_nothing_new_and_rejects_what_nothing_else_serves() -> None:
    specs = [EndpointSpec(name="a", max_concurrency=1), EndpointSpec(name="b", max_concurrency=1)]
    e = Engine(config(), endpoints=specs)
    e.submit(req("r1"), 0.0)  # a
    e.submit(req("r2"), 0.0)  # b
    e.submit(req("q"), 0.0)  # waits
    e.drain_endpoint("a", 1.0)
    assert where(e.completed("r1", 2.0, output_tokens=1)) == []  # a is drained
    assert where(e.completed("r2", 2.0, output_tokens=1)) == ["b"]
    e.submit(req("z"), 3.0)  # waits for b
    actions = e.drain_endpoint("b", 3.0)
    (reject,) = [a for a in actions if isinstance(a, Reject)]
    assert reject.request.id == "z" and "a: drained, b: drained" in reject.reason
    assert {s.name: s.state for s in e.statistics().endpoints} == {"a": "drained", "b": "drained"}


def test_endpoints_can_be_added_and_removed_at_run_time() -> None:
    e = fleet("a", policy="least_outstanding")
    e.submit(req("r1"), 0.0)
    e.add_endpoint(EndpointSpec(name="b"), 1.0)
    assert where(e.submit(req("r2"), 1.0)) == ["b"]
    e.remove_endpoint("a", 2.0)
    assert [s.name for s in e.statistics().endpoints] == ["b"]
    assert e.completed("r1", 3.0, output_tokens=1) == []  # its answer still counts
    assert where(e.submit(req("r3"), 3.0)) == ["b"]
    with pytest.raises(ValueError, match="must be one of"):
        e.drain_endpoint("a", 3.0)
    with pytest.raises(ValueError, match="already in the fleet"):
        e.add_endpoint(EndpointSpec(name="b"), 3.0)


def test_a_second_endpoint_splits_the_signals_a_lone_one_shared_and_loses_nothing() -> None:
    # A fleet of one keeps one Signals for its endpoint and its aggregate; when a second
    # endpoint joins, each must go on as if it had always been kept apart.
    from semisched.core.signals import Signals

    cfg = config("round_robin")
    e = Engine(cfg, endpoints=[EndpointSpec(name="a")])
    every, only_a = Signals(cfg.signals, track_tail=False), Signals(cfg.signals)
    now = 0.0

    def answer(rid: str, at: float, tokens: int, sent: float) -> None:
        e.completed(rid, at, output_tokens=tokens)
        for signals in (every, only_a) if where_of[rid] == "a" else (every,):
            signals.record_completion(at - sent, tokens)

    where_of: dict[str, str] = {}
    for i, (latency, tokens) in enumerate([(1.0, 10), (1.0, 12), (9.0, 10), (2.0, 40)]):
        (send,) = sends(e.submit(req(f"r{i}"), now))
        where_of[send.request.id] = send.endpoint
        answer(f"r{i}", now + latency, tokens, now)
        now += latency
    e.add_endpoint(EndpointSpec(name="b"), now)
    for i, (latency, tokens) in enumerate([(3.0, 10), (1.0, 30), (5.0, 10), (1.0, 8)], 4):
        (send,) = sends(e.submit(req(f"r{i}"), now))
        where_of[send.request.id] = send.endpoint
        answer(f"r{i}", now + latency, tokens, now)
        now += latency
    assert set(where_of.values()) == {"a", "b"}
    assert e.statistics().s_per_token == every.s_per_token
    endpoint_a = e._fleet.get("a")
    assert endpoint_a.signals.s_per_token == only_a.s_per_token
    assert endpoint_a.signals.tail_signal() == only_a.tail_signal() > 0.0
    assert e.statistics().endpoints[0].completed == sum(v == "a" for v in where_of.values())


def test_overload_control_sees_the_least_loaded_endpoint() -> None:
    specs = [EndpointSpec(name="a", max_concurrency=2), EndpointSpec(name="b", max_concurrency=2)]
    e = Engine(config(), endpoints=specs)
    e.submit(req("r1"), 0.0)
    e.submit(req("r2"), 0.0)
    e.failed("r1", 0.5, K.RATE_LIMITED, retry_after=30.0)  # a throttled: its tail signal is full
    # b still has room and no stress: the fleet is not loaded.
    assert e.signals().tail_latency_ratio == 0.0
    alone = Engine(config(), endpoints=specs[:1])
    alone.submit(req("r1"), 0.0)
    alone.failed("r1", 0.5, K.RATE_LIMITED, retry_after=30.0)
    assert alone.signals().tail_latency_ratio == 1.0


# -- configuration --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("policy", "fastest", "policy='fastest' must be one of"),
        ("failure_threshold", 0, "failure_threshold=0 must be"),
        ("cooloff_s", 0.0, "cooloff_s=0.0 must be"),
        ("speed_decay", 1.0, "speed_decay=1.0 must be"),
        ("spill_outstanding", 0, "spill_outstanding=0 must be"),
    ],
)
def test_routing_config_names_the_bad_field(field: str, value: object, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        RoutingConfig(**{field: value})  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("name", "", "name='' must be"),
        ("max_concurrency", 0, "max_concurrency=0 must be"),
        ("weight", 0.0, "weight=0.0 must be"),
        ("pool", "medium", "pool='medium' must be one of"),
        ("context_tokens", 0, "context_tokens=0 must be"),
    ],
)
def test_endpoint_spec_names_the_bad_field(field: str, value: object, message: str) -> None:
    kwargs: dict[str, object] = {"name": "a", field: value}
    with pytest.raises(ValueError, match=message):
        EndpointSpec(**kwargs)  # type: ignore[arg-type]


def test_a_cancelled_probe_lets_the_next_one_through() -> None:
    e = fleet("a", "b", policy="least_outstanding", failure_threshold=1, cooloff_s=10.0)
    e.submit(req("r"), 0.0)
    e.failed("r", 0.0, K.TIMEOUT)  # a opens; r fails over to b
    assert where(e.submit(req("p"), 10.0)) == ["a"]  # the probe
    e.cancel("p", 10.5)
    assert where(e.submit(req("p2"), 11.0)) == ["a"]  # another probe, not a stuck circuit


# -- a shared budget's refusal (semisched.state) --------------------------------------------


def test_a_refused_send_returns_to_the_queue_and_goes_elsewhere() -> None:
    e = fleet("a", "b", policy="least_outstanding")
    assert where(e.submit(req("r"), 0.0)) == ["a"]
    assert where(e.refused("r", 0.0, until=5.0)) == ["b"]  # a is paused: b takes it
    stats = e.statistics()
    assert stats.counters.refused == 1 and stats.inflight == 1
    # What left is counted sent: one send (to b), not the refused one (to a).
    assert stats.counters.sent == 1
    assert {x.name: x.sent for x in stats.endpoints} == {"a": 0, "b": 1}
    assert where(e.submit(req("s"), 1.0)) == ["b"]  # a still paused
    assert where(e.submit(req("t"), 6.0)) == ["a"]  # the pause is over


def test_a_refusal_is_not_an_attempt_and_takes_its_local_charge_back() -> None:
    specs = [EndpointSpec(name="a", budget=BudgetConfig(rpm=1))]
    cfg = config().with_(retry=RetryPolicy(max_attempts=1, jitter=0.0))
    e = Engine(cfg, endpoints=specs)
    e.submit(req("r"), 0.0)
    actions = e.refused("r", 0.0, until=2.0, fleet_wide=True)
    (wake,) = [a for a in actions if isinstance(a, Wake)]
    assert wake.at == 2.0 and where(actions) == []
    (send,) = sends(e.poll(2.0))  # the rpm=1 charge was refunded: it fits again at once
    assert send.attempt == 1
    (fail,) = e.failed("r", 3.0, K.SERVER_ERROR)  # max_attempts=1: the refusal did not count
    assert isinstance(fail, Fail) and fail.attempts == 1


def test_a_refused_request_still_expires_at_its_deadline() -> None:
    e = fleet("a")
    e.submit(req("r", deadline=4.0), 0.0)
    e.refused("r", 0.0, until=10.0)
    (expire,) = [a for a in e.poll(4.0) if isinstance(a, Expire)]
    assert expire.request.id == "r"


# -- the endpoints with free room ------------------------------------------------------------


def _varied_fleet(policy: str) -> Engine:
    specs = [
        EndpointSpec(name="a", max_concurrency=2),
        EndpointSpec(name="b", max_concurrency=3, budget=BudgetConfig(rpm=30)),
        EndpointSpec(name="c"),
        EndpointSpec(name="d", max_concurrency=1, context_tokens=600),
        EndpointSpec(name="e", max_concurrency=2, weight=2.0),
    ]
    cfg = config(policy, failure_threshold=2, cooloff_s=5.0).with_(max_inflight=7)
    return Engine(cfg, endpoints=specs, jitter=random.Random(7).random)


def _drive(engine: Engine, seed: int) -> list[tuple[str, ...]]:
    """A seeded mix of arrivals, answers, 429s and server errors; every action, in order."""
    rng = random.Random(seed)
    trace: list[tuple[str, ...]] = []
    inflight: list[str] = []
    now = 0.0
    for i in range(400):
        now += rng.expovariate(4.0)
        roll = rng.random()
        if roll < 0.5 or not inflight:
            actions = engine.submit(req(f"r{i}", rng.choice([20, 200, 900]), prompt=100.0), now)
        else:
            rid = inflight.pop(rng.randrange(len(inflight)))
            if roll < 0.85:
                actions = engine.completed(rid, now, output_tokens=50)
            else:
                kind = K.RATE_LIMITED if roll < 0.92 else K.SERVER_ERROR
                actions = engine.failed(rid, now, kind, retry_after=1.0)
        actions += engine.poll(now)
        for action in actions:
            if isinstance(action, Send):
                inflight.append(action.request.id)
                trace.append(("send", action.request.id, action.endpoint))
            else:
                request = getattr(action, "request", None)
                trace.append((type(action).__name__, request.id if request else ""))
        free = [e.name for e in engine._fleet.endpoints if e.cap is None or e.inflight < e.cap]
        assert [e.name for e in engine._fleet.room] == free  # the index is the fleet's truth
    return trace


@pytest.mark.parametrize(
    "policy", ["round_robin", "random", "least_outstanding", "latency_ewma", "anticipated_load"]
)
def test_picking_among_the_endpoints_with_room_decides_as_the_full_scan(
    policy: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The index of endpoints with free room is a shortcut: with caps, a budget, a
    # context limit, 429 pauses and opening circuits, every decision is the full scan's.
    fast = _drive(_varied_fleet(policy), seed=3)
    from semisched.core.fleet.picking import Picker

    monkeypatch.setattr(Picker, "_pick_roomy", lambda self, entry, now: None)
    assert _drive(_varied_fleet(policy), seed=3) == fast
    assert sum(1 for t in fast if t[0] == "send") > 200
