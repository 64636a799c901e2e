"""PNG figures shaped like the paper's (matplotlib, headless Agg backend).

Every figure is drawn from summary rows (mean ± std over seeds) or run rows;
error bars are the sample std. One function per experiment, picked by
`draw`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # headless: choose the backend before pyplot is imported
import matplotlib.pyplot as plt
import numpy as np
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.ticker import NullFormatter

__all__ = ["draw"]

Row = Mapping[str, object]

_LABELS = {
    "short_p95_ms": "Short P95 (s)",
    "global_p95_ms": "Global P95 (s)",
    "completion_rate": "Completion rate",
    "satisfaction": "Deadline satisfaction",
    "goodput_rps": "Useful goodput (req/s)",
    "short_p90_ms": "Short P90 (s)",
    "long_p90_ms": "Long P90 (s)",
    "throttled": "429 answers per run",
}


def _v(row: Row, metric: str) -> tuple[float, float]:
    mean, std = row[f"{metric}_mean"], row[f"{metric}_std"]
    assert isinstance(mean, float) and isinstance(std, float)
    scale = 1e-3 if metric.endswith("_ms") else 1.0
    return mean * scale, std * scale


def _num(value: object) -> float:
    assert isinstance(value, int | float)
    return float(value)


def _ordered(values: Sequence[object]) -> list[str]:
    return list(dict.fromkeys(str(v) for v in values))


def _grouped_bars(
    ax: Axes,
    summary: Sequence[Row],
    metric: str,
    *,
    group: str = "regime",
    series: str = "condition",
    highlight: str | None = None,
) -> None:
    groups = _ordered([r[group] for r in summary])
    names = _ordered([r[series] for r in summary])
    width = 0.8 / max(1, len(names))
    x = np.arange(len(groups))
    for i, name in enumerate(names):
        means, stds = [], []
        for g in groups:
            row = next((r for r in summary if str(r[group]) == g and str(r[series]) == name), None)
            m, s = _v(row, metric) if row is not None else (np.nan, 0.0)
            means.append(m)
            stds.append(s)
        hot = name == highlight
        ax.bar(x + (i - (len(names) - 1) / 2) * width, means, width, yerr=stds, capsize=2,
               label=name, color="tab:red" if hot else None, hatch="//" if hot else None,
               edgecolor="black" if hot else None)  # fmt: skip
    ax.set_xticks(x, groups, fontsize=8)
    ax.set_ylabel(_LABELS.get(metric, metric))
    ax.grid(axis="y", alpha=0.3)


def _save(fig: Figure, path: Path) -> None:
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def _information_ladder(summary: Sequence[Row], runs: Sequence[Row], out: Path) -> None:
    fig, axes = plt.subplots(3, 1, figsize=(9, 9))
    _grouped_bars(axes[0], summary, "short_p95_ms", highlight="no-information")
    axes[0].set_title("Information ladder (full stack fixed): no-information in red")
    axes[0].legend(fontsize=8, ncols=4)
    _grouped_bars(axes[1], summary, "completion_rate", highlight="no-information")
    _grouped_bars(axes[2], summary, "goodput_rps", highlight="no-information")
    _save(fig, out / "fig2_information_ladder.png")


def _scatter(
    summary: Sequence[Row], x: str, y: str, title: str, path: Path, *, logx: bool = False
) -> None:
    fig, axes = plt.subplots(1, 4, figsize=(14, 3.8), sharey=False)
    regimes = _ordered([r["regime"] for r in summary])
    for ax, regime in zip(axes, regimes, strict=False):
        for row in (r for r in summary if r["regime"] == regime):
            (mx, sx), (my, sy) = _v(row, x), _v(row, y)
            ax.errorbar(mx, my, xerr=sx, yerr=sy, fmt="o", capsize=3, label=str(row["condition"]))
        ax.set_title(regime, fontsize=9)
        ax.set_xlabel(_LABELS.get(x, x))
        if logx:
            ax.set_xscale("log")
            ax.xaxis.set_minor_formatter(NullFormatter())  # minor labels overlap
        ax.grid(alpha=0.3)
    axes[0].set_ylabel(_LABELS.get(y, y))
    axes[-1].legend(fontsize=7)
    fig.suptitle(title)
    _save(fig, path)


def _main_comparison(summary: Sequence[Row], runs: Sequence[Row], out: Path) -> None:
    _scatter(summary, "short_p95_ms", "completion_rate", "Short P95 vs completion",
             out / "fig3_short_p95_vs_completion.png", logx=True)  # fmt: skip
    _scatter(summary, "global_p95_ms", "goodput_rps", "Useful goodput vs global P95",
             out / "fig4_goodput_vs_global_p95.png")  # fmt: skip


def _overload(summary: Sequence[Row], runs: Sequence[Row], out: Path) -> None:
    buckets = ("short", "medium", "long", "xlong")
    ladder = [r for r in runs if r["condition"] == "ladder"]
    fig, ax = plt.subplots(figsize=(6, 4))
    x = np.arange(len(buckets))
    for i, kind in enumerate(("rejects", "defers")):
        totals = [sum(_num(r[f"{kind}_{b}"]) for r in ladder) for b in buckets]
        ax.bar(x + (i - 0.5) * 0.4, totals, 0.4, label=kind)
    ax.set_xticks(x, buckets)
    ax.set_ylabel(f"actions, summed over {len(ladder)} runs")
    ax.set_title("Overload actions by bucket (cost ladder)")
    ax.legend()
    ax.grid(axis="y", alpha=0.3)
    _save(fig, out / "fig5_actions_by_bucket.png")
    fig, axes = plt.subplots(1, 3, figsize=(14, 4))
    for ax, metric in zip(axes, ("short_p95_ms", "goodput_rps", "completion_rate"), strict=True):
        _grouped_bars(ax, summary, metric)
    axes[0].legend(fontsize=8)
    fig.suptitle("Overload bucket policy (full stack fixed)")
    _save(fig, out / "fig6_overload_policies.png")


def _fair_queuing(summary: Sequence[Row], runs: Sequence[Row], out: Path) -> None:
    fig, ax = plt.subplots(figsize=(7, 4))
    names = [str(r["condition"]) for r in summary]
    x = np.arange(len(names))
    for i, metric in enumerate(("short_p90_ms", "long_p90_ms")):
        vals = [_v(r, metric) for r in summary]
        ax.bar(x + (i - 0.5) * 0.4, [m for m, _ in vals], 0.4, yerr=[s for _, s in vals],
               capsize=3, label=_LABELS[metric])  # fmt: skip
    ax.set_xticks(x, names)
    ax.set_ylabel("seconds")
    ax.set_title("Fair Queuing vs Short-Priority (heavy70/high)")
    ax.legend()
    ax.grid(axis="y", alpha=0.3)
    _save(fig, out / "fair_queuing.png")


def _lines(
    summary: Sequence[Row], metrics: Sequence[str], title: str, path: Path,
    x_of: Callable[[Row], object],
) -> None:  # fmt: skip
    fig, axes = plt.subplots(1, len(metrics), figsize=(4.5 * len(metrics), 4))
    regimes = _ordered([r["regime"] for r in summary])
    for ax, metric in zip(axes, metrics, strict=True):
        for regime in regimes:
            rows = [r for r in summary if r["regime"] == regime]
            xs = [x_of(r) for r in rows]
            vals = [_v(r, metric) for r in rows]
            ax.errorbar(xs, [m for m, _ in vals], yerr=[s for _, s in vals], marker="o",
                        capsize=3, label=regime)  # fmt: skip
        ax.set_ylabel(_LABELS.get(metric, metric))
        ax.grid(alpha=0.3)
        ax.tick_params(axis="x", labelsize=8)
    axes[0].legend(fontsize=8)
    fig.suptitle(title)
    _save(fig, path)


def _layerwise(summary: Sequence[Row], runs: Sequence[Row], out: Path) -> None:
    _lines(summary, ("short_p95_ms", "goodput_rps", "completion_rate"),
           "Method progression (high congestion)", out / "fig7_layerwise.png",
           lambda r: str(r["condition"]).replace("_", "\n"))  # fmt: skip


def _noise(summary: Sequence[Row], runs: Sequence[Row], out: Path) -> None:
    _lines(summary, ("goodput_rps", "completion_rate", "short_p95_ms"),
           "Full stack under multiplicative prior error L", out / "fig8_predictor_noise.png",
           lambda r: float(str(r["condition"]).removeprefix("L=")))  # fmt: skip


def _sensitivity(summary: Sequence[Row], runs: Sequence[Row], out: Path) -> None:
    fig, axes = plt.subplots(2, 1, figsize=(10, 7))
    _grouped_bars(axes[0], summary, "short_p95_ms")
    _grouped_bars(axes[1], summary, "completion_rate")
    axes[0].legend(fontsize=8, ncols=5)
    axes[0].set_title("Overload thresholds and backoff ±20%")
    _save(fig, out / "sensitivity.png")


def _condition_bars(summary: Sequence[Row], metrics: Sequence[str], title: str, path: Path) -> None:
    """One panel per metric, one bar per condition (mean ± std over seeds)."""
    fig, axes = plt.subplots(1, len(metrics), figsize=(5 * len(metrics), 4.4))
    for ax, metric in zip(axes, metrics, strict=True):
        names = [str(r["condition"]).replace("final_adrr_olc/", "final/") for r in summary]
        vals = [_v(r, metric) for r in summary]
        ax.bar(range(len(names)), [m for m, _ in vals], yerr=[s for _, s in vals], capsize=3)
        ax.set_xticks(range(len(names)), names, rotation=35, ha="right", fontsize=7)
        ax.set_ylabel(_LABELS.get(metric, metric))
        ax.grid(axis="y", alpha=0.3)
    fig.suptitle(title)
    _save(fig, path)


def _sharegpt(summary: Sequence[Row], runs: Sequence[Row], out: Path) -> None:
    _condition_bars(summary, ("short_p95_ms", "satisfaction", "goodput_rps"),
                    "ShareGPT V3 output lengths, high congestion",
                    out / "sharegpt_trace.png")  # fmt: skip


def _prior_levers(summary: Sequence[Row], runs: Sequence[Row], out: Path) -> None:
    _condition_bars(summary, ("short_p95_ms", "completion_rate", "satisfaction"),
                    "Routing and deadline rules vs prior quality (ShareGPT, high congestion)",
                    out / "prior_levers.png")  # fmt: skip


def _rate_limits(summary: Sequence[Row], runs: Sequence[Row], out: Path) -> None:
    """One row per regime: 429s, completion and goodput by client budget, bars by strategy."""
    regimes = _ordered([r["regime"] for r in summary])
    metrics = ("throttled", "completion_rate", "goodput_rps")
    fig, axes = plt.subplots(len(regimes), len(metrics), figsize=(15, 3.6 * len(regimes)),
                             squeeze=False)  # fmt: skip
    for row_axes, reg in zip(axes, regimes, strict=True):
        rows = [r for r in summary if r["regime"] == reg]
        for ax, metric in zip(row_axes, metrics, strict=True):
            _grouped_bars(ax, rows, metric, group="condition", series="strategy")
            ax.set_title(f"{reg}: {_LABELS.get(metric, metric)}", fontsize=9)
            plt.setp(ax.get_xticklabels(), rotation=20, ha="right")
    axes[0][0].legend(fontsize=7)
    fig.suptitle("Provider rate limits: no budget, budget at / above the limit, shared key")
    _save(fig, out / "rate_limits.png")


_DRAW: dict[str, Callable[[Sequence[Row], Sequence[Row], Path], None]] = {
    "information-ladder": _information_ladder,
    "main-comparison": _main_comparison,
    "overload-policies": _overload,
    "fair-queuing": _fair_queuing,
    "layerwise": _layerwise,
    "sensitivity": _sensitivity,
    "predictor-noise": _noise,
    "sharegpt-trace": _sharegpt,
    "prior-levers": _prior_levers,
    "rate-limits": _rate_limits,
}


def draw(
    name: str,
    summary: Sequence[Row],
    runs: Sequence[Row],
    out: Path,
) -> None:
    """Draw the figures of experiment ``name`` into ``out``."""
    _DRAW[name](summary, runs, out)
