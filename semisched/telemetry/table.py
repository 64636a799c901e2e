"""The table of semisched's Prometheus metrics: names, kinds, labels, help, buckets.

Pure data, importable without the ``metrics`` extra (documentation, dashboards
and tests read it); `semisched.telemetry.prometheus` builds the
instruments from it. The module docstring there explains each metric.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

__all__ = ["METRICS", "SECONDS_BUCKETS", "TOKEN_BUCKETS", "MetricSpec"]

#: Histogram buckets of the ``_seconds`` metrics: 10 ms (a warm queue) to 30 min
#: (a batch job's queue, a long generation).
SECONDS_BUCKETS = (
    0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0, 300.0,
    600.0, 1800.0,
)  # fmt: skip
#: Histogram buckets of the token metrics; 64, 256 and 1024 are the bucket edges of
#: Scheduling the Unschedulable (short, medium, long; beyond: xlong).
TOKEN_BUCKETS = (
    16.0, 32.0, 64.0, 128.0, 256.0, 512.0, 1024.0, 2048.0, 4096.0, 8192.0, 16384.0, 32768.0,
    131072.0,
)  # fmt: skip

_CT = ("class", "tenant")


@dataclass(frozen=True, slots=True)
class MetricSpec:
    """One metric of the module table: its kind, labels and help text."""

    kind: str  # counter, histogram or gauge
    labels: tuple[str, ...]
    help: str


#: Every metric as exposed (a counter's name with ``_total``; a histogram's series add
#: ``_bucket``, ``_count``, ``_sum``), in the module table's order.
METRICS: Mapping[str, MetricSpec] = MappingProxyType(
    {
        "semisched_requests_submitted_total": MetricSpec(
            "counter", _CT, "Requests that entered a scheduler."
        ),
        "semisched_requests_total": MetricSpec(
            "counter",
            ("outcome", "class", "endpoint", "tenant"),
            "What happened to requests: terminal outcomes once per request; deferred and retried "
            "per decision.",
        ),
        "semisched_spend_usd_total": MetricSpec(
            "counter",
            ("tenant", "endpoint"),
            "US dollars spent, at the endpoints' prices: each finished request's usage, "
            "cached prompt tokens at the cached price.",
        ),
        "semisched_decisions_total": MetricSpec(
            "counter", ("decision", "rule"), "Explained decisions by rule."
        ),
        "semisched_queue_wait_seconds": MetricSpec(
            "histogram",
            _CT,
            "Submission to first send (scheduler clock seconds), observed when the request ends.",
        ),
        "semisched_time_to_first_token_seconds": MetricSpec(
            "histogram", _CT, "Submission to a stream's first content (scheduler clock seconds)."
        ),
        "semisched_request_duration_seconds": MetricSpec(
            "histogram", (*_CT, "outcome"), "Submission to the outcome (scheduler clock seconds)."
        ),
        "semisched_prompt_tokens": MetricSpec(
            "histogram", _CT, "A completed call's prompt tokens (the provider's count)."
        ),
        "semisched_output_tokens": MetricSpec(
            "histogram", _CT, "A completed call's output tokens."
        ),
        "semisched_internal_errors_total": MetricSpec(
            "counter",
            ("where",),
            "Unexpected exceptions inside semisched that were survived: a request's (it alone "
            "failed) or the scheduler's own work's (its timer, a background task).",
        ),
        "semisched_queue_depth": MetricSpec("gauge", ("class",), "Requests queued now, per class."),
        "semisched_deferred": MetricSpec(
            "gauge", (), "Requests held back now (overload deferral or retry back-off)."
        ),
        "semisched_inflight": MetricSpec(
            "gauge", ("endpoint",), "Requests in flight now, per endpoint."
        ),
        "semisched_concurrency_limit": MetricSpec(
            "gauge", ("endpoint",), "Requests an endpoint may hold at once: its max_concurrency "
            "or its learned limit (absent while it has none)."
        ),
        "semisched_severity": MetricSpec("gauge", (), "Overload severity, in [0, 1]."),
        "semisched_budget_headroom": MetricSpec(
            "gauge",
            ("endpoint",),
            "Smallest 1 - used/limit of a rate budget's RPM and TPM windows (fleet: the "
            "scheduler's own budget); 0 while a 429 pauses it.",
        ),
        "semisched_tenant_share": MetricSpec(
            "gauge", ("tenant",), "A tenant's share of the decayed usage."
        ),
        "semisched_tenant_entitlement": MetricSpec(
            "gauge", ("tenant",), "A tenant's entitled share."
        ),
        "semisched_tenant_debt_tokens": MetricSpec(
            "gauge",
            ("tenant",),
            "A tenant's usage beyond its entitlement, in work tokens (negative: owed).",
        ),
    }
)
