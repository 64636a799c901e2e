"""What the async SDK costs on top of the bare openai client, with and without its telemetry
(benchmarks, never asserted).

Every condition is measured in the same run against an *instant* in-process provider
(``httpx2.MockTransport`` answering a fixed ChatCompletion), so only client side work is
timed. The conditions (`CONDITIONS`):

``bare``
    The openai client alone (``AsyncOpenAI.chat.completions.create``).
``off``
    ``Scheduler(metrics=False, tracing=False)``: no telemetry at all.
``api``
    ``Scheduler(tracing=True)`` with no OpenTelemetry SDK configured: the API's no-op spans
    (the scheduler's default). The run checks that the global tracer really is a no-op.
``metrics``
    ``Scheduler(metrics=CollectorRegistry(), tracing=False)``: the Prometheus metrics alone.
``spans``
    ``Scheduler(metrics=False, tracing=provider)``: the real OpenTelemetry SDK alone
    (``TracerProvider`` with a ``SimpleSpanProcessor`` into an ``InMemorySpanExporter``),
    so every span is recorded, ended and exported (built when its request ends).
``on``
    Both: ``Scheduler(metrics=CollectorRegistry(), tracing=provider)``.
``live``
    ``on`` with the spans started at submission and current during each call
    (``RequestTracing(provider, nest_http=True)``, what an instrumented HTTP client's
    spans nest under): the cost of nesting.

Each run checks that a condition recording spans or metrics left one span and one counted
submission per call.

What is measured:

``added latency``
    For one call at a time with an idle provider: wall time from the caller's ``submit``
    (or the bare ``create``) to the moment the transport receives the HTTP request. Each
    iteration times ``bare`` and then every scheduled condition (in an order rotated per
    iteration), so drift hits all alike; a condition's added latency is the per-iteration
    difference from ``bare``. Targets: scheduler p99 <= 1 ms; telemetry ``on`` adds at
    most 5% to ``off``'s added p50 (``vs_off_pct``).
``throughput``
    ``concurrency`` callers issue ``calls`` requests as fast as they can; calls per wall
    second, the median of ``repeats`` rounds (each round runs every condition once, in
    turn), divided by ``bare``'s. Targets: >= 0.9 with telemetry off, >= 0.85 on.

Priors: ``"heuristic"`` by default, so that the scheduler, not a length model, is timed
(the SDK's default ``"auto"`` loads the learned model when the ``ml`` extra is installed,
and each prior then waits for its inference in a worker thread: tens of milliseconds on a
small CPU). ``priors=`` takes any name `Scheduler` does.
"""

from __future__ import annotations

import contextlib
import math
import random
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Final

import anyio
import httpx2
import numpy as np
import openai

from bench.experiments import ProgressReporter
from semisched import Scheduler
from semisched.core.config import preset

__all__ = ["CONDITIONS", "sdk_overhead", "table"]

#: The scheduled conditions, in the table's order (``bare`` comes first).
CONDITIONS: Final = ("off", "api", "metrics", "spans", "on", "live")
_REGISTRY, _API, _SDK = "registry", "API no-op", "SDK, in-memory"
_LIVE = "SDK, live spans"
#: Each condition's metrics and tracing.
_SETTINGS: Final = {"bare": ("-", "-"), "off": ("off", "off"), "api": ("off", _API),
                    "metrics": (_REGISTRY, "off"), "spans": ("off", _SDK),
                    "on": (_REGISTRY, _SDK), "live": (_REGISTRY, _LIVE)}  # fmt: skip

_BODY = {
    "id": "chatcmpl-bench",
    "object": "chat.completion",
    "created": 0,
    "model": "mock-1",
    "choices": [
        {"index": 0, "message": {"role": "assistant", "content": "ok"}, "finish_reason": "stop"}
    ],
    "usage": {"prompt_tokens": 5, "completion_tokens": 1, "total_tokens": 6},
}
_ARGS: dict[str, Any] = {
    "model": "mock-1",
    "messages": [{"role": "user", "content": "hello"}],
    "max_tokens": 16,
}
_WARM_UP = 50


def _client(on_request: Callable[[], None]) -> openai.AsyncOpenAI:
    def handler(request: httpx2.Request) -> httpx2.Response:
        on_request()
        return httpx2.Response(200, json=_BODY)

    http = httpx2.AsyncClient(transport=httpx2.MockTransport(handler))
    return openai.AsyncOpenAI(
        base_url="http://bench/v1", api_key="bench", http_client=http, max_retries=0
    )


@dataclass(slots=True)
class _Telemetry:
    """How many spans and counted submissions one condition's scheduler recorded (``None``:
    it records none)."""

    spans: Callable[[], int] | None = None
    counted: Callable[[], float] | None = None


@contextlib.contextmanager
def _telemetry(condition: str) -> Iterator[tuple[dict[str, Any], _Telemetry]]:
    """The ``Scheduler`` keyword arguments of ``condition`` and how to read what it recorded."""
    metrics, tracing = _SETTINGS[condition]
    settings: dict[str, Any] = {"metrics": False, "tracing": tracing == _API}
    telemetry = _Telemetry()
    provider: Any = None
    if tracing == _API:
        from opentelemetry import trace

        if trace.get_tracer("semisched.bench").start_span("probe").is_recording():
            raise RuntimeError(f"sdk-overhead: a global OpenTelemetry SDK is configured, so "
                               f"{condition!r} would not be the API's no-op")  # fmt: skip
    try:
        if metrics == _REGISTRY:
            from prometheus_client import CollectorRegistry

            registry = settings["metrics"] = CollectorRegistry()

            def counted() -> float:
                return sum(s.value for family in registry.collect() for s in family.samples
                           if s.name == "semisched_requests_submitted_total")  # fmt: skip

            telemetry.counted = counted
        if tracing in (_SDK, _LIVE):
            from opentelemetry.sdk.trace import TracerProvider
            from opentelemetry.sdk.trace.export import SimpleSpanProcessor
            from opentelemetry.sdk.trace.export.in_memory_span_exporter import (
                InMemorySpanExporter,
            )

            exporter = InMemorySpanExporter()
            provider = TracerProvider()
            provider.add_span_processor(SimpleSpanProcessor(exporter))
            if tracing == _LIVE:
                from semisched.telemetry.tracing import RequestTracing

                settings["observers"] = [RequestTracing(provider, nest_http=True)]
            else:
                settings["tracing"] = provider
            telemetry.spans = lambda: len(exporter.get_finished_spans())
    except ModuleNotFoundError as exc:  # pragma: no cover - the test extra has both
        raise ModuleNotFoundError(
            f"sdk-overhead's {condition!r} condition needs prometheus-client and "
            f"opentelemetry-sdk ({exc.name} is missing): "
            "pip install 'semisched[metrics]' opentelemetry-sdk"
        ) from exc
    try:
        yield settings, telemetry
    finally:
        if provider is not None:
            provider.shutdown()


def _check(condition: str, telemetry: _Telemetry, calls: int) -> None:
    """A condition that records spans or metrics recorded one of each per call."""
    for what, read in (("spans", telemetry.spans), ("counted submissions", telemetry.counted)):
        if read is not None and read() != calls:
            raise RuntimeError(f"sdk-overhead: {condition!r} made {calls} calls but recorded "
                               f"{read():.0f} {what}")  # fmt: skip


def _scheduler(client: openai.AsyncOpenAI, settings: dict[str, Any], priors: str,
               max_inflight: int) -> Scheduler:  # fmt: skip
    return Scheduler(client, config=preset("final_adrr_olc", max_inflight=max_inflight),
                     priors=priors, **settings)  # fmt: skip


async def _latency(samples: int, priors: str) -> dict[str, np.ndarray]:
    """Per condition, each iteration's seconds from the call to the transport (``bare``
    too); the scheduled conditions' added seconds are these minus ``bare``'s."""
    stamp: list[float] = []
    client = _client(lambda: stamp.append(time.perf_counter()))
    times = {name: np.empty(samples) for name in ("bare", *CONDITIONS)}
    order = list(CONDITIONS)
    rotate = random.Random(0)
    async with client, contextlib.AsyncExitStack() as stack:
        schedulers: dict[str, Scheduler] = {}
        checks: dict[str, _Telemetry] = {}
        for condition in CONDITIONS:
            settings, checks[condition] = stack.enter_context(_telemetry(condition))
            scheduler = _scheduler(client, settings, priors, 64)
            schedulers[condition] = await stack.enter_async_context(scheduler)
        for i in range(samples + _WARM_UP):  # the first iterations warm up
            t0 = time.perf_counter()
            await client.chat.completions.create(**_ARGS)
            measured = {"bare": stamp[-1] - t0}
            rotate.shuffle(order)
            for condition in order:
                t0 = time.perf_counter()
                await schedulers[condition].submit(**_ARGS, deadline=60)
                measured[condition] = stamp[-1] - t0
            if i >= _WARM_UP:
                for name, seconds in measured.items():
                    times[name][i - _WARM_UP] = seconds
        for condition in CONDITIONS:
            _check(condition, checks[condition], samples + _WARM_UP)
    return times


async def _throughput(calls: int, concurrency: int, condition: str, priors: str) -> float:
    client = _client(lambda: None)
    per_worker = calls // concurrency

    async def run(create: Callable[..., Any]) -> float:
        async def worker() -> None:
            for _ in range(per_worker):
                await create(**_ARGS)

        t0 = time.perf_counter()
        async with anyio.create_task_group() as tg:
            for _ in range(concurrency):
                tg.start_soon(worker)
        return per_worker * concurrency / (time.perf_counter() - t0)

    async with client:
        if condition == "bare":
            return await run(client.chat.completions.create)
        with _telemetry(condition) as (settings, telemetry):
            async with _scheduler(client, settings, priors, concurrency) as scheduler:
                rate = await run(scheduler.client.chat.completions.create)
            _check(condition, telemetry, per_worker * concurrency)
            return rate


def _percentile(values: np.ndarray, q: float) -> float:
    return float(np.percentile(values, q)) * 1000.0


def sdk_overhead(
    *,
    samples: int = 2000,
    calls: int = 4000,
    concurrency: int = 64,
    repeats: int = 3,
    priors: str = "heuristic",
) -> list[dict[str, object]]:
    """Measure every condition (module docstring); one row each, ``bare`` first.

    Row keys: ``condition``, ``metrics``, ``tracing``, ``p50_ms``/``p99_ms`` (call to
    transport), ``added_p50_ms``/``added_p99_ms`` (over ``bare``, per iteration),
    ``vs_off_pct`` (added p50 over ``off``'s, in percent), ``calls_per_s``,
    ``throughput_ratio`` (over ``bare``) and ``vs_off_throughput`` (over ``off``).
    """
    start = time.perf_counter()
    print(f"  latency: {samples} calls per condition, {len(CONDITIONS) + 1} conditions "
          "interleaved...", file=sys.stderr, flush=True)  # fmt: skip
    times = anyio.run(_latency, samples, priors)
    rates: dict[str, list[float]] = {name: [] for name in ("bare", *CONDITIONS)}
    for name in rates:  # a discarded warm-up round: first calls pay for lazy imports
        anyio.run(_throughput, 2 * concurrency, concurrency, name, priors)
    report = ProgressReporter(f"throughput runs of {calls} calls")
    runs = [name for _ in range(repeats) for name in rates]
    for done, name in enumerate(runs, 1):
        rates[name].append(anyio.run(_throughput, calls, concurrency, name, priors))
        report(done, len(runs), time.perf_counter() - start)
    bare_rate = float(np.median(rates["bare"]))
    added_off = _percentile(times["off"] - times["bare"], 50)
    off_rate = float(np.median(rates["off"]))
    rows: list[dict[str, object]] = []
    for name in ("bare", *CONDITIONS):
        metrics, tracing = _SETTINGS[name]
        added = times[name] - times["bare"]
        rate = float(np.median(rates[name]))
        nan = name == "bare"  # nothing added to itself
        rows.append({
            "condition": name, "metrics": metrics, "tracing": tracing, "priors": priors,
            "p50_ms": _percentile(times[name], 50), "p99_ms": _percentile(times[name], 99),
            "added_p50_ms": math.nan if nan else _percentile(added, 50),
            "added_p99_ms": math.nan if nan else _percentile(added, 99),
            "vs_off_pct": math.nan if nan else 100.0 * (_percentile(added, 50) / added_off - 1),
            "calls_per_s": rate, "throughput_ratio": rate / bare_rate,
            "vs_off_throughput": rate / off_rate,
        })  # fmt: skip
    return rows


def table(rows: list[dict[str, object]]) -> str:
    """The rows as a text table, then the targets."""
    head = ("condition", "metrics", "tracing", "p50 ms", "added p50 ms", "added p99 ms",
            "vs off", "calls/s", "vs bare", "vs off")  # fmt: skip
    lines = ["{:<9} {:<9} {:<15} {:>7} {:>12} {:>12} {:>7} {:>8} {:>7} {:>7}".format(*head)]
    for row in rows:
        bare = row["condition"] == "bare"

        def num(key: str, fmt: str, row: dict[str, object] = row) -> str:
            value = row[key]
            assert isinstance(value, float)
            return format(value, fmt)

        lines.append(
            f"{row['condition']!s:<9} {row['metrics']!s:<9} {row['tracing']!s:<15} "
            f"{num('p50_ms', '.3f'):>7} {'-' if bare else num('added_p50_ms', '.3f'):>12} "
            f"{'-' if bare else num('added_p99_ms', '.3f'):>12} "
            f"{'-' if bare else num('vs_off_pct', '+.1f') + '%':>7} "
            f"{num('calls_per_s', '.0f'):>8} {num('throughput_ratio', '.3f'):>7} "
            f"{num('vs_off_throughput', '.3f'):>7}"
        )
    by = {str(r["condition"]): r for r in rows}
    on, off, api = by["on"], by["off"], by["api"]
    lines += [
        f"telemetry on adds {on['vs_off_pct']:+.1f}% to off's added latency (p50; target "
        f"<= +5%; the API no-op, the observer calls with nothing recorded, adds "
        f"{api['vs_off_pct']:+.1f}%); throughput of bare: on {on['throughput_ratio']:.3f} "
        f"(target >= 0.85), off {off['throughput_ratio']:.3f} (target >= 0.9)",
    ]
    return "\n".join(lines)
