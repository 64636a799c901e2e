"""Three tenants share one API key: a checkout flow, a search feature and a backfill job.

``checkout`` is *guaranteed* (served first while inside its entitlement, never
shed there), ``search`` is *elastic* (its entitlement over time, through debt)
and ``backfill`` is *best effort* (surplus only, shed first). The backfill job
floods the scheduler with 400 long requests at once, while checkout and
search keep sending a request a second each. The same traffic runs twice: with
the tenant-blind ``fifo`` policy and with ``fair_share`` (the default). Each
run prints a table from ``statistics().engine.tenants`` (its share of the
decayed usage when the last checkout and search requests arrive, its
entitlement, what completed and what overload control rejected by the end)
plus the p50 and p95 latency of each tenant's short requests (at most 64
output tokens), which the example measures itself.

Runs the SDK against the in-process mock provider in virtual time (trio's
``MockClock``, as in ``examples/virtual_time.py``): a few wall seconds for
several busy virtual minutes, and the same numbers every run up to trio's
shuffling of simultaneous events.

    python examples/tenants.py
"""

from __future__ import annotations

import random
import time

import anyio
import httpx2
import openai
import trio.testing

from mockprovider.app import MockConfig, create_app
from mockprovider.virtual import inline_platform_lookup
from semisched import (
    RuntimeOptions,
    Scheduler,
    SemischedError,
    ServiceClass,
    TenantConfig,
    TenantSpec,
)
from semisched.runtime.calls import scheduler_config

TENANTS = (
    TenantSpec(name="checkout", service=ServiceClass.GUARANTEED, weight=1.0),
    TenantSpec(name="search", service=ServiceClass.ELASTIC, weight=1.0),
    TenantSpec(name="backfill", service=ServiceClass.BEST_EFFORT),
)
SHORT = 64  # output tokens: the paper's short bucket


def work() -> list[tuple[float, str, int]]:
    """(arrival s, tenant, output tokens): the backfill flood at t=0, then a checkout and
    a search request every second for two minutes."""
    rng = random.Random(11)
    arrivals = [(0.0, "backfill", rng.randint(300, 900)) for _ in range(400)]
    for second in range(120):
        arrivals.append((second + 0.5, "checkout", rng.randint(20, 60)))
        arrivals.append((second + 0.7, "search", rng.choice((40, 60, 120, 250))))
    return sorted(arrivals)


async def run(policy: str) -> None:
    app = create_app(MockConfig(), clock=anyio.current_time)
    transport = httpx2.ASGITransport(app=app)
    latencies: dict[str, list[float]] = {t.name: [] for t in TENANTS}
    async with httpx2.AsyncClient(transport=transport, base_url="http://mock") as http:
        client = openai.AsyncOpenAI(base_url="http://mock/v1", api_key="k", http_client=http)
        tenants = TenantConfig(tenants=TENANTS, policy=policy)
        async with Scheduler(
            client,
            priors="heuristic",
            config=scheduler_config("final_adrr_olc", tenants=tenants),
            options=RuntimeOptions(seed=0),
        ) as scheduler:
            hello = [{"role": "user", "content": "warm-up"}]  # one call first
            await scheduler.submit(model="mock-1", messages=hello, max_tokens=1, tenant="search")
            start = anyio.current_time()

            async def ask(tenant: str, tokens: int) -> None:
                sent = anyio.current_time()
                try:
                    await scheduler.submit(
                        model="mock-1",
                        messages=[{"role": "user", "content": f"{tenant} asks"}],
                        max_completion_tokens=tokens,
                        metadata={"mock_output_tokens": str(tokens)},
                        tenant=tenant,
                    )
                except SemischedError:
                    return  # counted by the scheduler (rejected, expired)
                if tokens <= SHORT:
                    latencies[tenant].append(anyio.current_time() - sent)

            async with anyio.create_task_group() as tg:
                for at, tenant, tokens in work():
                    await anyio.sleep_until(start + at)
                    tg.start_soon(ask, tenant, tokens)
                busy = scheduler.statistics().engine  # everyone still competing
            elapsed = anyio.current_time() - start
            stats = scheduler.statistics().engine
    print(f"policy {policy}: {elapsed:.0f} s (virtual)")
    print("  tenant     service      entitled  share  completed  rejected  short p50  short p95")
    for t in stats.tenants:
        short = sorted(latencies[t.name])
        p50, p95 = (percentile(short, q) for q in (0.50, 0.95))
        share = busy.tenant(t.name).share
        print(
            f"  {t.name:10s} {t.service:12s} {t.entitlement:8.0%} {share:6.0%} "
            f"{t.completed:10d} {t.rejected:9d}  {p50}  {p95}"
        )


def percentile(values: list[float], q: float) -> str:
    """The ``q`` quantile of sorted ``values`` in seconds, as a column ("-": none)."""
    if not values:
        return "        -"
    return f"{values[int(q * (len(values) - 1))]:7.1f} s"


def main() -> None:
    with inline_platform_lookup():  # openai's platform lookup on the loop, not in a thread
        for policy in ("fifo", "fair_share"):
            anyio.run(
                run,
                policy,
                backend="trio",
                backend_options={"clock": trio.testing.MockClock(autojump_threshold=0)},
            )


if __name__ == "__main__":
    wall = time.perf_counter()
    main()
    print(f"wall time {time.perf_counter() - wall:.1f} s")
