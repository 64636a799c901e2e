"""The prefill cost of a CPU engine in the mock's physics (``prefill_ms_per_token``): a
prompt lengthens the iterations that process it, for every sequence in the batch, the
way llama-server's prompt processing stalls the requests decoding beside it."""

from __future__ import annotations

import pytest
from physics_kit import delay_beside, event_times, run_both_ways

from mockprovider.physics import EventKind, PhysicsParams, ProviderPhysics

DONE, FIRST = EventKind.COMPLETED, EventKind.FIRST_TOKEN
W, H, P = 2.0, 1.0, 0.5  # ms; P per prompt token
CPU = PhysicsParams(slots=4, base_iter_ms=W, per_slot_ms=H, prefill_chunk=512,
                    prefill_ms_per_token=P)  # fmt: skip


def test_a_lone_prompt_costs_its_tokens_once() -> None:
    physics = ProviderPhysics(CPU)
    physics.submit(0.0, "a", 400, 10)
    seen = event_times(physics)
    prefill = W + H + P * 400  # one iteration holds the whole prompt (400 <= the chunk)
    assert seen[("a", FIRST)] == pytest.approx((prefill + (W + H)) / 1000)
    assert seen[("a", DONE)] == pytest.approx((prefill + 10 * (W + H)) / 1000)


def test_a_prompt_split_in_chunks_costs_the_same_tokens_over_more_iterations() -> None:
    physics = ProviderPhysics(PhysicsParams(**{**_fields(CPU), "prefill_chunk": 100}))
    physics.submit(0.0, "a", 400, 1)
    prefill = 4 * (W + H) + P * 400  # four iterations of 100 prompt tokens
    assert event_times(physics)[("a", DONE)] == pytest.approx((prefill + W + H) / 1000)


def test_a_prompt_stalls_the_request_decoding_beside_it() -> None:
    delay = delay_beside(CPU, (0.0, "decoding", 0, 100), (0.01, "prompt", 500, 1))
    # the prompt's one iteration adds P * 500 ms, and a second sequence H per iteration
    assert delay == pytest.approx((P * 500 + H * 2) / 1000, rel=0.02)


def test_without_a_prefill_cost_nothing_changes() -> None:
    plain = PhysicsParams(slots=4, base_iter_ms=W, per_slot_ms=H, prefill_chunk=512)
    physics = ProviderPhysics(plain)
    physics.submit(0.0, "a", 400, 10)
    assert event_times(physics)[("a", DONE)] == pytest.approx(11 * (W + H) / 1000)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_a_random_workload_ends_the_same_however_it_is_advanced(seed: int) -> None:
    params = PhysicsParams(**{**_fields(CPU), "prefill_chunk": 128, "timeout_s": 3.0})
    one, stepped, whole = run_both_ways(params, seed, max_prompt=600, max_output=50)
    assert [(e.request_id, e.kind) for e in stepped] == [(e.request_id, e.kind) for e in whole]
    assert [e.time for e in stepped] == pytest.approx([e.time for e in whole])
    assert one.statistics().active == 0 and one.statistics().iteration_ms == W


def test_a_negative_prefill_cost_is_refused() -> None:
    with pytest.raises(ValueError, match="prefill_ms_per_token"):
        PhysicsParams(prefill_ms_per_token=-1.0)


def _fields(params: PhysicsParams) -> dict[str, object]:
    from dataclasses import asdict

    return asdict(params)
