"""``python -m bench gateway-faults``: a fault campaign against a real ``semisched serve``.

Each scenario starts its own gateway process (``python -m semisched serve --config FILE``
on a free loopback port, `bench.gateway.serve`) in front of one
`FaultyUpstream` served in this process, drives it
with raw HTTP/1.1 clients (`exchange`), and records
what it measured, never what it expected:

1. ``storm``: runs of requests, half streaming, 30% of clients leaving at a random moment
   (before the answer, or mid-stream), the upstream answering after a random short delay;
   after each run, ``/healthz``, ``/readyz``, whether a fresh request is served, and the
   internal-error counters where ``/semisched/status`` or ``/metrics`` expose them.
2. ``slow``: slow clients against 2 s header, body and keep-alive timeouts.
3. ``hostile``: bodies, paths and headers no upstream should see, and how many upstream
   requests each caused.
4. ``memory``: 8 clients at once each sending a body of exactly ``max_body_bytes``: the
   gateway process's peak RSS (``VmHWM``) before and after.
5. ``upstream``: a 429 with ``Retry-After: 120``, a stalled stream, a hung upstream, a
   502 page naming its URL, and a fleet where one endpoint's key is refused.
6. ``sigterm``: SIGTERM while requests are in flight and queued.

Every client waits a bounded time; all traffic stays on 127.0.0.1. The tables are
`bench.gateway_faults_report`'s.

What this module is not: it asserts nothing about the gateway (a misbehaviour is a row).
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import re
import signal
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.gateway import serve
from bench.gateway_faults_upstream import (
    Exchange,
    FaultyUpstream,
    close_writer,
    exchange,
    request_bytes,
)
from semisched.gateway.keys import key_hash

__all__ = ["KEY", "SCENARIOS", "Campaign", "Gateway", "answer", "chat", "fault_campaign",
           "gateway_file", "gateway_process", "get", "sigterm_rows", "storm_rows",
           "upstream_rows"]  # fmt: skip

KEY = "sk-bench-faults"
AUTH = {"authorization": f"Bearer {KEY}", "content-type": "application/json"}
BODY: dict[str, Any] = {"model": "mock-1", "messages": [{"role": "user", "content": "hi"}],
                        "max_tokens": 5}  # fmt: skip
CHAT = "/v1/chat/completions"


@dataclass(frozen=True, kw_only=True)
class Campaign:
    """The campaign's sizes (``quick``: seconds in all, for the test)."""

    runs: int = 10
    requests: int = 1000
    concurrency: int = 100
    leave_share: float = 0.3
    sigterm_requests: int = 200
    quick: bool = False
    seed: int = 0

    def __post_init__(self) -> None:
        for name in ("runs", "requests", "concurrency", "sigterm_requests"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name}={getattr(self, name)!r} must be >= 1")
        if not 0 <= self.leave_share <= 1:
            raise ValueError(f"leave_share={self.leave_share!r} must be in 0..1")


@dataclass(frozen=True)
class Gateway:
    """A running gateway process: its port and pid."""

    port: int
    pid: int

    def peak_rss_mib(self) -> float | None:
        """``VmHWM`` (peak resident set) of the process, MiB; ``None`` off Linux."""
        return _status_kib(self.pid, "VmHWM")

    def rss_mib(self) -> float | None:
        """``VmRSS`` now, MiB."""
        return _status_kib(self.pid, "VmRSS")


def _status_kib(pid: int, name: str) -> float | None:
    try:
        text = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return None
    found = re.search(rf"^{name}:\s+(\d+) kB", text, re.MULTILINE)
    return None if found is None else int(found.group(1)) / 1024


def _toml(value: Any) -> str:
    """A TOML value (strings, numbers, booleans and lists of them are JSON's spelling)."""
    return json.dumps(list(value) if isinstance(value, tuple) else value)


def gateway_file(folder: Path, upstream: str, *, gateway: dict[str, Any] | None = None,
                 endpoints: list[dict[str, str]] | None = None) -> Path:  # fmt: skip
    """The gateway TOML: one tenant (`KEY`), ``mock-1`` declared, ``gateway``'s
    ``[gateway]`` keys, and ``endpoints`` (default: one, ``fake``, at ``upstream``)."""
    lines = ['routing = "round_robin"', "[gateway]", 'models = ["mock-1"]', "grace_s = 5"]
    lines += [f"{k} = {_toml(v)}" for k, v in (gateway or {}).items()]
    lines += ["[[tenant]]", 'name = "web"', f'key_sha256 = "{key_hash(KEY)}"']
    for endpoint in endpoints or [{"name": "fake", "base_url": upstream}]:
        lines += ["[[endpoint]]", *(f"{k} = {_toml(v)}" for k, v in endpoint.items())]
    path = folder / f"gateway-{len(list(folder.iterdir()))}.toml"
    path.write_text("\n".join(lines) + "\n")
    return path


@contextmanager
def gateway_process(folder: Path, upstream: str, *, env: dict[str, str] | None = None,
                    **kwargs: Any) -> Iterator[Gateway]:  # fmt: skip
    """``semisched serve --config`` (`gateway_file` with ``kwargs``) until the block ends."""
    path = gateway_file(folder, upstream, **kwargs)
    with serve(["--config", str(path)], env=None if env is None else {**os.environ, **env}) \
            as (url, pid):  # fmt: skip
        yield Gateway(int(url.rsplit(":", 1)[1].split("/")[0]), pid)


def chat(body: dict[str, Any] | None = None, *, headers: dict[str, str] | None = None,
         close: bool = True) -> bytes:  # fmt: skip
    """A chat completion request's bytes, authorized (``BODY`` by default)."""
    raw = json.dumps(BODY if body is None else body).encode()
    return request_bytes("POST", CHAT, raw, headers={**AUTH, **(headers or {})}, close=close)


def get(path: str) -> bytes:
    return request_bytes("GET", path, headers=AUTH)


def answer(got: Exchange) -> str:
    """``"STATUS code"`` of an exchange (``-`` when no HTTP answer came)."""
    if got.status is None:
        return f"- ({got.error or 'closed'})"
    error = got.json_error()
    code = "" if error is None else f" {error.get('code')}"
    return f"{got.status}{code}"


def settle(port: int, limit_s: float = 15.0) -> dict[str, Any]:
    """Wait (bounded) until the gateway holds no request; its status document."""
    deadline = time.monotonic() + limit_s
    while True:
        got = asyncio.run(exchange(port, get("/semisched/status"), timeout_s=10))
        status: dict[str, Any] = json.loads(got.body) if got.status == 200 else {}
        busy = status.get("inflight", 0) + sum(status.get("queued_by_class", {}).values())
        if not busy or time.monotonic() > deadline:
            return status
        time.sleep(0.2)  # bounded by limit_s


def _find(document: Any, names: tuple[str, ...]) -> dict[str, int]:
    """Every integer under one of ``names`` anywhere in a JSON document, summed by name."""
    found: dict[str, int] = {}
    stack = [document]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            for key, value in item.items():
                if key in names and isinstance(value, int):
                    found[key] = found.get(key, 0) + value
                stack.append(value)
        elif isinstance(item, list):
            stack.extend(item)
    return found


def error_counters(port: int, status: dict[str, Any]) -> str:
    """``internal_errors``/``task_errors`` from the status document and ``/metrics``."""
    names = ("internal_errors", "task_errors")
    found = {f"status.{k}": v for k, v in _find(status, names).items()}
    metrics = asyncio.run(exchange(port, get("/metrics"), timeout_s=10)).body.decode()
    for line in metrics.splitlines():
        if not line.startswith("#") and ("internal_errors" in line or "task_errors" in line):
            name, _, value = line.rpartition(" ")
            found[name] = int(float(value))
    return " ".join(f"{k}={v}" for k, v in found.items()) or "not exposed"


# -- 1. the disconnect storm ------------------------------------------------------------


async def _storm_client(port: int, stream: bool, leave: float | None, mid: bool) -> str:
    """One storm client: ``answered``, ``left`` (it disconnected first) or what went wrong.

    ``leave``: disconnect after that many seconds unless the answer came; ``mid``: after
    the stream's first event instead."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(chat(dict(BODY, stream=stream)))
        if mid:
            try:
                await asyncio.wait_for(reader.readuntil(b"data: "), 30)
                return "left"
            except asyncio.IncompleteReadError as exc:  # the answer ended before any event
                data = exc.partial
        else:
            try:
                data = await asyncio.wait_for(reader.read(), 60 if leave is None else leave)
            except TimeoutError:
                if leave is None:
                    raise
                return "left"
    except (TimeoutError, ConnectionError) as exc:
        return type(exc).__name__
    finally:
        await close_writer(writer)
    if not data.startswith(b"HTTP/1.1 200"):
        return data[:12].decode("latin-1") or "nothing"
    complete = b"data: [DONE]" in data if stream else b'"choices"' in data
    return "answered" if complete else "truncated"


async def _storm(port: int, campaign: Campaign, rng: random.Random) -> dict[str, int]:
    limit = asyncio.Semaphore(campaign.concurrency)
    tally: dict[str, int] = {}

    async def one() -> None:
        stream = rng.random() < 0.5
        leaves = rng.random() < campaign.leave_share
        mid = leaves and stream and rng.random() < 0.5
        leave = rng.uniform(0.0, 0.25) if leaves else None
        async with limit:
            outcome = await _storm_client(port, stream, leave, mid)
        tally[outcome] = tally.get(outcome, 0) + 1

    await asyncio.gather(*(one() for _ in range(campaign.requests)))
    return tally


def storm_rows(folder: Path, up: FaultyUpstream, campaign: Campaign) -> list[dict[str, Any]]:
    """Scenario 1 (module docstring): one row per run, all runs on one gateway process."""
    rng = random.Random(campaign.seed)
    rows = []
    with gateway_process(folder, up.url) as gw:
        for run in range(1, campaign.runs + 1):
            up.reset("ok", delay_s=(0.0, 0.2))
            start = time.perf_counter()
            tally = asyncio.run(_storm(gw.port, campaign, rng))
            took = time.perf_counter() - start
            status = settle(gw.port)
            received, abandoned = up.received, up.abandoned
            checks = {p: answer(asyncio.run(exchange(gw.port, get(p), timeout_s=10)))
                      for p in ("/healthz", "/readyz")}  # fmt: skip
            fresh = asyncio.run(exchange(gw.port, chat(), timeout_s=30))
            rows.append({
                "run": run, "requests": campaign.requests, "concurrency": campaign.concurrency,
                "answered": tally.pop("answered", 0), "disconnected": tally.pop("left", 0),
                "other": " ".join(f"{k}:{v}" for k, v in sorted(tally.items())) or "0",
                "seconds": took, "upstream_received": received,
                "upstream_abandoned": abandoned, "healthz": checks["/healthz"],
                "readyz": checks["/readyz"], "fresh_request": answer(fresh),
                "scheduler_dead": fresh.status != 200,
                "gateway_cancelled_so_far": " ".join(f"{k}={v}" for k, v in
                                              status.get("cancelled", {}).items()),
                "error_counters": error_counters(gw.port, status),
            })  # fmt: skip
    return rows


# -- 5. upstream faults -----------------------------------------------------------------


def _events(data: bytes) -> list[bytes]:
    """The SSE ``data:`` payloads in a raw (chunked) answer."""
    return [line[6:].strip() for line in re.split(rb"\r?\n", data) if line.startswith(b"data: ")]


def _event_names(got: Exchange) -> str:
    """What a raw SSE answer held, in order: ``chunk``, ``error CODE``, ``[DONE]``."""
    names: list[str] = []
    for event in _events(got.body):
        try:
            data = json.loads(event)
        except ValueError:
            names.append("[DONE]" if event == b"[DONE]" else "not JSON")
            continue
        error = data.get("error") if isinstance(data, dict) else None
        names.append(f"error {error.get('code')} ({error.get('message')!r})"
                     if isinstance(error, dict) else "chunk")  # fmt: skip
    return ", ".join(names) or "no event"


def _retry_after_row(folder: Path, up: FaultyUpstream, quick: bool) -> dict[str, Any]:
    """A 429 with ``Retry-After: 120``: two clients (deadline 45 s, the second 1 s later)."""
    deadline = 3 if quick else 45
    up.reset("429-once")
    with gateway_process(folder, up.url) as gw:

        async def two() -> list[Exchange]:
            head = {"x-semisched-deadline": str(deadline)}
            first = asyncio.create_task(exchange(gw.port, chat(headers=head), timeout_s=90))
            await asyncio.sleep(1)
            second = asyncio.create_task(exchange(gw.port, chat(headers=head), timeout_s=90))
            return [await first, await second]

        got = asyncio.run(two())
    times = [t for t, _ in up.events]
    gap = times[1] - times[0] if len(times) > 1 else None
    served = f"the next upstream request {gap:.1f} s after the 429" if gap is not None else \
        "no upstream request after the 429 within the deadline"  # fmt: skip
    return {"case": "429 with Retry-After: 120 (clients' deadline "
                    f"{deadline} s; a second client 1 s later)",
            "answer": f"{answer(got[0])} / {answer(got[1])}",
            "seconds": f"{got[0].answered_s or float('nan'):.1f} / "
                       f"{got[1].answered_s or float('nan'):.1f}",
            "measured": served, "upstream_requests": up.received}  # fmt: skip


def _stall_and_hang_rows(folder: Path, up: FaultyUpstream, quick: bool) -> list[dict[str, Any]]:
    """A stream stalled after its first chunk (deadline 3 s) and a hung upstream
    (``max_request_s`` small)."""
    max_request_s = 2 if quick else 3
    rows = []
    with gateway_process(folder, up.url, gateway={"max_request_s": max_request_s}) as gw:
        up.reset("stall")
        data = chat(dict(BODY, stream=True), headers={"x-semisched-deadline": "3"})
        got = asyncio.run(exchange(gw.port, data, timeout_s=60, wait_close=True))
        rows.append({"case": "stream stalled after its first chunk, x-semisched-deadline: 3",
                     "answer": answer(got), "seconds": got.closed_s,
                     "measured": f"events: {_event_names(got)}",
                     "upstream_requests": up.received})  # fmt: skip
        time.sleep(0.5)  # the stalled call's end reaching the upstream before the next count
        up.reset("hang")
        got = asyncio.run(exchange(gw.port, chat(), timeout_s=60))
        time.sleep(0.2)  # the gateway's abort reaching the upstream
        rows.append({"case": f"hung upstream, max_request_s = {max_request_s}",
                     "answer": answer(got), "seconds": got.answered_s,
                     "measured": f"upstream calls abandoned by the gateway: {up.abandoned}",
                     "upstream_requests": up.received})  # fmt: skip
    return rows


def _bad_gateway_row(folder: Path, up: FaultyUpstream) -> dict[str, Any]:
    """The upstream answers 502 with a proxy's HTML page naming the URL it was called at."""
    up.reset("502")
    with gateway_process(folder, up.url) as gw:
        got = asyncio.run(exchange(gw.port, chat(headers={"x-semisched-deadline": "20"}),
                                   timeout_s=60))  # fmt: skip
    leaked = f"127.0.0.1:{up.port}".encode() in got.body
    return {"case": "upstream 502 with an HTML page naming its internal URL",
            "answer": answer(got), "seconds": got.answered_s,
            "measured": f"internal URL in the client's body: {'yes' if leaked else 'no'}; "
                        f"OpenAI-shaped: {'yes' if got.json_error() else 'no'}",
            "upstream_requests": up.received}  # fmt: skip


def _fleet_row(folder: Path, up: FaultyUpstream, quick: bool) -> dict[str, Any]:
    """Two endpoints on the upstream, one with a key it refuses (401)."""
    n = 4 if quick else 20
    up.reset()
    up.key = "sk-upstream-good"
    endpoints = [
        {"name": "refused-key", "base_url": up.url, "key_env": "FAULTS_BAD_KEY"},
        {"name": "good-key", "base_url": up.url, "key_env": "FAULTS_GOOD_KEY"},
    ]
    env = {"FAULTS_BAD_KEY": "sk-upstream-revoked", "FAULTS_GOOD_KEY": up.key}
    try:
        with gateway_process(folder, up.url, env=env, endpoints=endpoints) as gw:
            got = [asyncio.run(exchange(gw.port, chat(), timeout_s=60)) for _ in range(n)]
            status = json.loads(asyncio.run(exchange(gw.port, get("/semisched/status"))).body)
    finally:
        up.key = None
    bad: dict[str, Any] = next(
        (e for e in status.get("endpoints", []) if e["name"] == "refused-key"), {}
    )
    ok = sum(g.status == 200 for g in got)
    return {"case": "two endpoints, one key refused with 401",
            "answer": f"200: {ok} of {n}", "seconds": sum(g.answered_s or 0 for g in got),
            "measured": f"status: refused-key circuit {bad.get('circuit')}, reason "
                        f"{bad.get('circuit_reason')}; upstream 401s: {up.refused_keys}",
            "upstream_requests": up.received}  # fmt: skip


def upstream_rows(folder: Path, up: FaultyUpstream, quick: bool) -> list[dict[str, Any]]:
    """Scenario 5 (module docstring): one row per upstream fault."""
    return [_retry_after_row(folder, up, quick), *_stall_and_hang_rows(folder, up, quick),
            _bad_gateway_row(folder, up), _fleet_row(folder, up, quick)]  # fmt: skip


# -- 6. SIGTERM under load --------------------------------------------------------------


async def _sigterm(gw: Gateway, up: FaultyUpstream, n: int,
                   inflight: int) -> tuple[int, float, list[Exchange]]:  # fmt: skip
    """``n`` requests at once; SIGTERM once ``inflight`` reached the upstream (waiting 10 s
    at most): the upstream's requests then, when it was sent, and every exchange."""
    tasks = [asyncio.create_task(exchange(gw.port, chat(), timeout_s=60)) for _ in range(n)]
    deadline = time.monotonic() + 10
    while up.received < inflight and time.monotonic() < deadline:
        await asyncio.sleep(0.02)
    await asyncio.sleep(0.2)
    sent, at = up.received, time.perf_counter()
    os.kill(gw.pid, signal.SIGTERM)
    return sent, at, list(await asyncio.gather(*tasks))


def sigterm_rows(folder: Path, up: FaultyUpstream, campaign: Campaign) -> list[dict[str, Any]]:
    """Scenario 6: SIGTERM with requests in flight (upstream answers after 1 s) and queued."""
    n = campaign.sigterm_requests
    inflight = min(20, n)
    up.reset("ok", delay_s=(1.0, 1.0))
    with gateway_process(folder, up.url, gateway={"max_inflight": inflight}) as gw:
        sent, at, got = asyncio.run(_sigterm(gw, up, n, inflight))
        while _status_kib(gw.pid, "VmRSS") is not None and time.perf_counter() - at < 30:
            time.sleep(0.05)  # bounded: the process's exit after its grace
        exited = time.perf_counter() - at
    shaped = [g for g in got if g.status is not None and g.json_error() is not None]
    return [{"requests": n, "upstream_requests_at_sigterm": sent,
             "upstream_requests": up.received,
             "answered_200": sum(g.status == 200 for g in got),
             "answered_503_json": sum(g.status == 503 for g in shaped),
             "other_json": " ".join(sorted({answer(g) for g in shaped if g.status != 503})),
             "nothing_or_plain_text": sum(g.status != 200 and g.json_error() is None
                                          for g in got),
             "upstream_answered": up.answered, "exited_s_after_sigterm": exited}]  # fmt: skip


# -- the campaign -----------------------------------------------------------------------

SCENARIOS: tuple[str, ...] = ("storm", "slow", "hostile", "memory", "upstream", "sigterm")


def fault_campaign(out: Path, campaign: Campaign, *, command: str) -> Path:
    """Run every scenario; write ``faults.csv`` and ``faults.md`` to ``out``; the latter's path."""
    from bench.gateway_faults_clients import hostile_rows, memory_rows, slow_rows
    from bench.gateway_faults_report import write_results

    results: dict[str, list[dict[str, Any]]] = {}
    with tempfile.TemporaryDirectory() as scratch, FaultyUpstream(seed=campaign.seed).running() \
            as up:  # fmt: skip
        folder = Path(scratch)
        runs = {"storm": lambda: storm_rows(folder, up, campaign),
                "slow": lambda: slow_rows(folder, up),
                "hostile": lambda: hostile_rows(folder, up, campaign.quick),
                "memory": lambda: memory_rows(folder, up, campaign.quick),
                "upstream": lambda: upstream_rows(folder, up, campaign.quick),
                "sigterm": lambda: sigterm_rows(folder, up, campaign)}  # fmt: skip
        for name in SCENARIOS:
            start = time.perf_counter()
            results[name] = runs[name]()
            print(f"gateway-faults: {name} done in {time.perf_counter() - start:.1f}s",
                  flush=True)  # fmt: skip
    return write_results(out, results, command=command)
