"""Experiments: seeded runs of named strategies over regimes, in virtual time.

One *run* is (regime, strategy, information level, seed, overrides): a
workload drawn with that seed, priors from that information level, the
preset's scheduler config, and the same provider physics for every strategy
(physics is never tuned per strategy). Runs are independent, so they go to a
process pool.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.report import aggregate, format_table, write_csv
from bench.workloads import Regime, generate, learned_source, regime
from mockprovider.gate import GateConfig
from mockprovider.physics import profile
from predictors.base import PriorQuery, PriorSource
from predictors.priors import information_source
from semisched.core.config import preset
from semisched.core.request import Prior
from semisched.sim.metrics import summarize
from semisched.sim.simulator import ProviderModel, simulate

__all__ = [
    "QUICK_STRATEGIES",
    "ProgressReporter",
    "RunSpec",
    "provider_model",
    "quick",
    "run_many",
    "run_one",
]


@dataclass(frozen=True, slots=True)
class RunSpec:
    """Everything that identifies one simulated run.

    ``overrides`` replace fields of the strategy's preset; ``provider`` sets
    the provider's `GateConfig` fields (RPM/TPM
    limits, fault rates; the fault seed is the run's seed) and
    ``other_traffic`` the share of those limits other clients use.
    ``short_probability`` routes a prior short at that probability of a short
    answer instead of the core's `SHORT_PROBABILITY`
    (the ablation of ``prior-levers``; 0.5 is the paper's p50 rule).
    """

    regime: str
    strategy: str
    seed: int
    information: str = "coarse"
    noise: float = 0.0
    requests: int = 600
    physics: str = "default"
    overrides: tuple[tuple[str, Any], ...] = field(default=())
    label: str = ""
    provider: tuple[tuple[str, Any], ...] = field(default=())
    other_traffic: float = 0.0
    short_probability: float | None = None

    @property
    def condition(self) -> str:
        """What varies across rows of a table: the label or the strategy."""
        return self.label or self.strategy


def run_one(spec: RunSpec, trace: Path | None = None) -> dict[str, object]:
    """Simulate one run and return its metrics with its identifying fields.

    With ``trace``, the per-request trace is written there as CSV.
    """
    reg: Regime = regime(spec.regime, requests=spec.requests)
    phys = profile(spec.physics)
    source: PriorSource
    if spec.information == "learned":
        source = learned_source()
    else:
        source = information_source(spec.information, noise=spec.noise, seed=spec.seed)
    if spec.short_probability is not None:
        source = RoutedAt(source, spec.short_probability)
    config = preset(spec.strategy, **dict(spec.overrides))
    jobs = generate(reg, spec.seed, source, phys)
    result = simulate(jobs, config, phys, provider_model(spec))
    if trace is not None:
        trace.write_text(result.trace_csv())
    row: dict[str, object] = {
        "regime": spec.regime,
        "strategy": spec.strategy,
        "condition": spec.condition,
        "information": spec.information,
        "noise": spec.noise,
        "seed": spec.seed,
    }
    row.update(summarize(result.rows))
    counters = result.engine.counters
    row["infeasible_sends"] = counters.infeasible_sends
    # 429 answers and retry decisions, from the core's counters (as the live runs count them).
    row["throttled"] = float(counters.throttled)
    row["retries"] = float(counters.retries)
    return row


class RoutedAt:
    """``source``'s priors with their routing bucket fixed by another short threshold."""

    def __init__(self, source: PriorSource, short_probability: float) -> None:
        self.source = source
        self.threshold = short_probability
        self.name = source.name

    def prior(self, query: PriorQuery) -> Prior:
        prior = self.source.prior(query)
        bucket = prior.route(self.threshold)
        return Prior(p50=prior.p50, p90=prior.p90, bucket=bucket)


def provider_model(spec: RunSpec) -> ProviderModel:
    """The simulated provider of ``spec``: its gate settings, seeded by the run's seed."""
    gate = GateConfig(**{"seed": spec.seed, **dict(spec.provider)})
    return ProviderModel(gate=gate, other_traffic=spec.other_traffic, seed=spec.seed)


def run_many(
    specs: Sequence[RunSpec],
    *,
    workers: int | None = None,
    progress: Callable[[int, int, float], None] | None = None,
) -> list[dict[str, object]]:
    """Run specs on a process pool (``workers=1``: in this process), order kept."""
    n = len(specs)
    workers = workers or min(n, os.cpu_count() or 1)
    start = time.perf_counter()
    rows: list[dict[str, object]] = []
    if workers <= 1:
        for i, spec in enumerate(specs, 1):
            rows.append(run_one(spec))
            if progress:
                progress(i, n, time.perf_counter() - start)
        return rows
    with ProcessPoolExecutor(max_workers=workers) as pool:
        for i, row in enumerate(pool.map(run_one, specs, chunksize=1), 1):
            rows.append(row)
            if progress:
                progress(i, n, time.perf_counter() - start)
    return rows


class ProgressReporter:
    """Runs done / total with elapsed time and ETA on stderr.

    On a terminal it is a live ``rich`` progress bar; otherwise (CI logs, pipes)
    a plain line at every tenth of the work.
    """

    def __init__(self, label: str = "runs") -> None:
        self.label = label
        self._bar: Any = None
        self._task: Any = None
        self._next_line = 0.0

    def __call__(self, done: int, total: int, elapsed: float) -> None:
        if sys.stderr.isatty():
            try:
                from rich.progress import (
                    BarColumn,
                    MofNCompleteColumn,
                    Progress,
                    TimeElapsedColumn,
                    TimeRemainingColumn,
                )
            except ImportError:  # rich is in the bench extra; fall back to lines
                pass
            else:
                if self._bar is None:
                    self._bar = Progress(
                        f"[bold]{self.label}",
                        BarColumn(),
                        MofNCompleteColumn(),
                        TimeElapsedColumn(),
                        "eta",
                        TimeRemainingColumn(),
                        transient=False,
                    )
                    self._bar.start()
                    self._task = self._bar.add_task(self.label, total=total)
                self._bar.update(self._task, completed=done)
                if done == total:
                    self._bar.stop()
                return
        if done / total >= self._next_line or done == total:
            eta = elapsed / done * (total - done) if done else float("nan")
            print(
                f"  {self.label} {done}/{total}  elapsed {elapsed:6.1f}s  eta {eta:6.1f}s",
                file=sys.stderr,
                flush=True,
            )
            self._next_line = done / total + 0.1


#: The four strategies of ``quick`` (Scheduling the Unschedulable §4.5, naive for orientation).
QUICK_STRATEGIES: tuple[str, ...] = (
    "direct_naive",
    "quota_tiered",
    "adaptive_drr",
    "final_adrr_olc",
)


def quick(
    out: Path,
    *,
    seeds: int = 5,
    workers: int | None = None,
    live: bool = False,
    time_scale: float = 25.0,
) -> list[dict[str, object]]:
    """balanced/high, four strategies, ``seeds`` seeds: print and write ``summary.csv``.

    With ``live``, the same runs also go through the real SDK and the HTTP mock
    (see `bench.live`); ``summary.csv`` then holds the live results and
    ``live_vs_sim.csv`` / ``live_vs_sim.md`` compare them with the simulator.
    """
    specs = [
        RunSpec(regime="balanced/high", strategy=s, seed=seed)
        for s in QUICK_STRATEGIES
        for seed in range(seeds)
    ]
    runs = run_many(specs, workers=workers, progress=ProgressReporter())
    summary = aggregate(runs, ("regime", "strategy"))
    if not live:
        write_csv(out / "runs.csv", runs)
        write_csv(out / "summary.csv", summary)
        print(format_table(summary, ("regime", "strategy")))
        return summary
    from bench.live import live_run

    print(
        f"live: {len(specs)} runs through the SDK and the HTTP mock at {time_scale:g}x",
        file=sys.stderr,
    )
    live_runs: list[dict[str, object]] = []
    start = time.perf_counter()
    report = ProgressReporter("live runs")
    for i, spec in enumerate(specs, 1):  # one at a time: both processes need a core
        live_runs.append(live_run(spec, time_scale=time_scale))
        report(i, len(specs), time.perf_counter() - start)
    live_summary = aggregate(live_runs, ("regime", "strategy"))
    write_csv(out / "runs.csv", live_runs)
    write_csv(out / "summary.csv", live_summary)
    write_csv(out / "sim_summary.csv", summary)
    comparison = compare_live(summary, live_summary)
    write_csv(out / "live_vs_sim.csv", comparison)
    text = format_comparison(comparison)
    (out / "live_vs_sim.md").write_text(text + "\n")
    print(format_table(live_summary, ("regime", "strategy")))
    print()
    print(text)
    return live_summary


#: Metrics compared between simulated and live runs.
COMPARED = ("short_p95_ms", "completion_rate", "goodput_rps", "global_p95_ms")


def compare_live(
    sim: list[dict[str, object]], live: list[dict[str, object]]
) -> list[dict[str, object]]:
    """Per strategy: simulator mean, live mean, and live/sim ratio of each compared metric."""
    live_by = {row["strategy"]: row for row in live}
    rows: list[dict[str, object]] = []
    for row in sim:
        other = live_by[row["strategy"]]
        out: dict[str, object] = {"regime": row["regime"], "strategy": row["strategy"]}
        for metric in COMPARED:
            a, b = row[f"{metric}_mean"], other[f"{metric}_mean"]
            assert isinstance(a, float) and isinstance(b, float)
            out[f"{metric}_sim"] = a
            out[f"{metric}_live"] = b
            out[f"{metric}_ratio"] = b / a if a else float("nan")
        rows.append(out)
    return rows


def format_comparison(rows: list[dict[str, object]]) -> str:
    """Markdown table of `compare_live` plus the two checks of the cross-check."""
    head = "| strategy | " + " | ".join(f"{m} sim / live (ratio)" for m in COMPARED) + " |"
    lines = [head, "|" + "---|" * (len(COMPARED) + 1)]
    for row in rows:
        cells = [
            f"{row[f'{m}_sim']:.3g} / {row[f'{m}_live']:.3g} ({row[f'{m}_ratio']:.2f})"
            for m in COMPARED
        ]
        lines.append(f"| {row['strategy']} | " + " | ".join(cells) + " |")
    order_sim = [r["strategy"] for r in sorted(rows, key=lambda r: float(r["short_p95_ms_sim"]))]  # type: ignore[arg-type]
    order_live = [r["strategy"] for r in sorted(rows, key=lambda r: float(r["short_p95_ms_live"]))]  # type: ignore[arg-type]
    within = all(
        abs(float(r[f"{m}_ratio"]) - 1.0) <= 0.15  # type: ignore[arg-type]
        for r in rows
        for m in ("completion_rate", "goodput_rps")
    )
    lines.append("")
    lines.append(f"- short-P95 order, simulator: {' < '.join(map(str, order_sim))}")
    lines.append(f"- short-P95 order, live:      {' < '.join(map(str, order_live))}")
    lines.append(f"- same order: {'yes' if order_sim == order_live else 'no'}")
    lines.append(f"- completion and goodput within 15%: {'yes' if within else 'no'}")
    return "\n".join(lines)
