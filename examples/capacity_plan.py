"""Plan a fleet for a workload and an SLO, then run the plan against the mock provider.

A chat service: most requests are short conversations, one in eight carries a long
document (8k-28k prompt tokens). A unit has the mock's default speed and room for 16
sequences of 32k tokens (or 64 of 8k: its KV cache is what bounds its batch). The
planner (``semisched plan``; here its Python API) sizes one pool and the best two-pool
split, and writes both fleet files of the winner: the client's (``token_budget``
routing at B_short, each unit capped at its slots) and the mock's (each unit's batch).
The same requests then run through the SDK against the planned fleet, and against the
same fleet with one short unit fewer, in virtual time (trio's ``MockClock``: a
three-minute workload in seconds of wall time).

The command line does the same planning:

```text
python examples/capacity_plan.py --write-trace /tmp/chat.jsonl
semisched plan --trace /tmp/chat.jsonl --slo 'e2e_p95<=30' --slots 16 \\
    --context-tokens 32768 --fleet-out fleet.toml --mock-fleet-out mock-fleet.toml

python examples/capacity_plan.py
```
"""

from __future__ import annotations

import json
import sys
import time
import tomllib
from pathlib import Path

import anyio
import httpx2
import numpy as np
import openai
import trio.testing

from mockprovider.fleet import create_fleet_app
from mockprovider.fleet import fleet_from_dict as mock_fleet
from mockprovider.virtual import inline_platform_lookup
from semisched import RuntimeOptions, Scheduler, SemischedError
from semisched.fleet.fleetfile import build_endpoints
from semisched.fleet.fleetfile import fleet_from_dict as client_fleet
from semisched.plan.fleetout import client_fleet_toml, mock_fleet_toml
from semisched.plan.planner import Plan, make_plan
from semisched.plan.profile import named_profile
from semisched.plan.report import plan_table
from semisched.plan.slo import parse_slo
from semisched.plan.workload import Workload, workload_from_records
from semisched.runtime.calls import scheduler_config

RATE = 12.0  # requests per second
REQUESTS = 2_160  # three minutes
SLO = parse_slo("e2e_p95<=30")
#: The mock's default speed, KV-bound: 16 sequences of 32k tokens (so 64 of 8k, 256 of 2k).
UNIT = named_profile("default").with_(slots=16, context_tokens=32_768)


def chat_trace(n: int = REQUESTS, seed: int = 7) -> list[dict[str, object]]:
    """The workload as trace records (what users export from their own logs)."""
    rng = np.random.default_rng(seed)
    arrivals = np.cumsum(rng.exponential(1 / RATE, n))
    records = []
    for i in range(n):
        document = rng.random() < 0.125
        prompt = rng.integers(8_000, 28_000) if document else rng.integers(30, 1_500)
        records.append({
            "prompt_tokens": int(prompt),
            "output_tokens": int(rng.integers(20, 400)),
            "arrival": round(float(arrivals[i]), 4),
        })  # fmt: skip
    return records


def filler(tokens: int) -> str:
    """About 4 bytes per token of prose (what the scheduler first assumes)."""
    return ("lore " * (tokens + 1))[: max(1, 4 * tokens)]


async def run_fleet(plan: Plan, work: Workload, *, drop_short: int = 0) -> list[float]:
    """Every request of ``work`` through the SDK against the planned fleet (minus
    ``drop_short`` short units), at its arrival time; each one's end-to-end seconds."""
    client_file = tomllib.loads(client_fleet_toml(plan, base_url="http://mock/{name}/v1"))
    mock_file = tomllib.loads(mock_fleet_toml(plan))
    shorts = [e for e in client_file["endpoint"] if e.get("pool") == "short"]
    for gone in shorts[len(shorts) - drop_short :]:
        client_file["endpoint"].remove(gone)
    fleet = client_fleet(client_file)
    app = create_fleet_app(mock_fleet(mock_file), clock=anyio.current_time)
    transport = httpx2.ASGITransport(app=app)
    latencies: list[float] = []
    async with httpx2.AsyncClient(transport=transport, base_url="http://mock") as http:

        def client(base_url: str, key: str) -> openai.AsyncOpenAI:
            return openai.AsyncOpenAI(base_url=base_url, api_key=key, http_client=http)

        endpoints = build_endpoints(
            fleet.endpoints, make_client=client, environ={"OPENAI_API_KEY": "k"}
        )
        config = scheduler_config("direct_naive", routing=fleet.routing)
        async with Scheduler(
            endpoints=endpoints, config=config, priors="heuristic", options=RuntimeOptions(seed=0)
        ) as scheduler:
            await scheduler.submit(model="mock-1", messages=[{"role": "user", "content": "hi"}],
                                   max_tokens=1)  # fmt: skip
            start = anyio.current_time()
            assert work.arrivals is not None

            async def ask(i: int) -> None:
                began = anyio.current_time()
                prompt = int(work.prompt_tokens[i])
                try:
                    await scheduler.submit(
                        model="mock-1",
                        messages=[{"role": "user", "content": filler(prompt)}],
                        max_tokens=int(work.output_tokens[i]),
                        extra_headers={"x-mock-input-tokens": str(prompt)},
                    )
                except SemischedError:
                    latencies.append(float("inf"))
                    return
                latencies.append(anyio.current_time() - began)

            async with anyio.create_task_group() as tg:
                for i in range(len(work)):
                    await anyio.sleep_until(start + float(work.arrivals[i] - work.arrivals[0]))
                    tg.start_soon(ask, i)
    return latencies


async def main() -> None:
    work = workload_from_records(chat_trace(), source="chat trace")
    started = time.perf_counter()
    plan = make_plan(work, rate=RATE, slos=[SLO], profile=UNIT)
    planned_ms = 1e3 * (time.perf_counter() - started)
    print(plan_table(plan, source="chat trace"))
    print(f"(planned in {planned_ms:.0f} ms)\n")
    runs = [("as planned", 0)]
    if plan.two_pools_win:
        runs.append(("one short unit fewer", 1))
    predicted = plan.best if plan.two_pools_win else None
    print(f"{'fleet':<22}{'units':>6}{'P95 e2e (s)':>14}{'SLO met':>9}")
    for label, drop in runs:
        wall = time.perf_counter()
        seconds = np.array(await run_fleet(plan, work, drop_short=drop))
        units = (predicted.units if predicted else plan.one_pool.units) - drop
        p95 = float(np.quantile(seconds, SLO.quantile))
        met = "yes" if p95 <= SLO.seconds else "no"
        print(
            f"{label:<22}{units:>6}{p95:>14.2f}{met:>9}   ({time.perf_counter() - wall:.1f} s wall)"
        )
    tails = predicted.short.tails + predicted.long.tails if predicted and predicted.short and \
        predicted.long else plan.one_pool.tails  # fmt: skip
    print("planner's predicted P95 per pool:", ", ".join(f"{t.seconds:.2f} s" for t in tails))


if __name__ == "__main__":
    if sys.argv[1:2] == ["--write-trace"]:
        with open(Path(sys.argv[2]), "w", encoding="utf-8") as handle:
            for record in chat_trace():
                handle.write(json.dumps(record) + "\n")
        print(f"wrote {sys.argv[2]}")
    else:
        with inline_platform_lookup():  # openai's platform lookup on the loop, not in a thread
            anyio.run(
                main,
                backend="trio",
                backend_options={"clock": trio.testing.MockClock(autojump_threshold=0)},
            )
