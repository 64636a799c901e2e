"""Tables and the figure of ``python -m bench concurrency`` (from its run and summary rows).

``tables.md``: per fleet size and condition the medians over seeds of short P95,
goodput and their ratios to ``caps`` (the true slots told), the limits' error
against the slots, the cells where a learned condition is more than 10% worse
than ``caps``, each seed's fleet and final limits, and the halving's numbers.
``convergence.png``: the limit against time in the halving run, the true slots as
a step line, the halving marked.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, cast

from bench.concurrency import CONDITIONS, Halving

if TYPE_CHECKING:
    from matplotlib.axes import Axes

__all__ = ["flagged", "halving_rows", "tables_markdown", "write_figure"]

Row = Mapping[str, object]

#: A learned condition is flagged when it is worse than ``caps`` by more than this.
WORSE = 0.10
_LEARNED = ("learned", "learned-nostream")


def _f(row: Row, key: str) -> float:
    return float(cast(float, row[key]))


def _num(value: float, digits: int, suffix: str = "") -> str:
    return "–" if math.isnan(value) else f"{value:.{digits}f}{suffix}"


def halving_rows(halving: Halving) -> list[dict[str, object]]:
    """``convergence.csv``: the limit at the start and after every change."""
    return [
        {"time_s": t, "limit": limit, "slots": _slots_at(halving, t), "rule": rule}
        for (t, limit), rule in zip(halving.trace, halving.rules, strict=True)
    ]


def _slots_at(halving: Halving, t: float) -> int:
    return halving.slots[0] if t < halving.at else halving.slots[1]


def _matrix(summary: Sequence[Row]) -> list[str]:
    lines = [
        "| endpoints | condition | short P95 (s) | short P95 vs caps | goodput (req/s) | "
        "goodput vs caps | satisfaction | limit error (slots) | limit bias (slots) |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in summary:
        lines.append(
            f"| {r['n']} | {r['condition']} | {_f(r, 'short_p95_ms') / 1000:.2f} | "
            f"{_num(_f(r, 'short_p95_vs_caps'), 2, 'x')} | {_f(r, 'goodput_rps'):.3f} | "
            f"{_num(_f(r, 'goodput_vs_caps'), 2, 'x')} | {_f(r, 'satisfaction'):.3f} | "
            f"{_num(_f(r, 'limit_mae'), 1)} | {_num(_f(r, 'limit_bias'), 1)} |"
        )
    return lines


def flagged(summary: Sequence[Row]) -> list[str]:
    """The learned cells more than `WORSE` worse than ``caps`` (median ratios)."""
    out: list[str] = []
    for r in summary:
        if r["condition"] not in _LEARNED:
            continue
        p95, goodput = _f(r, "short_p95_vs_caps"), _f(r, "goodput_vs_caps")
        worse = []
        if p95 > 1.0 + WORSE:
            worse.append(f"short P95 {p95:.2f}x caps")
        if goodput < 1.0 - WORSE:
            worse.append(f"goodput {goodput:.2f}x caps")
        if worse:
            out.append(f"- {r['n']} endpoint(s), {r['condition']}: " + ", ".join(worse))
    return out


def _fleets(runs: Sequence[Row]) -> list[str]:
    lines = [
        "| endpoints | seed | slots | learned: final limits | learned-nostream: final limits |",
        "|---|---|---|---|---|",
    ]
    keys = dict.fromkeys((r["n"], r["seed"]) for r in runs)
    for n, seed in keys:
        here = {r["condition"]: r for r in runs if (r["n"], r["seed"]) == (n, seed)}
        slots = next(iter(here.values()))["slots"]
        learned = here.get("learned", {}).get("limits", "–")
        unstreamed = here.get("learned-nostream", {}).get("limits", "–")
        lines.append(f"| {n} | {seed} | {slots} | {learned} | {unstreamed} |")
    return lines


def _halving(h: Halving) -> list[str]:
    after = [rule for (t, _), rule in zip(h.trace, h.rules, strict=True) if t >= h.at]
    rules = ", ".join(f"{rule} {count}" for rule, count in sorted(Counter(after).items()))
    if h.reached_s is None:
        reached = f"The limit never came down to {h.target} or below."
    else:
        reached = (
            f"The limit was first at most {h.target} (the new slots + 1) "
            f"**{h.reached_s:.1f} s** and **{h.reached_answers} answers** after the halving."
        )
    return [
        f"One endpoint of {h.slots[0]} slots, nothing told; at {h.at:.1f} s (the middle "
        f"request's arrival) the provider keeps {h.slots[1]} slots. The limit just before "
        f"the halving: {h.before}.",
        "",
        reached,
        "",
        f"Changes after the halving: {rules or 'none'}; the limit at the end of the run "
        f"({h.end:.0f} s): {h.final}. Every change: `convergence.csv`; the figure: "
        "`convergence.png`.",
    ]


def tables_markdown(
    summary: Sequence[Row], runs: Sequence[Row], halving: Halving, *, command: str, requests: int
) -> str:
    """``tables.md`` (module docstring)."""
    seeds = max((int(cast(int, r["seeds"])) for r in summary), default=0)
    worse = flagged(summary) or ["- none"]
    conditions = ", ".join(f"`{c}`" for c in CONDITIONS)
    preamble = (
        f"Generated by `{command}`; do not edit. Simulated: the real core against the mock "
        "provider's physics. Each endpoint's slots drawn from {8, 16, 32, 64} per seed; the "
        "balanced mix (coarse priors, bucket deadlines) offered at 1.1x the fleet's "
        f"full-batch capacity; `final_adrr_olc`; {seeds} seed(s) x {requests} requests per "
        f"run. Conditions: {conditions} (`bench/concurrency.py`'s docstring). Every number "
        "is the median over seeds; a ratio is the median of each seed's ratio to its `caps` "
        "run (the same fleet and jobs). Limit error: the mean, over every endpoint of every "
        "seed, of the absolute difference of its final limit from its slots; bias: the mean "
        "signed difference (below zero: under its slots); `–`: no per-endpoint limit."
    )
    lines = ["# Learned concurrency limits (`python -m bench concurrency`)", "", preamble, ""]
    lines += ["## Short P95 and goodput against the true slots told", "", *_matrix(summary), ""]
    lines += [f"## Learned cells more than {WORSE:.0%} worse than `caps`", "", *worse, ""]
    lines += ["## Each seed's fleet and final limits", "", *_fleets(runs), ""]
    lines += ["## Convergence after a halving", "", *_halving(halving), ""]
    return "\n".join(lines)


def _panel(ax: Axes, h: Halving, window: tuple[float, float]) -> None:
    times = [t for t, _ in h.trace] + [h.end]
    limits = [limit for _, limit in h.trace] + [h.final]
    ax.step(times, limits, where="post", label="learned limit", color="tab:blue")
    ax.step([0.0, h.at, h.end], [h.slots[0], h.slots[1], h.slots[1]], where="post",
            label="true slots", color="black", ls="--")  # fmt: skip
    ax.axvline(h.at, color="tab:red", lw=1.0, label=f"halving ({h.at:.0f} s)")
    if h.reached_s is not None:
        ax.axvline(h.at + h.reached_s, color="tab:green", lw=1.0, ls=":",
                   label=f"limit <= {h.target}: {h.reached_s:.1f} s, "
                   f"{h.reached_answers} answers later")  # fmt: skip
    ax.set_xlim(*window)
    ax.set_ylim(0, max(*limits, h.slots[0]) * 1.15)
    ax.set_xlabel("time (s)")
    ax.grid(alpha=0.3)


def write_figure(halving: Halving, path: Path) -> None:
    """The limit against time (the whole run, and around the halving), the true slots as a
    step line, the halving marked."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    h = halving
    settled = h.reached_s if h.reached_s is not None else 0.25 * (h.end - h.at)
    margin = max(30.0, settled)
    fig, axes = plt.subplots(1, 2, figsize=(12, 4), gridspec_kw={"width_ratios": (3, 2)})
    _panel(axes[0], h, (0.0, h.end))
    _panel(axes[1], h, (max(0.0, h.at - margin), min(h.end, h.at + settled + margin)))
    axes[0].set_ylabel("requests in flight")
    axes[0].set_title("the whole run", fontsize=9)
    axes[1].set_title("around the halving", fontsize=9)
    axes[1].legend(fontsize=8, loc="lower left")
    fig.suptitle(f"One endpoint, {h.slots[0]} slots halved to {h.slots[1]}: "
                 "the learned concurrency limit", fontsize=10)  # fmt: skip
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
