"""Tables and the figure of ``python -m bench tenants`` (from its ``summary.csv`` rows).

The headline (the README's block) puts each issue-15 target beside the
condition that should meet it: the noisy neighbour's effect on B's and C's
short P95 (flood over no flood, each condition against its own no-flood run),
backlogged tenants' served share over entitlement and Jain's index over those
ratios, the guaranteed tenant's short P95 beside a best-effort flood over
alone, and total goodput against the same jobs as one tenant. Every number is
a mean over seeds (a ratio of P95s is the ratio of the seed means).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path

from bench.report import format_table

__all__ = ["headline", "tables_markdown", "write_figure"]

Summary = Sequence[Mapping[str, object]]

_DETAIL = (
    ("short P95 ms", "short_p95_ms", 0),
    ("CR", "completion_rate", 3),
    ("rejects", "rejects", 1),
    ("expired", "expired", 1),
    ("goodput tok/s", "goodput_tps", 1),
    ("share", "share", 3),
    ("share/entitlement", "share_ratio", 3),
)
_TOTAL = (
    ("short P95 ms", "short_p95_ms", 0),
    ("CR", "completion_rate", 3),
    ("goodput tok/s", "goodput_tps", 1),
    ("goodput vs one tenant", "goodput_vs_one", 3),
    ("throughput vs one tenant", "throughput_vs_one", 3),
    ("Jain", "jain", 3),
)


def _mean(summary: Summary, scenario: str, condition: str, tenant: str, metric: str) -> float:
    for row in summary:
        if (row["scenario"], row["condition"], row["tenant"]) == (scenario, condition, tenant):
            return float(row[f"{metric}_mean"])  # type: ignore[arg-type]
    return math.nan


def _ratio(summary: Summary, scenario: str, condition: str, tenant: str) -> float:
    base = _mean(summary, f"{scenario}-base", condition, tenant, "short_p95_ms")
    return _mean(summary, scenario, condition, tenant, "short_p95_ms") / base


def headline(summary: Summary, conditions: Sequence[str]) -> list[dict[str, float | str]]:
    """One row per condition: the targets' numbers (module docstring)."""
    rows: list[dict[str, float | str]] = []
    for c in conditions:
        rows.append(
            {
                "condition": c,
                "noisy_b": _ratio(summary, "noisy", c, "B"),
                "noisy_c": _ratio(summary, "noisy", c, "C"),
                "w5": _mean(summary, "entitlements", c, "w5", "share_ratio"),
                "w3": _mean(summary, "entitlements", c, "w3", "share_ratio"),
                "w2": _mean(summary, "entitlements", c, "w2", "share_ratio"),
                "jain": _mean(summary, "entitlements", c, "all", "jain"),
                "guaranteed": _ratio(summary, "classes", c, "G"),
                "best_effort_goodput": _mean(summary, "classes", c, "S", "goodput_tps"),
                "goodput_noisy": _mean(summary, "noisy", c, "all", "goodput_vs_one"),
                "goodput_entitlements": _mean(summary, "entitlements", c, "all", "goodput_vs_one"),
                "goodput_classes": _mean(summary, "classes", c, "all", "goodput_vs_one"),
            }
        )
    return rows


def headline_markdown(rows: Sequence[Mapping[str, float | str]]) -> str:
    """The headline as a markdown table (the README block)."""
    lines = [
        "| condition | noisy neighbour: B / C short P95 vs no flood | backlogged 5/3/2: "
        "share / entitlement | Jain | guaranteed short P95 beside best-effort vs alone | "
        "best-effort goodput (tok/s) | goodput vs one tenant (noisy / 5/3/2 / classes) |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['condition']} | {r['noisy_b']:.2f}x / {r['noisy_c']:.2f}x | "
            f"{r['w5']:.3f} / {r['w3']:.3f} / {r['w2']:.3f} | {r['jain']:.3f} | "
            f"{r['guaranteed']:.2f}x | {r['best_effort_goodput']:.0f} | "
            f"{r['goodput_noisy']:.3f} / {r['goodput_entitlements']:.3f} / "
            f"{r['goodput_classes']:.3f} |"
        )
    return "\n".join(lines)


def tables_markdown(
    summary: Summary, conditions: Sequence[str], scenarios: Sequence[str], preamble: str
) -> str:
    """``tables.md``: the headline, then every scenario per tenant and in total."""
    lines = [
        "# Tenants (`python -m bench tenants`)",
        "",
        preamble,
        "",
        "## Headline",
        "",
        headline_markdown(headline(summary, conditions)),
        "",
    ]
    for scenario in scenarios:
        here = [s for s in summary if s["scenario"] == scenario]
        lines += [f"## {scenario}: per tenant", ""]
        per = [s for s in here if s["tenant"] != "all"]
        lines += [format_table(per, ("condition", "tenant"), _DETAIL, markdown=True), ""]
        lines += [f"## {scenario}: all tenants", ""]
        total = [s for s in here if s["tenant"] == "all"]
        lines += [format_table(total, ("condition",), _TOTAL, markdown=True), ""]
    return "\n".join(lines)


_LABELS = {
    "static_quota": "static\nquota",
    "tenant_blind": "tenant\nblind",
    "fair_share_no_headroom": "fair_share\nno headroom",
}


def write_figure(summary: Summary, conditions: Sequence[str], path: Path) -> None:
    """Three panels: noisy neighbour, entitlements, service classes."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = headline(summary, conditions)
    fig, axes = plt.subplots(1, 3, figsize=(13, 3.9))
    xs = list(range(len(conditions)))
    width = 0.38

    ax = axes[0]
    ax.bar([x - width / 2 for x in xs], [float(r["noisy_b"]) for r in rows], width, label="B")
    ax.bar([x + width / 2 for x in xs], [float(r["noisy_c"]) for r in rows], width, label="C")
    ax.axhline(1.1, color="k", lw=0.8, ls="--", label="target 1.10x")
    ax.set_title("noisy neighbour: short P95, flood / no flood", fontsize=9)
    ax.legend(fontsize=7)

    ax = axes[1]
    third = 0.27
    for i, (tenant, label) in enumerate(
        (("w5", "weight 5"), ("w3", "weight 3"), ("w2", "weight 2"))
    ):
        ax.bar([x + (i - 1) * third for x in xs], [float(r[tenant]) for r in rows], third,
               label=label)  # fmt: skip
    ax.axhspan(0.95, 1.05, color="green", alpha=0.15, label="±5%")
    ax.set_title("backlogged 5/3/2: served share / entitlement", fontsize=9)
    ax.legend(fontsize=7)

    ax = axes[2]
    ax.bar([x - width / 2 for x in xs], [float(r["guaranteed"]) for r in rows], width,
           label="guaranteed short P95 beside best-effort / alone")  # fmt: skip
    ax.bar([x + width / 2 for x in xs], [float(r["goodput_classes"]) for r in rows], width,
           label="total goodput / one tenant")  # fmt: skip
    ax.axhline(1.0, color="k", lw=0.8)
    ax.set_title("guaranteed beside a best-effort flood", fontsize=9)
    ax.legend(fontsize=7)

    labels = [_LABELS.get(c, c) for c in conditions]
    for ax in axes:
        ax.set_xticks(xs, labels, fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
