"""One worker process of the shared-budget benchmark: ``python -m bench.shared_worker``.

A worker is what a user runs N of: one `Scheduler` over
``openai.AsyncOpenAI`` (its own retries off, as the scheduler always does) against
the HTTP mock, in compressed time (`ScaledClock`), with the
budget it is given (``--rpm``/``--tpm``, ``--max-concurrency``) and, with
``--state``, a Redis shared with the other workers of ``--namespace``. It submits
``--requests`` calls at Poisson rate ``--rate`` (requests per virtual second) and,
when all are resolved, prints ONE JSON line (`run_worker`'s result) on stdout.

The calls (`request_mix`, seeded by ``--seed``): a prompt of 16–64 tokens
(filler of exactly 4 bytes per token, so the scheduler's byte estimate and the mock's
count agree), ``max_tokens`` 128 (three calls in four) or 1024, and a true answer of
8–96 tokens told to the mock by ``x-mock-output-tokens``. The provider's token charge
of a call is therefore known: prompt + ``max_tokens``. Every HTTP exchange is recorded
(wall send time, status, request index; an ``x-bench-id`` header names the request), so
the driver can rebuild what the provider admitted and when.

With ``--wait-go`` the worker opens its scheduler (and its Redis connection), prints
``ready`` and waits for one line on stdin before its first arrival, so that N workers
start together. ``--lease-ttl`` (wall seconds) shortens the shared leases' TTL (the
``kill -9`` test). ``--no-adapt`` stops the budget from following the provider's
rate-limit headers (a static split must not: the headers count every worker's traffic).

``--probe K`` (`run_probe`): K reservations one at a time, no scheduler: the Redis
round trip alone.

What this module is not: the launching side (`bench.shared_launch`: one worker's
command line, N started together and their JSON lines read), the driver
(`bench.shared_budget`: configurations, measures, tables), and not a load
generator of its own: it only uses the public SDK.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import math
import os
import random
import sys
import time
from collections import Counter
from collections.abc import Sequence
from typing import Any

import anyio
import httpx2
import openai

from semisched import RuntimeOptions, Scheduler, SemischedError
from semisched.core.config import BudgetConfig, preset
from semisched.runtime.clock import ScaledClock
from semisched.state.base import Grant, Scope, StateUnavailable

__all__ = ["Call", "main", "request_mix", "run_probe", "run_worker"]

#: Policies a worker may run (``--policy``).
POLICIES = ("batch_makespan", "final_adrr_olc")
#: The client's HTTP timeout, wall seconds (the mock never hangs in this benchmark).
HTTP_TIMEOUT_S = 60.0


@dataclasses.dataclass(frozen=True, slots=True)
class Call:
    """One planned call.

    Attributes:
        arrival: Virtual seconds after the start.
        prompt_tokens: Prompt length (the mock counts 4 bytes per token).
        max_tokens: The call's cap.
        output_tokens: The true answer's length (the mock's hint).
    """

    arrival: float
    prompt_tokens: int
    max_tokens: int
    output_tokens: int

    @property
    def charge(self) -> int:
        """What the provider's token window charges: prompt + ``max_tokens``."""
        return self.prompt_tokens + self.max_tokens


def request_mix(requests: int, rate: float, seed: int) -> list[Call]:
    """``requests`` calls arriving at Poisson ``rate`` (per virtual second), seeded.

    Raises:
        ValueError: ``requests < 0`` or ``rate <= 0``.
    """
    if requests < 0:
        raise ValueError(f"{requests=} must be >= 0")
    if not (math.isfinite(rate) and rate > 0):
        raise ValueError(f"{rate=} must be a finite number > 0")
    rng = random.Random(seed)
    calls, t = [], 0.0
    for _ in range(requests):
        t += rng.expovariate(rate)
        cap = 128 if rng.random() < 0.75 else 1024
        calls.append(Call(t, rng.randint(16, 64), cap, rng.randint(8, 96)))
    return calls


def _filler(tokens: int) -> str:
    return ("lore " * (tokens + 1))[: 4 * tokens]


class _Recorder(httpx2.AsyncBaseTransport):
    """Records every exchange: (wall send time, status or 0 for no answer, ``x-bench-id``)."""

    def __init__(self, sends: list[tuple[float, int, str]]) -> None:
        limits = httpx2.Limits(max_connections=1000, max_keepalive_connections=200)
        self._inner = httpx2.AsyncHTTPTransport(limits=limits)
        self._sends = sends

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        sent, status = time.time(), 0
        try:
            response = await self._inner.handle_async_request(request)
            status = response.status_code
            return response
        finally:
            self._sends.append((sent, status, request.headers.get("x-bench-id", "")))

    async def aclose(self) -> None:
        await self._inner.aclose()


def _timed_state(url: str, namespace: str, worker: str, lease_ttl_s: float) -> Any:
    """A `RedisState` that keeps every reservation's round trip."""
    from semisched.state.redis import RedisState

    class TimedState(RedisState):
        round_trips_ms: list[float]

        async def reserve(self, request_id: str, tokens: float, scopes: Sequence[Scope]) -> Grant:
            started = time.perf_counter()
            grant = await super().reserve(request_id, tokens, scopes)  # raises when lost
            self.round_trips_ms.append((time.perf_counter() - started) * 1000.0)
            return grant

    state = TimedState(url, namespace=namespace, worker=worker, lease_ttl_s=lease_ttl_s)
    state.round_trips_ms = []
    return state


async def run_worker(args: argparse.Namespace) -> dict[str, Any]:
    """Run one worker (module docstring) and return what it prints.

    Returns:
        ``worker``, ``requests`` (submitted), ``start``/``end`` (wall epoch seconds: the
        first arrival's origin, the last resolution), ``time_scale``, ``completed``,
        ``outcomes`` (error type -> count, for the calls that did not complete),
        ``throttled`` (429s this scheduler saw), ``refused`` (sends the shared budget
        refused), ``retries``, ``state`` (the `StateStats` fields, or ``None``),
        ``round_trips_ms`` (every reservation's wall time), ``calls`` (per call:
        arrival wall time, token charge, end wall time, outcome) and ``sends`` (per HTTP
        exchange: wall time, status, call index).
    """
    calls = request_mix(args.requests, args.rate, args.seed)
    worker = args.worker_id or f"w{args.seed}p{os.getpid()}"
    sends: list[tuple[float, int, str]] = []
    http = httpx2.AsyncClient(transport=_Recorder(sends), timeout=HTTP_TIMEOUT_S)
    client = openai.AsyncOpenAI(base_url=args.base_url, api_key="bench", http_client=http,
                                max_retries=0)  # fmt: skip
    budget = BudgetConfig(rpm=args.rpm, tpm=args.tpm, margin_s=args.margin, adapt=args.adapt)
    config = preset(args.policy, max_inflight=args.max_concurrency, budget=budget)
    state = None
    if args.state is not None:
        state = _timed_state(args.state, args.namespace, worker, args.lease_ttl)
    clock = ScaledClock(args.time_scale)
    scheduler = Scheduler(
        client,
        config=config,
        state=state,
        clock=clock,
        priors="heuristic",
        options=RuntimeOptions(seed=args.seed, namespace=args.namespace),
    )
    arrived: list[float] = [math.nan] * len(calls)
    ended: list[float] = [math.nan] * len(calls)
    outcome: list[str] = [""] * len(calls)

    async def one(i: int, call: Call) -> None:
        arrived[i] = time.time()
        try:
            await scheduler.submit(
                model="mock-1",
                messages=[{"role": "user", "content": _filler(call.prompt_tokens)}],
                max_tokens=call.max_tokens,
                extra_headers={
                    "x-mock-output-tokens": str(call.output_tokens),
                    "x-bench-id": str(i),
                },
            )
            outcome[i] = "completed"
        except SemischedError as exc:
            outcome[i] = type(exc).__name__
        ended[i] = time.time()

    async with client, scheduler:
        if args.wait_go:
            print("ready", flush=True)
            await anyio.to_thread.run_sync(sys.stdin.readline)
        start, origin = time.time(), clock.now()
        async with anyio.create_task_group() as tg:
            for i, call in enumerate(calls):
                delay = call.arrival - (clock.now() - origin)
                if delay > 0:
                    await clock.sleep(delay)
                tg.start_soon(one, i, call)
        end = time.time()
        stats = scheduler.statistics()
    shared = stats.state
    return {
        "worker": worker,
        "requests": len(calls),
        "start": start,
        "end": end,
        "time_scale": args.time_scale,
        "completed": outcome.count("completed"),
        "outcomes": dict(Counter(o for o in outcome if o != "completed")),
        "throttled": stats.counters.throttled,
        "refused": stats.engine.counters.refused,
        "retries": stats.counters.retries,
        "state": None if shared is None else dataclasses.asdict(shared),
        "round_trips_ms": [] if state is None else [round(x, 4) for x in state.round_trips_ms],
        "calls": [
            [round(arrived[i], 6), c.charge, round(ended[i], 6), outcome[i]]
            for i, c in enumerate(calls)
        ],
        "sends": [
            [round(t, 6), status, int(rid) if rid.isdigit() else -1] for t, status, rid in sends
        ],
    }


async def run_probe(args: argparse.Namespace) -> dict[str, Any]:
    """``--probe K``: K reservations (each released at once, 5 ms apart) in one scope shaped
    like a worker's (requests, tokens and leases, limits never reached), timed one at a
    time on an otherwise idle event loop: the shared state's own round trip.

    Returns:
        ``worker`` and ``round_trips_ms``.
    """
    from semisched.state.redis import RedisState

    worker = args.worker_id or f"probe{os.getpid()}"
    state = RedisState(args.state, namespace=args.namespace, worker=worker)
    scope = Scope(key="probe", rpm=10**6, tpm=10**9, max_concurrency=10**4, window_s=2.0)
    trips = []
    await state.open()
    try:
        if args.wait_go:
            print("ready", flush=True)
            await anyio.to_thread.run_sync(sys.stdin.readline)
        for i in range(args.probe):
            started = time.perf_counter()
            await state.reserve(f"p{i}", 500, [scope])
            trips.append(round((time.perf_counter() - started) * 1000.0, 4))
            await state.release(f"p{i}", [scope])
            await anyio.sleep(0.005)
    finally:
        await state.close()
    return {"worker": worker, "round_trips_ms": trips}


_REQUIRED = ("base_url", "requests", "rate", "rpm", "tpm", "time_scale")


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m bench.shared_worker", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    p.add_argument("--base-url", help="the mock's /v1 URL (required unless --probe)")
    p.add_argument("--requests", type=int, help="calls to submit (required unless --probe)")
    p.add_argument("--rate", type=float, help="Poisson arrivals per virtual s (required ...)")
    p.add_argument("--rpm", type=int, help="this worker's request budget (required ...)")
    p.add_argument("--tpm", type=int, help="this worker's token budget (required ...)")
    p.add_argument("--max-concurrency", type=int, default=32, help="max_inflight (32)")
    p.add_argument("--time-scale", type=float, help="virtual s per wall s (required ...)")
    p.add_argument("--state", help="redis://... shared with the other workers")
    p.add_argument("--namespace", default="semisched", help="the state's key namespace")
    p.add_argument("--worker-id", help="this worker's id in the namespace (default: w<seed>p<pid>)")
    p.add_argument("--lease-ttl", type=float, default=10.0, help="lease TTL, wall s (10)")
    p.add_argument("--seed", type=int, default=0, help="seeds the calls and the back-off")
    p.add_argument("--policy", choices=POLICIES, default="batch_makespan", help="preset")
    p.add_argument("--margin", type=float, default=1.0, help="budget margin_s, virtual (1)")
    p.add_argument("--no-adapt", dest="adapt", action="store_false",
                   help="do not follow the provider's rate-limit headers")  # fmt: skip
    p.add_argument("--wait-go", action="store_true", help="print ready, wait for a stdin line")
    p.add_argument(
        "--probe",
        type=int,
        metavar="K",
        help="instead: K reservations in --state, one at a time (round trips only)",
    )
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """Parse ``argv``, run, print the JSON line; 2 when the shared state is unreachable."""
    parser = _parser()
    args = parser.parse_args(argv)
    if args.probe is not None:
        if args.state is None or args.probe < 1:
            parser.error("--probe K needs K >= 1 and --state")
        run = run_probe
    else:
        missing = [n for n in _REQUIRED if getattr(args, n) is None]
        if missing:
            parser.error("missing: " + ", ".join("--" + n.replace("_", "-") for n in missing))
        run = run_worker
        for name in ("requests", "rpm", "tpm", "max_concurrency"):
            if getattr(args, name) < (0 if name == "requests" else 1):
                parser.error(f"--{name.replace('_', '-')}={getattr(args, name)} is out of range")
        for name in ("rate", "time_scale", "lease_ttl"):
            if not (math.isfinite(getattr(args, name)) and getattr(args, name) > 0):
                parser.error(f"--{name.replace('_', '-')} must be > 0")
    # The shared state's warning (lost) and info line (rejoined) go to stderr, timed.
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(created).6f %(levelname)s %(message)s"))
    logging.getLogger("semisched").addHandler(handler)
    logging.getLogger("semisched").setLevel(logging.INFO)
    try:
        result = anyio.run(run, args)
    except StateUnavailable as exc:
        print(f"shared_worker: {exc}", file=sys.stderr)
        return 2
    print(json.dumps(result, separators=(",", ":")), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
