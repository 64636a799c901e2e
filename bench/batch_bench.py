"""``semisched batch`` against the fixed-rate recipe: ``python -m bench batch``.

Same workload, same budgets, same provider. The workload is ``requests``
held-out ShareGPT prompts (the test split, never trained on); each asks for
``max_tokens=1024`` (what batch files commonly set) and the mock answers with
the real response's length (``metadata.mock_output_tokens``). The provider is
``python -m mockprovider`` on loopback with RPM/TPM limits (sliding 60 s
windows, charging prompt + ``max_tokens`` on arrival, like OpenAI), in
compressed time; a fresh server per run, so no run inherits another's window.

Two scenarios: ``budget = provider limit`` (the user knows the limits), and
``provider at 2/3 of the budget`` (the key is shared, or the tier is lower than
the user configured: the budget overstates what the provider grants).

Contenders, each given the same budget:

- ``fixed-rate (recipe)``: :mod:`bench.batch_baseline`, the cookbook's
  parallel processor (token buckets that start full, ``o200k_base`` prompt
  counts, a 15 s pause after any 429, 5 attempts), no concurrency cap;
- ``fixed-rate, cap 32``: the same with the concurrency cap ours uses;
- ``semisched batch``: :class:`semisched.batch.BatchRun` (sliding-window
  budget, adaptive DRR, heuristic priors), concurrency 32;
- ``semisched batch, learned``: the same with the shipped length model's
  priors (when the ml extra is installed);
- ``semisched batch, learned, LPT``: the ``batch_makespan`` preset (one
  class, longest predicted work first) on the learned priors. With every
  body at ``max_tokens`` 1024 the heuristic prior is the same for all, so
  LPT needs the learned one to have anything to sort.

Reported per run: makespan (virtual seconds from the first send to the last
result), 429s seen by the provider, retries, successes, and p50/p95 call
latency (send -> response of successful calls). Each row is the mean over
``repeats`` runs (real time: the numbers move a little between runs).
"""

from __future__ import annotations

import csv
import json
import statistics
import tempfile
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import numpy as np
import openai

from bench.batch_baseline import run_fixed_rate
from mockprovider.launch import running_server
from mockprovider.stats import MockCounters, MockStats
from semisched.batch import BatchOptions, BatchRun
from semisched.clock import ScaledClock

__all__ = ["batch_benchmark", "workload"]


def workload(requests: int, *, seed: int = 0) -> list[dict[str, Any]]:
    """Batch API input lines from held-out ShareGPT pairs (deterministic sample)."""
    from predictors.data import load_pairs, split_by_conversation

    test = list(split_by_conversation(load_pairs(), seed=0).test)
    rng = np.random.default_rng(seed)
    chosen = rng.choice(len(test), size=min(requests, len(test)), replace=False)
    lines = []
    for k, index in enumerate(sorted(int(i) for i in chosen)):
        pair = test[index]
        body = {
            "model": "mock-1",
            "messages": [{"role": "user", "content": pair.prompt[:4000]}],
            "max_tokens": 1024,
            "metadata": {"mock_output_tokens": str(min(pair.response_tokens, 1024))},
        }
        lines.append(
            {"custom_id": f"sg-{k}", "method": "POST", "url": "/v1/chat/completions", "body": body}
        )
    return lines


def _stats(url: str) -> MockCounters:
    with urllib.request.urlopen(f"{url}/mock/stats") as response:
        return MockStats.from_json(json.load(response)).counters


def _latency(values: list[float] | tuple[float, ...], q: float) -> float:
    return float(np.percentile(values, q)) if values else float("nan")


async def _ours(
    url: str,
    lines: list[dict[str, Any]],
    rpm: int,
    tpm: int,
    scale: float,
    priors: str,
    policy: str,
) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        (folder / "in.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
        options = BatchOptions(
            input=folder / "in.jsonl",
            output=folder / "out.jsonl",
            base_url=url,
            rpm=rpm,
            tpm=tpm,
            time_scale=scale,
            priors=priors,
            policy=policy,
            max_concurrency=32,
        )
        client = openai.AsyncOpenAI(base_url=url, api_key="bench", max_retries=0)
        summary = await BatchRun(options, client=client, clock=ScaledClock(scale)).run()
        await client.close()
    return {
        "makespan_s": summary.elapsed_s,
        "succeeded": summary.succeeded,
        "retries": summary.retries,
        "p50_s": _latency(summary.latencies_s, 50),
        "p95_s": _latency(summary.latencies_s, 95),
    }


async def _baseline(
    url: str,
    lines: list[dict[str, Any]],
    rpm: int,
    tpm: int,
    scale: float,
    cap: int | None,
    count: Callable[[str], int],
) -> dict[str, float]:
    client = openai.AsyncOpenAI(base_url=url, api_key="bench", max_retries=0)
    result = await run_fixed_rate(
        lines,
        client=client,
        rpm=rpm,
        tpm=tpm,
        clock=ScaledClock(scale),
        count_tokens=count,
        max_concurrency=cap,
    )
    await client.close()
    return {
        "makespan_s": result.makespan_s,
        "succeeded": result.succeeded,
        "retries": result.retries,
        "p50_s": _latency(result.latencies_s, 50),
        "p95_s": _latency(result.latencies_s, 95),
    }


#: (scenario name, provider limit as a fraction of the budget)
SCENARIOS: tuple[tuple[str, float], ...] = (
    ("budget = provider limit", 1.0),
    ("provider at 2/3 of the budget", 2.0 / 3.0),
)


def batch_benchmark(
    out: Path,
    *,
    requests: int = 600,
    rpm: int = 300,
    tpm: int = 150_000,
    time_scale: float = 20.0,
    repeats: int = 2,
) -> str:
    """Run every scenario x contender ``repeats`` times; write ``runs.csv`` and ``table.md``."""
    from bench.workloads import learned_available
    from predictors.tokens import encoding

    lines = workload(requests)
    enc = encoding("o200k_base")

    def count(text: str) -> int:
        return len(enc.encode(text, disallowed_special=()))

    def baseline(cap: int | None) -> Callable[[str], Any]:
        return lambda url: _baseline(url, lines, rpm, tpm, time_scale, cap, count)

    def ours(priors: str, policy: str = "adaptive_drr") -> Callable[[str], Any]:
        return lambda url: _ours(url, lines, rpm, tpm, time_scale, priors, policy)

    contenders: list[tuple[str, Callable[[str], Any]]] = [
        ("fixed-rate (recipe)", baseline(None)),
        ("fixed-rate, cap 32", baseline(32)),
        ("semisched batch", ours("heuristic")),
    ]
    if learned_available():
        contenders.append(("semisched batch, learned", ours("learned")))
        contenders.append(("semisched batch, learned, LPT", ours("learned", "batch_makespan")))
    rows: list[dict[str, Any]] = []
    for scenario, fraction in SCENARIOS:
        for repeat in range(repeats):
            for name, run in contenders:
                rows.append(_one(scenario, fraction, repeat, name, run, rpm, tpm, time_scale))
    out.mkdir(parents=True, exist_ok=True)
    with (out / "runs.csv").open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    table = _table(rows, contenders=[c[0] for c in contenders], requests=len(lines), rpm=rpm,
                   tpm=tpm, scale=time_scale, repeats=repeats)  # fmt: skip
    (out / "table.md").write_text(table)
    return table


def _one(
    scenario: str,
    fraction: float,
    repeat: int,
    name: str,
    run: Callable[[str], Any],
    rpm: int,
    tpm: int,
    time_scale: float,
) -> dict[str, Any]:
    provider_rpm, provider_tpm = round(rpm * fraction), round(tpm * fraction)
    args = ("--time-scale", str(time_scale), "--rpm", str(provider_rpm),
            "--tpm", str(provider_tpm))  # fmt: skip
    with running_server(*args) as url:
        wall = time.perf_counter()
        measured = anyio.run(run, url)
        wall = time.perf_counter() - wall
        counters = _stats(url)
    row = {
        "scenario": scenario,
        "contender": name,
        "repeat": repeat,
        **measured,
        "provider_429s": counters.rate_limited,
        "provider_requests": counters.requests,
        "wall_s": wall,
    }
    print(
        f"{scenario:<30} {name:<26} repeat {repeat}: makespan "
        f"{row['makespan_s']:.0f} s, 429s {row['provider_429s']}, wall {wall:.1f} s",
        flush=True,
    )
    return row


def _table(
    rows: list[dict[str, Any]],
    *,
    contenders: list[str],
    requests: int,
    rpm: int,
    tpm: int,
    scale: float,
    repeats: int,
) -> str:
    def mean(scenario: str, name: str, key: str) -> float:
        return statistics.fmean(
            float(r[key]) for r in rows if r["contender"] == name and r["scenario"] == scenario
        )

    lines = [
        "# `semisched batch` vs the fixed-rate recipe",
        "",
        f"Generated by `python -m bench batch`; do not edit. {requests} held-out ShareGPT "
        "prompts, `max_tokens` 1024, real response lengths; every contender's budget "
        f"{rpm} RPM / {tpm} TPM; provider limits (sliding 60 s windows, prompt + max_tokens "
        f"charged on arrival) equal to the budget, or 2/3 of it; time compressed {scale:g}x; "
        f"mean of {repeats} runs each. Times are virtual seconds; 429s as counted by the "
        "provider.",
        "",
        "| scenario | contender | makespan s | vs recipe | 429s | retries | succeeded | "
        "p50 call s | p95 call s | requests sent |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for scenario, _ in SCENARIOS:
        base = mean(scenario, contenders[0], "makespan_s")
        for name in contenders:

            def m(key: str, name: str = name, scenario: str = scenario) -> float:
                return mean(scenario, name, key)

            make = m("makespan_s")
            lines.append(
                f"| {scenario} | {name} | {make:.0f} | {make / base:.2f} | "
                f"{m('provider_429s'):.1f} | {m('retries'):.1f} | {m('succeeded'):.0f} | "
                f"{m('p50_s'):.1f} | {m('p95_s'):.1f} | {m('provider_requests'):.0f} |"
            )
    return "\n".join(lines) + "\n"
