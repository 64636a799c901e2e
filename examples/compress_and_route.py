"""Compress-and-route: borderline prompts cut to fit the short pool, in virtual time.

A fleet of two pools on in-process mock endpoints (``mockprovider.fleet``), as
``examples/fleet_routing.py`` runs them: ``short-a`` and ``short-b`` are configured for
1024 tokens of context (prompt plus output), ``long`` for 16k. ``token_budget`` routing
sends a request whose estimated total (prompt estimate plus ``max_tokens``) is at most
``short_pool_tokens = 1024`` to the short pool, and the rest to the long one.

With ``compress_band = 1.5`` (FleetOpt §5) a *borderline* request, whose total is in
(1024, 1536], is compressed at submit, extractively (whole sentences of prose dropped;
the system prompt and code blocks kept verbatim) to 1024 minus its ``max_tokens``, and
goes to the short pool compressed. One whose prompt is mostly code cannot be cut that
far and goes to the long pool whole. Then the same requests run with compression off
(``compress_band = 1.0``, the default): every borderline request takes the long pool.

    python examples/compress_and_route.py
"""

from __future__ import annotations

import json
import time
from typing import Any

import anyio
import httpx2
import trio.testing
from fleet_routing import client  # the openai client of one fleet endpoint

from mockprovider.app import MockConfig
from mockprovider.fleet import FleetConfig, FleetEndpoint, create_fleet_app
from mockprovider.virtual import inline_platform_lookup
from semisched import Endpoint, Scheduler
from semisched.core.config import RoutingConfig
from semisched.runtime.calls import scheduler_config

CONTEXT = {"short-a": 1024, "short-b": 1024, "long": 16384}  # tokens, prompt plus output
FLEET = FleetConfig(endpoints=tuple(FleetEndpoint(name=n, config=MockConfig()) for n in CONTEXT))
CAP = 128  # every call's max_tokens
SYSTEM = "You are a careful analyst. Answer in three short bullet points."
CODE = "```python\ndef weekly_change(rows):\n    return {r.week: r.delta for r in rows}\n```"
TOPICS = ("latency", "throughput", "billing", "storage", "routing", "caching", "quotas")


def prose(sentences: int, seed: int) -> str:
    """Distinct sentences of a status report (about 70 bytes each)."""
    return " ".join(
        f"Item {seed}.{i}: the {TOPICS[(i + seed) % 7]} figures moved by "
        f"{(i * 37 + seed) % 90 + 3} percent in week {i % 13 + 1}."
        for i in range(sentences)
    )


def requests() -> list[tuple[str, list[dict[str, Any]]]]:
    """(name, messages): borderline reports, one mostly-code prompt, short and long ones."""
    out = []
    for k, n in enumerate((56, 60, 62, 64, 66, 70)):  # ~1.0k-1.3k prompt tokens
        question = f"{prose(n // 2, k)}\n\n{CODE}\n\n{prose(n - n // 2, k + 10)} What changed?"
        out.append((f"borderline-{k + 1}", [{"role": "system", "content": SYSTEM},
                                             {"role": "user", "content": question}]))  # fmt: skip
    code = "```python\n" + "".join(f"x_{i} = compute({i}, {i * 7})\n" for i in range(160)) + "```"
    out.append(("mostly-code", [{"role": "user", "content": f"{code}\n\nWhy is this slow?"}]))
    out += [(f"short-{k + 1}", [{"role": "user", "content": prose(8, k)}]) for k in range(4)]
    out += [(f"long-{k + 1}", [{"role": "user", "content": prose(160, k)}]) for k in range(2)]
    return out


async def run(band: float) -> None:
    app = create_fleet_app(FLEET, clock=anyio.current_time)
    sent: list[dict[str, Any]] = []

    async def record(request: httpx2.Request) -> None:  # what the endpoints were sent
        if request.url.path.endswith("/chat/completions") and "/short-" in request.url.path:
            sent.append(json.loads(request.content))

    async with httpx2.AsyncClient(
        transport=httpx2.ASGITransport(app=app),
        base_url="http://mock",
        event_hooks={"request": [record]},
    ) as http:
        # Each deployment serves mock-1 under its own name: an answer's model says who served it.
        fleet = [
            Endpoint(n, client(http, n), model_map={"mock-1": n}, context_tokens=CONTEXT[n],
                     pool="long" if n == "long" else "short")
            for n in FLEET.names
        ]  # fmt: skip
        routing = RoutingConfig(policy="token_budget", short_pool_tokens=1024, compress_band=band,
                                pool_policy="least_outstanding")  # fmt: skip
        async with Scheduler(
            endpoints=fleet,
            priors="heuristic",
            config=scheduler_config("final_adrr_olc", routing=routing),
        ) as scheduler:
            hello = [{"role": "user", "content": "warm-up."}]  # 8 bytes, 2 tokens

            async def warm_up(cap: int) -> None:  # each endpoint answers once before the rest
                await scheduler.submit(model="mock-1", messages=hello, max_tokens=cap,
                                       extra_headers={"x-mock-output-tokens": "1"})  # fmt: skip

            async with anyio.create_task_group() as tg:  # at once: one per endpoint
                for cap in (1, 1, 2000):  # the last one's total is the long pool's
                    tg.start_soon(warm_up, cap)
            rows: dict[str, tuple[int, str, int]] = {}

            async def ask(name: str, messages: list[dict[str, Any]]) -> None:
                text = "\n".join(m["content"] for m in messages)  # the scheduler's estimate:
                estimate = -(-len(text.encode()) // 4)  # 4 bytes a token, as "warm-up." taught
                answer = await scheduler.submit(model="mock-1", messages=messages, max_tokens=CAP)
                rows[name] = (estimate + CAP, answer.model, answer.usage.prompt_tokens)

            start = anyio.current_time()
            async with anyio.create_task_group() as tg:
                for name, messages in requests():
                    tg.start_soon(ask, name, messages)
                    await anyio.sleep(0.25)  # one at a time: a repeatable routing order
            elapsed = anyio.current_time() - start
            stats = scheduler.statistics()
    state = "on" if band > 1.0 else "off"
    print(f"compress_band {band} (compress-and-route {state}), {elapsed:.0f} virtual s:")
    print(f"  {'request':13} {'total est.':>10}  {'endpoint':8} {'prompt sent':>11}")
    for name, _ in requests():
        total, endpoint, tokens = rows[name]
        print(f"  {name:13} {total:10}  {endpoint:8} {tokens:11}")
    c = stats.compression
    if c is not None:
        print(f"  compressed {c.sent_compressed} of {c.prepared} prepared, {c.spilled} spilled, "
              f"{c.not_fitting} too long to compress; "
              f"{c.tokens_removed} prompt tokens removed")  # fmt: skip
        reports = [b["messages"] for b in sent if b["messages"][0]["role"] == "system"]
        kept = sum(m[0]["content"] == SYSTEM and CODE in m[1]["content"] for m in reports)
        print(f"  system prompt and code block verbatim in {kept} of {len(reports)} sent short")
    short = sum(e.completed for e in stats.engine.endpoints if e.name != "long")
    print(f"  completed: short pool {short}, long pool {len(rows) + 3 - short} (with 3 warm-ups)")


async def main() -> None:
    await run(1.5)
    await run(1.0)


if __name__ == "__main__":
    wall = time.perf_counter()
    with inline_platform_lookup():  # openai's platform lookup on the loop, not in a thread
        anyio.run(
            main,
            backend="trio",
            backend_options={"clock": trio.testing.MockClock(autojump_threshold=0)},
        )
    print(f"wall time {time.perf_counter() - wall:.2f} s")
