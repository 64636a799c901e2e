"""Behaviour of the mock provider physics (mockprovider.physics)."""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

import pytest

from mockprovider.physics import (
    PROFILES,
    EventKind,
    PhysicsParams,
    ProviderEvent,
    ProviderPhysics,
    profile,
)

FIRST, DONE, TIMEOUT = EventKind.FIRST_TOKEN, EventKind.COMPLETED, EventKind.TIMED_OUT
DEFAULT = PhysicsParams()
T1 = DEFAULT.iteration_ms(1) / 1000  # 18.7 ms: one decode step alone
T2 = DEFAULT.iteration_ms(2) / 1000  # 20.1 ms: one decode step with two in the batch


def run_all(phys: ProviderPhysics) -> list[ProviderEvent]:
    """Advance far enough that every pending event comes out."""
    return phys.advance(1e9)


def by_id(events: list[ProviderEvent]) -> dict[tuple[str, EventKind], ProviderEvent]:
    return {(e.request_id, e.kind): e for e in events}


# -- parameters and profiles ----------------------------------------------------------------


def test_default_calibration_matches_the_seeds() -> None:
    assert DEFAULT.lone_decode_ms_per_token() == pytest.approx(18.7, rel=1e-12)
    assert DEFAULT.base_iter_ms / DEFAULT.per_slot_ms == pytest.approx(8 / 0.65, rel=0.01)
    assert DEFAULT.capacity_tokens_per_s() == pytest.approx(32 / (17.3 + 1.4 * 32) * 1000)
    assert profile("default") == DEFAULT
    assert profile("production-fit").overhead_ms == 3294.0


def test_unknown_profile_lists_the_known_ones() -> None:
    with pytest.raises(ValueError, match="production-fit") as info:
        profile("nope")
    assert all(name in str(info.value) for name in PROFILES)


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("slots", 0),
        ("slots", 2.5),
        ("slots", True),
        ("base_iter_ms", 0.0),
        ("base_iter_ms", math.nan),
        ("per_slot_ms", -0.1),
        ("prefill_chunk", 0),
        ("overhead_ms", -1.0),
        ("overhead_ms", math.inf),
        ("timeout_s", 0.0),
    ],
)
def test_invalid_parameter_names_the_field(field: str, value: object) -> None:
    with pytest.raises(ValueError, match=rf"^{field}="):
        PhysicsParams(**{field: value})  # type: ignore[arg-type]


# -- service times --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "input_tokens", "output_tokens", "first_iters", "total_iters"),
    [
        ("default", 0, 1, 1, 1),
        ("default", 0, 100, 1, 100),
        ("default", 1, 10, 2, 11),  # one started prefill chunk costs one iteration
        ("default", 1024, 10, 3, 12),
        ("default", 1025, 10, 4, 13),
        ("production-fit", 0, 100, 1, 100),
        ("production-fit", 0, 700, 1, 700),
    ],
)
def test_lone_request_latency(
    name: str, input_tokens: int, output_tokens: int, first_iters: int, total_iters: int
) -> None:
    params = profile(name)
    phys = ProviderPhysics(params)
    phys.submit(0.0, "a", input_tokens, output_tokens)
    events = run_all(phys)
    assert [e.kind for e in events] == [FIRST, DONE]
    first, done = events
    overhead = params.overhead_ms / 1000
    assert first.time == pytest.approx(overhead + first_iters * T1, rel=1e-9)
    assert done.time == pytest.approx(overhead + total_iters * T1, rel=1e-9)
    assert (done.started, done.output_tokens, first.output_tokens) == (0.0, output_tokens, 1)


def test_production_fit_reproduces_the_seed_004_line() -> None:
    for n in (10, 155, 670, 2839):
        phys = ProviderPhysics(profile("production-fit"))
        phys.submit(0.0, "a", 0, n)
        (done,) = (e for e in run_all(phys) if e.kind is DONE)
        assert done.time * 1000 == pytest.approx(3294 + 18.7 * n, rel=1e-9)


def test_zero_output_costs_one_iteration_and_has_no_first_token() -> None:
    phys = ProviderPhysics(DEFAULT)
    phys.submit(0.0, "a", 0, 0)
    events = run_all(phys)
    assert [(e.kind, e.output_tokens) for e in events] == [(DONE, 0)]
    assert events[0].time == pytest.approx(T1, rel=1e-9)


def test_two_requests_share_the_batch_then_the_survivor_speeds_up() -> None:
    phys = ProviderPhysics(DEFAULT)
    phys.submit(0.0, "short", 0, 10)
    phys.submit(0.0, "long", 0, 20)
    ev = by_id(run_all(phys))
    assert ev["short", FIRST].time == pytest.approx(T2, rel=1e-9)
    assert ev["short", DONE].time == pytest.approx(10 * T2, rel=1e-9)  # 201 ms
    # "long" did 10 iterations at 20.1 ms, the remaining 10 alone at 18.7 ms: 388 ms.
    assert ev["long", DONE].time == pytest.approx(10 * T2 + 10 * T1, rel=1e-9)


def test_a_late_joiner_slows_the_running_request() -> None:
    phys = ProviderPhysics(DEFAULT)
    phys.submit(0.0, "a", 0, 10)
    join = 4 * T1  # "a" has done 4 iterations alone
    phys.submit(join, "b", 0, 3)
    ev = by_id(run_all(phys))
    assert ev["b", DONE].time == pytest.approx(join + 3 * T2, rel=1e-9)
    assert ev["a", DONE].time == pytest.approx(join + 3 * T2 + 3 * T1, rel=1e-9)


# -- admission queue ------------------------------------------------------------------------


def test_third_request_waits_and_starts_when_the_first_finishes() -> None:
    phys = ProviderPhysics(PhysicsParams(slots=2))
    for rid, out in (("a", 10), ("b", 20), ("c", 5)):
        phys.submit(0.0, rid, 0, out)
    assert phys.statistics().queued == 1
    ev = by_id(run_all(phys))
    assert ev["c", DONE].started == ev["a", DONE].time == pytest.approx(10 * T2, rel=1e-9)
    assert ev["c", DONE].time == pytest.approx(15 * T2, rel=1e-9)  # batch stays at two
    assert ev["b", DONE].time == pytest.approx(15 * T2 + 5 * T1, rel=1e-9)


def test_short_request_behind_long_ones_waits_head_of_line() -> None:
    phys = ProviderPhysics(PhysicsParams(slots=1))
    phys.submit(0.0, "long", 0, 1000)
    phys.submit(0.0, "short", 0, 1)
    ev = by_id(run_all(phys))
    assert ev["short", DONE].started == pytest.approx(1000 * T1, rel=1e-9)
    assert ev["short", DONE].time == pytest.approx(1001 * T1, rel=1e-9)


def test_queue_is_strictly_fifo() -> None:
    phys = ProviderPhysics(PhysicsParams(slots=1))
    for i, out in enumerate((5, 50, 1, 20, 2)):
        phys.submit(0.001 * i, f"r{i}", 0, out)
    done = [e.request_id for e in run_all(phys) if e.kind is DONE]
    assert done == ["r0", "r1", "r2", "r3", "r4"]


# -- timeouts -------------------------------------------------------------------------------

# 200 + 50 ms = 0.25 s per lone iteration: every time below is exact in binary floating point.
EXACT = PhysicsParams(slots=1, base_iter_ms=200.0, per_slot_ms=50.0, timeout_s=1.0)


@pytest.mark.parametrize(
    ("output_tokens", "kind", "time", "tokens"),
    [
        (3, DONE, 0.75, 3),
        (4, DONE, 1.0, 4),  # completion exactly at the deadline counts as completed
        (5, TIMEOUT, 1.0, 4),  # tokens generated so far
        (1000, TIMEOUT, 1.0, 4),
    ],
)
def test_timeout_in_slot(output_tokens: int, kind: EventKind, time: float, tokens: int) -> None:
    phys = ProviderPhysics(EXACT)
    phys.submit(0.0, "a", 0, output_tokens)
    end = run_all(phys)[-1]
    assert (end.kind, end.time, end.output_tokens, end.started) == (kind, time, tokens, 0.0)


def test_timeout_in_queue_and_slot_released_to_next() -> None:
    phys = ProviderPhysics(EXACT)
    phys.submit(0.0, "hog", 0, 100)
    phys.submit(0.0, "starved", 0, 1)  # same deadline, never admitted
    phys.submit(0.5, "next", 0, 2)
    ev = by_id(run_all(phys))
    assert ev["hog", TIMEOUT].time == 1.0
    assert ev["starved", TIMEOUT].time == 1.0
    assert ev["starved", TIMEOUT].started is None
    assert ev["starved", TIMEOUT].output_tokens == 0
    assert ev["next", DONE].started == 1.0  # the freed slot goes to the next live request
    assert ev["next", DONE].time == 1.5
    assert phys.statistics().timed_out == 2


def test_overhead_can_push_a_finished_request_past_its_deadline() -> None:
    params = PhysicsParams(
        slots=1, base_iter_ms=200.0, per_slot_ms=50.0, timeout_s=1.0, overhead_ms=500.0
    )
    phys = ProviderPhysics(params)
    phys.submit(0.0, "ok", 0, 2)  # batch done at 0.5, observed at 1.0: in time
    phys.submit(0.0, "late", 0, 1)  # admitted 0.5, batch done 0.75, would be seen 1.25
    ev = by_id(run_all(phys))
    assert ev["ok", DONE].time == 1.0
    assert ("late", FIRST) not in ev  # its first token cannot arrive before it times out
    assert ev["late", TIMEOUT].time == 1.0
    assert ev["late", TIMEOUT].started == 0.5


# -- cancellation ---------------------------------------------------------------------------


def test_cancel_queued_request_emits_nothing() -> None:
    phys = ProviderPhysics(PhysicsParams(slots=1))
    phys.submit(0.0, "a", 0, 10)
    phys.submit(0.0, "b", 0, 10)
    phys.submit(0.0, "c", 0, 10)
    assert phys.cancel(0.05, "b")
    events = run_all(phys)
    assert {e.request_id for e in events} == {"a", "c"}
    assert by_id(events)["c", DONE].started == pytest.approx(10 * T1, rel=1e-9)
    assert phys.statistics().cancelled == 1


def test_cancel_running_request_frees_its_slot_at_once() -> None:
    phys = ProviderPhysics(PhysicsParams(slots=2))
    phys.submit(0.0, "a", 0, 100)
    phys.submit(0.0, "b", 0, 10)
    phys.submit(0.0, "c", 0, 10)
    first = phys.advance(0.1)
    assert [(e.request_id, e.kind) for e in first] == [("a", FIRST), ("b", FIRST)]
    assert phys.cancel(0.1, "a")
    ev = by_id(run_all(phys))
    assert not any(rid == "a" for rid, _ in ev)
    assert ev["c", DONE].started == 0.1
    # "b" did 0.1 / T2 iterations alone-with-"a", then shares with "c".
    assert ev["b", DONE].time == pytest.approx(0.1 + (10 - 0.1 / T2) * T2, rel=1e-9)


@pytest.mark.parametrize("rid", ["unknown", "done", "cancelled"])
def test_cancel_returns_false_when_nothing_to_cancel(rid: str) -> None:
    phys = ProviderPhysics(DEFAULT)
    phys.submit(0.0, "done", 0, 1)
    phys.submit(0.0, "cancelled", 0, 100)
    assert phys.cancel(0.01, "cancelled")
    assert not phys.cancel(1.0, rid)  # "done" completed long before 1.0, even if not advanced


def test_cancel_after_the_batch_finished_but_before_the_client_saw_it() -> None:
    phys = ProviderPhysics(profile("production-fit"))
    phys.submit(0.0, "a", 0, 1)  # batch done at 18.7 ms, observed at 3.3127 s
    assert phys.cancel(1.0, "a")
    assert run_all(phys) == []


# -- capacity changes -----------------------------------------------------------------------


def test_halving_slots_keeps_running_requests_and_blocks_admission() -> None:
    params = PhysicsParams(slots=4, base_iter_ms=200.0, per_slot_ms=50.0)
    phys = ProviderPhysics(params)
    for i, out in enumerate((1, 2, 30, 30, 1)):
        phys.submit(0.0, f"r{i}", 0, out)
    phys.set_slots(0.0, 2)
    assert (phys.statistics().active, phys.statistics().queued) == (4, 1)
    assert phys.params.slots == 2
    ev = by_id(run_all(phys))
    # r0 leaves after 1 iteration at 400 ms (3 active remain: still >= 2), r1 after one more
    # at 350 ms (2 remain), so r4 waits for r2 and r3: 28 more iterations at 300 ms.
    assert ev["r0", DONE].time == pytest.approx(0.4)
    assert ev["r1", DONE].time == pytest.approx(0.75)
    assert ev["r2", DONE].time == pytest.approx(0.75 + 28 * 0.3)
    assert ev["r4", DONE].started == ev["r2", DONE].time


def test_raising_slots_admits_immediately() -> None:
    phys = ProviderPhysics(PhysicsParams(slots=1))
    for rid in ("a", "b", "c"):
        phys.submit(0.0, rid, 0, 50)
    phys.set_slots(0.2, 3)
    assert phys.statistics().active == 3
    ev = by_id(run_all(phys))
    assert ev["b", DONE].started == ev["c", DONE].started == 0.2


# -- misuse ---------------------------------------------------------------------------------


def test_time_never_goes_backwards() -> None:
    phys = ProviderPhysics(DEFAULT)
    phys.advance(5.0)
    for call in (
        lambda: phys.submit(4.0, "a", 0, 1),
        lambda: phys.advance(4.999),
        lambda: phys.cancel(1.0, "a"),
        lambda: phys.set_slots(0.0, 3),
    ):
        with pytest.raises(ValueError, match="earlier"):
            call()
    assert phys.now == 5.0


@pytest.mark.parametrize(
    ("input_tokens", "output_tokens", "field"),
    [(-1, 5, "input_tokens"), (5, -1, "output_tokens"), (1.5, 5, "input_tokens")],
)
def test_bad_token_counts_are_rejected(input_tokens: int, output_tokens: int, field: str) -> None:
    with pytest.raises(ValueError, match=field):
        ProviderPhysics(DEFAULT).submit(0.0, "a", input_tokens, output_tokens)


def test_set_slots_rejects_zero() -> None:
    with pytest.raises(ValueError, match="slots"):
        ProviderPhysics(DEFAULT).set_slots(0.0, 0)


def test_duplicate_live_id_is_rejected_but_a_finished_id_can_be_reused() -> None:
    phys = ProviderPhysics(DEFAULT)
    phys.submit(0.0, "a", 0, 1)
    with pytest.raises(ValueError, match="already live"):
        phys.submit(0.001, "a", 0, 1)
    phys.submit(1.0, "a", 0, 1)  # the first "a" completed at 18.7 ms
    assert [e.kind for e in run_all(phys)] == [FIRST, DONE, FIRST, DONE]


def test_next_event_time_and_idle_state() -> None:
    phys = ProviderPhysics(profile("production-fit"))
    assert phys.next_event_time() is None
    phys.submit(0.0, "a", 0, 3)
    t = phys.next_event_time()
    assert t is not None
    assert t == pytest.approx(3.294 + T1, rel=1e-9)
    assert phys.advance(t - 1e-6) == []
    assert [e.kind for e in phys.advance(t)] == [FIRST]
    phys.advance(100.0)
    assert phys.next_event_time() is None
    stats = phys.statistics()
    assert (stats.active, stats.queued, stats.submitted, stats.completed) == (0, 0, 1, 1)
    assert "active=0" in repr(phys)


# -- whole-run properties on random workloads -----------------------------------------------


@dataclass(frozen=True)
class Op:
    time: float
    kind: str  # "submit", "cancel" or "slots"
    rid: str = ""
    input_tokens: int = 0
    output_tokens: int = 0
    slots: int = 0


def random_scenario(seed: int) -> tuple[PhysicsParams, list[Op]]:
    rng = random.Random(seed)
    params = PhysicsParams(
        slots=rng.randint(1, 6),
        base_iter_ms=rng.uniform(5, 30),
        per_slot_ms=rng.uniform(0, 3),
        prefill_chunk=rng.choice([64, 512]),
        overhead_ms=rng.choice([0.0, rng.uniform(0, 500)]),
        timeout_s=rng.uniform(0.5, 4.0),
    )
    mean_service_s = (750 / params.prefill_chunk + 40) * params.iteration_ms(params.slots) / 1000
    rate = params.slots / mean_service_s * rng.uniform(0.5, 1.5)  # light load to overload
    ops: list[Op] = []
    t = 0.0
    for i in range(200):
        t += rng.expovariate(rate) if rng.random() < 0.9 else 0.0  # some simultaneous arrivals
        ops.append(Op(t, "submit", f"r{i}", rng.randint(0, 1500), rng.randint(0, 80)))
        if rng.random() < 0.15:
            ops.append(Op(t + rng.uniform(0, 1), "cancel", f"r{rng.randint(0, i)}"))
        if rng.random() < 0.03:
            ops.append(Op(t + rng.uniform(0, 1), "slots", slots=rng.randint(1, 8)))
    ops.sort(key=lambda op: op.time)  # stable: ties keep generation order
    return params, ops


def play(
    params: PhysicsParams, ops: list[Op], steps: list[float], *, des: bool = False
) -> tuple[list[ProviderEvent], list[bool]]:
    """Apply ``ops``; advance at each of ``steps`` in between (or at every next event)."""
    phys = ProviderPhysics(params)
    events: list[ProviderEvent] = []
    cancels: list[bool] = []
    pending = sorted(steps)
    for op in [*ops, Op(1e6, "end")]:
        while des and (t := phys.next_event_time()) is not None and t <= op.time:
            got = phys.advance(t)
            assert got, "next_event_time must point at a real event"
            assert got[0].time == pytest.approx(t, abs=1e-9)
            events += got
        while pending and pending[0] <= op.time:
            events += phys.advance(pending.pop(0))
        stats = phys.statistics()
        assert stats.queued == 0 or stats.active >= stats.slots
        if op.kind == "submit":
            phys.submit(op.time, op.rid, op.input_tokens, op.output_tokens)
        elif op.kind == "cancel":
            cancels.append(phys.cancel(op.time, op.rid))
        elif op.kind == "slots":
            phys.set_slots(op.time, op.slots)
    events += phys.advance(1e6)
    assert phys.next_event_time() is None
    return events, cancels


@pytest.mark.parametrize("seed", range(12))
def test_random_workload_is_consistent_and_independent_of_advance_steps(seed: int) -> None:
    params, ops = random_scenario(seed)
    one_step = play(params, ops, [])
    horizon = ops[-1].time + params.timeout_s + 1
    rng = random.Random(seed + 1000)
    many_steps = play(params, ops, [rng.uniform(0, horizon) for _ in range(3000)])
    event_driven = play(params, ops, [], des=True)
    assert many_steps == one_step
    assert event_driven == one_step

    events, cancel_results = one_step
    times = [e.time for e in events]
    assert times == sorted(times)
    cancel_ops = [op for op in ops if op.kind == "cancel"]
    cancelled = {op.rid: op.time for op, ok in zip(cancel_ops, cancel_results, strict=True) if ok}
    for op in (op for op in ops if op.kind == "submit"):
        mine = [e for e in events if e.request_id == op.rid]
        terminal = [e for e in mine if e.kind is not FIRST]
        if op.rid in cancelled:
            assert terminal == []
            assert all(e.time <= cancelled[op.rid] for e in mine)
            continue
        assert len(terminal) == 1, op
        end = terminal[0]
        assert [e.kind for e in mine] == ([FIRST] if len(mine) == 2 else []) + [end.kind]
        deadline = op.time + params.timeout_s
        if end.kind is DONE:
            assert end.time <= deadline
            assert end.started is not None
            assert end.started >= op.time
            assert len(mine) == 2 or op.output_tokens == 0
        else:
            assert end.time == deadline
            assert 0 <= end.output_tokens <= op.output_tokens
