"""Operating the scheduler: Prometheus metrics, OpenTelemetry spans and explained decisions.

A burst of 300 requests (short, long and very long answers) arrives within
ten seconds while a few interactive calls keep coming; the provider answers
5% of calls with a 5xx. Overload control defers and rejects long work, the
retry policy retries the 5xx answers, and every decision is explained. The
example shows the three ways an operator sees that:

1. **Metrics**: ``Scheduler(metrics=registry)``; a few lines of what Prometheus
   would scrape (``prometheus_client.generate_latest``). A server would serve
   the registry with ``prometheus_client.start_http_server(9464)``.
2. **Logs**: a ``logging`` handler on ``semisched.decisions`` at DEBUG prints
   the first decision of each rule from the record's structured ``semisched``
   fields, and ``statistics().engine.decisions`` counts them all.
3. **Traces**: with ``opentelemetry-sdk`` installed, one span per request goes
   to an in-memory exporter (an application would export to its collector).

And it catches one `RequestRejected` and prints its
explanation: the rule that fired, the severity and the signals behind it.

Runs the SDK against the in-process mock provider in virtual time (trio's
``MockClock``, as in ``examples/virtual_time.py``): a few wall seconds.

    python examples/observability.py
"""

from __future__ import annotations

import logging
import random
import time
from collections import Counter
from typing import Any

import anyio
import httpx2
import openai
import trio.testing
from prometheus_client import CollectorRegistry, generate_latest

from mockprovider.app import MockConfig, create_app
from mockprovider.virtual import inline_platform_lookup
from semisched import RequestRejected, RuntimeOptions, Scheduler, SemischedError
from semisched.core.explain import RULES


class DecisionPrinter(logging.Handler):
    """Prints the first decision of each rule from the record's structured fields, and
    counts them all."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.seen: Counter[str] = Counter()

    def emit(self, record: logging.LogRecord) -> None:
        why: dict[str, Any] = record.semisched  # type: ignore[attr-defined]
        self.seen[why["rule"]] += 1
        if self.seen[why["rule"]] == 1:
            print(f"  {why['decision']:7s} {why['klass']:11s} {why['bucket']:6s} "
                  f"rule={why['rule']:22s} severity={why['severity']:.2f}")  # fmt: skip


def tracing() -> tuple[Any, Any]:
    """An OpenTelemetry provider exporting to memory, if ``opentelemetry-sdk`` is installed."""
    try:
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import SimpleSpanProcessor
        from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
    except ImportError:
        return None, None
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return provider, exporter


def work() -> list[tuple[float, str, int, float | None]]:
    """(arrival s, class, output tokens, deadline s): the burst, and interactive calls."""
    rng = random.Random(7)
    arrivals: list[tuple[float, str, int, float | None]] = []
    for _ in range(300):
        tokens = rng.choice((40, 300, 600, 900, 1500, 2500))
        arrivals.append((rng.uniform(0, 10), "batch", tokens, 120.0))
    arrivals += [(second + 0.5, "interactive", 40, 30.0) for second in range(30)]
    return sorted(arrivals)


async def run(registry: CollectorRegistry, provider: Any) -> RequestRejected | None:
    app = create_app(MockConfig(error_rate=0.05, seed=3), clock=anyio.current_time)
    transport = httpx2.ASGITransport(app=app)
    rejected: list[RequestRejected] = []
    async with httpx2.AsyncClient(transport=transport, base_url="http://mock") as http:
        client = openai.AsyncOpenAI(base_url="http://mock/v1", api_key="k", http_client=http)
        scheduler = Scheduler(
            client,
            priors="heuristic",
            metrics=registry,
            tracing=provider if provider is not None else False,
            options=RuntimeOptions(seed=0),
        )
        async with scheduler:
            hello = [{"role": "user", "content": "warm-up"}]  # one call first
            await scheduler.submit(model="mock-1", messages=hello, max_tokens=1)
            start = anyio.current_time()

            async def ask(klass: str, tokens: int, deadline: float | None) -> None:
                try:
                    await scheduler.submit(
                        model="mock-1",
                        messages=[{"role": "user", "content": f"a {klass} question"}],
                        max_completion_tokens=tokens,
                        metadata={"mock_output_tokens": str(tokens)},
                        klass=klass,
                        deadline=deadline,
                    )
                except RequestRejected as exc:
                    rejected.append(exc)
                except SemischedError:
                    pass  # counted in the metrics (expired, failed)

            async with anyio.create_task_group() as tg:
                for at, klass, tokens, deadline in work():
                    await anyio.sleep_until(start + at)
                    tg.start_soon(ask, klass, tokens, deadline)
            decisions = scheduler.statistics().engine.decisions
    fired = {rule: decisions.of(rule) for rule in RULES if decisions.of(rule)}
    print(f"statistics().engine.decisions: {fired}")
    return rejected[0] if rejected else None


def show_metrics(registry: CollectorRegistry) -> None:
    """The request counters, one histogram's totals and the gauges, as Prometheus scrapes them."""
    wanted = ("semisched_requests_total", "semisched_queue_wait_seconds_count",
              "semisched_severity", "semisched_queue_depth")  # fmt: skip
    for line in generate_latest(registry).decode().splitlines():
        if line.startswith(wanted):
            print(f"  {line}")


def explain(error: RequestRejected) -> None:
    why = error.explanation
    assert why is not None
    signals = why.signals
    print(f"  {type(error).__name__}: {error}")
    print(f"  rule {why.rule}: severity {why.severity:.2f} >= threshold {why.threshold} "
          f"at ladder level {why.level} (bucket {why.bucket})")  # fmt: skip
    print(f"  signals: provider_load {signals.provider_load:.2f}, queue_pressure "
          f"{signals.queue_pressure:.2f}, tail_latency_ratio "
          f"{signals.tail_latency_ratio:.2f}")  # fmt: skip
    print(f"  retry after {why.retry_after:.1f} s")


def main() -> None:
    decisions = logging.getLogger("semisched.decisions")
    decisions.setLevel(logging.DEBUG)
    printer = DecisionPrinter()
    decisions.addHandler(printer)
    registry = CollectorRegistry()
    provider, exporter = tracing()
    print("decisions, as logged (logger semisched.decisions, DEBUG):")
    with inline_platform_lookup():  # openai's platform lookup on the loop, not in a thread
        rejection = anyio.run(
            run,
            registry,
            provider,
            backend="trio",
            backend_options={"clock": trio.testing.MockClock(autojump_threshold=0)},
        )
    print(f"  ... {sum(printer.seen.values())} decisions logged in all")
    print("metrics, as Prometheus scrapes them:")
    show_metrics(registry)
    if rejection is not None:
        print("one rejection, explained (RequestRejected.explanation):")
        explain(rejection)
    if exporter is not None:
        spans = exporter.get_finished_spans()
        outcomes = Counter((s.attributes or {}).get("semisched.outcome") for s in spans)
        print(f"traces: {len(spans)} spans 'semisched.request', by outcome {dict(outcomes)}")
        shed = next(s for s in spans if (s.attributes or {}).get("semisched.outcome") == "rejected")
        attributes = {k: v for k, v in (shed.attributes or {}).items() if k != "semisched.reason"}
        print(f"  a rejected request's span: {attributes}")
    else:
        print("traces: pip install opentelemetry-sdk to see one span per request")


if __name__ == "__main__":
    wall = time.perf_counter()
    main()
    print(f"wall time {time.perf_counter() - wall:.1f} s")
