"""The paper's evaluation (Scheduling the Unschedulable §4), experiment by experiment.

Each `Experiment` names the runs it needs (`RunSpec` lists), how
its rows are grouped into a summary, and how its table is laid out. Figures
live in `bench.figures`, the claims check in `bench.claims`.
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
``rate-limits``        beyond  client budget vs the provider's RPM/TPM 429s
=====================  ======  ===========================================
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace

from bench.experiments import RunSpec
from bench.report import format_table
from predictors.priors import INFORMATION_LEVELS
from semisched.core.config import BudgetConfig, OverloadConfig, preset

__all__ = ["BEYOND", "EXPERIMENTS", "REGIMES", "Experiment", "experiment"]

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
        section: Scheduling the Unschedulable's section it reproduces.
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


#: The provider's limits in ``rate-limits``: below what balanced/high offers
#: (83 requests and ~120k tokens a minute), about what heavy/high offers at
#: its bursts (34 requests, ~72k tokens a minute on average).
PROVIDER_RPM = 60
PROVIDER_TPM = 100_000
#: ``rate-limits`` strategies: the quick four, and ``semisched batch``'s presets
#: (its default, ``adaptive_drr``, is among the four; ``batch_makespan`` is its
#: makespan preset).
RATE_LIMIT_STRATEGIES: tuple[str, ...] = (*MAIN, "batch_makespan")


def _budget(factor: float, *, adapt: bool = True) -> BudgetConfig:
    rpm, tpm = round(PROVIDER_RPM * factor), round(PROVIDER_TPM * factor)
    return BudgetConfig(rpm=rpm, tpm=tpm, adapt=adapt)


#: label -> (client budget or None, share of the provider's limits others use).
#: "1.5x limit" follows the provider's x-ratelimit-* headers (the default), so
#: its first answer corrects the budget; "headers ignored" shows what that saves.
#: "limit grants 2/3": other clients on the same key use a third of the limit.
LIMIT_REGIMES: dict[str, tuple[BudgetConfig | None, float]] = {
    "no budget": (None, 0.0),
    "budget = limit": (_budget(1.0), 0.0),
    "budget = 1.5x limit": (_budget(1.5), 0.0),
    "1.5x, headers ignored": (_budget(1.5, adapt=False), 0.0),
    "limit grants 2/3": (_budget(1.0), 1.0 / 3.0),
}


def _rate_limits(seeds: int) -> list[RunSpec]:
    provider = (("rpm", PROVIDER_RPM), ("tpm", PROVIDER_TPM))
    return [
        RunSpec(
            regime=reg,
            strategy=strategy,
            seed=s,
            overrides=(("budget", budget),),
            label=label,
            provider=provider,
            other_traffic=others,
        )
        for reg in HIGH
        for label, (budget, others) in LIMIT_REGIMES.items()
        for strategy in RATE_LIMIT_STRATEGIES
        for s in range(seeds)
    ]


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
        "section 4.4, Table 1, Fig. 2",
        _information_ladder,
    ),
    Experiment(
        "main-comparison",
        "Main policy comparison (coarse priors)",
        "section 4.5, Table 2, Figs. 3-4",
        _main,
        columns=_MAIN_COLUMNS,
    ),
    Experiment(
        "overload-policies",
        "Overload bucket policy (full stack fixed)",
        "section 4.7, Table 5, Figs. 5-6",
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
        "section 4.6, Table 4",
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
        "section 4.8, Fig. 7",
        lambda seeds: _main(seeds, HIGH),
        columns=_MAIN_COLUMNS,
    ),
    Experiment(
        "sensitivity",
        "Overload thresholds and backoff ±20%",
        "section 4.9",
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
        "section 4.10, Fig. 8",
        _noise,
    ),
    Experiment(
        "sharegpt-trace",
        "ShareGPT V3 output lengths (high congestion)",
        "section 4.1, Table 2 (trace)",
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


def _prior_levers(seeds: int) -> list[RunSpec]:
    """Issue 12's ablation on the ShareGPT trace: how the scheduler reads a prior's
    uncertainty. ``paper``: route short at p50 <= 64 and test deadlines at p50;
    ``default``: short at P(short) >= 0.1 and deadlines at the 25th percentile."""
    paper_order = (("ordering", replace(preset("final_adrr_olc").ordering,
                                        feasibility_quantile=0.5)),)  # fmt: skip
    variants = {
        "paper rules": (0.5, paper_order),
        "+ short at P >= 0.1": (0.1, paper_order),
        "+ deadlines at p25": (0.5, ()),
        "default (both)": (None, ()),
    }
    levels = ("learned",) if _learned() else ()
    specs = [
        RunSpec(
            regime="sharegpt/high",
            strategy="final_adrr_olc",
            seed=s,
            information=info,
            short_probability=threshold,
            overrides=overrides,
            label=f"{info} / {name}",
        )
        for info in (*levels, *INFORMATION_LEVELS)
        for name, (threshold, overrides) in variants.items()
        if info == "learned" or name in ("paper rules", "default (both)")
        for s in range(seeds)
    ]
    return specs


def _learned() -> bool:
    from bench.workloads import learned_available

    return learned_available()


#: Experiments beyond the paper's evaluation (not part of ``all``).
BEYOND: tuple[Experiment, ...] = (
    Experiment(
        "prior-levers",
        "How the scheduler reads a prior's uncertainty (ShareGPT trace, high congestion)",
        "Beyond the paper: an ablation of the routing and deadline rules",
        _prior_levers,
        columns=(
            ("Short P95 (ms)", "short_p95_ms", 0),
            ("CR", "completion_rate", 3),
            ("Satisfaction", "satisfaction", 3),
            ("Goodput (rps)", "goodput_rps", 3),
        ),
    ),
    Experiment(
        "rate-limits",
        f"Provider rate limits ({PROVIDER_RPM} RPM, {PROVIDER_TPM:,} TPM) vs the client's budget",
        "Beyond the paper: a client-side rate budget against the provider's 429 windows",
        _rate_limits,
        keys=("regime", "condition", "strategy"),
        columns=(
            ("429s", "throttled", 1),
            ("Retries", "retries", 1),
            ("Short P95 (ms)", "short_p95_ms", 0),
            ("Global P95 (ms)", "global_p95_ms", 0),
            ("CR", "completion_rate", 3),
            ("Satisfaction", "satisfaction", 3),
            ("Goodput (rps)", "goodput_rps", 3),
            ("Failed", "failed", 1),
        ),
    ),
)


def experiment(name: str) -> Experiment:
    """Look an experiment up by name.

    Raises:
        ValueError: For an unknown name.
    """
    for exp in (*EXPERIMENTS, *BEYOND):
        if exp.name == name:
            return exp
    names = [e.name for e in (*EXPERIMENTS, *BEYOND)]
    raise ValueError(f"experiment={name!r} must be one of {names}")
