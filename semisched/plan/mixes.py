"""The synthetic request mixes of Scheduling the Unschedulable §4.1, shared by the planner
and the benchmarks.

=====================  ==========================================
mix                    short / medium / long / xlong request share
=====================  ==========================================
``balanced``           50 / 25 / 15 / 10  (Scheduling the Unschedulable §4.1)
``heavy``              20 / 20 / 30 / 30  (Scheduling the Unschedulable §4.1)
``heavy70``            15 / 15 / 40 / 30  (§4.6: 70% long/xlong)
=====================  ==========================================

Within a bucket, output length is uniform over the bucket's range (xlong:
1025–4096, matching the 2839-token mean of the paper's measured xlong calls).
Prompts are uniform in 32–2048 tokens. ``bench.workloads`` builds its
simulated jobs from these; ``semisched plan --mix`` plans for them.
"""

from __future__ import annotations

from semisched.core.buckets import Bucket

__all__ = ["MIXES", "OUTPUT_RANGES", "PROMPT_RANGE"]

MIXES: dict[str, tuple[float, float, float, float]] = {
    "balanced": (0.50, 0.25, 0.15, 0.10),
    "heavy": (0.20, 0.20, 0.30, 0.30),
    "heavy70": (0.15, 0.15, 0.40, 0.30),
}

OUTPUT_RANGES: dict[Bucket, tuple[int, int]] = {
    Bucket.SHORT: (8, 64),
    Bucket.MEDIUM: (65, 256),
    Bucket.LONG: (257, 1024),
    Bucket.XLONG: (1025, 4096),
}

PROMPT_RANGE = (32, 2048)
