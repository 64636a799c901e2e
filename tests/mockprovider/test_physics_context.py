"""The context cost of a CPU engine's decode in the mock's physics (``context_ms_per_token``):
each iteration also pays for every token of context the batch holds, so a sequence's
steps slow down as it grows, and a neighbour with a long prompt slows the whole batch,
the way llama-server's attention over its KV cache does."""

from __future__ import annotations

import pytest
from physics_kit import delay_beside, event_times, run_both_ways

from mockprovider.physics import EventKind, PhysicsParams, ProviderPhysics

DONE, FIRST = EventKind.COMPLETED, EventKind.FIRST_TOKEN
W, H, K = 2.0, 1.0, 0.01  # ms; K per token of context
CPU = PhysicsParams(slots=4, base_iter_ms=W, per_slot_ms=H, prefill_chunk=512,
                    context_ms_per_token=K)  # fmt: skip


def _lone_ms(prompt: int, iterations: float) -> float:
    """A lone request's time to ``iterations``: the iteration time ``W + H + K (prompt + G)``
    integrated over ``G`` (the fluid model's lockstep)."""
    return (W + H + K * prompt) * iterations + K * iterations**2 / 2


def test_a_lone_request_slows_as_its_context_grows() -> None:
    physics = ProviderPhysics(CPU)
    physics.submit(0.0, "a", 300, 200)
    seen = event_times(physics)
    work = 1 + 200  # one prefill iteration, then one per output token
    assert seen[("a", FIRST)] == pytest.approx(_lone_ms(300, 2) / 1000)
    assert seen[("a", DONE)] == pytest.approx(_lone_ms(300, work) / 1000)
    flat = ProviderPhysics(PhysicsParams(slots=4, base_iter_ms=W, per_slot_ms=H))
    flat.submit(0.0, "a", 300, 200)
    # the same request without a context cost: K * (300 * 201 + 201^2 / 2) ms sooner
    assert seen[("a", DONE)] - event_times(flat)[("a", DONE)] == pytest.approx(
        K * (300 * work + work**2 / 2) / 1000
    )


def test_a_long_prompt_beside_it_slows_a_short_request() -> None:
    delay = delay_beside(CPU, (0.0, "short", 10, 50), (0.0, "long", 1500, 100))
    # over the short one's 51 iterations the long one holds 1500 + G tokens, and adds H
    per_iteration = H + K * 1500
    assert delay == pytest.approx((51 * per_iteration + K * 51**2 / 2) / 1000,
                                           rel=0.01)  # fmt: skip


def test_the_context_of_a_finished_request_leaves_the_batch() -> None:
    physics = ProviderPhysics(CPU)
    physics.submit(0.0, "long", 500, 1)  # two iterations (a prompt of one chunk), then gone
    physics.submit(0.0, "next", 0, 100)
    seen = event_times(physics)
    gone = seen[("long", DONE)]
    # after it left, "next" runs alone: its context is only what it produced
    rest = (W + H) * 98 + K * (100**2 - 2**2) / 2
    assert seen[("next", DONE)] - gone == pytest.approx(rest / 1000, rel=1e-6)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_a_random_workload_ends_the_same_however_it_is_advanced(seed: int) -> None:
    params = PhysicsParams(slots=4, base_iter_ms=W, per_slot_ms=H, prefill_chunk=256,
                           prefill_ms_per_token=0.2, context_ms_per_token=K,
                           timeout_s=4.0)  # fmt: skip
    one, stepped, whole = run_both_ways(params, seed, max_prompt=1500, max_output=80)
    assert [(e.request_id, e.kind) for e in stepped] == [(e.request_id, e.kind) for e in whole]
    assert [e.time for e in stepped] == pytest.approx([e.time for e in whole])
    assert one.statistics().active == 0


def test_a_negative_context_cost_is_refused() -> None:
    with pytest.raises(ValueError, match="context_ms_per_token"):
        PhysicsParams(context_ms_per_token=-0.1)
