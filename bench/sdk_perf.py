"""What the async SDK costs on top of the bare openai client (benchmarks, never asserted).

Both are measured in the same run against an *instant* in-process provider
(``httpx2.MockTransport`` answering a fixed ChatCompletion), so only client
side work is timed:

``added latency``
    For one call at a time with an idle provider: wall time from the caller's
    ``submit`` (or the bare ``create``) to the moment the transport receives
    the HTTP request. The scheduler's extra is the difference of the two.
    Target: scheduler p99 <= 1 ms.
``throughput``
    ``concurrency`` callers issue ``calls`` requests as fast as they can; calls
    per wall second through the scheduler divided by the bare client's.
    Target: >= 0.8.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import anyio
import httpx2
import numpy as np
import openai

from semisched import Scheduler
from semisched.core.config import preset

__all__ = ["sdk_overhead"]

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


def _client(on_request: Callable[[], None]) -> openai.AsyncOpenAI:
    def handler(request: httpx2.Request) -> httpx2.Response:
        on_request()
        return httpx2.Response(200, json=_BODY)

    http = httpx2.AsyncClient(transport=httpx2.MockTransport(handler))
    return openai.AsyncOpenAI(
        base_url="http://bench/v1", api_key="bench", http_client=http, max_retries=0
    )


_ARGS: dict[str, Any] = {
    "model": "mock-1",
    "messages": [{"role": "user", "content": "hello"}],
    "max_tokens": 16,
}


async def _latency(samples: int) -> dict[str, float]:
    stamp: list[float] = []
    client = _client(lambda: stamp.append(time.perf_counter()))
    bare, sched = np.empty(samples), np.empty(samples)
    config = preset("final_adrr_olc", max_inflight=64)
    async with client, Scheduler(client, config=config) as scheduler:
        for i in range(samples + 50):  # the first 50 of each warm up
            t0 = time.perf_counter()
            await client.chat.completions.create(**_ARGS)
            t_bare = stamp[-1] - t0
            t0 = time.perf_counter()
            await scheduler.submit(**_ARGS, deadline=60)
            t_sched = stamp[-1] - t0
            if i >= 50:
                bare[i - 50], sched[i - 50] = t_bare, t_sched
    ms = 1000.0
    return {
        "bare_p50_ms": float(np.percentile(bare, 50)) * ms,
        "bare_p99_ms": float(np.percentile(bare, 99)) * ms,
        "scheduler_p50_ms": float(np.percentile(sched, 50)) * ms,
        "scheduler_p99_ms": float(np.percentile(sched, 99)) * ms,
        "added_p50_ms": float(np.percentile(sched - bare, 50)) * ms,
        "added_p99_ms": float(np.percentile(sched - bare, 99)) * ms,
    }


async def _throughput(calls: int, concurrency: int, scheduled: bool) -> float:
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
        if not scheduled:
            return await run(client.chat.completions.create)
        config = preset("final_adrr_olc", max_inflight=concurrency)
        async with Scheduler(client, config=config) as scheduler:
            return await run(scheduler.client.chat.completions.create)


def sdk_overhead(
    *, samples: int = 500, calls: int = 4000, concurrency: int = 64
) -> dict[str, float]:
    """Measure added latency and relative throughput (see module docstring)."""
    row = anyio.run(_latency, samples)
    bare = [anyio.run(_throughput, calls, concurrency, False) for _ in range(3)]
    sched = [anyio.run(_throughput, calls, concurrency, True) for _ in range(3)]
    row["bare_calls_per_s"] = float(np.median(bare))
    row["scheduler_calls_per_s"] = float(np.median(sched))
    row["throughput_ratio"] = row["scheduler_calls_per_s"] / row["bare_calls_per_s"]
    return row
