"""One key spent by chat, the Responses API and embeddings: every call scheduled, one budget.

Runs the mock provider in process with a token limit (4,000 tokens a minute), in
virtual time (trio's ``MockClock``, as in ``examples/virtual_time.py``): minutes of
traffic take a second, and what it prints does not depend on the machine. Sends the
same 45 calls twice through ``Scheduler`` (15 chat completions, 15 Responses API calls,
15 embeddings of five texts each): once with no budget (the client discovers the
limit from 429s), once with ``BudgetConfig(tpm=4000)``, where each call is charged what
its API costs (its prompt and its output cap; an embedding its input alone) and no
call meets a 429. Prints what each run saw, by API.

    python examples/every_api.py
"""

from __future__ import annotations

import collections

import anyio
import httpx2
import openai
import trio.testing

from mockprovider.app import MockConfig, create_app
from mockprovider.virtual import inline_platform_lookup
from semisched import BudgetConfig, RetryPolicy, RuntimeOptions, Scheduler, SemischedError, preset

LIMIT_TPM = 4000
TEXT = "a short question about the weather in a few words"


async def run(budget: BudgetConfig | None) -> str:
    """Send 45 calls of three APIs to a fresh mock; return one line about what happened."""
    app = create_app(MockConfig(tpm=LIMIT_TPM, seed=3), clock=anyio.current_time)
    config = preset("final_adrr_olc", budget=budget, retry=RetryPolicy(max_attempts=8))
    done: collections.Counter[str] = collections.Counter()
    transport = httpx2.ASGITransport(app=app)
    async with (
        httpx2.AsyncClient(transport=transport, base_url="http://mock") as http,
        openai.AsyncOpenAI(base_url="http://mock/v1", api_key="k", http_client=http) as client,
        Scheduler(
            client, config=config, priors="heuristic", options=RuntimeOptions(seed=1)
        ) as scheduler,
    ):
        llm = scheduler.client
        # One call first: its answer teaches the scheduler before the measured part.
        await llm.embeddings.create(model="mock-1", input="warm-up")
        await anyio.sleep(60.0)  # a fresh window for the measured part

        async def call(api: str) -> None:
            try:
                if api == "chat":
                    messages = [{"role": "user", "content": TEXT}]
                    await llm.chat.completions.create(model="mock-1", messages=messages,
                                                      max_completion_tokens=120)  # fmt: skip
                elif api == "responses":
                    await llm.responses.create(model="mock-1", input=TEXT, max_output_tokens=120)
                else:
                    await llm.embeddings.create(model="mock-1", input=[TEXT] * 5)
                done[api] += 1
            except SemischedError as exc:
                done[type(exc).__name__] += 1

        start = anyio.current_time()
        async with anyio.create_task_group() as tg:
            for i in range(45):
                tg.start_soon(call, ("chat", "responses", "embeddings")[i % 3])
                await anyio.sleep(1.0)
        elapsed = anyio.current_time() - start
        stats = scheduler.statistics()
    return (
        f"429s {stats.engine.failures.rate_limited:3d}, answered {dict(sorted(done.items()))}, "
        f"{elapsed:.0f} s (virtual)"
    )


def main() -> None:
    with inline_platform_lookup():  # openai's platform lookup on the loop, not in a thread
        for label, budget in (("no budget", None), ("budget = limit", BudgetConfig(tpm=LIMIT_TPM))):
            line = anyio.run(
                run,
                budget,
                backend="trio",
                backend_options={"clock": trio.testing.MockClock(autojump_threshold=0)},
            )
            print(f"{label:15s} {line}")


if __name__ == "__main__":
    main()
