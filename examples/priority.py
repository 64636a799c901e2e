"""Priority when the provider is the bottleneck: an urgent trickle beside a low-priority flood.

An upstream that serves 4 requests at once, 200 ms each, and a scheduler capped at 4 in
flight. A flood of one-token requests arrives at 1.5x that capacity (300 at 30/s), and
an urgent trickle of one-token requests beside it (20 at 2/s). The same traffic runs
four ways:

- ``no marks``: nobody says what is urgent; the class comes from the predicted size,
  so both kinds land in the same class;
- ``marks``: the trickle is ``klass="interactive"``, the flood ``klass="batch"``: the
  default classes share the sends 1:1, which is far more than the trickle needs;
- ``strict tiers``: ``interactive`` in tier 0, ``batch`` in tier 1 with a 10% minimum
  share (the starvation guard), so urgent work always goes first;
- ``tenant's class``: the flood marks nothing but comes from a tenant whose
  ``default_class`` is ``batch`` (a batch job's own key at the gateway).

The table gives the trickle's p50 and p95 latency and the flood's p50. Unloaded, a
request takes 0.2 s. Runs the SDK in virtual time (trio's ``MockClock``): a few wall
seconds per run, and the same numbers every run.

    python examples/priority.py
"""

from __future__ import annotations

import json

import anyio
import httpx2
import openai
import trio.testing

from mockprovider.virtual import inline_platform_lookup
from semisched import ClassSpec, Scheduler, TenantConfig, TenantSpec
from semisched.core import SchedulerConfig, preset

SLOTS, SERVICE_S = 4, 0.2
FLOOD, FLOOD_RATE, TRICKLE, TRICKLE_RATE = 300, 30.0, 20, 2.0


class Upstream(httpx2.AsyncBaseTransport):
    """An OpenAI-shaped upstream: ``SLOTS`` requests at once, ``SERVICE_S`` each."""

    def __init__(self) -> None:
        self.slots = anyio.Semaphore(SLOTS)

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        body = json.loads(await request.aread())
        async with self.slots:
            await anyio.sleep(SERVICE_S)
        tokens = int(body.get("max_tokens") or 16)
        return httpx2.Response(200, json={
            "id": "c", "object": "chat.completion", "created": 0, "model": body["model"],
            "choices": [{"index": 0, "finish_reason": "length",
                         "message": {"role": "assistant", "content": "ok"}}],
            "usage": {"prompt_tokens": 9, "completion_tokens": tokens, "total_tokens": 9 + tokens},
        })  # fmt: skip


def quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


async def run(config: SchedulerConfig, urgent: str | None, flood: str | None) -> list[float]:
    """High p50, high p95 and low p50 of one run (virtual seconds)."""
    high: list[float] = []
    low: list[float] = []
    async with httpx2.AsyncClient(transport=Upstream(), base_url="http://upstream") as http:
        client = openai.AsyncOpenAI(base_url="http://upstream/v1", api_key="-", http_client=http)
        async with Scheduler(client, config=config, priors="heuristic") as scheduler:

            async def call(out: list[float], klass: str | None) -> None:
                start = anyio.current_time()
                await scheduler.submit(
                    model="m", messages=[{"role": "user", "content": "yes or no?"}],
                    max_tokens=1, klass=klass,
                )  # fmt: skip
                out.append(anyio.current_time() - start)

            floods = [(i / FLOOD_RATE, False) for i in range(FLOOD)]
            arrivals = sorted(floods + [(0.25 + i / TRICKLE_RATE, True) for i in range(TRICKLE)])
            t0 = anyio.current_time()
            async with anyio.create_task_group() as tg:
                for at, is_urgent in arrivals:
                    await anyio.sleep_until(t0 + at)
                    tg.start_soon(call, *((high, urgent) if is_urgent else (low, flood)))
    return [quantile(high, 0.5), quantile(high, 0.95), quantile(low, 0.5)]


async def main() -> None:
    default = preset("final_adrr_olc", max_inflight=SLOTS)
    tiers = default.with_(classes=(
        ClassSpec(name="interactive", interactive=True, tier=0),
        ClassSpec(name="batch", tier=1, min_share=0.1),
    ))  # fmt: skip
    jobs_key = default.with_(tenants=TenantConfig(
        tenants=(TenantSpec(name="app"), TenantSpec(name="jobs", default_class="batch")),
        default="jobs",  # the flood names no tenant: the batch job's key
    ))  # fmt: skip
    rows: list[tuple[str, list[float]]] = [
        ("no marks", await run(default, None, None)),
        ("marks", await run(default, "interactive", "batch")),
        ("strict tiers", await run(tiers, "interactive", "batch")),
        ("tenant's class", await run(jobs_key, "interactive", None)),
    ]
    print(f"{'variant':<16}{'urgent p50 s':>14}{'urgent p95 s':>14}{'flood p50 s':>13}")
    for name, (p50, p95, flood_p50) in rows:
        print(f"{name:<16}{p50:>14.2f}{p95:>14.2f}{flood_p50:>13.2f}")


if __name__ == "__main__":
    clock = trio.testing.MockClock(autojump_threshold=0.01)
    with inline_platform_lookup():  # openai's platform lookup on the loop, not in a thread
        anyio.run(main, backend="trio", backend_options={"clock": clock})
