"""Property: whatever the shell does, the engine never loses or duplicates a request.

Random (but derandomized) sequences of submit / complete / fail (with or without a
retry) / cancel / poll at nondecreasing times are run against every preset. The
test keeps its own ledger from the actions returned and the outcomes it reports,
and checks engine rules 1-4 after every call and a clean drain at the end.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Sequence
from typing import Any

from hypothesis import event, given, settings
from hypothesis import strategies as st

from semisched.core import (
    PRESETS,
    Action,
    Defer,
    Engine,
    Expire,
    Fail,
    FailureKind,
    Pause,
    Prior,
    Reject,
    Request,
    Retry,
    Send,
    Wake,
    preset,
)
from semisched.core.tenants.config import ServiceClass, TenantConfig, TenantSpec

#: Three tenants, one of each class, a concurrency cap and a rate cap among them.
TENANTS = (
    TenantSpec(name="gold", weight=2.0, service=ServiceClass.GUARANTEED, max_concurrency=2),
    TenantSpec(name="plain", rpm=5),
    TenantSpec(name="spot", service=ServiceClass.BEST_EFFORT),
)

dt = st.one_of(st.sampled_from([0.0, 0.5, 2.0, 10.0]), st.floats(0.0, 30.0))
submit = st.tuples(
    st.just("submit"),
    st.sampled_from(["interactive", "batch"]),
    st.sampled_from([8.0, 64.0, 200.0, 700.0, 3000.0]),  # every bucket
    st.one_of(st.none(), st.floats(0.5, 120.0)),  # deadline offset
    st.integers(0, 2),  # tenant (when there are three)
    dt,
)
ops = st.lists(
    st.one_of(
        submit,
        submit,
        submit,
        st.tuples(st.just("complete"), st.integers(0, 63), st.sampled_from([1, 40, 900]), dt),
        st.tuples(
            st.just("fail"),
            st.integers(0, 63),
            st.one_of(st.none(), st.floats(0.0, 40.0)),  # the provider's retry-after
            st.sampled_from(list(FailureKind)),
            dt,
        ),
        st.tuples(st.just("cancel"), st.integers(0, 63), dt),
        st.tuples(st.just("poll"), dt),
    ),
    min_size=10,
    max_size=80,
)


class Ledger:
    """The shell's view: what is live, what flies, and each request's outcomes."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.limit = engine.config.max_inflight
        self.submitted: list[str] = []
        self.live: set[str] = set()
        self.inflight: set[str] = set()
        self.sends: Counter[str] = Counter()
        self.outcomes: Counter[str] = Counter()

    def terminal(self, rid: str) -> None:
        assert rid in self.live, f"{rid} finished twice or was never pending"
        self.live.discard(rid)
        self.inflight.discard(rid)
        self.outcomes[rid] += 1

    def take(self, actions: Sequence[Action]) -> None:
        for action in actions:
            if isinstance(action, Wake):
                continue
            if isinstance(action, Pause):  # an endpoint kept off: a 429's hint or a circuit
                assert action.cause in {"rate_limited", "circuit_open"}
                continue
            rid = action.request.id
            assert rid in self.live, f"action for a request that is not pending: {action!r}"
            if isinstance(action, Send):
                assert rid not in self.inflight, f"{rid} sent while already in flight"
                self.sends[rid] += 1
                assert action.attempt == self.sends[rid]
                self.inflight.add(rid)
            elif isinstance(action, Reject | Expire | Fail):
                assert rid not in self.inflight, f"{rid} ended while in flight"
                self.terminal(rid)
            elif isinstance(action, Retry):
                assert rid not in self.inflight, f"{rid} retried while in flight"
            else:
                assert isinstance(action, Defer)
                assert rid not in self.inflight

    def check(self) -> None:
        e = self.engine
        stats = e.statistics()
        assert len(e) == len(self.live)
        assert stats.inflight == len(self.inflight)
        if self.limit is not None:
            assert stats.inflight <= self.limit
        assert 0.0 <= stats.signals.severity <= 1.0
        c = stats.counters
        ended = c.completed + c.rejected + c.expired + c.failed + c.cancelled
        assert c.submitted == len(self.submitted) == ended + len(e)
        tenants = stats.tenants
        assert sum(t.inflight for t in tenants) == stats.inflight
        assert sum(t.queued for t in tenants) == sum(stats.queued.values())
        assert sum(t.completed for t in tenants) == c.completed
        assert sum(t.rejected for t in tenants) == c.rejected
        assert all(t.usage >= 0.0 and t.inflight >= 0 for t in tenants)


def pick(items: set[str], index: int) -> str | None:
    return sorted(items)[index % len(items)] if items else None


@settings(max_examples=300, derandomize=True, deadline=None, database=None)
@given(
    name=st.sampled_from(sorted(PRESETS)),
    max_inflight=st.sampled_from([1, 2, 3, 8]),
    load_only=st.booleans(),
    tenancy=st.sampled_from([None, "fair_share", "fifo", "static_quota"]),
    script=ops,
)
def test_every_request_gets_exactly_one_outcome(
    name: str,
    max_inflight: int,
    load_only: bool,
    tenancy: str | None,
    script: list[tuple[Any, ...]],
) -> None:
    cfg = PRESETS[name]
    if cfg.max_inflight is not None:
        cfg = preset(name, max_inflight=max_inflight)
    if load_only:
        # Severity = in-flight / budget: with a small budget, overload control (where the
        # preset has it) defers and rejects often.
        overload = dataclasses.replace(cfg.overload, w_load=1.0, w_queue=0.0, w_tail=0.0)
        cfg = cfg.with_(overload=overload)
    if tenancy is not None:
        cfg = cfg.with_(tenants=TenantConfig(tenants=TENANTS, policy=tenancy, headroom=0.25))
    engine = Engine(cfg)
    ledger = Ledger(engine)
    now = 0.0
    for op in script:
        kind, *args, step = op
        now += step
        if kind == "submit":
            klass, p50, offset, tenant = args
            names = [c.name for c in cfg.classes]
            klass = klass if klass in names else names[0]  # single-class presets
            rid = f"r{len(ledger.submitted)}"
            deadline = None if offset is None else now + offset
            request = Request(
                id=rid,
                klass=klass,
                prior=Prior(p50=p50, p90=2 * p50),
                input_tokens=50.0,
                arrival=now,
                deadline=deadline,
                tenant="" if tenancy is None else TENANTS[tenant].name,
            )
            ledger.submitted.append(rid)
            ledger.live.add(rid)
            ledger.take(engine.submit(request, now))
        elif kind == "complete":
            index, tokens = args
            rid = pick(ledger.inflight, index)
            if rid is not None:
                ledger.terminal(rid)
                ledger.take(engine.completed(rid, now, output_tokens=tokens))
        elif kind == "fail":
            index, retry_after, failure = args
            rid = pick(ledger.inflight, index)
            if rid is not None:
                # Out of flight; the engine says what next: Retry, Expire or Fail.
                ledger.inflight.discard(rid)
                ledger.take(engine.failed(rid, now, failure, retry_after=retry_after))
        elif kind == "cancel":
            everyone = set(ledger.submitted) | {"never-submitted"}
            rid = pick(everyone, args[0])
            assert rid is not None
            was_pending = rid in ledger.live
            # Deadlines already due are reported first: the cancel may find it expired.
            ledger.take(engine.cancel(rid, now))
            if was_pending and rid in ledger.live:
                ledger.terminal(rid)
        else:
            ledger.take(engine.poll(now))
        ledger.check()

    # Drain: answer everything sent, follow the wake-ups, and nothing may remain.
    for _ in range(10_000):
        if ledger.inflight:
            for rid in sorted(ledger.inflight):
                ledger.terminal(rid)
                ledger.take(engine.completed(rid, now, output_tokens=10))
                ledger.check()
            continue
        wake = engine.next_wakeup()
        if wake is None:
            break
        now = max(now, wake)
        ledger.take(engine.poll(now))
        ledger.check()
    now += 1_000.0  # past every deadline
    ledger.take(engine.poll(now))
    ledger.check()
    assert not ledger.inflight
    assert len(engine) == 0
    assert set(ledger.outcomes) == set(ledger.submitted)
    assert set(ledger.outcomes.values()) <= {1}
    counters = engine.statistics().counters
    for field in dataclasses.fields(counters):
        if getattr(counters, field.name):
            event(f"saw {field.name}")
