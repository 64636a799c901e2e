"""``python -m bench gateway-priority``: does priority work out of the box, through the gateway?

Everything on 127.0.0.1. An upstream with `PriorityRun.slots` slots
(`bench.gateway_priority_upstream`, its own process: at most 4 requests in service,
each held ``service_ms``, the rest waiting in order) behind a real gateway process
(``python -m semisched serve --config FILE``, `bench.gateway.serve`, a fresh process
per cell, ready once ``/healthz`` answers) whose file (`gateway_toml`) caps the
sends in flight at the slots (``[gateway] max_inflight = 4``), needs no key, and names the
upstream as its one ``[[endpoint]]``, on the default preset.

The load, from this process (raw HTTP/1.1 on a fresh connection per request,
`bench.gateway_faults_upstream.exchange`; latency from the request's send to its
whole answer): a low-priority *flood* (600 requests at 30/s, 1.5x the 20/s that four slots
of 200 ms serve) and a high-priority *trickle* (40 at 2/s), starting together, all with one
``max_tokens``. The cells: `VARIANTS` x ``max_tokens`` {1, 256} x process {fresh,
warm} x upstream {200 ms, instant}:

``no marks``              no header: what a user gets without marking anything
``default + marks``       ``x-semisched-class: interactive`` on the trickle, ``batch`` on
                          the flood, the gateway's default classes
``strict tiers + marks``  the same marks; the file declares ``[[class]]`` tables:
                          interactive in tier 0, batch in tier 1 with ``min_share = 0.1``

``fresh``: the process has served only ten ``max_tokens=1`` requests (5/s, marked
interactive where the variant marks) before its first flood; ``warm``: its second flood,
once the first has drained. The trickle alone on a warmed process, per upstream and
``max_tokens``, is the *unloaded* latency the targets compare against. A variant whose
file the gateway refuses is skipped, with the gateway's reason in the results.

The summaries, targets and tables are `bench.gateway_priority_report`'s.

What this module is not: it asserts nothing about the gateway and tunes nothing in it (a
miss is a row).
"""

from __future__ import annotations

import asyncio
import json
import os
import platform
import re
import tempfile
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

from bench.gateway import serve
from bench.gateway_faults import settle
from bench.gateway_faults_upstream import exchange, request_bytes
from mockprovider.launch import free_port, running_process

__all__ = ["QUICK", "STRICT_CLASSES", "VARIANTS", "PriorityRun", "Record", "Results", "Send",
           "Variant", "gateway_toml", "load_plan", "priority_bench", "upstream_label"]  # fmt: skip

CHAT = "/v1/chat/completions"
HEADER = "x-semisched-class"
#: How long one request may take before the client gives up on it (a flood drains in ~30 s).
REQUEST_TIMEOUT_S = 300.0


@dataclass(frozen=True, kw_only=True)
class Variant:
    """One way of running the gateway: whether requests are marked, and the file's classes."""

    name: str
    marks: bool
    classes: tuple[Mapping[str, Any], ...] = ()


#: ``[[class]]`` tables of the strict-tiers variant.
STRICT_CLASSES: tuple[Mapping[str, Any], ...] = (
    {"name": "interactive", "interactive": True, "tier": 0},
    {"name": "batch", "tier": 1, "min_share": 0.1},
)
VARIANTS: tuple[Variant, ...] = (
    Variant(name="no marks", marks=False),
    Variant(name="default + marks", marks=True),
    Variant(name="strict tiers + marks", marks=True, classes=STRICT_CLASSES),
)


@dataclass(frozen=True, kw_only=True)
class PriorityRun:
    """The experiment's sizes (module docstring); `QUICK` is the test's."""

    flood: int = 600
    flood_rate: float = 30.0
    trickle: int = 40
    trickle_rate: float = 2.0
    warmup: int = 10
    warmup_rate: float = 5.0
    slots: int = 4
    cap: int = 40
    service_ms: tuple[float, ...] = (200.0, 0.0)
    max_tokens: tuple[int, ...] = (1, 256)
    variants: tuple[str, ...] = tuple(v.name for v in VARIANTS)
    runs: int = 1

    def __post_init__(self) -> None:
        for name in ("flood", "trickle", "warmup", "slots", "cap", "runs"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name}={value!r} must be an integer >= 1")
        for name in ("flood_rate", "trickle_rate", "warmup_rate"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name}={getattr(self, name)!r} must be > 0")
        if not self.service_ms or any(s < 0 for s in self.service_ms):
            raise ValueError(f"service_ms={self.service_ms!r} must be milliseconds >= 0")
        if not self.max_tokens or any(m < 1 for m in self.max_tokens):
            raise ValueError(f"max_tokens={self.max_tokens!r} must be integers >= 1")
        known = [v.name for v in VARIANTS]
        if not self.variants or any(v not in known for v in self.variants):
            raise ValueError(f"variants={list(self.variants)!r} must be among {known}")


#: A few seconds in all, for the test: two variants, one size, the 200 ms upstream.
QUICK = PriorityRun(flood=30, trickle=4, warmup=4, service_ms=(200.0,), max_tokens=(1,),
                    variants=("no marks", "default + marks"))  # fmt: skip


class Send(NamedTuple):
    """One planned request: when (s after the start), its group, and its bytes."""

    at_s: float
    group: str
    data: bytes


class Record(NamedTuple):
    """One answered (or failed) request: ``status`` ``"200"``, ``"429"``, ``"-"`` ..."""

    group: str
    status: str
    latency_s: float
    late_s: float


def _toml(value: Any) -> str:
    """A TOML value (strings, numbers, booleans and lists: JSON's spelling)."""
    return json.dumps(value)


def gateway_toml(upstream: str, variant: Variant, *, max_inflight: int = 4) -> str:
    """The gateway file of ``variant`` in front of ``upstream`` (module docstring)."""
    lines = ["[gateway]", f"max_inflight = {max_inflight}", "auth = false", "grace_s = 5"]
    for spec in variant.classes:
        lines += ["", "[[class]]", *(f"{k} = {_toml(v)}" for k, v in spec.items())]
    lines += ["", "[[endpoint]]", 'name = "upstream"', f"base_url = {_toml(upstream)}"]
    return "\n".join(lines) + "\n"


def chat_bytes(max_tokens: int, klass: str | None) -> bytes:
    """A chat completion request's bytes, marked with ``klass`` when given."""
    body = {"model": "mock-1", "messages": [{"role": "user", "content": "hi"}],
            "max_tokens": max_tokens}  # fmt: skip
    headers = {"content-type": "application/json", **({HEADER: klass} if klass else {})}
    return request_bytes("POST", CHAT, json.dumps(body).encode(), headers=headers)


def load_plan(run: PriorityRun, max_tokens: int, *, marks: bool, flood: bool = True,
              trickle: bool = True) -> list[Send]:  # fmt: skip
    """The flood (group ``low``) and the trickle (``high``), starting together."""
    plan: list[Send] = []
    if flood:
        low = chat_bytes(max_tokens, "batch" if marks else None)
        plan += [Send(i / run.flood_rate, "low", low) for i in range(run.flood)]
    if trickle:
        high = chat_bytes(max_tokens, "interactive" if marks else None)
        plan += [Send(i / run.trickle_rate, "high", high) for i in range(run.trickle)]
    return sorted(plan, key=lambda s: s.at_s)


def warmup_plan(run: PriorityRun, *, marks: bool) -> list[Send]:
    """The fresh process's first requests: ``warmup`` of ``max_tokens=1`` at ``warmup_rate``."""
    data = chat_bytes(1, "interactive" if marks else None)
    return [Send(i / run.warmup_rate, "warmup", data) for i in range(run.warmup)]


async def _drive(port: int, plan: Sequence[Send]) -> list[Record]:
    """Send ``plan`` open loop; each request's latency from its send to its whole answer."""
    start = time.perf_counter() + 0.05

    async def one(send: Send) -> Record:
        at = start + send.at_s
        await asyncio.sleep(max(0.0, at - time.perf_counter()))
        sent = time.perf_counter()
        got = await exchange(port, send.data, timeout_s=REQUEST_TIMEOUT_S)
        status = "-" if got.status is None else str(got.status)
        return Record(send.group, status, time.perf_counter() - sent, sent - at)

    return list(await asyncio.gather(*(one(s) for s in plan)))


def drive(port: int, plan: Sequence[Send]) -> list[Record]:
    """`_drive` to the end, then wait (bounded) until the gateway holds nothing."""
    records = asyncio.run(_drive(port, plan))
    settle(port)
    return records


def _get(port: int, path: str) -> tuple[int | None, bytes]:
    got = asyncio.run(exchange(port, request_bytes("GET", path), timeout_s=10))
    return got.status, got.body


@contextmanager
def slot_upstream(service_ms: float, slots: int, cap: int) -> Iterator[tuple[str, int]]:
    """`bench.gateway_priority_upstream` on a free port: ``(its /v1 URL, its port)``."""
    port = free_port()
    argv = ["-m", "bench.gateway_priority_upstream", "--port", str(port),
            "--service-ms", str(service_ms), "--slots", str(slots), "--cap", str(cap)]  # fmt: skip
    with running_process(argv, port):
        yield f"http://127.0.0.1:{port}/v1", port


@contextmanager
def gateway(folder: Path, upstream: str, variant: Variant, slots: int) -> Iterator[int]:
    """A fresh ``semisched serve`` with ``variant``'s file; its port once ``/healthz`` is 200.

    Raises:
        semisched.gateway.config.GatewayConfigError: The gateway refuses the file.
        RuntimeError: The process exited, or ``/healthz`` did not answer 200 in 30 s.
    """
    from semisched.gateway.configfile import load_config

    path = folder / f"gateway-{len(list(folder.iterdir()))}.toml"
    path.write_text(gateway_toml(upstream, variant, max_inflight=slots))
    load_config(path)  # the gateway's own check, here: a refusal names the field
    with serve(["--config", str(path)]) as (url, _pid):
        port = int(url.rsplit(":", 1)[1].split("/")[0])
        deadline = time.monotonic() + 30
        while _get(port, "/healthz")[0] != 200:
            if time.monotonic() > deadline:
                raise RuntimeError("the gateway's /healthz did not answer 200 within 30 s")
            time.sleep(0.1)  # bounded by the deadline
        yield port


@dataclass
class Results:
    """What one `priority_bench` measured, before any summary."""

    cells: list[dict[str, Any]] = field(default_factory=list)  # key fields + records
    unloaded: list[dict[str, Any]] = field(default_factory=list)
    skipped: dict[str, str] = field(default_factory=dict)  # variant -> the gateway's reason
    upstream_peaks: dict[str, int] = field(default_factory=dict)


def _cell(folder: Path, upstream: str, variant: Variant, run: PriorityRun, max_tokens: int,
          key: dict[str, Any], results: Results) -> None:  # fmt: skip
    """One process: warm-up, the fresh flood, the warm flood."""
    from semisched.gateway.config import GatewayConfigError

    try:
        with gateway(folder, upstream, variant, run.slots) as port:
            drive(port, warmup_plan(run, marks=variant.marks))
            for process in ("fresh", "warm"):
                start = time.perf_counter()
                records = drive(port, load_plan(run, max_tokens, marks=variant.marks))
                results.cells.append({**key, "variant": variant.name, "process": process,
                                      "seconds": time.perf_counter() - start,
                                      "records": records})  # fmt: skip
                _progress(results.cells[-1])
    except GatewayConfigError as exc:
        where = re.escape(str(folder))  # the scratch file's path says nothing to a reader
        _skip(results, variant, "the gateway refuses its file: "
              + re.sub(rf"{where}/gateway-\d+\.toml: ", "", str(exc)))  # fmt: skip
    except RuntimeError as exc:
        _skip(results, variant, f"the gateway did not start: {exc}")


def _skip(results: Results, variant: Variant, reason: str) -> None:
    lines = [line for line in reason.strip().splitlines() if line.strip()]
    results.skipped[variant.name] = " ".join(lines[:1] + lines[1:][-1:])[:600]
    print(f"gateway-priority: {variant.name!r} skipped: {results.skipped[variant.name]}",
          flush=True)  # fmt: skip


def _progress(cell: Mapping[str, Any]) -> None:
    from bench.gateway_priority_report import summarize

    s, upstream = summarize(cell["records"]), upstream_label(cell["service_ms"])
    print(f"gateway-priority: {upstream}, max_tokens {cell['max_tokens']}, "
          f"{cell['variant']}, {cell['process']}: high p95 {s['high_p95_ms']:.0f} ms, "
          f"low p50 {s['low_p50_ms']:.0f} ms ({cell['seconds']:.0f} s)", flush=True)  # fmt: skip


def _unloaded(folder: Path, upstream: str, run: PriorityRun, key: dict[str, Any],
              results: Results) -> None:  # fmt: skip
    """The trickle alone, per ``max_tokens``, on one warmed gateway (default file, marked)."""
    variant = VARIANTS[1]
    with gateway(folder, upstream, variant, run.slots) as port:
        drive(port, warmup_plan(run, marks=True))
        for max_tokens in run.max_tokens:
            records = drive(port, load_plan(run, max_tokens, marks=True, flood=False))
            results.unloaded.append({**key, "max_tokens": max_tokens, "records": records})


def run_matrix(run: PriorityRun) -> Results:
    """Every cell of ``run`` (module docstring), ``run.runs`` times over."""
    results = Results()
    variants = [v for v in VARIANTS if v.name in run.variants]
    with tempfile.TemporaryDirectory() as scratch:
        folder = Path(scratch)
        for index in range(run.runs):
            for service_ms in run.service_ms:
                key = {"run": index + 1, "service_ms": service_ms}
                with slot_upstream(service_ms, run.slots, run.cap) as (upstream, up_port):
                    _unloaded(folder, upstream, run, key, results)
                    for max_tokens in run.max_tokens:
                        for variant in variants:
                            if variant.name not in results.skipped:
                                _cell(folder, upstream, variant, run, max_tokens,
                                      {**key, "max_tokens": max_tokens}, results)  # fmt: skip
                    stats = json.loads(_get(up_port, "/stats")[1] or b"{}")
                    label = upstream_label(service_ms)
                    results.upstream_peaks[label] = max(results.upstream_peaks.get(label, 0),
                                                        int(stats.get("peak", 0)))  # fmt: skip
    return results


def upstream_label(service_ms: float) -> str:
    """``"200 ms"``, or ``"instant"`` for 0."""
    return "instant" if service_ms == 0 else f"{service_ms:g} ms"


def machine() -> dict[str, Any]:
    """Where it ran: the platform, cores, Python, and the load average now."""
    return {"platform": platform.platform(), "machine": platform.machine(),
            "cpus": os.cpu_count() or 1, "python": platform.python_version(),
            "load_average": [round(x, 2) for x in os.getloadavg()]}  # fmt: skip


def priority_bench(out: Path, run: PriorityRun, *, command: str) -> Path:
    """Run the matrix; write ``results.json`` and ``results.md`` to ``out``; the latter's path."""
    from bench.gateway_priority_report import write_results

    before = machine()
    start = time.perf_counter()
    results = run_matrix(run)
    wall_s = time.perf_counter() - start
    meta = {"command": command, "machine": before, "wall_s": round(wall_s, 1),
            "load_average_after": machine()["load_average"]}  # fmt: skip
    return write_results(out, run, results, meta)
