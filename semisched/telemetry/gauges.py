"""The scheduler's gauges in Prometheus: read from every live scheduler of a registry
when Prometheus scrapes, combined into one value per label.

`Gauges` is the collector `semisched.telemetry.prometheus` registers once per
registry; each `PrometheusMetrics` of that registry adds itself as a source. A
scrape takes each source's ``statistics()`` (on the scheduler's event loop:
`PrometheusMetrics.read_statistics`) and sums, maxes or weights them as the
metrics table in `semisched.telemetry.prometheus`'s docstring says (`headroom`:
one rate budget's). A source that fails is left out of that scrape, with one
warning per registry.

What this module is not: it counts no event (the counters and histograms are
`PrometheusMetrics`') and serves nothing.
"""

from __future__ import annotations

import logging
import threading
import weakref
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from semisched.core.budget import BudgetSnapshot
from semisched.telemetry.table import METRICS

if TYPE_CHECKING:
    from semisched.runtime.stats import SchedulerStats
    from semisched.telemetry.prometheus import PrometheusMetrics

__all__ = ["LOCK", "Gauges", "headroom"]

_log = logging.getLogger("semisched.observe")

#: Guards each registry's sources here and its instruments (`semisched.telemetry.prometheus`).
LOCK = threading.Lock()


def headroom(budget: BudgetSnapshot, now: float) -> float | None:
    """The smallest ``1 - used/limit`` of ``budget``'s limited windows, in [0, 1]; 0 while a
    429 pauses it at ``now``; ``None`` when it limits nothing."""
    pairs = ((budget.limit_requests, budget.used_requests),
             (budget.limit_tokens, budget.used_tokens))  # fmt: skip
    fractions = [min(1.0, max(0.0, 1.0 - used / limit)) for limit, used in pairs if limit]
    if not fractions:
        return None
    if budget.paused_until is not None and budget.paused_until > now:
        return 0.0
    return min(fractions)


class Gauges(Collector):
    """The gauges, read from every live scheduler of one registry at scrape time."""

    def __init__(self) -> None:
        self.sources: weakref.WeakSet[PrometheusMetrics] = weakref.WeakSet()
        self._complained = False

    def describe(self) -> Iterable[Metric]:
        return list(_Reading().families())

    def collect(self) -> Iterable[Metric]:
        reading = _Reading()
        with LOCK:
            sources = list(self.sources)
        for source in sources:
            stats = self._read(source)
            if stats is not None:
                reading.add(stats)
        return list(reading.families())

    def _read(self, source: PrometheusMetrics) -> SchedulerStats | None:
        try:
            return source.read_statistics()
        except Exception:
            if not self._complained:
                self._complained = True
                _log.warning("metrics: statistics() of %r failed", source, exc_info=True)
            return None


@dataclass
class _Reading:
    """The gauges' values combined over the schedulers of one scrape (how:
    `semisched.telemetry.prometheus`'s docstring)."""

    queue_depth: dict[str, float] = field(default_factory=dict)
    deferred: float = 0.0
    inflight: dict[str, float] = field(default_factory=dict)
    limit: dict[str, float] = field(default_factory=dict)
    severity: float = 0.0
    headroom: dict[str, float] = field(default_factory=dict)
    entitlement: dict[str, float] = field(default_factory=dict)
    debt: dict[str, float] = field(default_factory=dict)
    weighted_share: dict[str, float] = field(default_factory=dict)
    share: dict[str, float] = field(default_factory=dict)
    usage: float = 0.0
    internal_errors: dict[str, float] = field(default_factory=lambda: {"request": 0, "task": 0})

    def add(self, stats: SchedulerStats) -> None:
        self.internal_errors["request"] += stats.counters.internal_errors
        self.internal_errors["task"] += stats.counters.task_errors
        engine = stats.engine
        for klass, n in engine.queued.items():
            self.queue_depth[klass] = self.queue_depth.get(klass, 0.0) + n
        self.deferred += engine.deferred
        for endpoint in engine.endpoints:
            self.inflight[endpoint.name] = self.inflight.get(endpoint.name, 0.0) + endpoint.inflight
            if endpoint.limit is not None:
                self.limit[endpoint.name] = self.limit.get(endpoint.name, 0.0) + endpoint.limit
        if not engine.endpoints:
            self.inflight[""] = self.inflight.get("", 0.0) + engine.inflight
        self.severity = max(self.severity, engine.signals.severity)
        budgets = [("fleet", engine.budget)] + [(e.name, e.budget) for e in engine.endpoints]
        for name, budget in budgets:
            value = None if budget is None else headroom(budget, engine.now)
            if value is not None:
                self.headroom[name] = min(self.headroom.get(name, 1.0), value)
        usage = sum(t.usage for t in engine.tenants)
        self.usage += usage
        for t in engine.tenants:
            self.entitlement[t.name] = max(self.entitlement.get(t.name, 0.0), t.entitlement)
            self.debt[t.name] = self.debt.get(t.name, 0.0) + t.debt
            self.share[t.name] = self.share.get(t.name, 0.0) + t.share
            self.weighted_share[t.name] = self.weighted_share.get(t.name, 0.0) + t.share * usage

    def families(self) -> Iterator[Metric]:
        if self.usage > 0:
            share = {name: w / self.usage for name, w in self.weighted_share.items()}
        else:
            share = self.share
        errors = CounterMetricFamily("semisched_internal_errors",
                                     METRICS["semisched_internal_errors_total"].help,
                                     labels=("where",))  # fmt: skip
        for where, count in self.internal_errors.items():
            errors.add_metric([where], count)
        yield errors
        yield _gauge("semisched_queue_depth", self.queue_depth)
        yield _gauge("semisched_deferred", {"": self.deferred})
        yield _gauge("semisched_inflight", self.inflight)
        yield _gauge("semisched_concurrency_limit", self.limit)
        yield _gauge("semisched_severity", {"": self.severity})
        yield _gauge("semisched_budget_headroom", self.headroom)
        yield _gauge("semisched_tenant_share", share)
        yield _gauge("semisched_tenant_entitlement", self.entitlement)
        yield _gauge("semisched_tenant_debt_tokens", self.debt)


def _gauge(name: str, values: dict[str, float]) -> Metric:
    """Gauge ``name`` (`METRICS`) with a value per label value (``""``: no label)."""
    spec = METRICS[name]
    family = GaugeMetricFamily(name, spec.help, labels=spec.labels)
    for key, value in values.items():
        family.add_metric([key] if spec.labels else [], value)
    return family
