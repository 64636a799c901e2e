"""Shape a mixed interactive/batch workload through the drop-in facade.

Runs the mock provider in process, in virtual time (trio's ``MockClock``, as in
``examples/virtual_time.py``: what it prints does not depend on how busy the
machine is), and sends 40 short interactive questions and 40 long batch jobs
through ``scheduler.client.chat.completions.create`` — the same call an
application makes on ``AsyncOpenAI``, plus ``deadline``. Prints what happened
per class.

    python examples/mixed_workload.py
"""

from __future__ import annotations

import collections
import random

import anyio
import httpx2
import openai
import trio.testing

from mockprovider.app import MockConfig, create_app
from mockprovider.virtual import inline_platform_lookup
from semisched import Scheduler, SemischedError


async def main() -> None:
    rng = random.Random(7)
    app = create_app(MockConfig(), clock=anyio.current_time)
    outcomes: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
    latencies: dict[str, list[float]] = collections.defaultdict(list)
    transport = httpx2.ASGITransport(app=app)
    async with (
        httpx2.AsyncClient(transport=transport, base_url="http://mock") as http,
        openai.AsyncOpenAI(base_url="http://mock/v1", api_key="k", http_client=http) as client,
        # An inline prior source: the learned model answers from a worker thread, which
        # races a virtual clock (examples/virtual_time.py).
        Scheduler(client, config="final_adrr_olc", priors="heuristic") as scheduler,
    ):
        llm = scheduler.client  # the one-line change: use this where you used `client`
        warm_up = [{"role": "user", "content": "warm-up"}]  # one call first
        await llm.chat.completions.create(model="mock-1", messages=warm_up, max_tokens=1)

        async def ask(kind: str, i: int, tokens: int) -> None:
            start = anyio.current_time()
            try:
                await llm.chat.completions.create(
                    model="mock-1",
                    messages=[{"role": "user", "content": f"{kind} request {i}"}],
                    max_completion_tokens=tokens,
                    deadline=30 if kind == "interactive" else 600,
                )
                outcomes[kind]["completed"] += 1
                latencies[kind].append(anyio.current_time() - start)
            except SemischedError as exc:
                outcomes[kind][type(exc).__name__] += 1

        async with anyio.create_task_group() as tg:
            for i in range(40):
                # Drawn here, not in the tasks: trio runs ready tasks in a random order.
                tg.start_soon(ask, "batch", i, rng.randint(300, 3000))
                tg.start_soon(ask, "interactive", i, rng.randint(10, 60))
                await anyio.sleep(rng.expovariate(1.0))  # ~1 arrival per virtual second
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
    with inline_platform_lookup():  # openai's platform lookup on the loop, not in a thread
        anyio.run(
            main,
            backend="trio",
            backend_options={"clock": trio.testing.MockClock(autojump_threshold=0)},
        )
