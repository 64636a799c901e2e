"""Shape a mixed interactive/batch workload through the drop-in facade.

Starts the mock provider (``python -m mockprovider``) on a free loopback port,
100x faster than real time, and sends 40 short interactive questions and 40
long batch jobs through ``scheduler.client.chat.completions.create`` — the
same call an application makes on ``AsyncOpenAI``, plus ``deadline``. Prints
what happened per class.

    python examples/mixed_workload.py
"""

from __future__ import annotations

import collections
import random

import anyio
import openai

from mockprovider.launch import running_server
from semisched import Scheduler, SemischedError
from semisched.runtime.clock import ScaledClock

SCALE = 100.0  # virtual seconds per wall second, shared by the mock and the scheduler


async def main(base_url: str) -> None:
    rng = random.Random(7)
    client = openai.AsyncOpenAI(base_url=base_url, api_key="not-needed-for-the-mock")
    outcomes: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
    latencies: dict[str, list[float]] = collections.defaultdict(list)
    clock = ScaledClock(SCALE)
    async with client, Scheduler(client, config="final_adrr_olc", clock=clock) as scheduler:
        llm = scheduler.client  # the one-line change: use this where you used `client`

        async def ask(kind: str, i: int) -> None:
            tokens = rng.randint(10, 60) if kind == "interactive" else rng.randint(300, 3000)
            start = clock.now()
            try:
                await llm.chat.completions.create(
                    model="mock-1",
                    messages=[{"role": "user", "content": f"{kind} request {i}"}],
                    max_completion_tokens=tokens,
                    deadline=30 if kind == "interactive" else 600,
                )
                outcomes[kind]["completed"] += 1
                latencies[kind].append(clock.now() - start)
            except SemischedError as exc:
                outcomes[kind][type(exc).__name__] += 1

        async with anyio.create_task_group() as tg:
            for i in range(40):
                tg.start_soon(ask, "batch", i)
                tg.start_soon(ask, "interactive", i)
                await clock.sleep(rng.expovariate(1.0))  # ~1 arrival per virtual second
        stats = scheduler.statistics()
    for kind in ("interactive", "batch"):
        lat = sorted(latencies[kind])
        p95 = lat[int(0.95 * (len(lat) - 1))] if lat else float("nan")
        print(f"{kind:12s} {dict(outcomes[kind])}  p95 latency {p95:6.1f} s (virtual)")
    engine, runtime = stats.engine.counters, stats.counters
    print(
        f"severity now {stats.severity:.2f}; sent {engine.sent} (retries {runtime.retries}, "
        f"429s {runtime.throttled}), deferrals {engine.deferrals}, rejected {runtime.rejected}, "
        f"deadline exceeded {runtime.deadline_exceeded}, succeeded {runtime.succeeded}"
    )


if __name__ == "__main__":
    with running_server("--time-scale", str(SCALE)) as url:
        anyio.run(main, url)
