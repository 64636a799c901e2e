"""Helpers for the physics tests: every event's time, the delay a neighbour causes, and one
seeded random workload run two ways."""

from __future__ import annotations

import random

from mockprovider.physics import EventKind, PhysicsParams, ProviderEvent, ProviderPhysics

#: A request to submit: (arrival s, id, prompt tokens, output tokens).
Job = tuple[float, str, int, int]


def event_times(physics: ProviderPhysics) -> dict[tuple[str, EventKind], float]:
    """Every event's time, run to the end, by (request id, kind)."""
    return {(e.request_id, e.kind): e.time for e in physics.advance(1e9)}


def delay_beside(params: PhysicsParams, subject: Job, *others: Job) -> float:
    """How much later ``subject`` completes with ``others`` submitted after it (arrivals in
    order) than alone."""
    alone, beside = ProviderPhysics(params), ProviderPhysics(params)
    alone.submit(*subject)
    for job in (subject, *others):  # in arrival order, as given
        beside.submit(*job)
    done = (subject[1], EventKind.COMPLETED)
    return event_times(beside)[done] - event_times(alone)[done]


def run_both_ways(
    params: PhysicsParams, seed: int, *, max_prompt: int, max_output: int
) -> tuple[ProviderPhysics, list[ProviderEvent], list[ProviderEvent]]:
    """40 seeded requests over 2 s (a fifth cancelled on arrival), on one physics advanced
    once at the end and on another advanced at every arrival and then in 50 ms steps:
    the first physics, the stepped events and the whole-run events."""
    rng = random.Random(seed)
    arrivals = sorted(rng.uniform(0, 2) for _ in range(40))
    jobs = [(t, f"r{i}", rng.randint(0, max_prompt), rng.randint(0, max_output))
            for i, t in enumerate(arrivals)]  # fmt: skip
    one, many = ProviderPhysics(params), ProviderPhysics(params)
    stepped: list[ProviderEvent] = []
    for t, rid, prompt, out in jobs:
        one.submit(t, rid, prompt, out)
        stepped += many.advance(t)
        many.submit(t, rid, prompt, out)
        if rng.random() < 0.2:
            one.cancel(t, rid)
            many.cancel(t, rid)
    stepped += [e for k in range(1, 200) for e in many.advance(2 + k * 0.05)]
    return one, stepped, one.advance(1e9)
