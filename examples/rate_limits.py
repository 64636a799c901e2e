"""Meet a provider's rate limit and its transient errors: without, then with, a client budget.

Runs the mock provider in process, allowing 30 requests a minute and failing
10% of the requests it admits with a 5xx, in virtual time (trio's
``MockClock``, as in ``examples/virtual_time.py``): minutes of traffic take
a second, and what it prints does not depend on how busy the machine is.
Sends the same 60 requests twice through ``Scheduler``: once with no budget
(the client discovers the limit from 429s and retries into them), once with
``BudgetConfig(rpm=30)`` (it paces itself and meets no 429). Both runs retry
the 5xx answers with the core's retry policy (exponential back-off, seeded
jitter, never past a deadline). Prints what each run saw.

    python examples/rate_limits.py
"""

from __future__ import annotations

import collections

import anyio
import httpx2
import openai
import trio.testing

from mockprovider.app import MockConfig, create_app
from mockprovider.virtual import inline_platform_lookup
from semisched import (
    BudgetConfig,
    RetryPolicy,
    RuntimeOptions,
    Scheduler,
    SemischedError,
    preset,
)

LIMIT_RPM = 30


async def run(budget: BudgetConfig | None) -> str:
    """Send 60 requests, 2 a second, to a fresh mock; return one line about what happened."""
    app = create_app(MockConfig(rpm=LIMIT_RPM, error_rate=0.1, seed=3), clock=anyio.current_time)
    config = preset("final_adrr_olc", budget=budget, retry=RetryPolicy(max_attempts=6))
    outcomes: collections.Counter[str] = collections.Counter()
    transport = httpx2.ASGITransport(app=app)
    async with (
        httpx2.AsyncClient(transport=transport, base_url="http://mock") as http,
        openai.AsyncOpenAI(base_url="http://mock/v1", api_key="k", http_client=http) as client,
        Scheduler(
            client, config=config, priors="heuristic", options=RuntimeOptions(seed=1)
        ) as scheduler,
    ):
        # One call first: its answer teaches the scheduler before the measured part.
        warm_up = [{"role": "user", "content": "warm-up"}]
        await scheduler.submit(model="mock-1", messages=warm_up, max_completion_tokens=1)
        await anyio.sleep(60.0)  # a fresh window for the measured part

        async def ask(i: int) -> None:
            try:
                await scheduler.submit(
                    model="mock-1",
                    messages=[{"role": "user", "content": f"question {i}"}],
                    max_completion_tokens=40,
                    deadline=300,
                )
                outcomes["completed"] += 1
            except SemischedError as exc:
                outcomes[type(exc).__name__] += 1

        start = anyio.current_time()
        async with anyio.create_task_group() as tg:
            for i in range(60):
                tg.start_soon(ask, i)
                await anyio.sleep(0.5)
        elapsed = anyio.current_time() - start
        stats = scheduler.statistics()
    failures = stats.engine.failures
    return (
        f"429s {failures.rate_limited}, 5xx {failures.server_error}, "
        f"retries {stats.counters.retries}, outcomes {dict(sorted(outcomes.items()))}, "
        f"{elapsed:.0f} s (virtual)"
    )


def main() -> None:
    with inline_platform_lookup():  # openai's platform lookup on the loop, not in a thread
        for label, budget in (("no budget", None), ("budget = limit", BudgetConfig(rpm=LIMIT_RPM))):
            line = anyio.run(
                run,
                budget,
                backend="trio",
                backend_options={"clock": trio.testing.MockClock(autojump_threshold=0)},
            )
            print(f"{label:15s} {line}")


if __name__ == "__main__":
    main()
