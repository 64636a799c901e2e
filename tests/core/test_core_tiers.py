"""Strict tiers and the starvation guard, as a user states them, under any interleaving.

A stateful property test drives a real :class:`~semisched.core.Engine` whose classes
are ``urgent`` (tier 0), ``normal`` (tier 0, weight 2) and ``bulk`` (tier 1, guarded by
``min_share``), through submits of any size, answers, cancels and time passing. After
every step a user's statements hold:

- a ``bulk`` request is sent while tier 0 has work waiting only through the guard, and
  the guard never gives it more than its share (plus the one send it is owed);
- while the guard's class waits behind a busy tier 0, it is not starved: over every
  stretch of sends it gets its share, less one;
- every request is either queued, in flight or done, and when nothing is left the
  books are back to zero.
"""

from __future__ import annotations

import math

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from semisched.core import (
    AllocationConfig,
    ClassSpec,
    Engine,
    OrderingConfig,
    OverloadConfig,
    Prior,
    Request,
    SchedulerConfig,
    Send,
)

SHARE = 0.25
CLASSES = (
    ClassSpec(name="urgent", interactive=True, tier=0),
    ClassSpec(name="normal", weight=2.0, tier=0),
    ClassSpec(name="bulk", tier=1, min_share=SHARE),
)


class TieredEngine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.engine = Engine(
            SchedulerConfig(
                classes=CLASSES,
                max_inflight=2,
                allocation=AllocationConfig(request_tokens=None),
                ordering=OrderingConfig(policy="fifo"),
                overload=OverloadConfig(policy="none"),
            )
        )
        self.now = 0.0
        self.n = 0
        self.queued: dict[str, str] = {}  # id -> class
        self.inflight: list[str] = []
        self.done: set[str] = set()
        # Sends made while tier 0 had work waiting, and how many of them went to bulk.
        self.contested = 0
        self.bulk_contested = 0

    def _take(self, actions: list[object]) -> None:
        for action in actions:
            if isinstance(action, Send):
                rid = action.request.id
                if any(k != "bulk" for k in self.queued.values()):  # tier 0 had work waiting
                    self.contested += 1
                    self.bulk_contested += self.queued[rid] == "bulk"
                del self.queued[rid]
                self.inflight.append(rid)

    @rule(klass=st.sampled_from(["urgent", "normal", "bulk"]), tokens=st.integers(1, 600))
    def submit(self, klass: str, tokens: int) -> None:
        rid = f"r{self.n}"
        self.n += 1
        self.queued[rid] = klass
        prior = Prior(p50=tokens, p90=tokens * 2)
        self._take(self.engine.submit(Request(id=rid, klass=klass, prior=prior), self.now))

    @precondition(lambda self: self.inflight)
    @rule(which=st.integers(0, 10), tokens=st.integers(1, 600), took=st.floats(0.01, 5.0))
    def answer(self, which: int, tokens: int, took: float) -> None:
        rid = self.inflight.pop(which % len(self.inflight))
        self.now += took
        self._take(self.engine.completed(rid, self.now, output_tokens=tokens))
        self.done.add(rid)

    @precondition(lambda self: self.queued)
    @rule(which=st.integers(0, 50))
    def cancel(self, which: int) -> None:
        rid = sorted(self.queued)[which % len(self.queued)]
        del self.queued[rid]
        self.done.add(rid)
        self._take(self.engine.cancel(rid, self.now))

    @invariant()
    def the_guard_gives_bulk_its_share_and_no_more(self) -> None:
        assert self.bulk_contested <= math.ceil(SHARE * self.contested) + 1

    @invariant()
    def every_request_is_in_exactly_one_place(self) -> None:
        stats = self.engine.statistics()
        assert sum(stats.queued.values()) == len(self.queued)
        assert stats.inflight == len(self.inflight)
        assert not (set(self.queued) & set(self.inflight))
        assert not (self.done & (set(self.queued) | set(self.inflight)))

    def teardown(self) -> None:
        while self.inflight:  # drain: everything queued is sent and answered
            rid = self.inflight.pop(0)
            self.now += 1.0
            self._take(self.engine.completed(rid, self.now, output_tokens=8))
        assert not self.queued
        stats = self.engine.statistics()
        assert (stats.inflight, sum(stats.queued.values()), stats.deferred) == (0, 0, 0)
        assert stats.inflight_tokens == 0.0


TestTieredEngine = TieredEngine.TestCase
TestTieredEngine.settings = settings(max_examples=150, stateful_step_count=60, deadline=None)


def test_the_guard_is_not_starved_behind_a_busy_tier() -> None:
    """Tier 0 always has work; bulk is served at its share, every stretch of sends."""
    engine = Engine(
        SchedulerConfig(
            classes=CLASSES,
            max_inflight=1,
            allocation=AllocationConfig(congestion_gain=0.0),  # the weights alone
            ordering=OrderingConfig(policy="fifo"),
            overload=OverloadConfig(policy="none"),
        )
    )
    sent: list[str] = []
    inflight: list[str] = []
    now = 0.0

    def take(actions: list[object]) -> None:
        for a in actions:
            if isinstance(a, Send):
                sent.append(a.request.klass)
                inflight.append(a.request.id)

    for i in range(200):
        for klass in ("urgent", "normal", "bulk"):
            prior = Prior(p50=50, p90=80)
            take(engine.submit(Request(id=f"{klass}{i}", klass=klass, prior=prior), now))
    for _ in range(400):
        now += 1.0
        take(engine.completed(inflight.pop(0), now, output_tokens=50))
    for start in range(0, 400 - 40, 20):
        window = sent[start : start + 40]
        assert window.count("bulk") >= SHARE * 40 - 1
        assert window.count("normal") >= 1.5 * window.count("urgent")  # weight 2 vs 1
