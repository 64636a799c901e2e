"""The fault campaign's misbehaving clients: scenarios 2-4 of `bench.gateway_faults`.

``slow``: slow clients against 2 s header, body and keep-alive timeouts (when the gateway
closed each, and what it answered). ``hostile``: requests no upstream should see (each
one's answer, its size and the upstream requests it caused). ``memory``: 8 clients at
once each sending a body of exactly ``max_body_bytes`` (the gateway process's peak RSS
before and after).

What this module is not: it starts nothing of its own (the gateway and the upstream are
`bench.gateway_faults`'s) and asserts nothing about the answers.
"""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import fields
from pathlib import Path
from typing import Any

from bench.gateway_faults import AUTH, BODY, CHAT, KEY, answer, chat, gateway_process, get
from bench.gateway_faults_upstream import Exchange, FaultyUpstream, exchange, request_bytes
from semisched.gateway.config import GatewayConfig

__all__ = ["TIMEOUTS", "hostile_cases", "hostile_rows", "memory_rows", "slow_rows"]

#: The slow-client scenario's ``[gateway]`` timeouts.
TIMEOUTS = {"header_timeout_s": 2, "body_timeout_s": 2, "keepalive_timeout_s": 2}


async def _slow(port: int) -> list[tuple[str, str, Exchange, float]]:
    """Each slow client at once: ``(client, the limit that applies, its exchange, the
    seconds from when the limit's clock starts to the close)``."""
    whole = chat()
    head, _, body = whole.partition(b"\r\n\r\n")
    half = head + b"\r\n\r\n" + body[: len(body) // 2]
    idle = request_bytes("GET", "/healthz", close=False)
    runs = await asyncio.gather(
        exchange(port, whole, trickle_s=0.25, wait_close=True, timeout_s=30),
        exchange(port, b"", wait_close=True, timeout_s=30),
        exchange(port, half, wait_close=True, timeout_s=30),
        exchange(port, idle, wait_close=True, timeout_s=30),
    )
    names = [("headers one byte every 0.25 s", "header_timeout_s"),
             ("connects, sends nothing", "header_timeout_s"),
             ("half of its body, then nothing", "body_timeout_s"),
             ("idle keep-alive after one answer", "keepalive_timeout_s")]  # fmt: skip
    rows = []
    for (name, limit), got in zip(names, runs, strict=True):
        since = got.answered_s or 0.0 if limit == "keepalive_timeout_s" else 0.0
        rows.append((name, limit, got, (got.closed_s or float("nan")) - since))
    return rows


def slow_rows(folder: Path, up: FaultyUpstream) -> list[dict[str, Any]]:
    """Scenario 2: when the gateway closed each slow client, and what it answered."""
    up.reset()
    with gateway_process(folder, up.url, gateway=TIMEOUTS) as gw:
        measured = asyncio.run(_slow(gw.port))
    return [{"client": name, "limit": f"{limit} = {TIMEOUTS[limit]}",
             "closed_after_s": seconds, "answer": answer(got) if got.status else "none",
             "upstream_requests": up.received}
            for name, limit, got, seconds in measured]  # fmt: skip


# -- 3. hostile bodies ------------------------------------------------------------------


def hostile_cases(max_body: int) -> list[tuple[str, bytes]]:
    """``(case, request bytes)`` for each hostile request."""

    def body(**changes: Any) -> bytes:
        return chat(dict(BODY, **changes))

    def raw(text: bytes) -> bytes:
        return request_bytes("POST", CHAT, text, headers=AUTH)

    def sized(size: int) -> bytes:
        return chat(body_of(size))

    deep = b"[" * 100_000 + b"]" * 100_000
    nan = json.dumps(BODY)[:-1].encode() + b', "temperature": NaN}'
    duplicate = json.dumps(BODY)[:-1].encode() + b', "model": "mock-1"}'
    two_keys = [("authorization", f"Bearer {KEY}"), ("authorization", f"Bearer {KEY}"),
                ("content-type", "application/json")]  # fmt: skip
    return [
        ("50 MB declared body", request_bytes("POST", CHAT, headers=AUTH, length=50_000_000)),
        ("100,000-deep [", raw(deep)),
        ("NaN", raw(nan)),
        ("duplicate keys", raw(duplicate)),
        ("n = 10^9", body(n=10**9)),
        ('temperature "hot"', body(temperature="hot")),
        ("max_tokens = 10^8", body(max_tokens=10**8)),
        ("unknown model", body(model="gpt-unknown")),
        ("unknown path", request_bytes("POST", "/v1/chat/complete", json.dumps(BODY).encode(),
                                       headers=AUTH)),
        ("wrong method (GET)", get(CHAT)),
        ("trailing slash", request_bytes("POST", CHAT + "/", json.dumps(BODY).encode(),
                                         headers=AUTH)),
        ("two Authorization headers", request_bytes("POST", CHAT, json.dumps(BODY).encode(),
                                                    headers=two_keys)),
        ('service_tier "priority" (not allowed)', body(service_tier="priority")),
        ("5 MB messages string", body(messages="x" * 5_000_000)),
        (f"body of max_body_bytes + 1 ({max_body + 1} bytes)", sized(max_body + 1)),
    ]  # fmt: skip


def hostile_rows(folder: Path, up: FaultyUpstream, quick: bool) -> list[dict[str, Any]]:
    """Scenario 3: each hostile request's answer and the upstream requests it caused."""
    max_body = 1 << 20 if quick else _default("max_body_bytes")
    rows = []
    with gateway_process(folder, up.url, gateway={"max_body_bytes": max_body}) as gw:
        for case, data in hostile_cases(max_body):
            up.reset()
            got = asyncio.run(exchange(gw.port, data, timeout_s=30))
            time.sleep(0.05)  # a forwarded request would have reached the upstream by now
            error = got.json_error()
            rows.append({"case": case, "status": got.status or "-",
                         "code": "" if error is None else error.get("code"),
                         "response_bytes": len(got.body), "openai_shape": error is not None,
                         "upstream_requests": up.received})  # fmt: skip
    return rows


def body_of(size: int) -> dict[str, Any]:
    """A chat body of exactly ``size`` bytes as JSON (one user message of ``x``)."""
    empty = len(json.dumps(dict(BODY, messages=[{"role": "user", "content": ""}])))
    return dict(BODY, messages=[{"role": "user", "content": "x" * (size - empty)}])


def _default(name: str) -> Any:
    return next(f.default for f in fields(GatewayConfig) if f.name == name)


# -- 4. memory --------------------------------------------------------------------------


def memory_rows(folder: Path, up: FaultyUpstream, quick: bool) -> list[dict[str, Any]]:
    """Scenario 4: peak RSS of the gateway before and after 8 limit-sized bodies at once."""
    limit = 1 << 20 if quick else _default("max_body_bytes")
    data = chat(body_of(limit))
    up.reset()
    with gateway_process(folder, up.url, gateway={"max_body_bytes": limit}) as gw:
        asyncio.run(exchange(gw.port, chat(), timeout_s=30))  # warm: first request's imports
        before = gw.peak_rss_mib()

        async def eight() -> list[Exchange]:
            return await asyncio.gather(*(exchange(gw.port, data, timeout_s=120)
                                          for _ in range(8)))  # fmt: skip

        start = time.perf_counter()
        got = asyncio.run(eight())
        took = time.perf_counter() - start
        after, now = gw.peak_rss_mib(), gw.rss_mib()
    answers: dict[str, int] = {}
    for g in got:
        answers[answer(g)] = answers.get(answer(g), 0) + 1
    return [{"clients": 8, "body_bytes": limit, "max_body_bytes": limit,
             "peak_rss_before_mib": before, "peak_rss_after_mib": after,
             "rss_after_mib": now, "answers": " ".join(f"{k}:{v}" for k, v in answers.items()),
             "upstream_requests": up.received, "seconds": took}]  # fmt: skip
