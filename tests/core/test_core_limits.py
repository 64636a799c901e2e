"""Learned concurrency limits: the rules a user relies on, and the books under any interleaving.

The rules (:mod:`semisched.core.fleet.limits`): slow start grows a binding limit, a wait
for a slot cuts it below what the endpoint held, a 429 halves it and keeps it under
where it was hit, an explicit ``max_concurrency`` wins. Then a simulated server with
a known number of slots: nothing told, the scheduler finds it. Then a stateful test:
sends, first tokens, answers, 429s, 5xx, cancels and time in any order over two
learning endpoints; each endpoint may hold what its limit says and the books go back
to zero.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from mockprovider.physics import PhysicsParams
from semisched.core import (
    AllocationConfig,
    Answered,
    ClassSpec,
    EndpointSpec,
    Engine,
    FailureKind,
    OrderingConfig,
    OverloadConfig,
    Prior,
    QueueDelayLimit,
    Request,
    RoutingConfig,
    SchedulerConfig,
    Send,
    Wake,
    preset,
)
from semisched.core.fleet.endpoint import EndpointState
from semisched.core.fleet.routing import RoutingPolicy
from semisched.core.queue import Entry


def answer(sent_at: float, ttft: float, latency: float, tokens: int, held: int) -> Answered:
    return Answered(sent_at, sent_at + latency, tokens, ttft, held, 0.01, 100)


def test_slow_start_grows_only_a_binding_limit() -> None:
    limit = QueueDelayLimit(initial=4.0)
    assert limit.answered(answer(0.0, 0.02, 1.0, 100, held=2)) is None  # not binding
    assert limit.cap == 4
    for i in range(4):  # binding, no wait: one each (doubles per round)
        verdict = limit.answered(answer(float(i), 0.02, 1.0, 100, held=limit.cap))
        assert verdict is not None and verdict[0] == "limit.probe"
    assert limit.cap == 8


def test_a_long_wait_for_a_slot_cuts_below_what_the_endpoint_held_once_a_round() -> None:
    limit = QueueDelayLimit(initial=16.0)
    limit.answered(answer(0.0, 0.02, 1.0, 100, held=4))  # the floor: 2 steps
    verdict = limit.answered(answer(1.0, 1.0, 2.0, 100, held=9))  # waited 98 steps
    assert verdict is not None and verdict[0] == "limit.queued"
    assert limit.cap == 8 and limit.settled
    # sent before that decrease: says nothing of the new limit
    assert limit.answered(answer(1.5, 1.0, 2.0, 100, held=9)) is None
    assert limit.cap == 8


def test_a_small_wait_cuts_only_when_a_request_sent_after_it_waited_too() -> None:
    limit = QueueDelayLimit(initial=16.0)
    limit.answered(answer(0.0, 0.02, 1.0, 100, held=4))
    # 40 steps: above the threshold (4 + 5 x the scatter's prior of 4), not far above
    assert limit.answered(answer(1.0, 0.42, 1.5, 100, held=9)) is None
    # sent while that one still waited: the same burst of prefill, say; no proof
    assert limit.answered(answer(1.2, 0.42, 1.7, 100, held=9)) is None
    assert limit.cap == 16
    verdict = limit.answered(answer(1.5, 0.42, 2.0, 100, held=9))  # sent after: confirmed
    assert verdict is not None and verdict[0] == "limit.queued" and limit.cap == 8


def test_a_first_token_reads_the_wait_before_the_answer_ends() -> None:
    limit = QueueDelayLimit(initial=16.0)
    first = limit.first_token
    assert first(0.0, 0.5, held=9, prompt_tokens=0.0, left=3, left_by_s=0.4) is None  # no step
    limit.answered(answer(0.0, 0.02, 1.0, 100, held=4))  # the floor and the step (10 ms)
    assert first(1.0, 1.1, held=9, prompt_tokens=0.0, left=1, left_by_s=0.08) is None  # 8 steps
    # 98 steps, its answer still to come; but it waited for a slot only until the last
    # departure before its token, so one that left early bounds its wait to little
    assert first(2.0, 3.0, held=9, prompt_tokens=0.0, left=1, left_by_s=0.05) is None
    verdict = first(2.0, 3.0, held=9, prompt_tokens=0.0, left=3, left_by_s=0.95)
    assert verdict is not None and verdict[0] == "limit.queued" and limit.cap == 8


def test_a_first_token_no_departure_preceded_waited_for_no_slot_of_ours() -> None:
    limit = QueueDelayLimit(initial=16.0)
    limit.answered(answer(0.0, 0.02, 1.0, 100, held=4))
    # 98 steps, but nothing of this client's left the endpoint before its first token:
    # no slot of ours freed for it (another request's prefill, another client's load)
    assert limit.first_token(1.0, 2.0, held=9, prompt_tokens=0.0, left=0, left_by_s=0.0) is None
    late = Answered(1.0, 3.0, 100, 1.0, 9, 0.01, 100, left=0)
    assert limit.answered(late) is None and limit.cap == 16
    # that wait was scatter: the threshold grows with it. One that left before it: a
    # slot it may have waited for; no second reading needed (nor far above the threshold)
    queued = Answered(2.0, 4.0, 100, 1.8, 9, 0.01, 100, left=2, left_by_s=1.7)
    verdict = limit.answered(queued)
    assert verdict is not None and verdict[0] == "limit.queued" and limit.cap == 8


def test_slow_start_grows_at_each_first_token_that_proves_a_free_slot() -> None:
    limit = QueueDelayLimit(initial=2.0)
    for held in (2, 3, 4, 5):  # binding, and nothing left before its first token
        verdict = limit.first_token(0.0, 0.1, held=held, prompt_tokens=0.0, left=0, left_by_s=0.0)
        assert verdict is not None and verdict[0] == "limit.probe"
    assert limit.cap == 6
    # one that a departure preceded proves nothing: no growth
    assert limit.first_token(0.0, 0.1, held=6, prompt_tokens=0.0, left=1, left_by_s=0.05) is None
    assert limit.cap == 6


def test_above_what_first_tokens_proved_an_answer_a_departure_preceded_grows_nothing() -> None:
    limit = QueueDelayLimit(initial=2.0)
    for held in range(2, 9):  # first tokens no departure preceded: 8 served at once
        limit.first_token(0.0, 0.1, held=held, prompt_tokens=0.0, left=0, left_by_s=0.0)
    assert limit.cap == 9 and limit.sure == 8
    limit.answered(answer(0.0, 0.02, 1.0, 100, held=4))  # the floor and the step
    # Sent with 9, its first token after one of ours left: it may have had the slot that
    # left, however short its wait looked. No proof of a ninth slot: no growth.
    after = Answered(1.0, 3.0, 100, 0.1, 9, 0.01, 100, left=1, left_by_s=0.05)
    assert limit.answered(after) is None and limit.cap == 9
    # A first token at 9 that no departure preceded is the proof: then it grows.
    verdict = limit.first_token(2.0, 2.1, held=9, prompt_tokens=0.0, left=0, left_by_s=0.0)
    assert verdict is not None and verdict[0] == "limit.probe" and limit.cap == 10


def test_the_scatter_allowance_learns_only_from_answers_that_had_a_slot() -> None:
    """Waits that may have been a queue's (a departure preceded the first token, more in
    flight than was proved served) must not widen the allowance that hides a queue."""
    limit = QueueDelayLimit(initial=16.0)
    limit.answered(answer(0.0, 0.02, 1.0, 100, held=4))  # the floor: 20 ms
    for i in range(20):  # about 13 steps each: under the threshold (4 + 5 x a prior of 4)
        maybe = Answered(1.0 + i, 3.0 + i, 100, 0.3, 9, 0.01, 100, left=2, left_by_s=0.28)
        assert limit.answered(maybe) is None
    # About 40 steps after a departure: a queue. Had the 20 above widened the allowance
    # to some 4 + 5 x 11 steps, it would pass as scatter.
    queued = Answered(30.0, 32.0, 100, 0.9, 9, 0.01, 100, left=3, left_by_s=0.85)
    verdict = limit.answered(queued)
    assert verdict is not None and verdict[0] == "limit.queued" and limit.cap == 8


def test_a_streamed_endpoint_starts_low_and_an_unstreamed_one_at_eight() -> None:
    limit = QueueDelayLimit()
    verdict = limit.streamed(held=1)  # first tokens will show a slot within a prefill
    assert verdict is not None and verdict[0] == "limit.start" and limit.cap == 2
    assert limit.streamed(held=1) is None  # once
    busy = QueueDelayLimit()
    busy.streamed(held=5)  # not below what it already holds
    assert busy.cap == 5
    read = QueueDelayLimit()
    read.answered(answer(0.0, 0.02, 1.0, 100, held=1))
    assert read.streamed(held=1) is None and read.cap == 8  # something was read
    for stream, cap in ((True, 2), (False, 8)):
        engine = Engine(_one_class(), endpoints=[EndpointSpec(name="a")])
        engine.submit(_request("r", 0.0, stream=stream), 0.0)
        assert engine.statistics().endpoints[0].limit == cap


def test_a_request_says_whether_it_streams() -> None:
    prior = Prior(p50=10, p90=20)
    assert Request(id="r", klass="batch", prior=prior).stream is False
    with pytest.raises(ValueError, match="stream"):
        Request(id="r", klass="batch", prior=prior, stream=1)  # type: ignore[arg-type]


def test_a_first_token_past_its_due_time_cuts_to_what_decodes() -> None:
    limit = QueueDelayLimit()
    for held in (1, 2):  # two first tokens had a slot: it serves at least 2
        limit.first_token(0.0, 0.1, held=held, prompt_tokens=100.0, left=0, left_by_s=0.0)
    floor, allowance = limit.first_token_due(100.0) or (0.0, 0.0)
    assert floor == 0.1 and allowance > 0.0
    # one sent with 2 in flight waited for nothing a first token did not prove served
    assert limit.overdue(1.0, 2.0, held=2, inflight=2, awaiting=1) is None
    verdict = limit.overdue(1.0, 2.0, held=3, inflight=3, awaiting=1)  # 2 decode, it waits
    assert verdict is not None and verdict[0] == "limit.overdue" and limit.cap == 4  # halved
    assert limit.overdue(1.5, 2.5, held=4, inflight=4, awaiting=2) is None  # sent before
    verdict = limit.overdue(2.5, 3.0, held=4, inflight=4, awaiting=2)
    assert verdict is not None and limit.cap == 2  # what decodes


@pytest.mark.parametrize(("token_at", "cut"), [(0.55, False), (None, True)])
def test_the_engine_checks_a_streamed_first_token_when_it_is_due(
    token_at: float | None, cut: bool
) -> None:
    engine = Engine(_one_class(), endpoints=[EndpointSpec(name="a")])
    for i in range(2):
        engine.submit(_request(f"r{i}", 0.0, stream=True), 0.0)
    for i in range(2):  # slots proved; slow start grows the binding limit to 3
        engine.first_token(f"r{i}", 0.1)
    actions = engine.submit(_request("late", 0.2, stream=True), 0.2)
    assert any(isinstance(a, Send) and a.request.id == "late" for a in actions)
    # due at its send + the floor (0.1) + 3 x the longest first token that had a slot
    wakes = [a.at for a in actions if isinstance(a, Wake)]
    assert wakes and wakes[0] == pytest.approx(0.6)
    if token_at is not None:
        engine.first_token("late", token_at)
    engine.poll(wakes[0])
    e = engine.statistics().endpoints[0]
    assert (e.limit_changes.get("limit.overdue", 0) == 1) is cut
    assert e.limit == (2 if cut else 4)  # in time, it proved a third slot: slow start grows


def test_prefill_awaited_before_it_delays_a_first_tokens_due_time() -> None:
    engine = Engine(_one_class(), endpoints=[EndpointSpec(name="a")])
    for i in range(2):
        engine.submit(_request(f"r{i}", 0.0, stream=True), 0.0)
    for i in range(2):
        engine.first_token(f"r{i}", 0.1)
    engine.completed("r0", 0.2, output_tokens=1)
    engine.completed("r1", 0.2, output_tokens=1)
    sent = [engine.submit(_request(f"b{i}", 0.3, stream=True), 0.3) for i in range(3)]
    assert all(any(isinstance(a, Send) for a in actions) for actions in sent)
    # three prompts in prefill together: the last is not late until theirs are done too
    for now in (0.6, 0.8):
        engine.poll(now)
    assert engine.statistics().endpoints[0].limit_changes.get("limit.overdue", 0) == 0


class FirstListed(RoutingPolicy):
    """Routes to the first candidate in fleet order (a test's policy)."""

    name = "first_listed"

    def choose(
        self, entry: Entry, candidates: Sequence[EndpointState], now: float
    ) -> EndpointState:
        return candidates[0]


def test_a_probe_takes_a_request_only_when_no_endpoint_has_room_it_has_shown() -> None:
    cfg = replace(_one_class(), max_inflight=None,
                  routing=RoutingConfig(policy=FirstListed))  # fmt: skip
    engine = Engine(cfg, endpoints=[EndpointSpec(name="a"), EndpointSpec(name="b",
                                                                          max_concurrency=1)])
    sent = {}
    for i in range(3):  # a starts streamed at 2; the third goes to b
        for action in engine.submit(_request(f"s{i}", 0.0, stream=True), 0.0):
            if isinstance(action, Send):
                sent[action.request.id] = action.endpoint
    assert sent == {"s0": "a", "s1": "a", "s2": "b"}
    for i in range(2):  # both had a slot at a: it serves 2; slow start probes a third
        engine.first_token(f"s{i}", 0.1)
    engine.completed("s2", 0.2, output_tokens=10)  # b has room again
    assert engine.statistics().endpoints[0].limit == 3
    # the policy prefers a, but a's third slot is a probe and b has a slot it has shown
    actions = engine.submit(_request("s3", 0.3, stream=True), 0.3)
    assert [a.endpoint for a in actions if isinstance(a, Send)] == ["b"]
    # with b full, the probe is the only room: it is used
    actions = engine.submit(_request("s4", 0.3, stream=True), 0.3)
    assert [a.endpoint for a in actions if isinstance(a, Send)] == ["a"]


def _one_class() -> SchedulerConfig:
    return SchedulerConfig(
        classes=(ClassSpec(name="batch"),),
        allocation=AllocationConfig(policy="fifo"),
        ordering=OrderingConfig(policy="fifo"),
        overload=OverloadConfig(policy="none"),
    )


def _request(rid: str, now: float, *, stream: bool = False, tokens: int = 100) -> Request:
    prior = Prior(p50=tokens, p90=tokens * 2)
    return Request(id=rid, klass="batch", arrival=now, prior=prior, input_tokens=100.0,
                   stream=stream)  # fmt: skip


@pytest.mark.parametrize("ceiling", [1, 2])
def test_a_ceiling_of_one_request_leaves_the_limit_unfed(ceiling: int) -> None:
    # With max_inflight=1 no endpoint ever holds more than one: no limit can bind, so
    # none is fed (it stays where it started); a ceiling of two feeds it as usual.
    config = replace(_one_class(), max_inflight=ceiling)
    engine = Engine(config, endpoints=[EndpointSpec(name="a")])
    actions = [a for i in range(2) for a in engine.submit(_request(f"r{i}", 0.0, stream=True), 0.0)]
    assert sum(isinstance(a, Send) for a in actions) == ceiling
    assert not any(isinstance(a, Wake) for a in actions)  # no first token to check
    engine.first_token("r0", 0.1)
    engine.failed("r0", 0.2, FailureKind.RATE_LIMITED, retry_after=0.5)
    stats = engine.statistics()
    e = stats.endpoints[0]
    if ceiling == 1:
        assert (e.limit, e.limit_changes) == (8, {})
        assert stats.limit_changes == ()
    else:
        assert e.limit_changes.get("limit.start") == 1
        assert e.limit_changes.get("limit.throttled") == 1
        # every change, oldest first, explained: the statistics' log of them
        assert [(c.endpoint, c.rule) for c in stats.limit_changes] == [
            ("a", "limit.start"), ("a", "limit.throttled")]  # fmt: skip
        assert stats.limit_changes[-1] == e.last_limit_change


def test_the_knee_holds_then_probes_resume_one_a_round() -> None:
    limit = QueueDelayLimit(initial=16.0, ceiling_rounds=5.0)
    limit.answered(answer(0.0, 0.02, 1.0, 100, held=4))
    limit.answered(answer(1.0, 1.0, 2.0, 100, held=9))  # cut to 8: the knee
    for i in range(30):  # under 5 rounds of 8 answers: no probe past the knee
        limit.answered(answer(10.0 + i, 0.02, 1.0, 100, held=limit.cap))
    assert limit.cap == 8
    for i in range(60):  # then about one a round, past fractional limits too
        limit.answered(answer(50.0 + i, 0.02, 1.0, 100, held=limit.cap))
    assert limit.cap >= 12


def test_a_429_takes_one_off_and_probes_stay_below_where_it_was_hit() -> None:
    limit = QueueDelayLimit(initial=20.0, throttle_s=60.0)
    verdict = limit.throttled(sent_at=1.0, now=2.0)
    assert verdict is not None and verdict[0] == "limit.throttled" and limit.cap == 19
    # the rest of a rate window's 429s are the rate budget's to pace, not the limit's
    assert limit.throttled(sent_at=3.0, now=30.0) is None and limit.cap == 19
    for i in range(200):  # binding answers, no wait: no probe past where the 429 came
        limit.answered(answer(3.0 + i * 0.1, 0.02, 1.0, 100, held=limit.cap))
    assert limit.cap == 19
    for i in range(40):  # a minute later the ceiling lifts: probes find more again
        limit.answered(answer(70.0 + i, 0.02, 1.0, 100, held=limit.cap))
    assert limit.cap >= 20
    failed = limit.failed(sent_at=500.0, now=501.0)
    assert failed is not None and failed[0] == "limit.failed" and limit.cap < 20


def test_an_explicit_cap_wins_and_fixed_learns_nothing() -> None:
    config = SchedulerConfig()
    engine = Engine(config, endpoints=[EndpointSpec(name="a", max_concurrency=3),
                                       EndpointSpec(name="b")])  # fmt: skip
    a, b = engine.statistics().endpoints
    assert (a.limit, a.limit_policy) == (3, "fixed")
    assert (b.limit, b.limit_policy) == (8, "learned")
    fixed = Engine(SchedulerConfig(routing=RoutingConfig(concurrency="fixed")))
    assert fixed.statistics().endpoints[0].limit is None
    with pytest.raises(ValueError, match="concurrency"):
        RoutingConfig(concurrency="guess")


@pytest.mark.parametrize("slots", [4, 12])
def test_nothing_told_the_scheduler_finds_a_servers_slots(slots: int) -> None:
    from bench.workloads import generate, regime
    from predictors.priors import Coarse
    from semisched.sim.model import SimEndpoint
    from semisched.sim.simulator import Simulator

    physics = PhysicsParams(slots=slots)
    jobs = generate(regime("balanced/high", requests=800), 1, Coarse(), physics)
    sim = Simulator(preset("final_adrr_olc"), None,
                    fleet=[SimEndpoint(spec=EndpointSpec(name="e"), physics=physics)])  # fmt: skip
    sim.run(jobs)
    stats = sim.engine.statistics().endpoints[0]
    assert stats.limit is not None and abs(stats.limit - slots) <= 1
    assert stats.last_limit_change is not None and stats.last_limit_change.endpoint == "e"
    assert stats.limit_changes.get("limit.queued", 0) >= 1


def _peak_held(stream: bool, seed: int) -> int:
    """The most requests a 2-slot server beside an 8-slot one ever held, nothing told,
    round robin, the balanced mix at 1.1x the pair's capacity (simulated)."""
    from dataclasses import replace

    from bench.workloads import generate, regime
    from predictors.priors import Coarse
    from semisched.sim.model import SimEndpoint
    from semisched.sim.simulator import Simulator

    fast, slow = PhysicsParams(slots=8), PhysicsParams(slots=2)
    capacity = fast.capacity_tokens_per_s() + slow.capacity_tokens_per_s()
    jobs = generate(regime("balanced/high", requests=200), seed, Coarse(), fast,
                    capacity_tokens_per_s=capacity)  # fmt: skip
    jobs = [replace(j, request=replace(j.request, stream=stream)) for j in jobs]
    config = preset("final_adrr_olc").with_(routing=RoutingConfig(policy="round_robin"))
    fleet = [SimEndpoint(spec=EndpointSpec(name=n), physics=p)
             for n, p in (("fast", fast), ("slow", slow))]  # fmt: skip
    rows = [r for r in Simulator(config, None, fleet=fleet).run(jobs).rows
            if r.endpoint == "slow" and r.first_send is not None and r.end is not None]  # fmt: skip
    held = peak = 0
    for _, step in sorted([(r.first_send, 1) for r in rows] + [(r.end, -1) for r in rows]):
        held += step
        peak = max(peak, held)
    return peak


def test_a_small_server_is_found_before_it_is_sent_more_than_its_slots_and_one() -> None:
    """Streamed calls: slow start from 2 at the pace of first tokens, and a late first
    token cuts the limit before any answer could. Unstreamed, the same server is sent
    up to the starting 8 before its first answers tell it anything."""
    assert max(_peak_held(True, seed) for seed in range(3)) <= 3
    assert max(_peak_held(False, seed) for seed in range(3)) > 3


class LearningFleet(RuleBasedStateMachine):
    """Two learning endpoints under sends, first tokens, answers, 429s, 5xx and cancels."""

    def __init__(self) -> None:
        super().__init__()
        self.engine = Engine(
            SchedulerConfig(
                classes=(ClassSpec(name="batch"),),
                allocation=AllocationConfig(policy="fifo"),
                ordering=OrderingConfig(policy="fifo"),
                overload=OverloadConfig(policy="none"),
                routing=RoutingConfig(policy="least_outstanding"),
            ),
            endpoints=[EndpointSpec(name="a"), EndpointSpec(name="b")],
        )
        self.now = 0.0
        self.n = 0
        self.inflight: dict[str, str] = {}  # id -> endpoint
        self.live: set[str] = set()
        self.streamed: set[str] = set()
        self.awaiting: set[str] = set()  # sent, streamed, no first token yet

    def _apply(self, actions: list[object]) -> None:
        sent_to = set()
        for action in actions:
            if isinstance(action, Send):
                self.inflight[action.request.id] = action.endpoint
                sent_to.add(action.endpoint)
                if action.request.id in self.streamed:
                    self.awaiting.add(action.request.id)
            elif hasattr(action, "request") and not hasattr(action, "until"):
                rid = action.request.id  # type: ignore[attr-defined]
                self.inflight.pop(rid, None)
                self.awaiting.discard(rid)
                if type(action).__name__ != "Retry":
                    self.live.discard(rid)
        for e in self.engine.statistics().endpoints:  # no send beyond an endpoint's limit
            assert e.name not in sent_to or e.limit is None or e.inflight <= e.limit

    @rule(tokens=st.integers(1, 400), stream=st.booleans())
    def submit(self, tokens: int, stream: bool) -> None:
        self.n += 1
        rid = f"r{self.n}"
        self.live.add(rid)
        if stream:
            self.streamed.add(rid)
        prior = Prior(p50=tokens, p90=tokens * 2)
        request = Request(id=rid, klass="batch", arrival=self.now, prior=prior, stream=stream)
        self._apply(self.engine.submit(request, self.now))

    @rule(dt=st.floats(0.0, 5.0))
    def time_passes(self, dt: float) -> None:
        self.now += dt
        self._apply(self.engine.poll(self.now))

    @precondition(lambda self: self.inflight)
    @rule(i=st.integers(0, 10**6), wait=st.floats(0.0, 3.0))
    def first_token(self, i: int, wait: float) -> None:
        rid = sorted(self.inflight)[i % len(self.inflight)]
        self.now += wait
        self.engine.first_token(rid, self.now)
        self.awaiting.discard(rid)

    @precondition(lambda self: self.inflight)
    @rule(i=st.integers(0, 10**6), tokens=st.integers(0, 500), dt=st.floats(0.0, 10.0))
    def answer(self, i: int, tokens: int, dt: float) -> None:
        rid = sorted(self.inflight)[i % len(self.inflight)]
        self.now += dt
        del self.inflight[rid]
        self.live.discard(rid)
        self.awaiting.discard(rid)
        self._apply(self.engine.completed(rid, self.now, output_tokens=tokens))

    @precondition(lambda self: self.inflight)
    @rule(i=st.integers(0, 10**6), kind=st.sampled_from(
        [FailureKind.RATE_LIMITED, FailureKind.SERVER_ERROR, FailureKind.TIMEOUT]))  # fmt: skip
    def fail(self, i: int, kind: FailureKind) -> None:
        rid = sorted(self.inflight)[i % len(self.inflight)]
        del self.inflight[rid]
        self.awaiting.discard(rid)
        self._apply(self.engine.failed(rid, self.now, kind, retry_after=0.5))

    @precondition(lambda self: self.live)
    @rule(i=st.integers(0, 10**6))
    def cancel(self, i: int) -> None:
        rid = sorted(self.live)[i % len(self.live)]
        self.inflight.pop(rid, None)
        self.live.discard(rid)
        self.awaiting.discard(rid)
        self._apply(self.engine.cancel(rid, self.now))

    @invariant()
    def each_endpoint_holds_what_its_limit_allows(self) -> None:
        stats = self.engine.statistics()
        for e in stats.endpoints:
            assert e.limit is not None and 1 <= e.limit <= 1024
            held = sum(1 for where in self.inflight.values() if where == e.name)
            assert e.inflight == held
        assert stats.inflight == len(self.inflight)
        for state in self.engine._fleet.endpoints:  # the first tokens it awaits, exactly
            waits = sum(1 for rid in self.awaiting if self.inflight.get(rid) == state.name)
            assert state.awaiting == waits and state.awaiting_s >= 0.0

    def teardown(self) -> None:
        for rid in list(self.live):  # what is left is answered: the books go back to zero
            if rid in self.inflight:
                del self.inflight[rid]
                self._apply(self.engine.completed(rid, self.now, output_tokens=1))
            else:
                self._apply(self.engine.cancel(rid, self.now))
        for rid in list(self.inflight):
            self._apply(self.engine.completed(rid, self.now, output_tokens=1))
        stats = self.engine.statistics()
        assert stats.inflight == 0 and sum(stats.queued.values()) == 0
        assert all(e.inflight == 0 for e in stats.endpoints)
        assert all(e.awaiting == 0 and e.awaiting_s == 0.0 for e in self.engine._fleet.endpoints)


LearningFleet.TestCase.settings = settings(max_examples=60, stateful_step_count=40, deadline=None)
test_learning_fleet = LearningFleet.TestCase


def test_a_cap_on_the_endpoint_schedules_as_the_same_cap_on_the_scheduler() -> None:
    """With no endpoint room left, nothing is chosen: the allocation's state does not
    move without a send, so per-endpoint caps decide as ``max_inflight`` does."""
    classes = (ClassSpec(name="interactive", interactive=True), ClassSpec(name="batch"))
    fixed = RoutingConfig(concurrency="fixed")

    def order(engine: Engine) -> list[str]:
        sent: list[str] = []
        inflight: list[str] = []
        now = 0.0
        for i in range(40):
            klass = "interactive" if i % 3 == 0 else "batch"
            size = 20 if klass == "interactive" else 300
            request = Request(id=f"r{i}", klass=klass, arrival=now,
                              prior=Prior(p50=size, p90=2 * size))  # fmt: skip
            for a in engine.submit(request, now):
                if isinstance(a, Send):
                    sent.append(a.request.id)
                    inflight.append(a.request.id)
        while inflight:
            now += 1.0
            for a in engine.completed(inflight.pop(0), now, output_tokens=100):
                if isinstance(a, Send):
                    sent.append(a.request.id)
                    inflight.append(a.request.id)
        return sent

    base = SchedulerConfig(classes=classes, routing=fixed, ordering=OrderingConfig(policy="fifo"),
                           overload=OverloadConfig(policy="none"))  # fmt: skip
    by_scheduler = order(Engine(base.with_(max_inflight=4)))
    by_endpoint = order(Engine(base, endpoints=[EndpointSpec(name="e", max_concurrency=4)]))
    assert by_endpoint == by_scheduler
    assert len(by_scheduler) == 40
