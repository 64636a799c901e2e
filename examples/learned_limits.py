"""Nothing told: each endpoint learns how many requests it serves at once.

Runs two mock providers in process, in virtual time (trio's ``MockClock``, as in
``examples/virtual_time.py``: what it prints does not depend on how busy the machine
is): ``small`` serves 4 requests at once and queues the rest, ``large`` serves 12.
One ``Scheduler`` sends to both, with no ``max_concurrency`` and no ``max_inflight``:
each endpoint's limit is learned from each answer's wait for a slot, its latency less
its tokens at the endpoint's learned step (``RoutingConfig(concurrency="learned")``, the
default; calls made with ``stream=True`` are read at their first token, and sooner).
Prints each endpoint's slots, the limit it learned, why it last changed, and how often
each rule fired.

    python examples/learned_limits.py
"""

from __future__ import annotations

import random

import anyio
import httpx2
import openai
import trio.testing

from mockprovider.app import MockConfig, create_app
from mockprovider.physics import PhysicsParams
from mockprovider.virtual import inline_platform_lookup
from semisched import Endpoint, Scheduler, SemischedError

SLOTS = {"small": 4, "large": 12}
REQUESTS = 1000


def client(slots: int, stack: list[object]) -> openai.AsyncOpenAI:
    """An openai client of a fresh in-process mock with ``slots`` slots."""
    app = create_app(MockConfig(physics=PhysicsParams(slots=slots)), clock=anyio.current_time)
    http = httpx2.AsyncClient(transport=httpx2.ASGITransport(app=app), base_url="http://mock")
    stack.append(http)
    return openai.AsyncOpenAI(base_url="http://mock/v1", api_key="k", http_client=http)


async def main() -> None:
    rng = random.Random(3)
    opened: list[object] = []
    fleet = [Endpoint(name, client(slots, opened)) for name, slots in SLOTS.items()]
    failed = 0
    async with Scheduler(endpoints=fleet, config="final_adrr_olc", priors="heuristic") as s:

        async def ask(i: int, tokens: int) -> None:
            nonlocal failed
            try:
                await s.submit(
                    model="mock-1", messages=[{"role": "user", "content": f"question {i}"}],
                    max_tokens=tokens, deadline=600,
                )
            except SemischedError:
                failed += 1

        async with anyio.create_task_group() as tg:
            for i in range(REQUESTS):
                tg.start_soon(ask, i, rng.randint(20, 400))  # drawn here: trio's order varies
                await anyio.sleep(rng.expovariate(4.0))  # ~4 requests per virtual second
        stats = s.statistics().engine
    for http in opened:
        await http.aclose()  # type: ignore[attr-defined]
    print(f"not answered (shed or expired) {failed} of {REQUESTS}")
    for e in stats.endpoints:
        why = e.last_limit_change
        print(f"{e.name:6s} slots {SLOTS[e.name]:3d}  learned limit {e.limit}  ({e.limit_policy})")
        if why is not None:
            print(f"       last change: {why.rule} {why.old} -> {why.new}: {why.reason}")
        print(f"       changes by rule: {dict(sorted(e.limit_changes.items()))}")


if __name__ == "__main__":
    with inline_platform_lookup():  # openai's platform lookup on the loop, not in a thread
        clock = trio.testing.MockClock(autojump_threshold=0)
        anyio.run(main, backend="trio", backend_options={"clock": clock})
