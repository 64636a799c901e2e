"""Mock vs engine's workload and table (no engine): the scaled balanced mix, seeded, at the
asked load of the fitted capacity; the mock side's latencies; the per-bucket ratios."""

from __future__ import annotations

import math

import numpy as np
import pytest

from bench.real_engine.compare import (
    PROMPTS,
    bucket_table,
    mock_latencies,
    scaled_ranges,
    workload,
)
from mockprovider.physics import PhysicsParams

PHYSICS = PhysicsParams(slots=8, base_iter_ms=6.0, per_slot_ms=1.5, prefill_chunk=512,
                        prefill_ms_per_token=0.25, overhead_ms=40.0)  # fmt: skip


def test_the_workload_is_seeded_and_is_the_balanced_mix_scaled_down() -> None:
    one = workload(PHYSICS, requests=2000, load=0.9, seed=5, vocab=8192)
    again = workload(PHYSICS, requests=2000, load=0.9, seed=5, vocab=8192)
    assert one == again
    assert scaled_ranges() == [(2, 16), (17, 64), (65, 256), (257, 1024)]
    shares = [one.buckets.count(b) / 2000 for b in ("short", "medium", "long", "xlong")]
    assert shares == pytest.approx([0.50, 0.25, 0.15, 0.10], abs=0.03)
    for job, bucket in zip(one.jobs, one.buckets, strict=True):
        lo, hi = scaled_ranges()[("short", "medium", "long", "xlong").index(bucket)]
        assert lo <= job.max_tokens <= hi
        assert PROMPTS[0] <= len(job.prompt) <= PROMPTS[1]
        assert all(2 <= t < 8192 for t in job.prompt[:5])


def test_arrivals_offer_the_asked_share_of_the_fitted_capacity() -> None:
    work = workload(PHYSICS, requests=4000, load=0.9, seed=1, vocab=8192)
    span = work.jobs[-1].arrival - work.jobs[0].arrival
    per_iteration = (6.0 + 1.5 * 8) / 8  # ms of a full batch's iteration, per sequence
    busy_ms = sum((1 + j.max_tokens) * per_iteration + 0.25 * len(j.prompt) for j in work.jobs)
    assert busy_ms / 1000 / span == pytest.approx(0.9, rel=0.08)


def test_the_mock_side_queues_beyond_its_slots() -> None:
    physics = PhysicsParams(slots=1, base_iter_ms=10.0, per_slot_ms=0.0, prefill_chunk=100,
                            overhead_ms=0.0)  # fmt: skip
    work = workload(physics, requests=2, load=0.5, seed=0, vocab=300)
    jobs = [type(j)(arrival=0.0, prompt=j.prompt[:100], max_tokens=9, tag=j.tag)
            for j in work.jobs]  # fmt: skip
    lone = 10 * 0.010  # one prefill iteration and nine decode iterations of 10 ms
    assert mock_latencies(physics, jobs) == pytest.approx([lone, 2 * lone])


def test_the_table_gives_each_buckets_percentiles_and_engine_over_mock() -> None:
    buckets = ["short"] * 100 + ["long"] * 100
    mock = list(np.linspace(1, 2, 100)) + list(np.linspace(10, 20, 100))
    engine = [1.1 * m for m in mock[:100]] + [0.9 * m for m in mock[100:]]
    rows = {r["bucket"]: r for r in bucket_table(buckets, engine, mock, (30.0, 25.0))}
    assert set(rows) == {"short", "long", "all", "completion_time"}
    assert rows["short"]["ratio_p50"] == pytest.approx(1.1) and rows["long"]["ratio_p95"] == 0.9
    assert rows["long"]["mock_p50_s"] == pytest.approx(15.0)
    assert rows["completion_time"]["ratio_p50"] == pytest.approx(1.2)
    assert rows["all"]["requests"] == 200 and not math.isnan(rows["all"]["ratio_p99"])


def test_a_workload_without_requests_or_load_is_refused() -> None:
    with pytest.raises(ValueError, match="requests"):
        workload(PHYSICS, requests=0, load=0.9, seed=0, vocab=300)
    with pytest.raises(ValueError, match="load"):
        workload(PHYSICS, requests=5, load=0.0, seed=0, vocab=300)
