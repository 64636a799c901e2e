"""Prometheus metrics of the mock provider: what ``GET /metrics`` serves.

What it is: the mock's side of an operator's dashboard. Each app (``mockprovider.app``) keeps
its own `prometheus_client.CollectorRegistry` (never the global one, so several apps in
one process never collide) with one `MockCollector` that reads the app's state at scrape
time: nothing is counted twice, and the physics gauges are exact at the scrape's virtual
instant. A fleet (``mockprovider.fleet``) serves every endpoint's metrics at its root
``/metrics`` with an ``endpoint`` label; each endpoint's own ``/NAME/metrics`` has no label.

The metrics (Prometheus text format; counters since the app was built):

===================================  =========  ==================================================
metric                               type       what
===================================  =========  ==================================================
``mock_requests_total{status}``      counter    requests to the POST routes (chat, completions,
                                                responses, embeddings) by the answer's HTTP status
                                                (``200``, ``400``, ``401``, ``429``, ``500``,
                                                ``503``, ``504``), ``dropped`` (the injected
                                                dropped connection) or ``none`` (no status line
                                                sent: a hang, or a client that gave up first)
``mock_outcomes_total{outcome}``     counter    the counters of ``/v1/mock/stats``
                                                (`MockCounters`:
                                                ``completed``, ``rate_limited_requests``,
                                                ``insufficient_quota``, ``faults_error``, ...)
``mock_prompt_tokens_total``         counter    prompt tokens of completed requests (embeddings
                                                included)
``mock_generated_tokens_total``      counter    output tokens of completed requests
``mock_active_requests``             gauge      the physics' running batch (slots in use)
``mock_waiting_requests``            gauge      the provider's hidden FIFO behind the slots
``mock_slots``                       gauge      batch slots (after a capacity loss)
``mock_iteration_seconds``           gauge      one decode iteration at the current batch size
``mock_virtual_time_seconds``        gauge      the app's virtual clock (0 before its first
                                                request; a scrape never starts the clock)
===================================  =========  ==================================================

A status is counted when its request's handler returns, so a request still being served is in
no status yet (``mock_active_requests`` or ``mock_waiting_requests`` holds it). ``/metrics``
needs no API key: it carries counts only, never a request's content, and a scraper holds no
secret.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, fields
from typing import Final

import anyio
from prometheus_client import CollectorRegistry
from prometheus_client.exposition import choose_encoder
from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from mockprovider.physics import PhysicsStats
from mockprovider.stats import MockCounters

__all__ = [
    "STATUSES",
    "MetricsSnapshot",
    "MockCollector",
    "StatusCounter",
    "Traffic",
    "metrics_endpoint",
    "metrics_registry",
]

#: The ``status`` label values every app reports from the start (at 0 until seen).
STATUSES: Final = ("200", "400", "401", "429", "500", "503", "504", "dropped", "none")
_OUTCOMES: Final = tuple(f.name for f in fields(MockCounters) if f.name != "requests")


class Traffic:
    """What an app counts for its metrics beyond ``Tally``: statuses and tokens."""

    __slots__ = ("output_tokens", "prompt_tokens", "statuses")

    def __init__(self) -> None:
        self.statuses: dict[str, int] = dict.fromkeys(STATUSES, 0)
        self.prompt_tokens = 0
        self.output_tokens = 0

    def __repr__(self) -> str:
        seen = ", ".join(f"{k}={v}" for k, v in self.statuses.items() if v)
        return f"<Traffic {seen or 'none'} tokens={self.prompt_tokens}+{self.output_tokens}>"

    def status(self, label: str) -> None:
        """Count one answer with status ``label``."""
        self.statuses[label] = self.statuses.get(label, 0) + 1

    def tokens(self, prompt: int, output: int) -> None:
        """Count a completed request's tokens."""
        self.prompt_tokens += prompt
        self.output_tokens += output


@dataclass(frozen=True, slots=True, kw_only=True)
class MetricsSnapshot:
    """One app at one scrape (what `MockCollector` exposes).

    Attributes:
        statuses: Requests to the POST routes by status label (see the module docstring).
        counters: The ``/v1/mock/stats`` counters.
        prompt_tokens: Prompt tokens of completed requests.
        output_tokens: Output tokens of completed requests.
        physics: The physics' occupancy now.
        virtual_time: The app's virtual time now (0 before its first request).
    """

    statuses: Mapping[str, int]
    counters: MockCounters
    prompt_tokens: int
    output_tokens: int
    physics: PhysicsStats
    virtual_time: float


class StatusCounter:
    """ASGI middleware of the completion routes: counts each answer's status in ``traffic``.

    The label is the status line's code; ``dropped`` when the app raised after or before
    sending it (``ConnectionDropped``, the injected fault); ``none`` when it ended (or was
    cancelled) without sending one.
    """

    def __init__(self, app: ASGIApp, traffic: Traffic) -> None:
        self.app = app
        self.traffic = traffic

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        status: str | None = None

        async def sending(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = str(message["status"])
            await send(message)

        label = "none"
        try:
            await self.app(scope, receive, sending)
            label = status or "none"
        except anyio.get_cancelled_exc_class():
            label = status or "none"
            raise
        except Exception:
            label = "dropped"
            raise
        finally:
            self.traffic.status(label)


class MockCollector(Collector):
    """The mock's metrics of one or several apps, read at each scrape.

    Args:
        sources: ``(endpoint, snapshot)`` pairs: ``endpoint`` is the value of the
            ``endpoint`` label (``None`` for a lone app: no label), ``snapshot`` reads the
            app's state now. Either every source names an endpoint or there is exactly one.
    """

    def __init__(self, sources: Sequence[tuple[str | None, Callable[[], MetricsSnapshot]]]) -> None:
        named = [name is not None for name, _ in sources]
        if not sources or (not all(named) and (any(named) or len(sources) != 1)):
            raise ValueError("sources: one unnamed source, or one named source per endpoint")
        self._sources = tuple(sources)
        self._labelled = all(named)

    def describe(self) -> Iterable[Metric]:
        return self._families()

    def collect(self) -> Iterable[Metric]:
        snapshots = [(name, read()) for name, read in self._sources]
        return self._families(snapshots)

    def _families(
        self, snapshots: Sequence[tuple[str | None, MetricsSnapshot]] = ()
    ) -> list[Metric]:
        base = ["endpoint"] if self._labelled else []

        def counter(name: str, doc: str, labels: Sequence[str] = ()) -> CounterMetricFamily:
            return CounterMetricFamily(name, doc, labels=[*base, *labels])

        def gauge(name: str, doc: str) -> GaugeMetricFamily:
            return GaugeMetricFamily(name, doc, labels=base)

        requests = counter("mock_requests", "API requests by answer status.", ["status"])
        outcomes = counter("mock_outcomes", "The /v1/mock/stats counters.", ["outcome"])
        prompt = counter("mock_prompt_tokens", "Prompt tokens of completed requests.")
        output = counter("mock_generated_tokens", "Output tokens of completed requests.")
        active = gauge("mock_active_requests", "Requests in the running batch.")
        waiting = gauge("mock_waiting_requests", "Requests in the provider's FIFO.")
        slots = gauge("mock_slots", "Batch slots.")
        iteration = gauge("mock_iteration_seconds", "One iteration at the current batch.")
        clock = gauge("mock_virtual_time_seconds", "The app's virtual clock.")
        for name, snap in snapshots:
            key = [name] if name is not None else []
            for status, count in snap.statuses.items():
                requests.add_metric([*key, status], count)
            for outcome in _OUTCOMES:
                outcomes.add_metric([*key, outcome], getattr(snap.counters, outcome))
            prompt.add_metric(key, snap.prompt_tokens)
            output.add_metric(key, snap.output_tokens)
            active.add_metric(key, snap.physics.active)
            waiting.add_metric(key, snap.physics.queued)
            slots.add_metric(key, snap.physics.slots)
            iteration.add_metric(key, snap.physics.iteration_ms / 1000.0)
            clock.add_metric(key, snap.virtual_time)
        return [requests, outcomes, prompt, output, active, waiting, slots, iteration, clock]


def metrics_registry(
    sources: Sequence[tuple[str | None, Callable[[], MetricsSnapshot]]],
) -> CollectorRegistry:
    """A fresh registry holding one `MockCollector` over ``sources``."""
    registry = CollectorRegistry(auto_describe=True)
    registry.register(MockCollector(sources))
    return registry


def metrics_endpoint(registry: CollectorRegistry) -> Callable[[Request], Awaitable[Response]]:
    """The ``GET /metrics`` handler serving ``registry``: the Prometheus text format, or
    OpenMetrics when the scraper's ``Accept`` asks for it (``prometheus_client``'s own
    negotiation). It runs on the event loop: the collectors read the physics."""

    async def endpoint(request: Request) -> Response:
        encode, content_type = choose_encoder(request.headers.get("accept", ""))
        return Response(encode(registry), headers={"content-type": content_type})

    return endpoint
