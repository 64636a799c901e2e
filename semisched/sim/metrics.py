"""Joint metrics over per-request records (Scheduling the Unschedulable §4.3, vLLM's latency terms).

The paper's metrics must be read together: a low tail next to low completion
means sacrificed work, not a better system. Definitions used everywhere in
semisched (all latencies in milliseconds, measured from *submission*):

``short_p95_ms`` / ``global_p95_ms``
    95th percentile end-to-end latency of completed requests whose *true*
    bucket is short / of all completed requests (numpy's linear percentile).
``short_p90_ms`` / ``long_p90_ms`` / ``latency_std_ms``
    90th percentile for short and for heavy (true long or xlong) completed
    requests, and the standard deviation of all completed latencies (Scheduling the Unschedulable
    §4.6's fairness table).
``completion_rate``
    completed / admitted, where admitted = submitted − rejected. The paper
    reports completion 1.00 beside nonzero rejects, so its completion counts
    admitted work; the tables use this one.
``served_fraction``
    completed / submitted: the share of all demand that got an answer.
``satisfaction``
    completed at or before the deadline / admitted.
``goodput_rps``
    completed-and-on-time requests per second of makespan ("useful goodput").
``makespan_ms``
    first submission to last terminal event.
``rejects`` / ``defers`` / ``expired`` / ``failed``
    counts; ``defers`` counts deferral actions, ``rejects_<bucket>`` and
    ``defers_<bucket>`` split them by true bucket.
``ttft_p50_ms`` / ``ttft_p95_ms``
    submission to first token (vLLM's TTFT, client queue time included).
``tpot_mean_ms``
    mean over completed multi-token requests of
    ``(end − first_token) / (output_tokens − 1)`` (vLLM's TPOT).
``e2e_p50_ms`` / ``e2e_p95_ms``
    end-to-end latency with client queue time (= the percentiles above over
    all buckets); ``service_p50_ms`` / ``service_p95_ms`` exclude it
    (first send to completion), which is what the provider alone caused.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Protocol

import numpy as np

from semisched.core.buckets import SIZED_BUCKETS

__all__ = ["METRIC_NAMES", "RequestRecord", "summarize"]


class RequestRecord(Protocol):
    """What `summarize` needs of one request's record."""

    bucket: str
    arrival: float
    deadline: float | None
    output_tokens: int
    outcome: str
    first_send: float | None
    first_token: float | None
    end: float | None
    defers: int


def _pct(values: Sequence[float], q: float) -> float:
    return float(np.percentile(values, q)) * 1000.0 if values else math.nan


def summarize(records: Iterable[RequestRecord]) -> dict[str, float]:
    """Compute the joint metrics of one run (see module docstring)."""
    rows = list(records)
    submitted = len(rows)
    done = [r for r in rows if r.outcome == "completed" and r.end is not None]
    lat = [r.end - r.arrival for r in done if r.end is not None]
    short = [r.end - r.arrival for r in done if r.bucket == "short" and r.end is not None]
    heavy = [r.end - r.arrival for r in done if r.bucket in ("long", "xlong") and r.end is not None]
    service = [r.end - r.first_send for r in done if r.end is not None and r.first_send is not None]
    ttft = [r.first_token - r.arrival for r in done if r.first_token is not None]
    tpot = [
        (r.end - r.first_token) / (r.output_tokens - 1)
        for r in done
        if r.end is not None and r.first_token is not None and r.output_tokens > 1
    ]
    on_time = [r for r in done if r.deadline is None or (r.end is not None and r.end <= r.deadline)]
    rejected = sum(r.outcome == "rejected" for r in rows)
    admitted = submitted - rejected
    if rows:
        start = min(r.arrival for r in rows)
        finish = max(r.end if r.end is not None else r.arrival for r in rows)
        makespan = max(0.0, finish - start)
    else:
        makespan = 0.0
    out: dict[str, float] = {
        "submitted": float(submitted),
        "short_p95_ms": _pct(short, 95),
        "global_p95_ms": _pct(lat, 95),
        "short_p90_ms": _pct(short, 90),
        "long_p90_ms": _pct(heavy, 90),
        "latency_std_ms": float(np.std(lat)) * 1000.0 if lat else math.nan,
        "completion_rate": len(done) / admitted if admitted else math.nan,
        "served_fraction": len(done) / submitted if submitted else math.nan,
        "satisfaction": len(on_time) / admitted if admitted else math.nan,
        "goodput_rps": len(on_time) / makespan if makespan > 0 else math.nan,
        "makespan_ms": makespan * 1000.0,
        "rejects": float(rejected),
        "defers": float(sum(r.defers for r in rows)),
        "expired": float(sum(r.outcome == "expired" for r in rows)),
        "failed": float(sum(r.outcome == "failed" for r in rows)),
        "ttft_p50_ms": _pct(ttft, 50),
        "ttft_p95_ms": _pct(ttft, 95),
        "tpot_mean_ms": float(np.mean(tpot)) * 1000.0 if tpot else math.nan,
        "e2e_p50_ms": _pct(lat, 50),
        "e2e_p95_ms": _pct(lat, 95),
        "service_p50_ms": _pct(service, 50),
        "service_p95_ms": _pct(service, 95),
    }
    for bucket in SIZED_BUCKETS:
        name = str(bucket)
        out[f"rejects_{name}"] = float(
            sum(r.outcome == "rejected" and r.bucket == name for r in rows)
        )
        out[f"defers_{name}"] = float(sum(r.defers for r in rows if r.bucket == name))
    return out


#: Metric names in report order.
METRIC_NAMES: tuple[str, ...] = tuple(summarize([]).keys())
