"""The tenant layer: entitlements, service classes, debt, lending, caps, statistics.

A real Engine throughout. Ordering is FIFO and, unless a test is about
overload control, overload control is off, so which tenant each send goes to
reflects the tenant layer alone. Time is explicit (the core reads no clock).
"""

from __future__ import annotations

import math
from collections import Counter

import pytest

from semisched.core import (
    Engine,
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
from semisched.core.tenants.config import ServiceClass, TenantConfig, TenantSpec

FIXED = RoutingConfig(concurrency="fixed")

BATCH = "batch"


def config(
    *specs: TenantSpec,
    policy: str = "fair_share",
    max_inflight: int = 1,
    headroom: float = 0.0,
    half_life_s: float = 60.0,
    overload: str = "none",
    default: str | None = None,
) -> SchedulerConfig:
    return SchedulerConfig(
        max_inflight=max_inflight,
        routing=FIXED,  # the scheduler's cap alone, no learned endpoint limit
        ordering=OrderingConfig(policy="fifo"),
        overload=OverloadConfig(policy=overload),
        tenants=TenantConfig(
            tenants=specs,
            policy=policy,
            headroom=headroom,
            half_life_s=half_life_s,
            default=default,
        ),
    )


def req(rid: str, tenant: str, cost: float = 100.0, *, klass: str = BATCH) -> Request:
    return Request(id=rid, klass=klass, prior=Prior(p50=cost, p90=cost), tenant=tenant)


def sends(actions: list[object]) -> list[Send]:
    return [a for a in actions if isinstance(a, Send)]


class Loop:
    """Submits queued work, then completes each send after ``service_s`` seconds,
    recording which tenant every send opportunity went to."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.now = 0.0
        self.flying: list[Send] = []
        self.order: list[str] = []

    def take(self, actions: list[object]) -> None:
        for send in sends(actions):
            self.flying.append(send)
            self.order.append(send.request.tenant)

    def submit(self, request: Request) -> None:
        self.take(self.engine.submit(request, self.now))

    def complete_next(self, service_s: float = 1.0, tokens: int | None = None) -> None:
        send = self.flying.pop(0)
        self.now += service_s
        out = int(send.request.prior.p50) if tokens is None else tokens
        self.take(self.engine.completed(send.request.id, self.now, output_tokens=out))


# -- configuration ----------------------------------------------------------------------


def test_tenant_spec_accepts_the_service_class_by_value_and_checks_its_fields() -> None:
    assert TenantSpec(name="a", service="guaranteed").service is ServiceClass.GUARANTEED
    with pytest.raises(ValueError, match="service="):
        TenantSpec(name="a", service="gold")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="weight="):
        TenantSpec(name="a", weight=0)
    with pytest.raises(ValueError, match="max_concurrency="):
        TenantSpec(name="a", max_concurrency=0)
    with pytest.raises(ValueError, match="name="):
        TenantSpec(name="")


def test_tenant_config_rejects_duplicates_an_undeclared_default_and_unknown_policies() -> None:
    with pytest.raises(ValueError, match="unique"):
        TenantConfig(tenants=(TenantSpec(name="a"), TenantSpec(name="a")))
    with pytest.raises(ValueError, match="default="):
        TenantConfig(tenants=(TenantSpec(name="a"),), default="b")
    with pytest.raises(ValueError, match="policy="):
        TenantConfig(policy="lottery")
    with pytest.raises(ValueError, match="headroom="):
        TenantConfig(headroom=1.0)
    with pytest.raises(ValueError, match="at least one"):
        TenantConfig(tenants=())


def test_a_request_without_a_tenant_goes_to_the_default_or_the_only_tenant() -> None:
    two = TenantConfig(tenants=(TenantSpec(name="a"), TenantSpec(name="b")))
    assert TenantConfig().tenant_for(None) == "default"
    assert TenantConfig(tenants=(TenantSpec(name="solo"),)).tenant_for("") == "solo"
    assert TenantConfig(tenants=two.tenants, default="b").tenant_for(None) == "b"
    with pytest.raises(ValueError, match="tenant is required"):
        two.tenant_for(None)
    with pytest.raises(ValueError, match="declared tenants"):
        two.tenant_for("c")


def test_an_unknown_tenant_is_refused_and_nothing_is_queued() -> None:
    engine = Engine(config(TenantSpec(name="a")))
    with pytest.raises(
        ValueError, match=r"tenant='typo' must be one of the declared tenants \['a'\]"
    ):
        engine.submit(req("r1", "typo"), 0.0)
    assert len(engine) == 0
    assert engine.statistics().counters.submitted == 0


# -- entitlements, lending, debt --------------------------------------------------------


def test_backlogged_tenants_are_served_in_proportion_to_their_weights() -> None:
    engine = Engine(config(TenantSpec(name="a", weight=3.0), TenantSpec(name="b", weight=1.0)))
    loop = Loop(engine)
    for i in range(200):
        loop.submit(req(f"a{i}", "a"))
        loop.submit(req(f"b{i}", "b"))
    for _ in range(100):
        loop.complete_next()
    counts = Counter(loop.order[:100])
    assert 74 <= counts["a"] <= 76 and counts["a"] + counts["b"] == 100


def test_an_idle_tenants_share_is_lent_and_taken_back_when_it_returns() -> None:
    engine = Engine(config(TenantSpec(name="a"), TenantSpec(name="b")))
    loop = Loop(engine)
    for i in range(60):
        loop.submit(req(f"a{i}", "a"))
    for _ in range(20):  # b is idle: a gets every send opportunity (work-conserving)
        loop.complete_next()
    assert loop.order == ["a"] * 21
    for i in range(5):
        loop.submit(req(f"b{i}", "b"))
    for _ in range(5):
        loop.complete_next()
    # b returns owed its share: its requests go before a's queued ones.
    assert loop.order[21:26] == ["b"] * 5


def test_debt_decays_with_the_half_life() -> None:
    engine = Engine(config(TenantSpec(name="a"), TenantSpec(name="b"), half_life_s=10.0))
    loop = Loop(engine)
    loop.submit(req("a0", "a", cost=100.0))
    loop.complete_next(service_s=1.0, tokens=100)
    usage = engine.statistics().tenant("a").usage
    assert usage == pytest.approx(100.0 * 2 ** (-1.0 / 10.0), rel=1e-9)
    engine.poll(21.0)
    later = engine.statistics().tenant("a")
    assert later.usage == pytest.approx(100.0 * 2 ** (-21.0 / 10.0), rel=1e-9)
    assert later.debt == pytest.approx(later.usage * 0.5)  # a holds everything; entitled to half
    assert engine.statistics().tenant("b").debt == pytest.approx(-later.usage * 0.5)


def test_statistics_report_each_tenants_queue_flight_service_and_share() -> None:
    engine = Engine(config(TenantSpec(name="a", weight=3.0), TenantSpec(name="b"), max_inflight=2))
    loop = Loop(engine)
    for i in range(3):
        loop.submit(req(f"a{i}", "a", cost=50.0))
    loop.submit(req("b0", "b", cost=50.0))
    stats = engine.statistics()
    a, b = stats.tenant("a"), stats.tenant("b")
    assert (a.entitlement, b.entitlement) == (0.75, 0.25)
    assert a.inflight + b.inflight == 2 and a.queued + b.queued == 2
    loop.complete_next(tokens=40)
    a = engine.statistics().tenant(loop.order[0])
    assert a.completed == 1 and a.output_tokens == 40
    assert a.served_tokens == pytest.approx(40.0)
    shares = sum(t.share for t in engine.statistics().tenants)
    assert shares == pytest.approx(1.0)
    with pytest.raises(KeyError):
        engine.statistics().tenant("nobody")


# -- service classes and overload control -------------------------------------------------


def test_best_effort_gets_only_what_no_other_tenant_can_use() -> None:
    engine = Engine(
        config(
            TenantSpec(name="gold", service=ServiceClass.GUARANTEED),
            TenantSpec(name="spot", service=ServiceClass.BEST_EFFORT),
        )
    )
    loop = Loop(engine)
    for i in range(10):
        loop.submit(req(f"s{i}", "spot"))
    for i in range(10):
        loop.submit(req(f"g{i}", "gold"))
    for _ in range(14):
        loop.complete_next()
    assert loop.order[0] == "spot"  # nobody else had work: surplus is used
    assert loop.order[1:11] == ["gold"] * 10  # then gold, whatever spot queued earlier
    assert loop.order[11:] == ["spot"] * 4


def test_the_ladder_sheds_best_effort_first_never_a_guaranteed_tenant_inside_its_share() -> None:
    engine = Engine(
        config(
            TenantSpec(name="filler"),
            TenantSpec(name="gold", service=ServiceClass.GUARANTEED),
            TenantSpec(name="plain"),
            TenantSpec(name="spot", service=ServiceClass.BEST_EFFORT),
            max_inflight=2,
            overload="ladder",
        )
    )
    for i in range(120):  # short work is never shed: the queue (and severity) grows
        engine.submit(req(f"load{i}", "filler", cost=60.0), 0.0)
    severity = engine.signals().severity
    assert 0.65 <= severity < 0.8  # rejects level >= 2, defers level >= 1
    medium, xlong = 200.0, 2000.0  # ladder levels 0 and 2
    verdicts = {
        name: [type(a).__name__ for a in engine.submit(req(name, tenant, cost=cost), 0.0)]
        for name, tenant, cost in (
            ("spot-medium", "spot", medium),  # best-effort: two levels sooner
            ("filler-medium", "filler", medium),  # beyond its entitlement: one level sooner
            ("plain-medium", "plain", medium),  # owed its share
            ("gold-xlong", "gold", xlong),  # guaranteed, inside its entitlement
            ("spot-short", "spot", 20.0),  # short requests stay protected
        )
    }
    assert "Reject" in verdicts["spot-medium"]
    assert "Defer" in verdicts["filler-medium"]
    for name in ("plain-medium", "gold-xlong", "spot-short"):
        assert "Reject" not in verdicts[name] and "Defer" not in verdicts[name], name
    stats = engine.statistics()
    assert stats.tenant("spot").rejected == 1 and stats.tenant("filler").deferrals == 1
    assert stats.tenant("gold").rejected == stats.tenant("gold").deferrals == 0


# -- headroom -------------------------------------------------------------------------------


def test_headroom_keeps_the_last_slots_for_tenants_inside_their_entitlement() -> None:
    specs = (TenantSpec(name="a"), TenantSpec(name="b"))
    engine = Engine(config(*specs, max_inflight=8, headroom=0.25))
    loop = Loop(engine)
    loop.submit(req("b0", "b"))
    loop.complete_next()  # b has recent usage: it is "around"
    for i in range(20):
        loop.submit(req(f"a{i}", "a"))
    # a is beyond its entitlement once it holds 6 of 8: the last 2 wait for b.
    assert engine.statistics().tenant("a").inflight == 6
    loop.submit(req("b1", "b"))
    assert loop.order[-1] == "b"  # b's request leaves at once
    # Without headroom a borrower fills every slot.
    engine = Engine(config(*specs, max_inflight=8, headroom=0.0))
    loop = Loop(engine)
    loop.submit(req("b0", "b"))
    loop.complete_next()
    for i in range(20):
        loop.submit(req(f"a{i}", "a"))
    assert engine.statistics().tenant("a").inflight == 8


def test_headroom_is_not_kept_for_owners_long_gone() -> None:
    specs = (TenantSpec(name="a"), TenantSpec(name="b"))
    engine = Engine(config(*specs, max_inflight=8, headroom=0.25, half_life_s=1.0))
    loop = Loop(engine)
    loop.submit(req("b0", "b"))
    loop.complete_next()
    loop.submit(req("a0", "a"))
    loop.complete_next(service_s=30.0)  # b's usage decayed to nothing meanwhile
    for i in range(20):
        loop.submit(req(f"a{i + 1}", "a"))
    assert engine.statistics().tenant("a").inflight == 8


# -- caps and the baselines ------------------------------------------------------------------


def test_a_tenants_concurrency_cap_binds_it_alone() -> None:
    engine = Engine(
        config(TenantSpec(name="a", max_concurrency=2), TenantSpec(name="b"), max_inflight=8)
    )
    loop = Loop(engine)
    for i in range(5):
        loop.submit(req(f"a{i}", "a"))
    assert engine.statistics().tenant("a").inflight == 2
    for i in range(5):
        loop.submit(req(f"b{i}", "b"))
    assert engine.statistics().tenant("b").inflight == 5


def test_a_tenants_rpm_cap_holds_its_requests_until_the_window_frees() -> None:
    engine = Engine(config(TenantSpec(name="a", rpm=2), TenantSpec(name="b"), max_inflight=8))
    actions: list[object] = []
    for i in range(3):
        actions += engine.submit(req(f"a{i}", "a"), 0.0)
    assert [s.request.id for s in sends(actions)] == ["a0", "a1"]
    wakes = [a.at for a in actions if isinstance(a, Wake)]
    assert wakes and min(wakes) == pytest.approx(61.0)  # the 60 s window plus its 1 s margin
    assert sends(engine.submit(req("b0", "b"), 1.0))  # b is not held up by a's cap
    assert [s.request.id for s in sends(engine.poll(61.0))] == ["a2"]


def test_a_request_a_tenants_tpm_can_never_pay_for_is_rejected_naming_the_tenant() -> None:
    engine = Engine(config(TenantSpec(name="a", tpm=50), max_inflight=8))
    actions = engine.submit(req("big", "a", cost=400.0), 0.0)
    rejects = [a for a in actions if isinstance(a, Reject)]
    assert rejects and "tenant 'a'" in rejects[0].reason and "tpm=50" in rejects[0].reason


def test_static_quota_caps_each_tenant_at_its_share_even_when_the_other_is_idle() -> None:
    engine = Engine(
        config(TenantSpec(name="a"), TenantSpec(name="b"), policy="static_quota", max_inflight=8)
    )
    loop = Loop(engine)
    for i in range(20):
        loop.submit(req(f"a{i}", "a"))
    assert engine.statistics().inflight == 4  # half of 8, never lent


def test_fifo_tenants_send_oldest_first_whoever_it_belongs_to() -> None:
    engine = Engine(config(TenantSpec(name="a"), TenantSpec(name="b"), policy="fifo"))
    loop = Loop(engine)
    for i in range(6):
        loop.submit(req(f"a{i}", "a"))
    for i in range(2):
        loop.submit(req(f"b{i}", "b"))
    for _ in range(7):
        loop.complete_next()
    assert loop.order == ["a"] * 6 + ["b"] * 2


# -- shared usage ---------------------------------------------------------------------------


def test_usage_other_processes_report_steers_the_choice() -> None:
    engine = Engine(config(TenantSpec(name="a"), TenantSpec(name="b")))
    loop = Loop(engine)
    loop.submit(req("a0", "a"))
    loop.complete_next()
    assert engine.tenant_usage("a") > 0.0 and engine.tenant_usage("b") == 0.0
    # Another process served b heavily: this one now prefers a.
    engine.observe_tenant_usage("b", 10_000.0, loop.now)
    assert engine.statistics().tenant("b").usage == pytest.approx(10_000.0)
    assert engine.tenant_usage("b") == 0.0  # its own part is still nothing
    loop.submit(req("a1", "a"))  # takes the one slot
    for i in range(3):
        loop.submit(req(f"b{i}", "b"))
    for i in range(3):
        loop.submit(req(f"a{i + 2}", "a"))
    for _ in range(4):
        loop.complete_next()
    assert loop.order[2:5] == ["a", "a", "a"]
    with pytest.raises(ValueError, match="fleet_usage="):
        engine.observe_tenant_usage("a", -1.0, loop.now)
    with pytest.raises(ValueError, match="declared tenants"):
        engine.observe_tenant_usage("zzz", 1.0, loop.now)


def test_one_tenant_alone_is_judged_as_without_tenants() -> None:
    plain = Engine(SchedulerConfig(max_inflight=2))
    solo = TenantConfig(tenants=(TenantSpec(name="x"),))
    named = Engine(SchedulerConfig(max_inflight=2, tenants=solo))
    seen: dict[str, list[str]] = {"": [], "x": []}
    for i in range(30):
        cost = [20.0, 200.0, 900.0, 3000.0][i % 4]
        for engine, tenant in ((plain, ""), (named, "x")):
            for action in engine.submit(req(f"r{i}", tenant, cost=cost), float(i) * 0.1):
                if not isinstance(action, Wake):
                    seen[tenant].append(f"{type(action).__name__}:{action.request.id}")  # type: ignore[attr-defined]
    assert seen[""] == seen["x"]
    assert any(s.startswith(("Reject", "Defer")) for s in seen[""])  # shedding ran
    assert math.isclose(plain.signals().severity, named.signals().severity)


@pytest.mark.parametrize("start", [0.0, 1.7e9, -5.0e4])
def test_usage_decays_the_same_on_any_clock(start: float) -> None:
    """Monotonic, epoch or scaled clocks: the decay scale rebases instead of overflowing."""
    engine = Engine(config(TenantSpec(name="a"), TenantSpec(name="b"), half_life_s=10.0))
    loop = Loop(engine)
    loop.now = start
    loop.submit(req("a0", "a"))
    loop.complete_next(service_s=10.0, tokens=100)
    assert engine.statistics().tenant("a").usage == pytest.approx(50.0)
    engine.poll(loop.now + 2_000.0)  # 200 half-lives: past the scale's comfortable range
    assert engine.statistics().tenant("a").usage == pytest.approx(0.0, abs=1e-12)
    loop.now += 2_000.0
    loop.submit(req("a1", "a"))
    loop.complete_next(service_s=10.0, tokens=100)
    assert engine.statistics().tenant("a").usage == pytest.approx(50.0)
    engine.poll(loop.now + 1e7)  # a million half-lives
    assert engine.statistics().tenant("a").usage == 0.0
