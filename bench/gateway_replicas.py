"""Two gateway replicas on one upstream key: ``python -m bench gateway``'s ``replicas`` part.

The mock (``python -m mockprovider``, `TIME_SCALE` times real time) enforces
`RPM` requests per minute of its time, answering 429 beyond it. Two ``semisched
serve`` processes front it, each configured with that whole budget (``[budget] rpm``, the
window in wall seconds, not adapted from the mock's headers); a client sends
`WINDOWS` windows' worth of requests at twice the limit, alternating between the
two replicas (a round-robin load balancer). Conditions:

``shared``
    Both replicas join one real Redis (``--state redis://...``; ``bench.redis_server``):
    they spend one budget, so together they never send past the limit.
``separate``
    No shared state: each replica believes it owns the whole budget, together they send
    twice it, and the upstream answers 429 (which the gateways retry after its
    ``retry-after``).

Per condition: requests, the answers' statuses, the upstream's 429s (its own counter,
``GET /v1/mock/stats``) and the wall time to the last answer. That time is not the shared
window's: the mock advertises its limit per minute of *its* time, and a gateway (on wall
time, unlike the SDK's benchmarks on a scaled clock) adopts it per wall minute for the
endpoint, so after the first windows' worth it waits up to a wall minute. The 429 counts
do not depend on it.
"""

from __future__ import annotations

import asyncio
import tempfile
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import httpx2

from bench.gateway import serve
from bench.redis_server import running_redis
from mockprovider.launch import free_port, running_process
from semisched.gateway.keys import key_hash

__all__ = ["CONDITIONS", "RPM", "gateway_file", "replica_rows", "storm"]

TIME_SCALE = 10.0
RPM = 60  # per minute of the mock's time: per 6 wall seconds at TIME_SCALE
WINDOWS = 1
CONDITIONS: tuple[str, ...] = ("shared", "separate")
KEY = "sk-bench-replicas"
BODY = {"model": "mock-1", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 3}


def gateway_file(folder: Path, upstream: str, rpm: int = RPM) -> Path:
    """The replicas' TOML: the whole budget each, its window in wall seconds."""
    path = folder / "replica.toml"
    path.write_text(
        f"[gateway]\ngrace_s = 1\n[budget]\nrpm = {rpm}\nwindow_s = {60 / TIME_SCALE}\n"
        f'adapt = false\n[[tenant]]\nname = "app"\nkey_sha256 = "{key_hash(KEY)}"\n'
        f'[[endpoint]]\nname = "mock"\nbase_url = "{upstream}"\n'
        # The mock's headers count per virtual minute; the budget above keeps its limit.
        "learn_limits = false\n"
    )
    return path


async def storm(bases: Sequence[str], requests: int, seconds: float) -> tuple[Counter[int], float]:
    """``requests`` evenly over ``seconds``, alternating over ``bases``: the statuses and the
    wall seconds to the last answer."""
    statuses: Counter[int] = Counter()
    auth = {"authorization": f"Bearer {KEY}"}
    async with httpx2.AsyncClient(timeout=300) as http:
        start = time.perf_counter()

        async def one(i: int) -> None:
            await asyncio.sleep(max(0.0, start + i * seconds / requests - time.perf_counter()))
            try:
                response = await http.post(f"{bases[i % len(bases)]}/chat/completions",
                                           json=BODY, headers=auth)  # fmt: skip
                statuses[response.status_code] += 1
            except httpx2.HTTPError:
                statuses[-1] += 1

        await asyncio.gather(*(one(i) for i in range(requests)))
        return statuses, time.perf_counter() - start


@contextmanager
def _replicas(path: Path, state: str | None) -> Iterator[list[str]]:
    args = ["--config", str(path), *(["--state", state] if state else [])]
    with ExitStack() as stack:
        yield [stack.enter_context(serve(args))[0] for _ in range(2)]


def replica_rows(*, quick: bool = False) -> list[dict[str, Any]]:
    """Both conditions (module docstring); ``quick`` changes nothing (one window already)."""
    windows = WINDOWS
    window_s = 60 / TIME_SCALE
    rows = []
    with tempfile.TemporaryDirectory() as scratch, running_redis() as redis:
        for condition in CONDITIONS:
            port = free_port()
            mock = ["-m", "mockprovider", "--port", str(port), "--time-scale", str(TIME_SCALE),
                    "--rpm", str(RPM), "--log-level", "warning"]  # fmt: skip
            with running_process(mock, port):
                upstream = f"http://127.0.0.1:{port}/v1"
                path = gateway_file(Path(scratch), upstream)
                state = redis if condition == "shared" else None
                with _replicas(path, state) as bases:
                    statuses, took = asyncio.run(storm(bases, 2 * RPM * windows,
                                                       windows * window_s))  # fmt: skip
                stats = httpx2.get(f"{upstream}/mock/stats", timeout=30).json()
            rows.append({"condition": condition, "replicas": 2, "rpm": RPM,
                         "window_s": window_s, "requests": sum(statuses.values()),
                         "answered_200": statuses[200],
                         "statuses": " ".join(f"{k}:{v}" for k, v in sorted(statuses.items())),
                         "upstream_429s": stats["counters"]["rate_limited_requests"],
                         "makespan_s": took})  # fmt: skip
    return rows
