"""Aggregation and output: per-run rows to mean ± std summaries, CSV and text tables.

Numbers here are only ever computed from run rows; nothing is typed in.
"""

from __future__ import annotations

import csv
import math
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

import numpy as np

from semisched.sim.metrics import METRIC_NAMES

__all__ = ["aggregate", "format_table", "write_csv"]

RunRow = Mapping[str, object]

#: Per-run counts that come from the core's counters rather than from per-request
#: records (both runners fill them: simulated and live).
RUN_COUNTS: tuple[str, ...] = ("throttled", "retries")


def aggregate(
    runs: Iterable[RunRow], keys: Sequence[str], extra: Sequence[str] = ()
) -> list[dict[str, object]]:
    """Group run rows by ``keys`` and add ``<metric>_mean`` / ``<metric>_std``
    (the metrics of `semisched.sim.metrics.summarize`, the core's counts, ``extra``).

    Groups keep first-seen order. Std is the sample std (ddof=1) over seeds;
    NaN samples (a metric undefined in that run) are left out.
    """
    groups: dict[tuple[object, ...], list[RunRow]] = {}
    for run in runs:
        groups.setdefault(tuple(run[k] for k in keys), []).append(run)
    out: list[dict[str, object]] = []
    for key, rows in groups.items():
        summary: dict[str, object] = dict(zip(keys, key, strict=True))
        summary["runs"] = len(rows)
        counts = tuple(c for c in RUN_COUNTS if all(c in r for r in rows))
        for metric in (*METRIC_NAMES, *counts, *extra):
            values = np.array([_num(r[metric]) for r in rows], dtype=np.float64)
            values = values[~np.isnan(values)]
            summary[f"{metric}_mean"] = float(values.mean()) if values.size else math.nan
            summary[f"{metric}_std"] = float(values.std(ddof=1)) if values.size > 1 else 0.0
        out.append(summary)
    return out


def _num(value: object) -> float:
    if isinstance(value, (int, float)):
        return float(value)
    raise TypeError(f"metric value {value!r} is not a number")


def write_csv(path: Path, rows: Sequence[Mapping[str, object]]) -> None:
    """Write dict rows to ``path`` (columns from the first row, then any new ones)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    columns: list[str] = []
    for row in rows:
        columns.extend(k for k in row if k not in columns)
    with path.open("w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=columns)
        writer.writeheader()
        for row in rows:
            writer.writerow({k: _cell(row.get(k)) for k in columns})


def _cell(value: object) -> object:
    if isinstance(value, float):
        return "" if math.isnan(value) else f"{value:.6g}"
    return "" if value is None else value


def _pm(row: Mapping[str, object], metric: str, digits: int) -> str:
    mean = row[f"{metric}_mean"]
    std = row[f"{metric}_std"]
    assert isinstance(mean, float)
    assert isinstance(std, float)
    if math.isnan(mean):
        return "n/a"
    return f"{mean:.{digits}f} ± {std:.{digits}f}"


#: (column title, metric, decimals) of the default text table.
DEFAULT_COLUMNS: tuple[tuple[str, str, int], ...] = (
    ("short P95 ms", "short_p95_ms", 0),
    ("global P95 ms", "global_p95_ms", 0),
    ("completion", "completion_rate", 3),
    ("served", "served_fraction", 3),
    ("satisfaction", "satisfaction", 3),
    ("goodput rps", "goodput_rps", 3),
    ("makespan ms", "makespan_ms", 0),
    ("rejects", "rejects", 1),
    ("defers", "defers", 1),
)


def format_table(
    rows: Sequence[Mapping[str, object]],
    keys: Sequence[str],
    columns: Sequence[tuple[str, str, int]] = DEFAULT_COLUMNS,
    *,
    markdown: bool = False,
) -> str:
    """Render summaries as an aligned text (or markdown) table of mean ± std."""
    header = [*keys, *(title for title, _, _ in columns)]
    body = [
        [str(r[k]) for k in keys] + [_pm(r, metric, d) for _, metric, d in columns] for r in rows
    ]
    if markdown:
        lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
        lines += ["| " + " | ".join(cells) + " |" for cells in body]
        return "\n".join(lines)
    widths = [max(len(h), *(len(b[i]) for b in body)) for i, h in enumerate(header)]
    fmt = "  ".join(f"{{:<{w}}}" for w in widths)
    lines = [fmt.format(*header), fmt.format(*("-" * w for w in widths))]
    lines += [fmt.format(*cells) for cells in body]
    return "\n".join(lines)
