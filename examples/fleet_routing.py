"""Route over a fleet of three endpoints, through an outage, in virtual time.

The SDK sends to three in-process mock endpoints (``mockprovider.fleet``; endpoint
NAME answers under ``/NAME/v1``), set up like ``examples/fleet.toml``:

- ``fast-a``: fast, but down from 60 s to 120 s (new requests get 503 meanwhile);
- ``fast-b``: as fast, behind a tight limit of 120 requests a minute (429 beyond);
- ``slow``: half the decode speed of the others.

``routing="anticipated_load"`` sends each call where the predicted work in flight,
at the speed the scheduler has learned for that endpoint, drains soonest. A call that
fails on ``fast-a`` during its outage is retried at once on another endpoint
(failover); after five failures in a row ``fast-a``'s circuit opens, and it gets one
probe every 30 s until it answers again. ``fast-b``'s limit is learned from its
``x-ratelimit-*`` headers. Three minutes of mixed traffic (short and long answers,
``max_tokens`` set) run in a few wall seconds on trio's ``MockClock``, as in
``examples/virtual_time.py`` (read it for the details of virtual time).

    python examples/fleet_routing.py
"""

from __future__ import annotations

import time
from dataclasses import replace

import anyio
import httpx2
import openai
import trio.testing

from mockprovider.app import MockConfig
from mockprovider.fleet import FleetConfig, FleetEndpoint, create_fleet_app
from mockprovider.physics import profile
from mockprovider.virtual import inline_platform_lookup
from semisched import Endpoint, RuntimeOptions, Scheduler, SemischedError
from semisched.runtime.calls import scheduler_config

FLEET = FleetConfig(
    endpoints=(
        FleetEndpoint(name="fast-a", config=MockConfig(outages=((60.0, 120.0),))),
        FleetEndpoint(name="fast-b", config=MockConfig(rpm=120)),
        FleetEndpoint(
            name="slow",
            config=MockConfig(
                physics=replace(profile("default"), base_iter_ms=34.6, per_slot_ms=2.8)
            ),
        ),
    )
)
CONCURRENCY = {"fast-a": 12, "fast-b": 12, "slow": 8}  # 32: the scheduler's max_inflight


def client(http: httpx2.AsyncClient, name: str) -> openai.AsyncOpenAI:
    """An openai client for endpoint ``name`` of the fleet (it answers under ``/NAME/v1``)."""
    return openai.AsyncOpenAI(base_url=f"http://mock/{name}/v1", api_key="k", http_client=http)


async def main() -> None:
    app = create_fleet_app(FLEET, clock=anyio.current_time)
    transport = httpx2.ASGITransport(app=app)
    async with httpx2.AsyncClient(transport=transport, base_url="http://mock") as http:
        fleet = [
            Endpoint(name, client(http, name), max_concurrency=CONCURRENCY[name])
            for name in FLEET.names
        ]
        outcomes: dict[str, int] = {}
        async with Scheduler(
            endpoints=fleet,
            priors="heuristic",
            config=scheduler_config("final_adrr_olc", routing="anticipated_load"),
            options=RuntimeOptions(seed=0),
        ) as scheduler:

            async def warm_up() -> None:  # each endpoint answers once before the rest
                hello = [{"role": "user", "content": "warm-up"}]
                await scheduler.submit(model="mock-1", messages=hello, max_tokens=1)

            async with anyio.create_task_group() as tg:  # three at once: one per endpoint
                for _ in FLEET.names:
                    tg.start_soon(warm_up)
            start = anyio.current_time()

            async def ask(i: int) -> None:
                long = i % 5 < 2  # two in five want a long answer
                try:
                    await scheduler.submit(
                        model="mock-1",
                        messages=[{"role": "user", "content": f"q{i}"}],
                        max_tokens=300 + (i * 37) % 300 if long else 16 + (i * 7) % 48,
                    )
                    name = "completed"
                except SemischedError as exc:
                    name = type(exc).__name__
                outcomes[name] = outcomes.get(name, 0) + 1

            async with anyio.create_task_group() as tg:
                for i in range(360):  # two a second for three minutes
                    tg.start_soon(ask, i)
                    await anyio.sleep(0.5)
            elapsed = anyio.current_time() - start
            stats = scheduler.statistics()
    print(f"virtual time {elapsed:.1f} s; outcomes {dict(sorted(outcomes.items()))}")
    print(f"retries {stats.counters.retries}, failovers {stats.engine.counters.failovers}")
    print(f"{'endpoint':8} {'sent':>5} {'done':>5} {'failed':>6} {'429s':>5} {'failover':>8}"
          f" {'circuit':>8} {'opened':>6} {'tokens/s':>8} {'rpm':>5}")  # fmt: skip
    for e in stats.engine.endpoints:
        rpm = e.budget.limit_requests if e.budget is not None else None  # learned from headers
        print(f"{e.name:8} {e.sent:5} {e.completed:5} {e.failed_attempts:6} {e.throttled:5}"
              f" {e.failovers:8} {e.circuit:>8} {e.circuit_opens:6}"
              f" {e.decode_tokens_per_s:8.1f} {rpm or '-':>5}")  # fmt: skip


if __name__ == "__main__":
    wall = time.perf_counter()
    with inline_platform_lookup():  # openai's platform lookup on the loop, not in a thread
        anyio.run(
            main,
            backend="trio",
            backend_options={"clock": trio.testing.MockClock(autojump_threshold=0)},
        )
    print(f"wall time {time.perf_counter() - wall:.2f} s")
