"""Prometheus metrics of a [`Scheduler`][semisched.Scheduler]: what happened to each request, and
the scheduler's state at scrape time.

`PrometheusMetrics` is a [`RequestObserver`][semisched.telemetry.observe.RequestObserver] that
``Scheduler(metrics=True)`` (the default registry) or
``Scheduler(metrics=CollectorRegistry())`` builds; it needs the ``metrics``
extra (``prometheus-client``). Serving them is the application's:
``prometheus_client.start_http_server(9464)`` for the default registry, or
``semisched batch --metrics-port 9464`` for a batch job. Counters and
histograms are updated on the scheduler's own events; the gauges are read
from ``statistics()`` when Prometheus scrapes, so they cost nothing between
scrapes.

=========================================  ================  =======================================
metric                                     labels            meaning
=========================================  ================  =======================================
``semisched_requests_submitted_total``     class, tenant     counter: requests that entered a
                                                             scheduler
``semisched_requests_total``               outcome, class,   counter: terminal outcomes
                                           endpoint, tenant  (``completed``, ``rejected``,
                                                             ``expired``, ``failed``, ``cancelled``)
                                                             once per request, ``endpoint`` where
                                                             its last attempt went (``""``: none);
                                                             ``deferred`` and ``retried`` (a
                                                             failover too) per decision,
                                                             ``endpoint`` where the attempt failed
``semisched_decisions_total``              decision, rule    counter: explained decisions by rule
                                                             (`RULES`)
``semisched_spend_usd_total``              tenant, endpoint  counter: US dollars spent at the
                                                             endpoints' prices (priced endpoints
                                                             only; cached prompt tokens at the
                                                             cached price)
``semisched_queue_wait_seconds``           class, tenant     histogram: submission to first send
                                                             (observed when the request ends)
``semisched_time_to_first_token_seconds``  class, tenant     histogram: submission to a stream's
                                                             first content (streams only)
``semisched_request_duration_seconds``     class, tenant,    histogram: submission to the outcome
                                           outcome
``semisched_prompt_tokens``                class, tenant     histogram: a completed call's prompt
                                                             tokens (the provider's count)
``semisched_output_tokens``                class, tenant     histogram: a completed call's output
                                                             tokens
``semisched_internal_errors_total``        where             counter: unexpected exceptions inside
                                                             semisched, survived: ``request`` (that
                                                             request alone failed) or ``task`` (its
                                                             timer, a background task); read from
                                                             ``statistics()`` at scrape time
``semisched_queue_depth``                  class             gauge: requests queued now
``semisched_deferred``                                       gauge: requests held back now (overload
                                                             deferral, retry back-off)
``semisched_inflight``                     endpoint          gauge: requests in flight now
``semisched_concurrency_limit``            endpoint          gauge: requests it may hold at once
                                                             (its ``max_concurrency`` or learned
                                                             limit; absent while it has none)
``semisched_severity``                                       gauge: overload severity, in [0, 1]
``semisched_budget_headroom``              endpoint          gauge: the smallest ``1 - used/limit``
                                                             of a rate budget's RPM and TPM windows,
                                                             0 while a 429 pauses it; ``fleet`` is
                                                             ``config.budget``; absent without a
                                                             budget
``semisched_tenant_share``                 tenant            gauge: its share of the decayed usage
``semisched_tenant_entitlement``           tenant            gauge: its entitled share
``semisched_tenant_debt_tokens``           tenant            gauge: usage beyond its entitlement, in
                                                             work tokens (negative: owed)
=========================================  ================  =======================================

Times are seconds of the scheduler's clock (``Scheduler(clock=)``: wall
seconds by default). ``deferred`` and ``retried`` count decisions, the terminal
outcomes count requests, so per class the terminal outcomes add up to
``semisched_requests_submitted_total`` once nothing is pending. A call refused
with [`QueueFull`][semisched.errors.QueueFull] never entered, so no metric counts it
(``statistics().counters.queue_full`` does).

The gauges are read on the scheduler's own event loop: ``statistics()`` also
retires expired budget charges, so another thread must not call it while the
loop runs. A scrape from the loop's thread (``generate_latest`` in a task)
reads directly; one from another thread (``start_http_server``'s) asks the loop
for the snapshot and waits up to `LOOP_TIMEOUT_S` (a loop blocked that
long leaves that scheduler's gauges out of that scrape). What decays with time
(budget windows, tenants' usage) is as of the scheduler's last event.

Labels stay few: class and tenant names come from the config, endpoints from
the fleet, outcome, decision and rule from fixed sets. A request's default
tenant is labelled by its resolved name (``default`` for the one built-in
tenant; a request carrying none is labelled ``default`` too). No request id,
prompt, parameter, model name or key ever becomes a label.

Several schedulers on one registry (the default one, say) share one set of
metrics: `PrometheusMetrics` registers them in a registry once and each
scheduler's observer updates the same counters and histograms. The gauges
(their collector: `semisched.telemetry.gauges`) combine every live scheduler of
the registry: queue depth, deferred, in flight and debt are summed, severity is
the highest, headroom the lowest, entitlement the highest, and share is weighted
by each scheduler's usage (one scheduler's own share, alone). A scheduler stops
counting in the gauges once it is garbage.

What this module is not: it decides nothing and serves nothing; it writes no
exposition format itself (``prometheus_client`` does).
"""

from __future__ import annotations

import asyncio
import threading
import weakref
from collections.abc import Callable
from concurrent.futures import Future
from types import MethodType
from typing import TYPE_CHECKING, Any

from prometheus_client import REGISTRY, CollectorRegistry, Counter, Histogram

from semisched.core.explain import Decision, Explanation
from semisched.core.request import Request
from semisched.core.tenants.config import DEFAULT_TENANT
from semisched.telemetry.gauges import LOCK, Gauges
from semisched.telemetry.observe import Finished, RequestObserver
from semisched.telemetry.table import METRICS, SECONDS_BUCKETS, TOKEN_BUCKETS, MetricSpec

if TYPE_CHECKING:
    from semisched.runtime.stats import SchedulerStats

__all__ = [
    "LOOP_TIMEOUT_S",
    "METRICS",
    "SECONDS_BUCKETS",
    "TOKEN_BUCKETS",
    "MetricSpec",
    "PrometheusMetrics",
]

#: Longest wait (wall seconds) of a scrape from another thread for a scheduler's event
#: loop to take its statistics; past it, that scrape leaves the scheduler's gauges out.
LOOP_TIMEOUT_S = 2.0
_RETRIED = {Decision.RETRY, Decision.FAILOVER}


def _call_soon() -> Callable[[Callable[[], object]], object] | None:
    """How another thread runs a callable on the running event loop (asyncio's
    ``call_soon_threadsafe``, trio's ``run_sync_soon``); ``None``: neither."""
    try:
        return asyncio.get_running_loop().call_soon_threadsafe
    except RuntimeError:
        pass
    try:
        import trio
    except ImportError:
        return None
    try:
        return trio.lowlevel.current_trio_token().run_sync_soon
    except RuntimeError:
        return None


def _tenant(name: str) -> str:
    return name or DEFAULT_TENANT


class _Instruments:
    """One registry's counters, histograms and gauge collector (shared by its schedulers)."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.submitted = _counter("semisched_requests_submitted_total", registry)
        self.requests = _counter("semisched_requests_total", registry)
        self.decisions = _counter("semisched_decisions_total", registry)
        self.spend = _counter("semisched_spend_usd_total", registry)
        self.queue_wait = _histogram("semisched_queue_wait_seconds", registry, SECONDS_BUCKETS)
        self.ttft = _histogram("semisched_time_to_first_token_seconds", registry, SECONDS_BUCKETS)
        self.duration = _histogram("semisched_request_duration_seconds", registry, SECONDS_BUCKETS)
        self.prompt_tokens = _histogram("semisched_prompt_tokens", registry, TOKEN_BUCKETS)
        self.output_tokens = _histogram("semisched_output_tokens", registry, TOKEN_BUCKETS)
        self.gauges = Gauges()
        registry.register(self.gauges)


def _counter(name: str, registry: CollectorRegistry) -> Counter:
    spec = METRICS[name]
    return Counter(name.removesuffix("_total"), spec.help, spec.labels, registry=registry)


def _histogram(name: str, registry: CollectorRegistry, buckets: tuple[float, ...]) -> Histogram:
    spec = METRICS[name]
    return Histogram(name, spec.help, spec.labels, registry=registry, buckets=buckets)


_BY_REGISTRY: weakref.WeakKeyDictionary[CollectorRegistry, _Instruments] = (
    weakref.WeakKeyDictionary()
)


def _instruments(registry: CollectorRegistry) -> _Instruments:
    with LOCK:
        found = _BY_REGISTRY.get(registry)
        if found is None:
            found = _BY_REGISTRY[registry] = _Instruments(registry)
        return found


class _Open:
    """One request's times and labels while it is open."""

    __slots__ = ("klass", "sent", "submitted", "tenant")

    def __init__(self, request: Request, now: float) -> None:
        self.klass = request.klass
        self.tenant = _tenant(request.tenant)
        self.submitted = now
        self.sent: float | None = None  # the first send


class PrometheusMetrics(RequestObserver):
    """One scheduler's Prometheus metrics (module docstring).

    Args:
        statistics: The scheduler's ``statistics()`` (the gauges read it at scrape
            time; a bound method is held weakly, so the metrics never keep a
            scheduler alive).
        registry: Where the metrics live (``None``: ``prometheus_client.REGISTRY``).
            They are registered there once and shared by every scheduler using it.

    Raises:
        ValueError: Another collector already registered one of these names.
    """

    def __init__(
        self,
        statistics: Callable[[], SchedulerStats],
        *,
        registry: CollectorRegistry | None = None,
    ) -> None:
        self._statistics: Callable[[], Callable[[], SchedulerStats] | None]
        if isinstance(statistics, MethodType):
            self._statistics = weakref.WeakMethod(statistics)
        else:
            self._statistics = lambda: statistics
        self.registry = REGISTRY if registry is None else registry
        self._m = _instruments(self.registry)
        with LOCK:
            self._m.gauges.sources.add(self)
        self._open: dict[str, _Open] = {}
        self._children: dict[tuple[int, tuple[str, ...]], Any] = {}
        self._loop: tuple[Callable[[Callable[[], object]], object] | None, int] | None = None

    def __repr__(self) -> str:
        return f"<PrometheusMetrics open={len(self._open)}>"

    def read_statistics(self, timeout_s: float | None = None) -> SchedulerStats | None:
        """The scheduler's statistics now, taken on its event loop (module docstring);
        ``None``: the scheduler is gone, or its loop did not answer within ``timeout_s``
        (default `LOOP_TIMEOUT_S`)."""
        read = self._statistics()
        if read is None:
            return None
        if self._loop is None or self._loop[0] is None or self._loop[1] == threading.get_ident():
            return read()  # not running yet, an unknown loop, or the loop's own thread
        done: Future[SchedulerStats] = Future()

        def on_loop() -> None:
            if done.set_running_or_notify_cancel():
                try:
                    done.set_result(read())
                except BaseException as exc:
                    done.set_exception(exc)

        try:
            self._loop[0](on_loop)
        except RuntimeError:  # its loop has finished: nothing changes the scheduler now
            return read()
        try:
            return done.result(timeout=LOOP_TIMEOUT_S if timeout_s is None else timeout_s)
        except TimeoutError:
            done.cancel()
            return None

    def submitted(self, request: Request, now: float) -> None:
        if self._loop is None:
            self._loop = (_call_soon(), threading.get_ident())
        state = self._open[request.id] = _Open(request, now)
        self._child(self._m.submitted, state.klass, state.tenant).inc()

    def sent(self, request: Request, attempt: int, endpoint: str, now: float) -> None:
        # Only noted here: the histogram is observed at the end, off the request's way
        # to the provider.
        state = self._open.get(request.id)
        if state is not None and state.sent is None:
            state.sent = now

    def decided(self, request: Request, explanation: Explanation, now: float) -> None:
        self._decision(explanation)
        decision = explanation.decision
        if decision is Decision.DEFER:
            outcome = "deferred"
        elif decision in _RETRIED:
            outcome = "retried"
        else:  # pragma: no cover - terminal decisions come with finished()
            return
        self._child(self._m.requests, outcome, request.klass, explanation.endpoint,
                                _tenant(request.tenant)).inc()  # fmt: skip

    def first_token(self, request: Request, now: float) -> None:
        state = self._open.get(request.id)
        if state is not None:
            self._child(self._m.ttft, state.klass, state.tenant).observe(now - state.submitted)

    def finished(self, request: Request, finished: Finished, now: float) -> None:
        state = self._open.pop(request.id, None)
        klass, tenant = request.klass, _tenant(request.tenant)
        outcome = finished.outcome.value
        m = self._m
        self._child(m.requests, outcome, klass, finished.endpoint, tenant).inc()
        if finished.explanation is not None:
            self._decision(finished.explanation)
        if state is not None:
            self._child(m.duration, klass, tenant, outcome).observe(now - state.submitted)
            if state.sent is not None:
                wait = state.sent - state.submitted
                self._child(m.queue_wait, state.klass, state.tenant).observe(wait)
        if finished.prompt_tokens is not None:
            self._child(m.prompt_tokens, klass, tenant).observe(finished.prompt_tokens)
        if finished.output_tokens is not None:
            self._child(m.output_tokens, klass, tenant).observe(finished.output_tokens)
        if finished.cost_usd is not None:
            self._child(m.spend, tenant, finished.endpoint).inc(finished.cost_usd)

    def _decision(self, explanation: Explanation) -> None:
        self._child(self._m.decisions, explanation.decision.value, explanation.rule).inc()

    def _child(self, metric: Any, *labels: str) -> Any:
        """``metric.labels(*labels)``, cached: the label sets are few (classes, tenants,
        endpoints, fixed outcomes), and ``labels()`` checks and locks on every call."""
        key = (id(metric), labels)
        child = self._children.get(key)
        if child is None:
            child = self._children[key] = metric.labels(*labels)
        return child
