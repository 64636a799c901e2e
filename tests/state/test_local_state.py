"""LocalState: the in-process shared state keeps the same rules as Redis's (no server needed)."""

from __future__ import annotations

import pytest

from semisched.state import LocalState, Scope

pytestmark = pytest.mark.anyio


class Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


async def test_rpm_is_exact_and_the_wait_is_until_the_oldest_charge_leaves() -> None:
    clock = Clock()
    state = LocalState(clock=clock)
    scope = Scope(key="fleet", rpm=2, window_s=60.0)
    assert (await state.reserve("a", 1, [scope])).ok
    clock.t += 10.0
    assert (await state.reserve("b", 1, [scope])).ok
    refused = await state.reserve("c", 1, [scope])
    assert (refused.ok, refused.reason, refused.scope) == (False, "rpm", "fleet")
    assert refused.wait_s == pytest.approx(50.0)
    clock.t += 50.0
    assert (await state.reserve("c", 1, [scope])).ok


async def test_a_charge_at_the_window_edge_never_refuses_with_no_wait() -> None:
    """``0.3 + 60 - 60.3 == 0`` but ``60.3 - 60 < 0.3``: a charge counted until one
    rounding and refused with a zero wait by the other was retried at once, forever."""
    clock = Clock()
    clock.t = 0.3
    state = LocalState(clock=clock)
    scope = Scope(key="fleet", rpm=1, window_s=60.0)
    assert (await state.reserve("a", 1, [scope])).ok
    clock.t = 60.3
    grant = await state.reserve("b", 1, [scope])
    assert grant.ok or grant.wait_s > 0.0


async def test_a_retry_is_charged_again_and_its_total_never_drifts() -> None:
    clock = Clock()
    state = LocalState(clock=clock)
    scope = Scope(key="fleet", tpm=1000, window_s=60.0)
    assert (await state.reserve("r", 300, [scope])).ok
    clock.t += 1.0
    assert (await state.reserve("r", 300, [scope])).ok  # the retry of the same request
    await state.settle("r", 100, [scope])  # the provider counted 100 for the latest
    assert (await state.reserve("x", 600, [scope])).ok  # 300 + 100 + 600 = 1000
    assert not (await state.reserve("y", 1, [scope])).ok
    clock.t += 59.5  # the first charge (300) leaves; the retry's (100) and x's stay
    assert (await state.reserve("y", 300, [scope])).ok
    assert not (await state.reserve("z", 1, [scope])).ok  # 100 + 600 + 300 = 1000


async def test_a_request_reserved_again_does_not_count_its_own_lease() -> None:
    state = LocalState(clock=Clock())
    scope = Scope(key="endpoint:a", max_concurrency=1)
    assert (await state.reserve("r", 1, [scope])).ok
    refused = await state.reserve("s", 1, [scope])
    assert refused.reason == "concurrency" and 0 < refused.wait_s <= 0.05
    assert (await state.reserve("r", 1, [scope])).ok  # r again: still one lease
    await state.release("r", [scope])
    assert (await state.reserve("s", 1, [scope])).ok


async def test_all_or_nothing_across_scopes_and_leases_expire_without_heartbeats() -> None:
    clock = Clock()
    state = LocalState(clock=clock, lease_ttl_s=10.0)
    fleet = Scope(key="fleet", rpm=10)
    endpoint = Scope(key="endpoint:a", max_concurrency=1)
    assert (await state.reserve("r", 1, [fleet, endpoint])).ok
    refused = await state.reserve("s", 1, [fleet, endpoint])
    assert refused.scope == "endpoint:a"
    for i in range(9):  # the refusal charged nothing in the fleet scope: 9 more fit
        assert (await state.reserve(f"f{i}", 1, [fleet])).ok
    clock.t += 5.0
    await state.heartbeat()  # r's lease lives until 115
    clock.t += 9.0
    assert not (await state.reserve("s", 1, [endpoint])).ok
    clock.t += 2.0  # 116: no heartbeat since 105: the lease is gone
    assert (await state.reserve("s", 1, [endpoint])).ok


async def test_tenant_usage_adds_up_across_callers_and_halves_every_half_life() -> None:
    clock = Clock()
    state = LocalState(clock=clock)
    assert await state.add_usage({}, 60.0) == {}  # nothing yet: a read answers nothing
    assert await state.add_usage({"a": 1000.0}, 60.0) == {"a": 1000.0}
    # Another scheduler of the process, sharing this state, adds its own.
    assert await state.add_usage({"a": 500.0, "b": 100.0}, 60.0) == {"a": 1500.0, "b": 100.0}
    clock.t += 60.0  # one half-life
    assert await state.add_usage({}, 60.0) == pytest.approx({"a": 750.0, "b": 50.0})
    clock.t += 120.0
    found = await state.add_usage({"b": 25.0}, 60.0)  # decayed, then added
    assert found == pytest.approx({"a": 187.5, "b": 37.5})
    assert state.statistics().usage_syncs == 5


async def test_tenant_usage_decays_to_nothing_and_is_forgotten() -> None:
    clock = Clock()
    state = LocalState(clock=clock)
    await state.add_usage({"a": 1000.0, "b": 1.0}, 1.0)
    clock.t += 25.0  # b: 2**-25 < 1e-6 work tokens; a: still ~3e-5
    assert set(await state.add_usage({}, 1.0)) == {"a"}


async def test_tenant_usage_arguments_are_checked() -> None:
    state = LocalState(clock=Clock())
    bad: list[tuple[dict[str, float], float, str]] = [
        ({"a": -1.0}, 60.0, "finite number >= 0"),
        ({"a": float("nan")}, 60.0, "finite number >= 0"),
        ({"a": True}, 60.0, "finite number >= 0"),
        ({"": 1.0}, 60.0, "non-empty str"),
        ({"a": 1.0}, 0.0, "half_life_s"),
    ]
    for tokens, half_life, message in bad:
        with pytest.raises(ValueError, match=message):
            await state.add_usage(tokens, half_life)
    assert await state.add_usage({}, 60.0) == {}  # a refused call added nothing


async def test_a_weighted_reservation_counts_weight_times_and_a_cancel_takes_it_back() -> None:
    clock = Clock()
    state = LocalState(clock=clock, weight=4)  # a fallback's send, four workers sharing
    scope = Scope(key="fleet", rpm=9, tpm=1000, window_s=60.0)
    state.seed("others", 300.0, [scope], clock.t, count=2)  # what the others held
    assert (await state.reserve("a", 100, [scope])).ok  # 2 + 4 requests, 300 + 400 tokens
    refused = await state.reserve("b", 10, [scope])
    assert (refused.ok, refused.reason) == (False, "rpm") and refused.wait_s == 60.0
    state.cancel("a", [scope])  # it was never sent after all
    assert (await state.reserve("b", 100, [scope])).ok
    await state.settle("b", 25, [scope])  # settled: 4 x 25, not 25
    refused = await state.reserve("c", 1, [scope])
    assert not refused.ok and refused.used == (("fleet", 6, 400.0),)
    with pytest.raises(ValueError, match="weight"):
        LocalState(weight=0)


def test_state_stats_print_as_one_readable_line() -> None:
    from semisched.state.base import StateStats

    stats = StateStats(backend="redis", namespace="app", workers=3, reservations=120,
                       refusals=2, round_trip_p50_ms=0.214, round_trip_p99_ms=0.8)  # fmt: skip
    assert str(stats) == (
        "redis 'app': 3 workers, 120 reservations (2 refused), round trip p50 0.21 ms / "
        "p99 0.80 ms"
    )
    lost = StateStats(backend="local", namespace="app", workers=1, reservations=0, refusals=0,
                      round_trip_p50_ms=0.0, round_trip_p99_ms=0.0, fallbacks=1)  # fmt: skip
    assert str(lost).startswith("local 'app': 1 worker, ") and str(lost).endswith("; 1 fallbacks")
