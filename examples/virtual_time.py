"""Test code that uses the scheduler in virtual time: ten busy minutes in a few seconds.

Runs the SDK against the in-process mock provider (no server, no sockets:
``httpx2.ASGITransport``) on trio with ``trio.testing.MockClock(autojump_threshold=0)``.
The mock reads the event loop's clock (``create_app(..., clock=anyio.current_time)``)
and the scheduler's default clock is the event loop's too, so every wait, deadline,
back-off and physics delay happens in virtual time, exactly. This is how
semisched's own SDK tests run; use it for yours.

Repeatable up to one thing: requests sent at the same virtual instant (several
answers end in one decode step and free several slots) reach the mock in the
order trio happens to run their tasks, and trio shuffles that order on purpose
to shake out order bugs. Here it moves the end by a fraction of a virtual
second between runs; the outcomes repeat. Assert on outcomes, not on the last
decimal of a time. The scheduler is told the provider's 60 requests a minute
(``BudgetConfig(rpm=60)``), so it paces its sends instead of retrying 429s.

Two details, both about worker threads, which race an autojumping clock (the
loop is idle while a thread runs, so the clock jumps to the next timer). An
openai client looks up the platform in a worker thread on its first request, and
so does each copy the scheduler makes of it (your client with its retries turned
off): run inside ``mockprovider.virtual.inline_platform_lookup()``, which makes
that lookup on the loop. And name an inline prior source (here
``priors="heuristic"``): the default with the ``ml`` extra installed is the
learned model, which answers from a worker thread.

    python examples/virtual_time.py
"""

from __future__ import annotations

import time

import anyio
import httpx2
import openai
import trio.testing

from mockprovider.app import MockConfig, create_app
from mockprovider.virtual import inline_platform_lookup
from semisched import RuntimeOptions, Scheduler, SemischedError
from semisched.core import BudgetConfig, preset


async def main() -> None:
    app = create_app(MockConfig(rpm=60), clock=anyio.current_time)
    transport = httpx2.ASGITransport(app=app)
    async with httpx2.AsyncClient(transport=transport, base_url="http://mock") as http:
        client = openai.AsyncOpenAI(base_url="http://mock/v1", api_key="k", http_client=http)
        outcomes: dict[str, int] = {}
        config = preset("final_adrr_olc", budget=BudgetConfig(rpm=60))
        async with Scheduler(
            client, config=config, priors="heuristic", options=RuntimeOptions(seed=0)
        ) as scheduler:
            warm_up = {"role": "user", "content": "warm-up"}  # one call first
            await scheduler.submit(model="mock-1", messages=[warm_up], max_completion_tokens=1)
            start = anyio.current_time()

            async def ask(i: int) -> None:
                try:
                    await scheduler.submit(
                        model="mock-1",
                        messages=[{"role": "user", "content": f"q{i}"}],
                        max_completion_tokens=20 + (i * 37) % 400,
                        deadline=120,
                    )
                    name = "completed"
                except SemischedError as exc:
                    name = type(exc).__name__
                outcomes[name] = outcomes.get(name, 0) + 1

            async with anyio.create_task_group() as tg:
                for i in range(600):  # one a second for ten minutes, against 60 a minute
                    tg.start_soon(ask, i)
                    await anyio.sleep(1.0)
            elapsed = anyio.current_time() - start
            stats = scheduler.statistics()
    print(f"virtual time {elapsed:.1f} s; outcomes {dict(sorted(outcomes.items()))}")
    print(f"429s {stats.counters.throttled}, retries {stats.counters.retries}")


if __name__ == "__main__":
    wall = time.perf_counter()
    with inline_platform_lookup():  # openai's platform lookup on the loop, not in a thread
        anyio.run(
            main,
            backend="trio",
            backend_options={"clock": trio.testing.MockClock(autojump_threshold=0)},
        )
    print(f"wall time {time.perf_counter() - wall:.2f} s")
