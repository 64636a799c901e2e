"""``python -m bench default-prior``: what the prior a user gets without asking does under overload.

Issue 12's run, through the real SDK (``Scheduler`` over ``openai.AsyncOpenAI``)
and the in-process mock provider, in virtual time (trio's autojumping
``MockClock``; the mock reads the loop's clock): 1,000 chat calls arriving at
8.4 a second, about 10x the mock's decode capacity (32 slots: ~515 tokens/s
against a mean 613 tokens per call in ``exact``), each with a 300 s deadline,
through the default ``final_adrr_olc``. What changes is the prior:

==============================  ==================================================
condition                       prior
==============================  ==================================================
``clipped neutral (old)``       neutral p50/p90 clipped to the cap, no calibration
                                (the default issue 12 reported)
``heuristic``                   `Heuristic` + calibration
                                (the default without the ``ml`` extra)
``heuristic, no calibration``   the same, ``calibration=False``
``learned``                     the shipped model + calibration (the default with
                                the ``ml`` extra)
``learned, no calibration``     the same, ``calibration=False``
``caller (0.6 cap, cap)``       ``prior=(0.6 * cap, cap)`` on every call
==============================  ==================================================

Workloads:

- ``exact``: ``max_tokens`` drawn from 16/48/200/800/2000 and the mock answers
  exactly that many tokens (the cap is the size: issue 12's run);
- ``bounded``: the same caps, the answer uniform in 10-100% of the cap;
- ``sharegpt``: held-out ShareGPT V3 prompts with their previous-answer
  lengths, the answer its real length, and ``max_tokens=2048`` on every call
  (a cap that says nothing about size).

The learned model answers inline (its wall time does not count in virtual
time), so this measures its priors, not its speed; the ``sharegpt`` workload
reads the model's predictions from the trace cache ``sharegpt-trace`` keeps.
"""

from __future__ import annotations

import contextlib
import os
import random
import time
from collections.abc import Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from bench.experiments import ProgressReporter
from bench.report import write_csv
from mockprovider.virtual import inline_platform_lookup
from semisched import RoutingConfig, RuntimeOptions, preset
from semisched.core.request import Prior
from semisched.priors.sources import NEUTRAL_P50, NEUTRAL_P90, Heuristic, PriorQuery, PriorSource

__all__ = ["CONDITIONS", "WORKLOADS", "default_prior", "overload_run"]

CAPS: tuple[int, ...] = (16, 48, 200, 800, 2000)
REQUESTS = 1000
RATE_PER_S = 8.4
DEADLINE_S = 300.0
TRACE_CAP = 2048

WORKLOADS: tuple[str, ...] = ("exact", "bounded", "sharegpt")
CONDITIONS: tuple[str, ...] = (
    "clipped neutral (old)",
    "heuristic",
    "heuristic, no calibration",
    "learned",
    "learned, no calibration",
    "caller (0.6 cap, cap)",
)


class _ClippedNeutral:
    """The default issue 12 reported: neutral p50/p90 clipped to the cap."""

    name = "clipped-neutral"

    def prior(self, query: PriorQuery) -> Prior:
        cap = float(query.max_tokens) if query.max_tokens else NEUTRAL_P90
        return Prior(p50=min(NEUTRAL_P50, cap), p90=min(NEUTRAL_P90, cap))


def _last(messages: Sequence[dict[str, Any]] | None, role: str) -> str | None:
    for message in reversed(messages or ()):
        if message.get("role") == role:
            return str(message.get("content"))
    return None


class _InlineLearned:
    """The shipped model (clipped to the cap), called inline; memoised per prompt."""

    name = "learned"

    def __init__(self) -> None:
        from predictors.learned import load_default

        self._model = load_default()
        self._memo: dict[tuple[str, int | None], Prior] = {}

    def prefill(self, queries: Sequence[PriorQuery]) -> None:
        """Predict ``queries`` in batches now (one at a time would be ~20x slower)."""
        for i in range(0, len(queries), 64):
            chunk = list(queries[i : i + 64])
            for query, prior in zip(chunk, self._model.prior_batch(chunk), strict=True):
                self._memo[(_last(query.messages, "user") or "", query.max_tokens)] = prior

    def prior(self, query: PriorQuery) -> Prior:
        key = (_last(query.messages, "user") or "", query.max_tokens)
        if key not in self._memo:
            self._memo[key] = self._model.prior(query)
        return self._memo[key]


class _TraceLearned:
    """The model's cached predictions for the held-out trace (``bench.workloads``)."""

    name = "learned"

    def __init__(self) -> None:
        from bench.workloads import learned_source

        self._table = learned_source()

    def prior(self, query: PriorQuery) -> Prior:
        previous = _last(query.messages, "assistant")
        lookup = PriorQuery(
            request_id=query.request_id,
            prompt=_last(query.messages, "user"),
            previous_output_tokens=None if previous is None else len(previous.split()),
        )
        prior = self._table.prior(lookup)
        cap = float(query.max_tokens or prior.p90)
        return Prior(p50=min(prior.p50, cap), p90=min(prior.p90, cap))


@dataclass(frozen=True, slots=True)
class _Call:
    messages: list[dict[str, str]]
    max_tokens: int
    output_tokens: int


def _calls(workload: str, seed: int) -> list[tuple[float, _Call]]:
    """(arrival gap, call) for every request of one run."""
    rng = random.Random(seed)
    calls = []
    if workload == "sharegpt":
        from bench.workloads import trace_population

        pop = trace_population("sharegpt")
        picks = np.random.default_rng(seed).choice(len(pop.lengths), size=REQUESTS)
        for i in picks:
            messages = [{"role": "user", "content": pop.prompts[i]}]
            if pop.previous[i] is not None:
                earlier = " ".join(["word"] * int(pop.previous[i]))
                messages = [{"role": "user", "content": "earlier"},
                            {"role": "assistant", "content": earlier}, *messages]  # fmt: skip
            output = min(int(pop.lengths[i]), TRACE_CAP)
            calls.append((rng.expovariate(RATE_PER_S), _Call(messages, TRACE_CAP, output)))
        return calls
    for i in range(REQUESTS):
        cap = rng.choice(CAPS)
        output = cap if workload == "exact" else max(1, round(cap * rng.uniform(0.1, 1.0)))
        call = _Call([{"role": "user", "content": f"q{i}"}], cap, output)
        calls.append((rng.expovariate(RATE_PER_S), call))
    return calls


def _source(condition: str, workload: str) -> tuple[PriorSource | None, bool]:
    """(prior source, calibration) of a condition; ``None`` for the caller's own prior."""
    if condition.startswith("caller"):
        return None, False
    calibrate = not condition.endswith("no calibration") and not condition.startswith("clipped")
    if condition.startswith("clipped"):
        return _ClippedNeutral(), False
    if condition.startswith("heuristic"):
        return Heuristic(), calibrate
    if workload == "sharegpt":
        return _TraceLearned(), calibrate
    return _InlineLearned(), calibrate


def overload_run(condition: str, workload: str, seed: int) -> dict[str, object]:
    """One run; returns its outcome counts and latencies (virtual seconds)."""
    import trio
    import trio.testing

    started = time.perf_counter()
    clock = trio.testing.MockClock(autojump_threshold=0)
    with inline_platform_lookup():  # openai's platform lookup on the loop, not in a thread
        row = trio.run(_run, condition, workload, seed, clock=clock)
    row["wall_s"] = time.perf_counter() - started
    return row


async def _run(condition: str, workload: str, seed: int) -> dict[str, object]:
    import anyio
    import httpx2
    import openai

    from mockprovider.app import MockConfig, create_app
    from semisched import DeadlineExceeded, RequestRejected, Scheduler

    source, calibrate = _source(condition, workload)
    calls = _calls(workload, seed)
    if isinstance(source, _InlineLearned):
        source.prefill([
            PriorQuery(request_id=str(i), messages=tuple(c.messages), max_tokens=c.max_tokens)
            for i, (_, c) in enumerate(calls)
        ])  # fmt: skip
    outcomes = {"completed": 0, "rejected": 0, "deadline_exceeded": 0}
    short_latency: list[float] = []
    app = create_app(MockConfig(), clock=anyio.current_time)
    transport = httpx2.ASGITransport(app=app)
    async with httpx2.AsyncClient(transport=transport, base_url="http://m") as h:
        client = openai.AsyncOpenAI(base_url="http://m/v1", api_key="k", http_client=h)
        priors = source if source is not None else Heuristic()
        # A fixed client cap of 32 (no learned endpoint limit): this compares priors under
        # one cap; learned limits are measured by ``python -m bench concurrency``.
        fixed = preset("final_adrr_olc", max_inflight=32,
                       routing=RoutingConfig(concurrency="fixed"))  # fmt: skip
        async with Scheduler(
            client, config=fixed, priors=priors,
            options=RuntimeOptions(calibration=calibrate, seed=seed),
        ) as s:
            start = anyio.current_time()

            async def one(call: _Call) -> None:
                hint = {"x-mock-output-tokens": str(call.output_tokens)}
                extra: dict[str, Any] = {"extra_headers": hint}
                if source is None:
                    extra["prior"] = (0.6 * call.max_tokens, float(call.max_tokens))
                sent = anyio.current_time()
                try:
                    await s.submit(
                        model="mock-1",
                        messages=call.messages,
                        max_tokens=call.max_tokens,
                        deadline=DEADLINE_S,
                        **extra,
                    )
                    outcomes["completed"] += 1
                    if call.output_tokens <= 64:
                        short_latency.append(anyio.current_time() - sent)
                except RequestRejected:
                    outcomes["rejected"] += 1
                except DeadlineExceeded:
                    outcomes["deadline_exceeded"] += 1

            async with anyio.create_task_group() as tg:
                for gap, call in calls:
                    tg.start_soon(one, call)
                    await anyio.sleep(gap)
            makespan = anyio.current_time() - start
            stats = s.statistics()
    return {
        "workload": workload,
        "condition": condition,
        "seed": seed,
        **outcomes,
        "deferrals": stats.engine.counters.deferrals,
        "short_p95_s": float(np.percentile(short_latency, 95)) if short_latency else float("nan"),
        "makespan_s": makespan,
    }


def _one_thread_each() -> None:
    """Pool initializer: the workers share the cores, so the model's inference (torch)
    runs one thread per process (oversubscribed, it ran 30x slower)."""
    try:
        import torch
    except ImportError:
        return
    torch.set_num_threads(1)


METRICS: tuple[str, ...] = ("completed", "rejected", "deadline_exceeded", "deferrals",
                            "short_p95_s", "makespan_s")  # fmt: skip


def _summary(rows: Sequence[dict[str, object]]) -> list[dict[str, object]]:
    out = []
    for workload in dict.fromkeys(str(r["workload"]) for r in rows):
        for condition in dict.fromkeys(str(r["condition"]) for r in rows):
            group = [r for r in rows if r["workload"] == workload and r["condition"] == condition]
            if not group:
                continue
            summary: dict[str, object] = {"workload": workload, "condition": condition,
                                          "runs": len(group)}  # fmt: skip
            for metric in METRICS:
                values = np.array([float(r[metric]) for r in group])  # type: ignore[arg-type]
                values = values[~np.isnan(values)]
                summary[f"{metric}_mean"] = float(values.mean()) if values.size else float("nan")
                summary[f"{metric}_std"] = float(values.std(ddof=1)) if values.size > 1 else 0.0
            out.append(summary)
    return out


#: (metric, decimals) of the table's number columns.
COLUMNS: tuple[tuple[str, int], ...] = (
    ("completed", 0),
    ("rejected", 0),
    ("deadline_exceeded", 0),
    ("deferrals", 0),
    ("short_p95_s", 1),
    ("makespan_s", 0),
)


def table(summary: Sequence[dict[str, object]]) -> str:
    """The markdown table of a summary (mean ± std over seeds)."""
    header = ("workload", "prior", "completed", "rejected", "deadline misses", "deferrals",
              "short P95 (s)", "makespan (s)")  # fmt: skip
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for r in summary:
        cells = [str(r["workload"]), str(r["condition"])]
        for metric, digits in COLUMNS:
            mean, std = float(r[f"{metric}_mean"]), float(r[f"{metric}_std"])  # type: ignore[arg-type]
            cells.append(f"{mean:,.{digits}f} ± {std:,.{digits}f}")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def default_prior(
    out: Path,
    *,
    seeds: int = 3,
    workloads: Sequence[str] = WORKLOADS,
    conditions: Sequence[str] = CONDITIONS,
    workers: int | None = None,
) -> Path:
    """Run every (workload, condition, seed); write ``runs.csv``, ``summary.csv``, ``table.md``."""
    for name in workloads:
        if name not in WORKLOADS:
            raise ValueError(f"workload {name!r} must be one of {', '.join(WORKLOADS)}")
    for name in conditions:
        if name not in CONDITIONS:
            raise ValueError(f"condition {name!r} must be one of {', '.join(CONDITIONS)}")
    specs = [(c, w, s) for w in workloads for c in conditions for s in range(seeds)]
    workers = workers or min(len(specs), os.cpu_count() or 1)
    report, start = ProgressReporter("overload runs"), time.perf_counter()
    rows: list[dict[str, object]] = []
    with contextlib.ExitStack() as stack:
        if workers <= 1:
            results: Iterator[dict[str, object]] = (overload_run(*spec) for spec in specs)
        else:
            pool = stack.enter_context(
                ProcessPoolExecutor(max_workers=workers, initializer=_one_thread_each)
            )
            results = pool.map(overload_run, *zip(*specs, strict=True))
        for row in results:  # a line per tenth of the runs (a bar on a terminal)
            rows.append(row)
            report(len(rows), len(specs), time.perf_counter() - start)
    out.mkdir(parents=True, exist_ok=True)
    write_csv(out / "runs.csv", rows)
    summary = _summary(rows)
    write_csv(out / "summary.csv", summary)
    note = (
        f"{REQUESTS} calls at {RATE_PER_S}/s, deadline {DEADLINE_S:.0f} s, `final_adrr_olc`, "
        f"SDK + in-process mock in virtual time; mean ± std over {seeds} seeds. "
        "Generated by `python -m bench default-prior`; do not edit."
    )
    (out / "table.md").write_text(f"{note}\n\n{table(summary)}\n")
    return out / "table.md"
