"""Timed completions against an OpenAI-compatible server (llama-server or the mock).

Each request is ``POST /v1/completions`` with the prompt as token ids (so both servers
count exactly the same prompt tokens), ``max_tokens`` as the output length and
``ignore_eos`` (llama-server stops at ``max_tokens`` only), prompt caching off. The
answer's ``usage`` and, from llama-server, its ``timings`` (``prompt_ms``,
``predicted_ms``, ``predicted_n``) are kept beside the client's send and answer times.

What it is not: no retries, no scheduling; an error answer raises.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

import anyio
import numpy as np

__all__ = ["Completion", "Job", "complete", "prompt_ids", "run_jobs"]


@dataclass(frozen=True, slots=True, kw_only=True)
class Job:
    """One request to send: when (seconds after the run starts), its prompt, its length."""

    arrival: float
    prompt: tuple[int, ...]
    max_tokens: int
    tag: str = ""


@dataclass(frozen=True, slots=True, kw_only=True)
class Completion:
    """One answered request, times in seconds from the run's start.

    Attributes:
        tag: The job's tag.
        sent, end: When it was sent and when its answer arrived.
        prompt_tokens, output_tokens: From the answer's ``usage``.
        prompt_ms, predicted_ms, predicted_n: llama-server's ``timings`` (``nan`` elsewhere).
    """

    tag: str
    sent: float
    end: float
    prompt_tokens: int
    output_tokens: int
    prompt_ms: float
    predicted_ms: float
    predicted_n: int

    @property
    def latency(self) -> float:
        return self.end - self.sent


def prompt_ids(rng: np.random.Generator, length: int, vocab_size: int) -> tuple[int, ...]:
    """``length`` token ids drawn from the vocabulary (the two special ids left out)."""
    return tuple(int(t) for t in rng.integers(2, vocab_size, size=length))


async def complete(client: object, url: str, job: Job, origin: float) -> Completion:
    """Send ``job`` now on ``client`` (an ``httpx2.AsyncClient``) and time it."""
    body = {
        "model": "engine",
        "prompt": list(job.prompt),
        "max_tokens": job.max_tokens,
        "ignore_eos": True,
        "temperature": 0.0,
        "cache_prompt": False,
    }
    sent = time.perf_counter() - origin
    answer = await client.post(f"{url}/completions", json=body)  # type: ignore[attr-defined]
    end = time.perf_counter() - origin
    answer.raise_for_status()
    data = answer.json()
    usage, timings = data.get("usage") or {}, data.get("timings") or {}
    return Completion(
        tag=job.tag,
        sent=sent,
        end=end,
        prompt_tokens=int(usage.get("prompt_tokens", len(job.prompt))),
        output_tokens=int(usage.get("completion_tokens", 0)),
        prompt_ms=float(timings.get("prompt_ms", float("nan"))),
        predicted_ms=float(timings.get("predicted_ms", float("nan"))),
        predicted_n=int(timings.get("predicted_n", 0)),
    )


async def _run(url: str, jobs: Sequence[Job], timeout_s: float) -> list[Completion]:
    import httpx2

    done: list[Completion | None] = [None] * len(jobs)
    limits = httpx2.Limits(max_connections=len(jobs) + 1, max_keepalive_connections=64)
    async with httpx2.AsyncClient(timeout=timeout_s, limits=limits) as client:
        origin = time.perf_counter()

        async def one(i: int, job: Job) -> None:
            await anyio.sleep(max(0.0, job.arrival - (time.perf_counter() - origin)))
            done[i] = await complete(client, url, job, origin)

        async with anyio.create_task_group() as group:
            for i, job in enumerate(jobs):
                group.start_soon(one, i, job)
    return [c for c in done if c is not None]


def run_jobs(url: str, jobs: Sequence[Job], *, timeout_s: float = 900.0) -> list[Completion]:
    """Send every job at its arrival time (open loop) to ``url`` (``.../v1``); their answers."""
    return anyio.run(_run, url, jobs, timeout_s)
