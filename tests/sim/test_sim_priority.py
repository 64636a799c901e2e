"""Priority in the simulator: a marked request goes first beside a flood of one-token ones.

The provider holds each request for a fixed 200 ms plus 1 ms a token (its overhead is
outside the batch, but the client's in-flight cap of 4 holds it too), and a flood of
one-token requests arrives at 1.5x capacity beside an urgent trickle. Counted in tokens
alone, a flood request cost one token, and deficit round robin with a 256-token quantum
sent about 256 of them a turn for one urgent request.
"""

from __future__ import annotations

from mockprovider.physics import PhysicsParams
from semisched.core import AllocationConfig, Prior, Request, preset
from semisched.sim.simulator import SimJob, simulate

PHYSICS = PhysicsParams(slots=4, base_iter_ms=1.0, per_slot_ms=0.0, overhead_ms=200.0)


def _job(rid: str, klass: str, at: float, tokens: int) -> SimJob:
    prior = Prior(p50=tokens, p90=tokens)
    request = Request(id=rid, klass=klass, prior=prior, arrival=at, max_output_tokens=tokens)
    return SimJob(request=request, output_tokens=tokens, input_tokens=20)


def _urgent_p95(urgent_tokens: int, **changes: object) -> float:
    jobs = [_job(f"b{i}", "batch", i / 30.0, 1) for i in range(600)]
    jobs += [_job(f"i{i}", "interactive", 0.25 + i / 2.0, urgent_tokens) for i in range(40)]
    config = preset("final_adrr_olc", max_inflight=4, **changes)
    latencies = sorted(
        r.latency for r in simulate(jobs, config, PHYSICS).rows
        if r.klass == "interactive" and r.latency is not None
    )  # fmt: skip
    assert len(latencies) == 40
    return latencies[round(0.95 * 39)]


def test_marked_one_token_requests_go_first() -> None:
    assert _urgent_p95(1) <= 2 * 0.2  # within 2x the unloaded 0.2 s


def test_marked_256_token_requests_go_first() -> None:
    assert _urgent_p95(256) <= 2 * (0.2 + 0.256)  # within 2x its unloaded 0.456 s


def _slot_seconds(**changes: object) -> dict[str, float]:
    """Both classes flood (each alone would fill the provider): what each occupied in the
    first 30 s, in slot-seconds (latency summed)."""
    jobs = [_job(f"b{i}", "batch", i / 30.0, 1) for i in range(900)]
    jobs += [_job(f"i{i}", "interactive", i / 10.0, 256) for i in range(300)]
    config = preset("final_adrr_olc", max_inflight=4, **changes)
    held = {"batch": 0.0, "interactive": 0.0}
    for row in simulate(jobs, config, PHYSICS).rows:
        if row.end is not None and row.first_send is not None and row.end <= 30.0:
            held[row.klass] += row.end - row.first_send
    return held


def test_the_weights_hold_in_slot_time_for_one_token_and_256_token_classes() -> None:
    # Equal weights (and no congestion feedback, which grows the interactive share under
    # stress): each class holds about half the slots, whatever its requests' sizes.
    held = _slot_seconds(allocation=AllocationConfig(congestion_gain=0.0))
    assert 0.67 <= held["interactive"] / held["batch"] <= 1.5
    # Tokens alone: a one-token request looks 256 times cheaper than a 256-token one,
    # though it holds its slot for 200 of the 456 ms: the flood of small ones takes it all,
    # congestion feedback or not.
    alone = _slot_seconds(allocation=AllocationConfig(congestion_gain=0.0, request_tokens=0.0))
    assert alone["interactive"] / alone["batch"] < 0.1
    fed_back = _slot_seconds(allocation=AllocationConfig(request_tokens=0.0))
    assert fed_back["interactive"] / fed_back["batch"] < 0.25
