"""Meet a provider's rate limit and its transient errors: without, then with, a client budget.

Starts the mock provider (``python -m mockprovider``) on a free loopback port,
50x faster than real time, allowing 30 requests a minute and failing 10% of
the requests it admits with a 5xx. Sends the same 60 requests twice through
``Scheduler``: once with no budget (the client discovers the limit from 429s
and retries into them), once with ``BudgetConfig(rpm=30)`` (it paces itself
and meets no 429). Both runs retry the 5xx answers with the core's retry
policy (exponential back-off, seeded jitter, never past a deadline). Prints
what each run saw.

    python examples/rate_limits.py
"""

from __future__ import annotations

import collections

import anyio
import openai

from mockprovider.launch import running_server
from semisched import RetryPolicy, RuntimeOptions, Scheduler, SemischedError, preset
from semisched.core import BudgetConfig
from semisched.runtime.clock import ScaledClock

SCALE = 50.0  # virtual seconds per wall second, shared by the mock and the scheduler
LIMIT_RPM = 30
MOCK = ("--rpm", str(LIMIT_RPM), "--error-rate", "0.1", "--seed", "3")


async def run(base_url: str, budget: BudgetConfig | None) -> str:
    """Send 60 requests, 2 a second; return one line about what happened."""
    config = preset("final_adrr_olc", budget=budget, retry=RetryPolicy(max_attempts=6))
    clock = ScaledClock(SCALE)
    client = openai.AsyncOpenAI(base_url=base_url, api_key="not-needed-for-the-mock")
    outcomes: collections.Counter[str] = collections.Counter()
    async with (
        client,
        Scheduler(client, config=config, clock=clock, options=RuntimeOptions(seed=1)) as scheduler,
    ):

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

        start = clock.now()
        async with anyio.create_task_group() as tg:
            for i in range(60):
                tg.start_soon(ask, i)
                await clock.sleep(0.5)
        elapsed = clock.now() - start
        stats = scheduler.statistics()
    failures = stats.engine.failures
    return (
        f"429s {failures.rate_limited}, 5xx {failures.server_error}, "
        f"retries {stats.counters.retries}, outcomes {dict(sorted(outcomes.items()))}, "
        f"{elapsed:.0f} s (virtual)"
    )


def main() -> None:
    for label, budget in (("no budget", None), ("budget = limit", BudgetConfig(rpm=LIMIT_RPM))):
        with running_server("--time-scale", str(SCALE), *MOCK) as url:  # a fresh provider
            print(f"{label:15s} {anyio.run(run, url, budget)}")


if __name__ == "__main__":
    main()
