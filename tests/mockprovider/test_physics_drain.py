"""``ProviderPhysics.drain`` is ``advance`` as tuples: the same events, order and counts."""

from __future__ import annotations

import random

from mockprovider.physics import (
    COMPLETED,
    FIRST_TOKEN,
    TIMED_OUT,
    EventKind,
    PhysicsParams,
    ProviderPhysics,
)

CODES = {EventKind.FIRST_TOKEN: FIRST_TOKEN, EventKind.COMPLETED: COMPLETED}
CODES[EventKind.TIMED_OUT] = TIMED_OUT


def _script(seed: int) -> list[tuple[str, float, str, int, int]]:
    rng = random.Random(seed)
    t, steps = 0.0, []
    for i in range(300):
        t += rng.expovariate(4.0)
        op = rng.choice(["submit", "submit", "submit", "advance", "cancel", "slots"])
        steps.append((op, t, f"r{i}", rng.randrange(0, 2000), rng.randrange(0, 400)))
    return steps


def _run(seed: int, raw: bool) -> tuple[list[tuple[int, str, float, int, int]], object]:
    phys = ProviderPhysics(PhysicsParams(slots=4, overhead_ms=50.0, timeout_s=5.0))
    out: list[tuple[int, str, float, int, int]] = []
    submitted: list[str] = []

    def take(now: float) -> None:
        if raw:
            out.extend(phys.drain(now))
        else:
            out.extend(
                (CODES[e.kind], e.request_id, e.time, e.input_tokens, e.output_tokens)
                for e in phys.advance(now)
            )

    for op, t, rid, a, b in _script(seed):
        if op == "submit":
            phys.submit(t, rid, a, b)
            submitted.append(rid)
        elif op == "advance":
            take(t)
        elif op == "cancel" and submitted:
            phys.cancel(t, submitted[a % len(submitted)])
        elif op == "slots":
            phys.set_slots(t, 1 + a % 6)
    take(1e9)
    return out, phys.statistics()


def test_drain_gives_advance_s_events_as_tuples() -> None:
    for seed in range(5):
        raw, raw_stats = _run(seed, raw=True)
        events, stats = _run(seed, raw=False)
        assert raw == events
        assert raw_stats == stats
        assert {code for code, *_ in raw} == {FIRST_TOKEN, COMPLETED, TIMED_OUT}
