"""The paper's evaluation (seed 004 §4), experiment by experiment.

Each :class:`Experiment` names the runs it needs (:class:`RunSpec` lists), how
its rows are grouped into a summary, and how its table is laid out. Figures
live in :mod:`bench.figures`, the claims check in :mod:`bench.claims`.
Everything printed or written is computed from the runs; nothing is typed in.

=====================  ======  ===========================================
experiment             paper   what varies (the rest fixed)
=====================  ======  ===========================================
``information-ladder`` §4.4    prior information, full stack, 4 regimes
``main-comparison``    §4.5    strategy, coarse priors, 4 regimes
``overload-policies``  §4.7    overload bucket policy, full stack, 2 regimes
``fair-queuing``       §4.6    allocation policy, heavy70/high
``layerwise``          §4.8    naive → quota → adaptive DRR → full, 2 regimes
``sensitivity``        §4.9    thresholds / backoff ±20 %, 4 regimes
``predictor-noise``    §4.10   multiplicative prior error L, 4 regimes
``sharegpt-trace``     §4.1    strategy and information, ShareGPT lengths
=====================  ======  ===========================================
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace

from bench.experiments import RunSpec
from bench.report import format_table
from predictors.priors import INFORMATION_LEVELS
from semisched.core.config import OverloadConfig, preset

__all__ = ["EXPERIMENTS", "REGIMES", "Experiment", "experiment"]

REGIMES: tuple[str, ...] = ("balanced/medium", "balanced/high", "heavy/medium", "heavy/high")
HIGH: tuple[str, ...] = ("balanced/high", "heavy/high")
MAIN: tuple[str, ...] = ("direct_naive", "quota_tiered", "adaptive_drr", "final_adrr_olc")
BUCKET_POLICIES: tuple[str, ...] = ("ladder", "uniform_mild", "uniform_harsh", "reverse")
NOISE_LEVELS: tuple[float, ...] = (0.0, 0.1, 0.2, 0.4, 0.6)

Row = Mapping[str, object]


@dataclass(frozen=True)
class Experiment:
    """One experiment of the suite.

    Attributes:
        name: Command-line name.
        title: Table and figure title.
        section: Seed 004 section it reproduces.
        specs: Seeds -> the runs.
        keys: Summary grouping columns.
        columns: (title, metric, decimals) of its markdown table.
    """

    name: str
    title: str
    section: str
    specs: Callable[[int], list[RunSpec]]
    keys: tuple[str, ...] = ("regime", "condition")
    columns: tuple[tuple[str, str, int], ...] = (
        ("Short P95 (ms)", "short_p95_ms", 0),
        ("Global P95 (ms)", "global_p95_ms", 0),
        ("CR", "completion_rate", 3),
        ("Satisfaction", "satisfaction", 3),
        ("Goodput (rps)", "goodput_rps", 3),
    )

    def table(self, summary: Sequence[Row]) -> str:
        """The markdown table of mean ± std over seeds."""
        return format_table(summary, self.keys, self.columns, markdown=True)


def _information_ladder(seeds: int) -> list[RunSpec]:
    return [
        RunSpec(regime=r, strategy="final_adrr_olc", seed=s, information=info, label=info)
        for r in REGIMES
        for info in INFORMATION_LEVELS
        for s in range(seeds)
    ]


def _main(seeds: int, regimes: Sequence[str] = REGIMES) -> list[RunSpec]:
    return [
        RunSpec(regime=r, strategy=strategy, seed=s)
        for r in regimes
        for strategy in MAIN
        for s in range(seeds)
    ]


def _overload(seeds: int) -> list[RunSpec]:
    return [
        RunSpec(
            regime=r,
            strategy="final_adrr_olc",
            seed=s,
            overrides=(("overload", OverloadConfig(policy=policy)),),
            label=policy,
        )
        for r in HIGH
        for policy in BUCKET_POLICIES
        for s in range(seeds)
    ]


def _fair_queuing(seeds: int) -> list[RunSpec]:
    return [
        RunSpec(regime="heavy70/high", strategy=strategy, seed=s, label=label)
        for strategy, label in (
            ("direct_naive", "FIFO (direct)"),
            ("short_priority", "Short-Priority"),
            ("fair_queuing", "Fair Queuing"),
        )
        for s in range(seeds)
    ]


def _scaled_overload(factor: float, *, thresholds: bool) -> OverloadConfig:
    base = preset("final_adrr_olc").overload
    if thresholds:
        return replace(
            base,
            defer_threshold=min(1.0, base.defer_threshold * factor),
            reject_xlong_threshold=min(1.0, base.reject_xlong_threshold * factor),
            reject_long_threshold=min(1.0, base.reject_long_threshold * factor),
        )
    return replace(base, backoff_s=base.backoff_s * factor)


SENSITIVITY: tuple[tuple[str, OverloadConfig], ...] = (
    ("baseline", preset("final_adrr_olc").overload),
    ("thresholds -20%", _scaled_overload(0.8, thresholds=True)),
    ("thresholds +20%", _scaled_overload(1.2, thresholds=True)),
    ("backoff -20%", _scaled_overload(0.8, thresholds=False)),
    ("backoff +20%", _scaled_overload(1.2, thresholds=False)),
)


def _sensitivity(seeds: int) -> list[RunSpec]:
    return [
        RunSpec(
            regime=r,
            strategy="final_adrr_olc",
            seed=s,
            overrides=(("overload", overload),),
            label=label,
        )
        for r in REGIMES
        for label, overload in SENSITIVITY
        for s in range(seeds)
    ]


def _noise(seeds: int) -> list[RunSpec]:
    return [
        RunSpec(regime=r, strategy="final_adrr_olc", seed=s, noise=level, label=f"L={level:g}")
        for r in REGIMES
        for level in NOISE_LEVELS
        for s in range(seeds)
    ]


def _sharegpt(seeds: int) -> list[RunSpec]:
    strategies = [
        RunSpec(regime="sharegpt/high", strategy=strategy, seed=s)
        for strategy in ("direct_naive", "quota_tiered", "final_adrr_olc")
        for s in range(seeds)
    ]
    from bench.workloads import learned_available

    # The fifth rung (beyond the paper): priors from the shipped length model on
    # held-out prompts; present when the ml extra is installed.
    levels = (*INFORMATION_LEVELS, "learned") if learned_available() else INFORMATION_LEVELS
    ladder = [
        RunSpec(
            regime="sharegpt/high",
            strategy="final_adrr_olc",
            seed=s,
            information=info,
            label=f"final_adrr_olc/{info}",
        )
        for info in levels
        for s in range(seeds)
    ]
    return strategies + ladder


_MAIN_COLUMNS = (
    ("Short P95 (ms)", "short_p95_ms", 0),
    ("Global P95 (ms)", "global_p95_ms", 0),
    ("Makespan (ms)", "makespan_ms", 0),
    ("CR", "completion_rate", 3),
    ("Served", "served_fraction", 3),
    ("Satisfaction", "satisfaction", 3),
    ("Goodput (rps)", "goodput_rps", 3),
)

EXPERIMENTS: tuple[Experiment, ...] = (
    Experiment(
        "information-ladder",
        "Information ladder (full stack fixed)",
        "§4.4, Table 1, Fig. 2",
        _information_ladder,
    ),
    Experiment(
        "main-comparison",
        "Main policy comparison (coarse priors)",
        "§4.5, Table 2, Figs. 3-4",
        _main,
        columns=_MAIN_COLUMNS,
    ),
    Experiment(
        "overload-policies",
        "Overload bucket policy (full stack fixed)",
        "§4.7, Table 5, Figs. 5-6",
        _overload,
        columns=(
            *_MAIN_COLUMNS[:2],
            ("CR", "completion_rate", 3),
            ("Satisfaction", "satisfaction", 3),
            ("Goodput (rps)", "goodput_rps", 3),
            ("Rejects", "rejects", 1),
            ("Defers", "defers", 1),
        ),
    ),
    Experiment(
        "fair-queuing",
        "Fair Queuing vs Short-Priority (70% long/xlong)",
        "§4.6, Table 4",
        _fair_queuing,
        columns=(
            ("Short P90 (ms)", "short_p90_ms", 0),
            ("Long P90 (ms)", "long_p90_ms", 0),
            ("Global stdev (ms)", "latency_std_ms", 0),
            ("CR", "completion_rate", 3),
            ("Goodput (rps)", "goodput_rps", 3),
        ),
    ),
    Experiment(
        "layerwise",
        "Layerwise progression (high congestion)",
        "§4.8, Fig. 7",
        lambda seeds: _main(seeds, HIGH),
        columns=_MAIN_COLUMNS,
    ),
    Experiment(
        "sensitivity",
        "Overload thresholds and backoff ±20%",
        "§4.9",
        _sensitivity,
        columns=(
            ("Short P95 (ms)", "short_p95_ms", 0),
            ("CR", "completion_rate", 3),
            ("Satisfaction", "satisfaction", 3),
            ("Goodput (rps)", "goodput_rps", 3),
            ("Rejects", "rejects", 1),
            ("Defers", "defers", 1),
        ),
    ),
    Experiment(
        "predictor-noise",
        "Predictor noise: multiplicative error L on p50/p90",
        "§4.10, Fig. 8",
        _noise,
    ),
    Experiment(
        "sharegpt-trace",
        "ShareGPT V3 output lengths (high congestion)",
        "§4.1, Table 2 (trace)",
        _sharegpt,
        columns=(
            ("Short P95 (ms)", "short_p95_ms", 0),
            ("Global P95 (ms)", "global_p95_ms", 0),
            ("Makespan (ms)", "makespan_ms", 0),
            ("CR", "completion_rate", 3),
            ("Satisfaction", "satisfaction", 3),
            ("Goodput (rps)", "goodput_rps", 3),
        ),
    ),
)


def experiment(name: str) -> Experiment:
    """Look an experiment up by name.

    Raises:
        ValueError: For an unknown name.
    """
    for exp in EXPERIMENTS:
        if exp.name == name:
            return exp
    raise ValueError(f"experiment={name!r} must be one of {[e.name for e in EXPERIMENTS]}")
