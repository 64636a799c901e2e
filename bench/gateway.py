"""``python -m bench gateway``: what ``semisched serve`` costs, measured on this machine.

Overhead: an upstream that answers at once (:mod:`bench.gateway_upstream`) in its own
process, a gateway process in front of it (``semisched serve --upstream URL --no-auth``),
and a load generator (this process, asyncio and httpx2) calling either straight or through
the gateway, at one fixed rate (open loop: a request every 1/rate s, latency from its
scheduled start) and, for throughput, as fast as a fixed number of connections allows.
The added p50/p99 are the gateway's minus the straight ones, in the same run. The load
generator shares the machine's cores with both servers: on two cores it is part of what
limits the throughput measured.

Writes ``overhead.csv`` and ``summary.md`` to ``--out``.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx2

from bench.report import write_csv
from mockprovider.launch import free_port

__all__ = ["gateway_bench"]

BODY = {"model": "mock-1", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 1}


@contextlib.contextmanager
def _process(args: list[str], port: int) -> Iterator[str]:
    proc = subprocess.Popen([sys.executable, *args], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, env={**os.environ})  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"{args} did not start") from None
                time.sleep(0.05)
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def _open_loop(base: str, rate: float, seconds: float) -> dict[str, float]:
    """A request every ``1/rate`` s for ``seconds``; latency from each one's scheduled start."""
    latencies: list[float] = []
    errors = 0
    limits = httpx2.Limits(max_connections=256, max_keepalive_connections=256)
    async with httpx2.AsyncClient(limits=limits, timeout=30) as http:

        async def one(at: float) -> None:
            nonlocal errors
            await asyncio.sleep(max(0.0, at - time.perf_counter()))
            response = await http.post(f"{base}/chat/completions", json=BODY)
            if response.status_code != 200:
                errors += 1
            latencies.append(time.perf_counter() - at)

        start = time.perf_counter() + 0.2
        n = int(rate * seconds)
        await asyncio.gather(*(one(start + i / rate) for i in range(n)))
    return {"p50_ms": 1000 * _pct(latencies, 0.5), "p99_ms": 1000 * _pct(latencies, 0.99),
            "errors": errors, "requests": n}  # fmt: skip


async def _closed_loop(base: str, connections: int, requests: int) -> dict[str, float]:
    """``connections`` callers back to back until ``requests`` are answered: requests/s."""
    limits = httpx2.Limits(max_connections=connections, max_keepalive_connections=connections)
    left = requests
    async with httpx2.AsyncClient(limits=limits, timeout=30) as http:

        async def caller() -> None:
            nonlocal left
            while left > 0:
                left -= 1
                await http.post(f"{base}/chat/completions", json=BODY)

        start = time.perf_counter()
        await asyncio.gather(*(caller() for _ in range(connections)))
        took = time.perf_counter() - start
    return {"requests_per_s": requests / took}


def gateway_bench(out: Path, *, rate: float = 500.0, seconds: float = 10.0,
                  connections: int = 32, requests: int = 5000) -> Path:  # fmt: skip
    """Run the overhead measurement; return the summary's path."""
    out.mkdir(parents=True, exist_ok=True)
    up_port, gw_port = free_port(), free_port()
    upstream_args = ["-m", "bench.gateway_upstream", "--port", str(up_port)]
    rows: list[dict[str, Any]] = []
    with _process(upstream_args, up_port) as upstream:
        gateway_args = ["-m", "semisched", "serve", "--upstream", upstream, "--no-auth",
                        "--port", str(gw_port), "--max-inflight", "1024", "--log-level",
                        "warning"]  # fmt: skip
        with _process(gateway_args, gw_port) as gateway:
            for name, base in (("straight", upstream), ("gateway", gateway)):
                asyncio.run(_open_loop(base, rate, 1.0))  # warm-up
                row: dict[str, Any] = {"path": name, "rate": rate}
                row.update(asyncio.run(_open_loop(base, rate, seconds)))
                row.update(asyncio.run(_closed_loop(base, connections, requests)))
                rows.append(row)
    straight, through = rows
    through["added_p50_ms"] = through["p50_ms"] - straight["p50_ms"]
    through["added_p99_ms"] = through["p99_ms"] - straight["p99_ms"]
    write_csv(out / "overhead.csv", rows)
    summary = out / "summary.md"
    summary.write_text(_summary(rows, rate, connections))
    return summary


def _summary(rows: list[dict[str, Any]], rate: float, connections: int) -> str:
    straight, through = rows
    lines = [
        "# semisched serve: overhead on this machine",
        "",
        f"Open loop at {rate:.0f} requests/s (latency from each request's scheduled start), "
        f"and throughput with {connections} connections back to back; the upstream answers "
        "at once; load generator, gateway and upstream share the machine's cores.",
        "",
        "| path | p50 ms | p99 ms | errors | requests/s (closed loop) |",
        "|---|---|---|---|---|",
    ]
    for row in rows:
        lines.append(f"| {row['path']} | {row['p50_ms']:.2f} | {row['p99_ms']:.2f} | "
                     f"{row['errors']} | {row['requests_per_s']:.0f} |")  # fmt: skip
    lines += ["", f"Added by the gateway: p50 {through['added_p50_ms']:.2f} ms, "
              f"p99 {through['added_p99_ms']:.2f} ms at {rate:.0f} requests/s; one gateway "
              f"process sustained {through['requests_per_s']:.0f} requests/s "
              f"(straight: {straight['requests_per_s']:.0f})."]  # fmt: skip
    return "\n".join(lines) + "\n"
