"""``python -m bench gateway``: what ``semisched serve`` costs and what it buys, on this machine.

Three parts (``--parts``, all by default), each writing its CSV to ``--out``, and one
``summary.md`` over them:

``overhead`` (``overhead.csv``)
    An upstream that answers at once (`bench.gateway_upstream`) in its own process,
    a gateway process in front of it (``semisched serve --upstream URL --no-auth``), and a
    load generator calling either straight or through the gateway, alternated over
    ``--rounds`` rounds (medians reported): open loop at each ``--rates`` (a request every
    1/rate s, latency from its scheduled start: a late generator counts against the path,
    never hides it), and closed loop (``--connections`` callers back to back) for the
    requests/s sustained. Each server process's CPU time per request (from
    ``/proc/PID/stat``) is measured over the closed loop: ``1000 / cpu ms`` is what one
    process would sustain with a core to itself. The added p50/p99 are the gateway's
    minus the straight ones of the same round.

    The load generator is Node's http client with keep-alive (`gateway_load.mjs`;
    Node is what the polyglot test already needs; its own CPU per request is a column),
    not an asyncio/httpx2 one, which capped at ~390 requests/s straight to the instant
    upstream on this machine. Without ``node`` on the PATH the Python generator runs
    instead, and the summary says so.

``tenants`` (``tenants.csv``): `bench.gateway_tenants`, a noisy neighbour through the
gateway against a congested mock. ``replicas`` (``replicas.csv``): `bench.gateway_replicas`,
two replicas on one key, with and without shared state.

All processes share the machine's cores with the load generator: on two cores, the
closed-loop requests/s are bounded by all three processes together.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import statistics
import subprocess
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx2

from bench.report import write_csv
from mockprovider.launch import free_port, running_process

__all__ = ["BODY", "GENERATOR", "PARTS", "cpu_seconds", "gateway_bench", "load", "serve"]

BODY = {"model": "mock-1", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 1}
GENERATOR = Path(__file__).with_name("gateway_load.mjs")
PARTS: tuple[str, ...] = ("overhead", "tenants", "replicas")


@contextmanager
def serve(args: Sequence[str], *, env: dict[str, str] | None = None) -> Iterator[tuple[str, int]]:
    """``python -m semisched serve ARGS --port P`` on a free port: ``(its /v1 URL, its pid)``."""
    port = free_port()
    argv = ["-m", "semisched", "serve", *args, "--port", str(port), "--log-level", "warning"]
    with running_process(argv, port, startup_timeout_s=60, env=env, stop_timeout_s=60) as proc:
        yield f"http://127.0.0.1:{port}/v1", proc.pid


@contextmanager
def instant_upstream() -> Iterator[tuple[str, int]]:
    """`bench.gateway_upstream` on a free port: ``(its /v1 URL, its pid)``."""
    port = free_port()
    with running_process(["-m", "bench.gateway_upstream", "--port", str(port)], port) as proc:
        yield f"http://127.0.0.1:{port}/v1", proc.pid


def cpu_seconds(pid: int) -> float | None:
    """User + system CPU seconds of process ``pid`` so far (``None`` off Linux)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _pct(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


def load(base: str, spec: dict[str, Any], node: str | None) -> dict[str, float]:
    """One load run (``spec``: ``mode`` open with ``rate``/``seconds``, or closed with
    ``connections``/``requests``) against ``base``'s chat route: count, errors, p50/p99 ms,
    requests/s, and the generator's own CPU seconds."""
    full = {"url": f"{base}/chat/completions", "body": BODY, **spec}
    if node is not None:
        done = subprocess.run([node, str(GENERATOR), json.dumps(full)], capture_output=True,
                              text=True, timeout=600, check=True)  # fmt: skip
        result: dict[str, float] = json.loads(done.stdout)
        return result
    return asyncio.run(_python_load(full))


async def _python_load(spec: dict[str, Any]) -> dict[str, float]:
    """The fallback generator: asyncio and httpx2 (a bottleneck of its own, see module)."""
    latencies: list[float] = []
    errors = 0
    limits = httpx2.Limits(max_connections=256, max_keepalive_connections=256)
    cpu0 = time.process_time()
    async with httpx2.AsyncClient(limits=limits, timeout=60) as http:

        async def one(at: float) -> None:
            nonlocal errors
            await asyncio.sleep(max(0.0, at - time.perf_counter()))
            response = await http.post(spec["url"], json=spec["body"])
            errors += response.status_code != 200
            latencies.append(time.perf_counter() - at)

        start = time.perf_counter() + 0.05
        if spec["mode"] == "open":
            n = round(spec["rate"] * spec["seconds"])
            await asyncio.gather(*(one(start + i / spec["rate"]) for i in range(n)))
        else:
            left = spec["requests"]

            async def caller() -> None:
                nonlocal left
                while left > 0:
                    left -= 1
                    await one(time.perf_counter())

            await asyncio.gather(*(caller() for _ in range(spec["connections"])))
        took = time.perf_counter() - start
    return {"requests": len(latencies), "errors": errors, "p50_ms": 1000 * _pct(latencies, 0.5),
            "p99_ms": 1000 * _pct(latencies, 0.99), "requests_per_s": len(latencies) / took,
            "generator_cpu_s": time.process_time() - cpu0}  # fmt: skip


def _closed(base: str, pid: int, connections: int, requests: int,
            node: str | None) -> dict[str, float]:  # fmt: skip
    before = cpu_seconds(pid)
    result = load(base, {"mode": "closed", "connections": connections, "requests": requests}, node)
    after = cpu_seconds(pid)
    n = max(1, int(result["requests"]))
    cpu = float("nan") if before is None or after is None else 1000 * (after - before) / n
    return {"requests_per_s": result["requests_per_s"], "closed_errors": result["errors"],
            "cpu_ms_per_request": cpu,
            "generator_cpu_ms_per_request": 1000 * result["generator_cpu_s"] / n}  # fmt: skip


def overhead_rows(*, rates: Sequence[float] = (100.0, 500.0), seconds: float = 10.0,
                  connections: int = 32, requests: int = 5000, rounds: int = 3,
                  node: str | None = None) -> list[dict[str, Any]]:  # fmt: skip
    """The overhead part's rows (module docstring): per path and rate, medians over rounds."""
    samples: dict[tuple[str, float], list[dict[str, float]]] = {}
    with instant_upstream() as (upstream, up_pid):
        with serve(["--upstream", upstream, "--no-auth"]) as gw:  # defaults: limits learned
            paths = {"straight": (upstream, up_pid), "gateway": gw}
            for base, _ in paths.values():  # warm-up: connections, caches, first imports
                load(base, {"mode": "closed", "connections": connections, "requests": 500}, node)
            for _ in range(rounds):
                for name, (base, pid) in paths.items():
                    closed = _closed(base, pid, connections, requests, node)
                    for rate in rates:
                        spec = {"mode": "open", "rate": rate, "seconds": seconds}
                        sample = dict(load(base, spec, node), **closed)
                        samples.setdefault((name, rate), []).append(sample)
    return _medians(samples, rates)


def _medians(samples: dict[tuple[str, float], list[dict[str, float]]],
             rates: Sequence[float]) -> list[dict[str, Any]]:  # fmt: skip
    rows = []
    for (name, rate), runs in samples.items():
        row: dict[str, Any] = {"path": name, "rate": rate, "rounds": len(runs)}
        for key in ("p50_ms", "p99_ms", "requests_per_s", "cpu_ms_per_request",
                    "generator_cpu_ms_per_request"):  # fmt: skip
            row[key] = statistics.median(r[key] for r in runs)
        row["errors"] = sum(int(r["errors"]) + int(r["closed_errors"]) for r in runs)
        if name == "gateway":
            straight = samples[("straight", rate)]
            row["added_p50_ms"] = statistics.median(
                g["p50_ms"] - s["p50_ms"] for g, s in zip(runs, straight, strict=True))
            row["added_p99_ms"] = statistics.median(
                g["p99_ms"] - s["p99_ms"] for g, s in zip(runs, straight, strict=True))
        rows.append(row)
    return rows


def gateway_bench(out: Path, *, parts: Sequence[str] = PARTS, rates: Sequence[float] = (100.0,
                  500.0), seconds: float = 10.0, connections: int = 32, requests: int = 5000,
                  rounds: int = 3, quick: bool = False) -> Path:  # fmt: skip
    """Run ``parts``; write their CSVs and ``summary.md`` to ``out``; return the summary's path.

    Raises:
        ValueError: An unknown part.
    """
    unknown = sorted(set(parts) - set(PARTS))
    if unknown:
        raise ValueError(f"parts={unknown} must be among {list(PARTS)}")
    from bench.gateway_report import summary

    out.mkdir(parents=True, exist_ok=True)
    node = shutil.which("node")
    if node is None:
        print("bench gateway: node is not on the PATH: the Python load generator runs instead "
              "(itself a bottleneck: see the summary)")  # fmt: skip
    runs: dict[str, Callable[[], list[dict[str, Any]]]] = {
        "overhead": lambda: overhead_rows(rates=rates, seconds=seconds, connections=connections,
                                          requests=requests, rounds=rounds, node=node),
        "tenants": lambda: _tenants(quick, node),
        "replicas": lambda: _replicas(quick),
    }  # fmt: skip
    for part in parts:
        write_csv(out / f"{part}.csv", runs[part]())
    path = out / "summary.md"
    path.write_text(summary(out, generator="node" if node else "python"))
    return path


def _tenants(quick: bool, node: str | None) -> list[dict[str, Any]]:
    from bench.gateway_tenants import tenant_rows

    return tenant_rows(quick=quick, node=node)


def _replicas(quick: bool) -> list[dict[str, Any]]:
    from bench.gateway_replicas import replica_rows

    return replica_rows(quick=quick)
