"""``python -m bench apis``: the quick comparison's strategies when one key is spent by
chat completions, the Responses API and embeddings together.

Each strategy of the quick comparison (`bench.experiments.QUICK_STRATEGIES`)
runs the same calls twice through the SDK against the in-process mock provider, in
virtual time (trio's ``MockClock``: what it prints does not depend on the machine):
once all chat completions, once a third each of chat completions, Responses API
calls and embeddings (five texts each), with the client's budget at the mock's
limits (``rpm``, ``tpm``). Short calls (a short answer) are the interactive ones.
It reports, per strategy and mix, the 429s the mock answered, what completed, the
short calls' P95 latency and the makespan; and whether the strategies rank the same
by short P95 in both mixes.

Writes ``apis.csv`` and ``tables.md`` under ``--out`` (``docs/results/apis``).
"""

from __future__ import annotations

import argparse
import csv
import random
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import httpx2
import numpy as np
import openai
import trio.testing

from bench.experiments import QUICK_STRATEGIES
from mockprovider.app import MockConfig, create_app
from semisched import BudgetConfig, RetryPolicy, RuntimeOptions, Scheduler, SemischedError, preset

__all__ = ["MIXES", "ApiRow", "add_parser", "apis", "run", "run_cell"]

#: The mixes: every call a chat completion, or the three APIs in turn.
MIXES: dict[str, tuple[str, ...]] = {
    "chat only": ("chat",),
    "chat + responses + embeddings": ("chat", "responses", "embeddings"),
}
RPM, TPM = 60, 12_000  # the mock's limits, and the client's budget
CAP = 400  # every generating call's output cap
TEXT = "a question of about twenty words about the weather, the sea and the hills today"


@dataclass(frozen=True)
class ApiRow:
    """One strategy on one mix."""

    strategy: str
    mix: str
    calls: int
    completed: int
    rate_limited: int
    short_p95_s: float
    makespan_s: float


def _plan(mix: Sequence[str], calls: int, seed: int) -> list[tuple[str, int, float]]:
    """Each call's API, its true output length (0: an embedding) and its arrival time."""
    rng = random.Random(seed)
    plan, at = [], 0.0
    for i in range(calls):
        api = mix[i % len(mix)]
        out = 0 if api == "embeddings" else (rng.randint(10, 40) if rng.random() < 0.6
                                              else rng.randint(200, 380))  # fmt: skip
        at += rng.expovariate(1.4)
        plan.append((api, out, at))
    return plan


async def _call(llm: Any, api: str, out: int) -> None:
    hint = {"mock_output_tokens": str(out)}
    prior = (20, 60) if out < 100 else (250, 400)
    if api == "chat":
        messages = [{"role": "user", "content": TEXT}]
        await llm.chat.completions.create(model="mock-1", messages=messages, metadata=hint,
                                          max_completion_tokens=CAP, prior=prior)  # fmt: skip
    elif api == "responses":
        await llm.responses.create(model="mock-1", input=TEXT, metadata=hint,
                                   max_output_tokens=CAP, prior=prior)  # fmt: skip
    else:
        await llm.embeddings.create(model="mock-1", input=[TEXT] * 5)


async def _run(strategy: str, mix: str, calls: int, seed: int) -> ApiRow:
    app = create_app(MockConfig(rpm=RPM, tpm=TPM, seed=seed), clock=anyio.current_time)
    config = preset(strategy, budget=BudgetConfig(rpm=RPM, tpm=TPM),
                    retry=RetryPolicy(max_attempts=8))  # fmt: skip
    short: list[float] = []
    done = 0
    async with (
        httpx2.AsyncClient(transport=httpx2.ASGITransport(app=app), base_url="http://mock") as http,
        openai.AsyncOpenAI(base_url="http://mock/v1", api_key="k", http_client=http) as client,
        Scheduler(client, config=config, priors="heuristic",
                  options=RuntimeOptions(seed=seed)) as scheduler,
    ):
        # openai looks its platform up in a thread on the first call: before the clock matters
        await scheduler.client.embeddings.create(model="mock-1", input="warm-up")
        await anyio.sleep(60.0)  # a fresh window for the measured part
        start = anyio.current_time()

        async def one(api: str, out: int, at: float) -> None:
            nonlocal done
            await anyio.sleep_until(start + at)
            sent = anyio.current_time()
            try:
                await _call(scheduler.client, api, out)
            except SemischedError:
                return
            done += 1
            if api != "embeddings" and out < 100:
                short.append(anyio.current_time() - sent)

        async with anyio.create_task_group() as tg:
            for api, out, at in _plan(MIXES[mix], calls, seed):
                tg.start_soon(one, api, out, at)
        makespan = anyio.current_time() - start
    counters = app.state.mock_stats().counters
    limited = counters.rate_limited_requests + counters.rate_limited_tokens
    p95 = float(np.percentile(short, 95)) if short else float("nan")
    return ApiRow(strategy, mix, calls, done, limited, p95, makespan)


def run_cell(strategy: str, mix: str, calls: int, seed: int = 0) -> ApiRow:
    """One strategy on one mix, in virtual time."""
    clock = trio.testing.MockClock(autojump_threshold=0)
    row: ApiRow = anyio.run(_run, strategy, mix, calls, seed, backend="trio",
                            backend_options={"clock": clock})  # fmt: skip
    return row


def _ranks(rows: Sequence[ApiRow], mix: str) -> list[str]:
    return [r.strategy for r in sorted((r for r in rows if r.mix == mix),
                                       key=lambda r: r.short_p95_s)]  # fmt: skip


def apis(out: Path, *, calls: int = 240, strategies: Sequence[str] = QUICK_STRATEGIES) -> Path:
    """Run every strategy on every mix; write ``apis.csv`` and ``tables.md``."""
    rows = [run_cell(s, mix, calls) for s in strategies for mix in MIXES]
    out.mkdir(parents=True, exist_ok=True)
    with (out / "apis.csv").open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["strategy", "mix", "calls", "completed", "rate_limited",
                         "short_p95_s", "makespan_s"])  # fmt: skip
        for r in rows:
            writer.writerow([r.strategy, r.mix, r.calls, r.completed, r.rate_limited,
                             f"{r.short_p95_s:.3f}", f"{r.makespan_s:.1f}"])  # fmt: skip
    lines = [
        "# The quick comparison's strategies over one key spent by three APIs",
        "",
        "Generated by `python -m bench apis` (do not edit): each strategy sends the same "
        f"{calls} calls through the SDK to the in-process mock provider in virtual time, "
        f"with the client's budget at the mock's limits ({RPM} requests and {TPM:,} tokens "
        "a minute); once all chat completions, once a third each of chat completions, "
        "Responses API calls and embeddings. Short calls are those with a short answer.",
        "",
        "| strategy | mix | completed | 429s | short P95 (s) | makespan (s) |",
        "|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(f"| `{r.strategy}` | {r.mix} | {r.completed} / {r.calls} | "
                     f"{r.rate_limited} | {r.short_p95_s:.2f} | {r.makespan_s:.0f} |")  # fmt: skip
    ranked = {mix: _ranks(rows, mix) for mix in MIXES}
    same = len({tuple(v) for v in ranked.values()}) == 1
    lines += ["", "Ranked by short P95, best first:", ""]
    lines += [f"- {mix}: " + ", ".join(f"`{s}`" for s in order) for mix, order in ranked.items()]
    lines += ["", f"The strategies keep their order across the mixes: {'yes' if same else 'no'}."]
    (out / "tables.md").write_text("\n".join(lines) + "\n")
    return out


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """The ``apis`` subcommand and its flags."""
    ap = sub.add_parser("apis", help="the quick comparison's strategies over one key spent by "
                        "chat, the Responses API and embeddings, in virtual time")  # fmt: skip
    ap.add_argument("--out", type=Path, default=Path("docs/results/apis"), help="output folder")
    ap.add_argument("--calls", type=int, default=240, help="calls per run (default 240)")


def run(args: argparse.Namespace) -> Path:
    """Run the benchmark the flags ask for; print its table; the folder written."""
    written = apis(args.out, calls=args.calls)
    print((written / "tables.md").read_text())
    return written
