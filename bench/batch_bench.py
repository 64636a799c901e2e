"""``semisched batch`` against the fixed-rate recipe: ``python -m bench batch``.

Same workload, same budgets, same provider. The provider is ``python -m mockprovider``
on loopback with RPM/TPM limits (sliding 60 s windows, charging prompt + ``max_tokens``
on arrival, like OpenAI), in compressed time; a fresh server per run, so no run
inherits another's window. Two workloads (``--workload``, one per invocation):

- ``sharegpt`` (the default; 600 requests, 300 RPM / 150k TPM, 20x): held-out ShareGPT
  prompts (the test split, never trained on); each asks for ``max_tokens=1024`` (what
  batch files commonly set) and the mock answers with the real response's length
  (``metadata.mock_output_tokens``). The token limit binds; the request limit barely.
- ``mixed`` (issue 11; 400 requests, 100 RPM / 40k TPM, 25x): `mixed_workload`,
  synthetic chat requests of mixed length, where *both* limits bind: the short half is
  paced by RPM, the long tail by TPM (TPM / RPM = 400 tokens, the mean charge ~580).

Two scenarios: ``budget = provider limit`` (the user knows the limits), and
``provider at 2/3 of the budget`` (the key is shared, or the tier is lower than
the user configured: the budget overstates what the provider grants).

Contenders, each given the same budget (`contenders`):

- ``fixed-rate (recipe)``: `bench.batch_baseline`, the cookbook's
  parallel processor (token buckets that start full, ``o200k_base`` prompt
  counts, a 15 s pause after any 429, OpenAI's ``rate_limit_exceeded`` included,
  5 attempts), no concurrency cap; ``sharegpt`` also runs it with cap 32
  (``fixed-rate, cap 32``), the concurrency cap ours uses;
- ``semisched batch``: `semisched.batch.BatchRun` with its defaults (the
  preset `BatchOptions` defaults to), heuristic priors
  (``max_tokens``), concurrency 32, and one more row per extra preset named
  (``--policies``, e.g. ``batch_makespan``: one class, longest predicted work first);
- ``sharegpt`` only, when the ml extra is installed: ``semisched batch, learned``
  (the shipped length model's priors) and ``semisched batch, learned, LPT``
  (``batch_makespan`` on them). With every body at ``max_tokens`` 1024 the heuristic
  prior is the same for all, so LPT needs the learned one to have anything to sort.
  The mixed workload's prompts are random words that say nothing about the answer's
  length, so its rows use the heuristic priors, which read its informative ``max_tokens``.

Reported per run: makespan (virtual seconds from the first send to the last
result), makespan over the steady-rate floor (`floor_for`; a run can end up to
one window's burst under it, `semisched.core.makespan_floor`),
429s seen by the provider, retries, successes, and p50/p95 call latency (send ->
response of successful calls). Each row is the mean over ``repeats`` runs (real
time: the numbers move a little between runs).
"""

from __future__ import annotations

import csv
import dataclasses
import json
import tempfile
import time
import urllib.request
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import anyio
import numpy as np
import openai

from bench.batch_baseline import run_fixed_rate
from bench.batch_report import SCENARIOS, batch_table, describe_floor, provider_limits
from bench.batch_workloads import (
    MIXED_BUCKETS,
    PROMPT_MEDIAN_WORDS,
    PROMPT_WORDS,
    mixed_workload,
    workload,
)
from mockprovider.launch import running_server
from mockprovider.stats import MockCounters, MockStats
from semisched.batch import BatchOptions, BatchRun
from semisched.core import PRESETS, MakespanFloor, Request, makespan_floor
from semisched.priors.sources import Heuristic, PriorQuery
from semisched.runtime.calls import output_cap
from semisched.runtime.clock import ScaledClock
from semisched.runtime.estimate import TokenEstimator, prompt_bytes

__all__ = [
    "DEFAULT_POLICY",
    "WORKLOADS",
    "Contender",
    "Workload",
    "batch_benchmark",
    "contenders",
    "core_requests",
    "floor_for",
]

#: Calls in flight for ``semisched batch`` (its default), the capped recipe and the floor.
CONCURRENCY: Final = 32
#: The preset ``semisched batch`` runs without ``--policy`` (follows BatchOptions).
DEFAULT_POLICY: Final = str(
    next(f.default for f in dataclasses.fields(BatchOptions) if f.name == "policy")
)


def core_requests(lines: Iterable[Mapping[str, Any]]) -> list[Request]:
    """The core `Request` each chat line becomes in ``semisched batch``, before any
    response: the prompt estimate of an uncalibrated `TokenEstimator` (UTF-8 bytes
    / 4, what the mock charges too), ``max_output_tokens`` = the body's cap, and the
    heuristic prior from it (`semisched.priors.sources.Heuristic`)."""
    estimator = TokenEstimator()
    heuristic = Heuristic()
    requests = []
    for line in lines:
        body = line["body"]
        nbytes, kind = prompt_bytes(messages=body["messages"])
        cap = output_cap(body)
        prior = heuristic.prior(PriorQuery(request_id=line["custom_id"], max_tokens=cap))
        requests.append(
            Request(
                id=line["custom_id"],
                klass="batch",
                prior=prior,
                input_tokens=float(estimator.estimate(body["model"], kind, nbytes)),
                max_output_tokens=cap,
            )
        )
    return requests


def floor_for(
    lines: Iterable[Mapping[str, Any]], *, rpm: int, tpm: int, max_inflight: int = CONCURRENCY
) -> MakespanFloor:
    """The steady-rate makespan floor of ``lines`` at the provider's limits, computed from
    `core_requests` with ``max_inflight`` (ours; the uncapped recipe's serving bound
    would be lower, but it binds in no scenario here)."""
    return makespan_floor(core_requests(lines), rpm=rpm, tpm=tpm, max_inflight=max_inflight)


# -- workloads and contenders -------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class Workload:
    """A workload of ``python -m bench batch`` and its defaults.

    Attributes:
        name: ``--workload`` value.
        lines: ``(requests, seed) -> input lines``.
        requests, rpm, tpm, time_scale: Defaults of the options of the same names.
        policies: ``semisched batch`` presets to run (``"default"``: BatchOptions').
        recipe_caps: Concurrency caps of the recipe's rows (``None``: the recipe, uncapped).
        learned_rows: Also run the learned priors (when the ml extra is installed).
        caption: What the table says the workload is (``{requests}`` filled in).
    """

    name: str
    lines: Callable[[int, int], list[dict[str, Any]]]
    requests: int
    rpm: int
    tpm: int
    time_scale: float
    policies: tuple[str, ...]
    recipe_caps: tuple[int | None, ...]
    learned_rows: bool
    caption: str


def _mixed_caption() -> str:
    mix = ", ".join(
        f"{b.share:.0%} {b.name} ({b.low}–{b.high} tokens, max_tokens {b.high})"
        for b in MIXED_BUCKETS
    )
    low, high = PROMPT_WORDS
    return (
        f"{{requests}} synthetic chat requests of mixed length: {mix}; true lengths hinted; "
        f"prompts {low}–{high} words (log-normal, median {PROMPT_MEDIAN_WORDS:g})."
    )


WORKLOADS: Final[Mapping[str, Workload]] = {
    "sharegpt": Workload(
        name="sharegpt",
        lines=lambda n, seed: workload(n, seed=seed),
        requests=600,
        rpm=300,
        tpm=150_000,
        time_scale=20.0,
        policies=("default", "adaptive_drr"),
        recipe_caps=(None, CONCURRENCY),
        learned_rows=True,
        caption="{requests} held-out ShareGPT prompts, `max_tokens` 1024, real response lengths.",
    ),
    "mixed": Workload(
        name="mixed",
        lines=lambda n, seed: mixed_workload(n, seed=seed),
        requests=400,
        rpm=100,
        tpm=40_000,
        time_scale=25.0,
        policies=("default", "batch_makespan", "adaptive_drr"),
        recipe_caps=(None,),
        learned_rows=False,
        caption=_mixed_caption(),
    ),
}


@dataclass(frozen=True, kw_only=True)
class Contender:
    """One row of the table.

    Attributes:
        name: The row's label.
        recipe: The fixed-rate recipe (`bench.batch_baseline`) rather than ours.
        cap: The recipe's concurrency cap (``None``: uncapped, as the cookbook).
        policy: Our preset (``None``: BatchOptions' default, `DEFAULT_POLICY`).
        priors: Our ``--priors``.
    """

    name: str
    recipe: bool = False
    cap: int | None = None
    policy: str | None = None
    priors: str = "heuristic"


def contenders(
    spec: Workload, *, policies: Sequence[str] | None = None, learned: bool = False
) -> list[Contender]:
    """The rows of ``spec``: the recipe first (the ratios' baseline), then ours.

    Args:
        spec: The workload.
        policies: Preset names for our rows (``"default"``: BatchOptions' default, labelled
            plain ``semisched batch``); ``None``: the workload's. A new preset is one more name;
            a name that resolves to a preset already listed adds no row.
        learned: Add the learned-prior rows (where the workload has them).

    Raises:
        ValueError: A name that is neither ``"default"`` nor a preset.
    """
    rows = [
        Contender(
            name="fixed-rate (recipe)" if cap is None else f"fixed-rate, cap {cap}",
            recipe=True,
            cap=cap,
        )
        for cap in spec.recipe_caps
    ]
    seen: set[str] = set()
    for name in spec.policies if policies is None else policies:
        if name != "default" and name not in PRESETS:
            raise ValueError(f"policy {name!r} must be 'default' or one of {sorted(PRESETS)}")
        if (DEFAULT_POLICY if name == "default" else name) in seen:
            continue  # e.g. a preset named that is also the default: one row
        seen.add(DEFAULT_POLICY if name == "default" else name)
        if name == "default":
            rows.append(Contender(name="semisched batch"))
        else:
            rows.append(Contender(name=f"semisched batch --policy {name}", policy=name))
    if learned and spec.learned_rows:
        rows.append(Contender(name="semisched batch, learned", priors="learned"))
        rows.append(Contender(name="semisched batch, learned, LPT", priors="learned",
                              policy="batch_makespan"))  # fmt: skip
    return rows


# -- running ------------------------------------------------------------------------------


def _stats(url: str) -> MockCounters:
    with urllib.request.urlopen(f"{url}/mock/stats") as response:
        return MockStats.from_json(json.load(response)).counters


def _latency(values: list[float] | tuple[float, ...], q: float) -> float:
    return float(np.percentile(values, q)) if values else float("nan")


async def _ours(
    url: str, lines: list[dict[str, Any]], who: Contender, rpm: int, tpm: int, scale: float
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
            priors=who.priors,
            max_concurrency=CONCURRENCY,
        )
        if who.policy is not None:  # else BatchOptions' default, whatever it is
            options = dataclasses.replace(options, policy=who.policy)
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
    who: Contender,
    rpm: int,
    tpm: int,
    scale: float,
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
        max_concurrency=who.cap,
    )
    await client.close()
    return {
        "makespan_s": result.makespan_s,
        "succeeded": result.succeeded,
        "retries": result.retries,
        "p50_s": _latency(result.latencies_s, 50),
        "p95_s": _latency(result.latencies_s, 95),
    }


def batch_benchmark(
    out: Path,
    *,
    workload: str = "sharegpt",
    requests: int | None = None,
    rpm: int | None = None,
    tpm: int | None = None,
    time_scale: float | None = None,
    repeats: int = 2,
    policies: Sequence[str] | None = None,
    seed: int = 0,
) -> str:
    """Run every scenario x contender ``repeats`` times; write ``runs.csv`` and ``table.md``.

    ``None`` takes the workload's default (`WORKLOADS`).

    Raises:
        ValueError: An unknown workload or policy.
    """
    from bench.workloads import learned_available
    from predictors.tokens import encoding

    if workload not in WORKLOADS:
        raise ValueError(f"{workload=} must be one of {sorted(WORKLOADS)}")
    spec = WORKLOADS[workload]
    requests = spec.requests if requests is None else requests
    rpm = spec.rpm if rpm is None else rpm
    tpm = spec.tpm if tpm is None else tpm
    scale = spec.time_scale if time_scale is None else time_scale
    who = contenders(spec, policies=policies, learned=spec.learned_rows and learned_available())
    lines = spec.lines(requests, seed)
    enc = encoding("o200k_base")

    def count(text: str) -> int:
        return len(enc.encode(text, disallowed_special=()))

    def runner(c: Contender) -> Callable[[str], Awaitable[dict[str, float]]]:
        if c.recipe:
            return lambda url: _baseline(url, lines, c, rpm, tpm, scale, count)
        return lambda url: _ours(url, lines, c, rpm, tpm, scale)

    floors = {}
    for scenario, fraction in SCENARIOS:
        limits = provider_limits(rpm, tpm, fraction)
        floors[scenario] = floor_for(lines, rpm=limits[0], tpm=limits[1])
        print(describe_floor(scenario, floors[scenario], *limits, CONCURRENCY), flush=True)
    rows: list[dict[str, Any]] = []
    for scenario, fraction in SCENARIOS:
        limits = provider_limits(rpm, tpm, fraction)
        for repeat in range(repeats):
            for c in who:
                row = _one(scenario, limits, repeat, c.name, runner(c), scale)
                rows.append({"workload": workload, **row,
                             "floor_s": floors[scenario].floor_s})  # fmt: skip
    out.mkdir(parents=True, exist_ok=True)
    with (out / "runs.csv").open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    table = batch_table(rows, spec=spec, contenders=[c.name for c in who], floors=floors,
                        requests=len(lines), rpm=rpm, tpm=tpm, scale=scale, repeats=repeats,
                        default_policy=DEFAULT_POLICY, concurrency=CONCURRENCY)  # fmt: skip
    (out / "table.md").write_text(table)
    return table


async def _probed(
    run: Callable[[str], Awaitable[dict[str, float]]], url: str
) -> tuple[dict[str, float], int]:
    """``run(url)``, and how many requests had reached the provider one wall second in
    (a job that plans before it sends shows it here; its makespan starts at the first send)."""
    first: list[int] = []

    async def probe() -> None:
        await anyio.sleep(1.0)
        first.append((await anyio.to_thread.run_sync(_stats, url)).requests)

    async with anyio.create_task_group() as tg:
        tg.start_soon(probe)
        measured = await run(url)
    return measured, first[0]


def _one(
    scenario: str,
    limits: tuple[int, int],
    repeat: int,
    name: str,
    run: Callable[[str], Awaitable[dict[str, float]]],
    time_scale: float,
) -> dict[str, Any]:
    args = ("--time-scale", str(time_scale), "--rpm", str(limits[0]), "--tpm", str(limits[1]))
    with running_server(*args) as url:
        wall = time.perf_counter()
        measured, first = anyio.run(_probed, run, url)
        wall = time.perf_counter() - wall
        counters = _stats(url)
    row = {
        "scenario": scenario,
        "contender": name,
        "repeat": repeat,
        **measured,
        "first_second_requests": first,
        "provider_429s": counters.rate_limited,
        "provider_requests": counters.requests,
        "wall_s": wall,
    }
    print(
        f"{scenario:<30} {name:<40} repeat {repeat}: makespan "
        f"{row['makespan_s']:.0f} s, 429s {row['provider_429s']}, wall {wall:.1f} s",
        flush=True,
    )
    return row
