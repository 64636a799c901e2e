"""Allocation: which class gets each send opportunity, per policy.

Most tests drive a real Engine with max_inflight=1 and many queued requests of
known cost, completing one request at a time and recording which class each
send opportunity went to. Ordering is FIFO and overload control is off, so the
sequence reflects allocation alone.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import pytest

from semisched.core import (
    AllocationConfig,
    ClassSpec,
    Engine,
    OrderingConfig,
    OverloadConfig,
    Prior,
    Request,
    RoutingConfig,
    SchedulerConfig,
    Send,
)
from semisched.core.allocation import AdaptiveDRR
from semisched.core.queue import Entry

FIXED = RoutingConfig(concurrency="fixed")

INTERACTIVE, BATCH = "interactive", "batch"


def config(
    policy: str,
    *,
    weights: tuple[float, float] = (1.0, 1.0),
    max_inflight: int = 1,
    gain: float = 0.0,
    request_tokens: float | None = 0.0,
) -> SchedulerConfig:
    return SchedulerConfig(
        max_inflight=max_inflight,
        routing=FIXED,  # the scheduler's cap alone, no learned endpoint limit
        classes=(
            ClassSpec(name=INTERACTIVE, weight=weights[0], interactive=True, quota=0.25),
            ClassSpec(name=BATCH, weight=weights[1], quota=0.75),
        ),
        # The tests of token shares charge tokens alone (the learned per-request part is
        # tested on its own below).
        allocation=AllocationConfig(
            policy=policy, quantum_tokens=256.0, congestion_gain=gain, request_tokens=request_tokens
        ),
        ordering=OrderingConfig(policy="fifo"),
        overload=OverloadConfig(policy="none"),
    )


def req(rid: str, klass: str, cost: float) -> Request:
    return Request(id=rid, klass=klass, prior=Prior(p50=cost, p90=cost))


class Driver:
    """Feeds an engine and records the requests it sends, in order."""

    def __init__(self, cfg: SchedulerConfig) -> None:
        self.engine = Engine(cfg)
        self.sent: list[Request] = []
        self.inflight: list[str] = []
        self.now = 0.0

    def _take(self, actions: Sequence[object]) -> None:
        for action in actions:
            if isinstance(action, Send):
                self.sent.append(action.request)
                self.inflight.append(action.request.id)

    def submit(self, rid: str, klass: str, cost: float) -> None:
        self._take(self.engine.submit(req(rid, klass, cost), self.now))

    def complete_oldest(self) -> None:
        self.now += 1.0
        rid = self.inflight.pop(0)
        self._take(self.engine.completed(rid, self.now, output_tokens=1))

    def classes(self) -> list[str]:
        return [r.klass for r in self.sent]

    def ids(self) -> list[str]:
        return [r.id for r in self.sent]


def backlogged_driver(
    policy: str, i_cost: float, b_cost: float, n: int = 200, **kw: object
) -> Driver:
    d = Driver(config(policy, **kw))  # type: ignore[arg-type]
    for i in range(n):
        d.submit(f"i{i}", INTERACTIVE, i_cost)
        d.submit(f"b{i}", BATCH, b_cost)
    return d


def tokens_by_class(sent: Sequence[Request]) -> dict[str, float]:
    out = {INTERACTIVE: 0.0, BATCH: 0.0}
    for r in sent:
        out[r.klass] += r.prior.p50
    return out


@pytest.mark.parametrize("weights", [(1.0, 1.0), (2.0, 1.0), (1.0, 3.0)])
def test_adaptive_drr_shares_tokens_in_proportion_to_quanta(weights: tuple[float, float]) -> None:
    # Interactive requests cost 32 tokens, batch ones 256: by count the interactive class
    # sends many more requests, but in *tokens* the split follows the weights.
    d = backlogged_driver("adaptive_drr", 32, 256, weights=weights)
    for _ in range(150):
        d.complete_oldest()
    tokens = tokens_by_class(d.sent[:150])
    assert tokens[INTERACTIVE] / tokens[BATCH] == pytest.approx(weights[0] / weights[1], rel=0.1)


def test_fair_queuing_alternates_one_per_turn_regardless_of_size() -> None:
    d = backlogged_driver("fair_queuing", 32, 2048)
    for _ in range(20):
        d.complete_oldest()
    assert d.classes()[:20] == [INTERACTIVE, BATCH] * 10


def test_short_priority_serves_interactive_first() -> None:
    d = Driver(config("short_priority"))
    d.submit("blocker", BATCH, 100)
    for i in range(5):
        d.submit(f"b{i}", BATCH, 100)  # batch arrived first ...
    for i in range(5):
        d.submit(f"i{i}", INTERACTIVE, 2000)  # ... and is smaller, but waits
    for _ in range(10):
        d.complete_oldest()
    assert d.classes()[1:] == [INTERACTIVE] * 5 + [BATCH] * 5


def test_fifo_allocation_is_global_arrival_order() -> None:
    d = Driver(config("fifo"))
    order = [("a", BATCH), ("b", INTERACTIVE), ("c", INTERACTIVE), ("d", BATCH), ("e", BATCH)]
    for rid, klass in order:
        d.submit(rid, klass, 5000 if klass == BATCH else 10)
    for _ in range(4):
        d.complete_oldest()
    assert d.ids() == ["a", "b", "c", "d", "e"]


@pytest.mark.parametrize(
    ("policy", "expected_inflight"),
    [
        ("adaptive_drr", 4),  # work-conserving: the idle interactive share is used
        ("fair_queuing", 4),
        ("short_priority", 4),
        ("fifo", 4),
        ("quota_tiered", 3),  # no borrowing: batch keeps to floor(0.75 * 4)
    ],
)
def test_idle_interactive_class_leaves_batch_every_opportunity_unless_quota_tiered(
    policy: str, expected_inflight: int
) -> None:
    d = Driver(config(policy, max_inflight=4))
    for i in range(10):
        d.submit(f"b{i}", BATCH, 500)
    assert d.engine.statistics().inflight == expected_inflight
    for _ in range(6):
        d.complete_oldest()
        assert d.engine.statistics().inflight == expected_inflight
    assert set(d.classes()) == {BATCH}


def test_quota_tiered_never_exceeds_a_class_limit() -> None:
    d = Driver(config("quota_tiered", max_inflight=4))
    for i in range(20):
        d.submit(f"i{i}", INTERACTIVE, 10)
    assert d.engine.statistics().inflight_by_class == {INTERACTIVE: 1, BATCH: 0}
    for i in range(40):
        d.submit(f"b{i}", BATCH, 10)
    for _ in range(30):
        by_class = d.engine.statistics().inflight_by_class
        assert by_class[INTERACTIVE] <= 1
        assert by_class[BATCH] <= 3
        assert sum(by_class.values()) == 4  # both backlogged: every slot in use
        d.complete_oldest()


def test_adaptive_drr_class_that_empties_forfeits_its_deficit() -> None:
    # Work-conserving DRR: a class whose queue empties forfeits what it had left (to 0,
    # not below): it neither banks credit while idle nor owes the cost of its last send.
    # quantum 256: one interactive turn is four 64-token requests, one batch turn one request.
    d = Driver(config("adaptive_drr"))
    d.submit("b0", BATCH, 256)  # sent at once; the batch queue is empty again
    for i in range(1, 10):
        d.submit(f"b{i}", BATCH, 256)
    d.submit("i0", INTERACTIVE, 64)
    d.complete_oldest()  # interactive's turn: i0 goes, its queue empties with 192 unspent
    assert d.engine.statistics().allocation_state == {INTERACTIVE: 0.0, BATCH: 0.0}
    for i in range(1, 8):
        d.submit(f"i{i}", INTERACTIVE, 64)
    while d.inflight:
        d.complete_oldest()
    # Leftover credit is forfeited: batch's turn comes first, then a full interactive quantum.
    assert d.ids()[:11] == ["b0", "i0", "b1", "i1", "i2", "i3", "i4", "b2", "i5", "i6", "i7"]


# -- AdaptiveDRR in isolation: congestion feedback -------------------------------------------


@dataclass
class FakeView:
    """A minimal AllocationView: both classes always backlogged with fixed head costs."""

    severity: float
    costs: dict[str, float]
    max_inflight: int | None = 8
    entries: dict[str, Entry] = field(default_factory=dict)
    request_tokens: float = 0.0

    def __post_init__(self) -> None:
        for seq, (klass, cost) in enumerate(self.costs.items()):
            request = Request(id=klass, klass=klass, prior=Prior(p50=cost, p90=cost))
            self.entries[klass] = Entry(request=request, cost=cost, reserve=cost, seq=seq)

    def backlogged(self) -> Sequence[str]:
        return list(self.costs)

    def head(self, klass: str) -> Entry:
        return self.entries[klass]

    def oldest_seq(self, klass: str) -> int:
        return self.entries[klass].seq

    def inflight(self, klass: str) -> int:
        return 0


def interactive_token_share(severity: float, gain: float = 2.0, decisions: int = 400) -> float:
    cfg = config("adaptive_drr", gain=gain)
    policy = AdaptiveDRR(cfg.allocation, cfg.classes)
    view = FakeView(severity=severity, costs={INTERACTIVE: 64.0, BATCH: 256.0})
    tokens = {INTERACTIVE: 0.0, BATCH: 0.0}
    for _ in range(decisions):
        klass = policy.select(view)
        assert klass is not None
        cost = view.costs[klass]
        policy.on_send(klass, cost)
        tokens[klass] += cost
    return tokens[INTERACTIVE] / tokens[BATCH]


@pytest.mark.parametrize(("severity", "ratio"), [(0.0, 1.0), (0.5, 2.0), (1.0, 3.0)])
def test_congestion_feedback_grows_the_interactive_share(severity: float, ratio: float) -> None:
    # interactive quantum = 256 * (1 + 2 * severity); batch stays 256
    assert interactive_token_share(severity) == pytest.approx(ratio, rel=0.05)


def test_no_congestion_gain_means_no_feedback() -> None:
    assert interactive_token_share(1.0, gain=0.0) == pytest.approx(1.0, rel=0.05)


def test_adaptive_drr_serves_a_job_larger_than_many_quanta() -> None:
    # A 100k-token job needs ~400 rounds of a 256-token quantum; it must still be chosen,
    # and in the meantime the peer keeps sending.
    cfg = config("adaptive_drr")
    policy = AdaptiveDRR(cfg.allocation, cfg.classes)
    view = FakeView(severity=0.0, costs={INTERACTIVE: 64.0, BATCH: 100_000.0})
    picks = []
    for _ in range(2000):
        klass = policy.select(view)
        assert klass is not None
        policy.on_send(klass, view.costs[klass])
        picks.append(klass)
    batch_at = [i for i, k in enumerate(picks) if k == BATCH]
    assert batch_at, "the big job starved"
    assert 1000 < batch_at[0] < 2000  # after ~ 100_000 / 64 interactive sends


# -- a request's fixed cost and the round's quantum --------------------------------------------


def test_one_token_requests_alternate_instead_of_a_class_sending_hundreds_a_turn() -> None:
    # Both classes' requests cost one token. A quantum of 256 once let the class whose
    # turn it was send 256 of them in a row; the round's quantum is now the largest head
    # cost, so equal weights alternate one for one.
    d = backlogged_driver("adaptive_drr", 1, 1, n=20)
    for _ in range(20):
        d.complete_oldest()
    assert (
        d.classes()[:20] == [INTERACTIVE, BATCH] * 10
        or d.classes()[:20] == [BATCH, INTERACTIVE] * 10
    )


@pytest.mark.parametrize("weights", [(1.0, 1.0), (3.0, 1.0)])
def test_a_per_request_cost_makes_the_weights_hold_by_count_when_slots_are_the_cost(
    weights: tuple[float, float],
) -> None:
    # Interactive requests of 1 token against batch requests of 64: with a per-request
    # cost of 1,000 tokens (a provider whose slot time hardly depends on length) the
    # classes share the sends by their weights, not 64 interactive sends per batch one.
    d = backlogged_driver("adaptive_drr", 1, 64, weights=weights, request_tokens=1000.0)
    for _ in range(80):
        d.complete_oldest()
    counts = {k: d.classes()[:80].count(k) for k in (INTERACTIVE, BATCH)}
    assert counts[INTERACTIVE] / counts[BATCH] == pytest.approx(weights[0] / weights[1], rel=0.15)
    tokens_only = backlogged_driver("adaptive_drr", 1, 64, weights=weights)
    for _ in range(80):
        tokens_only.complete_oldest()
    assert tokens_only.classes()[:80].count(BATCH) < counts[BATCH] / 2


def test_the_per_request_cost_is_learned_from_latency() -> None:
    # Every answer takes 2 s whatever its length (lengths 1 to 64 vary enough to fit a
    # slope): the fit's intercept over its slope is a large per-request cost.
    engine = Engine(config("adaptive_drr", request_tokens=None))
    assert engine.statistics().request_tokens == 0.0  # nothing learned yet
    now = 0.0
    for i in range(40):
        engine.submit(req(f"r{i}", BATCH, 8), now)
        now += 2.0
        engine.completed(f"r{i}", now, output_tokens=1 + (i % 2) * 63)
    fit = engine.statistics().endpoints[0]
    learned = engine.statistics().request_tokens
    assert learned == pytest.approx(fit.intercept_s * fit.decode_tokens_per_s)
    assert learned > 256  # more than a whole quantum: the slot, not the tokens, is the cost


# -- strict tiers and the starvation guard -----------------------------------------------------


def tiered(policy: str, *, min_share: float | None = None) -> SchedulerConfig:
    return config(policy).with_(
        classes=(
            ClassSpec(name=INTERACTIVE, interactive=True, tier=0),
            ClassSpec(name=BATCH, tier=1, min_share=min_share),
        )
    )


@pytest.mark.parametrize("policy", ["adaptive_drr", "fifo", "fair_queuing"])
def test_a_later_tier_waits_while_an_earlier_one_has_work(policy: str) -> None:
    d = Driver(tiered(policy))
    d.submit("blocker", BATCH, 100)
    for i in range(5):
        d.submit(f"b{i}", BATCH, 8)  # batch arrived first, and is smaller ...
    for i in range(5):
        d.submit(f"i{i}", INTERACTIVE, 2000)  # ... but waits for the earlier tier
    for _ in range(10):
        d.complete_oldest()
    assert d.classes()[1:] == [INTERACTIVE] * 5 + [BATCH] * 5


def test_the_guard_gives_a_starved_tier_its_minimum_share() -> None:
    d = Driver(tiered("adaptive_drr", min_share=0.25))
    for i in range(100):
        d.submit(f"i{i}", INTERACTIVE, 64)
        d.submit(f"b{i}", BATCH, 64)
    for _ in range(80):
        d.complete_oldest()
    assert d.classes()[:80].count(BATCH) == pytest.approx(20, abs=2)
    unguarded = Driver(tiered("adaptive_drr"))
    for i in range(100):
        unguarded.submit(f"i{i}", INTERACTIVE, 64)
        unguarded.submit(f"b{i}", BATCH, 64)
    for _ in range(80):
        unguarded.complete_oldest()
    assert unguarded.classes()[1:80].count(BATCH) == 0


def test_tier_and_guard_values_are_checked() -> None:
    with pytest.raises(ValueError, match="tier"):
        ClassSpec(name="x", tier=-1)
    with pytest.raises(ValueError, match="min_share"):
        ClassSpec(name="x", min_share=1.0)
    with pytest.raises(ValueError, match="min_share"):
        config("adaptive_drr").with_(
            classes=(ClassSpec(name="a", min_share=0.6), ClassSpec(name="b", min_share=0.5))
        )
    with pytest.raises(ValueError, match="request_tokens"):
        AllocationConfig(request_tokens=-1.0)


def test_a_tenants_default_class_is_the_class_of_its_unmarked_requests() -> None:
    from semisched.core import Bucket, TenantConfig, TenantSpec

    tenants = TenantConfig(
        tenants=(TenantSpec(name="jobs", default_class=BATCH), TenantSpec(name="app")),
        default="app",
    )
    cfg = config("adaptive_drr").with_(tenants=tenants)
    assert cfg.class_for(Bucket.SHORT, "jobs") == BATCH  # short, but its tenant says batch
    assert cfg.class_for(Bucket.SHORT, "app") == INTERACTIVE
    assert cfg.class_for(Bucket.SHORT) == INTERACTIVE  # the default tenant has none
    with pytest.raises(ValueError, match="default_class='nope' must be one of"):
        config("adaptive_drr").with_(
            tenants=TenantConfig(tenants=(TenantSpec(name="t", default_class="nope"),))
        )


def test_a_class_deadline_is_the_longest_its_requests_may_take() -> None:
    cfg = config("adaptive_drr").with_(
        classes=(
            ClassSpec(name=INTERACTIVE, interactive=True, deadline_s=5.0),
            ClassSpec(name=BATCH),
        )
    )
    assert cfg.deadline_for(INTERACTIVE, None) == 5.0  # none asked: the class's
    assert cfg.deadline_for(INTERACTIVE, 30.0) == 5.0  # a later one asked: the class's
    assert cfg.deadline_for(INTERACTIVE, 2.0) == 2.0  # a sooner one asked: the call's
    assert cfg.deadline_for(BATCH, None) is None
    with pytest.raises(ValueError, match="deadline_s"):
        ClassSpec(name="x", deadline_s=0)
