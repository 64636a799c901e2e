"""The summaries, targets and tables of ``python -m bench gateway-priority``.

Per cell: the high (trickle) requests' p50/p95/max and how many took over 1 s, the low
(flood) requests' p50/p95 (latencies of ``200`` answers), and every other answer counted
by status. With ``--runs N`` above 1 each figure is the median over the runs, and the
errors are summed. The targets, each a ratio in the table:

1. high p95 at most `HIGH_VS_UNLOADED` x the trickle's p95 alone (same upstream and
   ``max_tokens``);
2. low p50 at most `LOW_VS_NO_MARKS` x the ``no marks`` cell's (same
   ``max_tokens``, process and upstream): marking costs the flood little;
3. a marked cell's high p95 never above the ``no marks`` cell's.

A figure within `NOISE_MS` of its bound meets it: on loopback a request's latency
varies by about that much from one to the next (the instant upstream's unloaded p50 to
max), so a 4 ms p95 against a 3.9 ms one says nothing either way.

``results.json`` holds the summaries, the config, the command and the machine;
``results.md`` the tables; `priority_block` the docs' generated block, from the
committed ``results.json``.

What this module is not: it runs nothing (`bench.gateway_priority`).
"""

from __future__ import annotations

import json
import math
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np

from bench.docs_tables import DOCS
from bench.docs_tables import table as md_table
from bench.gateway_priority import (
    VARIANTS,
    PriorityRun,
    Record,
    Results,
    gateway_toml,
    upstream_label,
)

__all__ = ["HIGH_VS_UNLOADED", "LOW_VS_NO_MARKS", "NO_MARKS", "combine", "markdown",
           "percentile", "priority_block", "summarize", "with_targets",
           "write_results"]  # fmt: skip

HIGH_VS_UNLOADED = 2.0
LOW_VS_NO_MARKS = 1.2
#: Loopback jitter: a figure this close to its bound meets it (module docstring).
NOISE_MS = 2.0
NO_MARKS = "no marks"
#: Where ``results.json`` is committed, relative to the repository root.
RESULTS = DOCS / "gateway-priority" / "results.json"
_KEY = ("service_ms", "max_tokens", "process", "variant")


def percentile(values: Sequence[float], q: float) -> float:
    """The ``q``-quantile (0..1) of ``values``, linearly interpolated; NaN when empty."""
    return float(np.quantile(values, q)) if len(values) else math.nan


def summarize(records: Iterable[Record]) -> dict[str, Any]:
    """One run's figures (module docstring), latencies in ms."""
    records = list(records)
    out: dict[str, Any] = {}
    errors: dict[str, dict[str, int]] = {}
    for group in ("high", "low"):
        mine = [r for r in records if r.group == group]
        ok = [1000 * r.latency_s for r in mine if r.status == "200"]
        out[f"{group}_n"], out[f"{group}_ok"] = len(mine), len(ok)
        out[f"{group}_p50_ms"], out[f"{group}_p95_ms"] = percentile(ok, 0.5), percentile(ok, 0.95)
        for r in mine:
            if r.status != "200":
                _add(errors, group, r.status, 1)
    high = [r for r in records if r.group == "high"]
    out["high_max_ms"] = max((1000 * r.latency_s for r in high), default=math.nan)
    out["high_over_1s"] = sum(r.latency_s > 1.0 for r in high)
    out["errors"] = errors
    out["client_late_max_ms"] = max((1000 * r.late_s for r in records), default=0.0)
    return out


def _add(errors: dict[str, dict[str, int]], group: str, status: str, n: int) -> None:
    counts = errors.setdefault(group, {})
    counts[status] = counts.get(status, 0) + n


def combine(summaries: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Several runs' summaries of one cell: numbers' medians, errors summed, ``runs``."""
    out: dict[str, Any] = {"runs": len(summaries)}
    for name, value in summaries[0].items():
        if name == "errors":
            total: dict[str, dict[str, int]] = {}
            for s in summaries:
                for group, counts in s["errors"].items():
                    for status, n in counts.items():
                        _add(total, group, status, n)
            out[name] = total
        elif isinstance(value, int | float):
            values = [float(s[name]) for s in summaries if not math.isnan(float(s[name]))]
            out[name] = statistics.median(values) if values else math.nan
        else:
            out[name] = value
    return out


def _grouped(items: Sequence[Mapping[str, Any]], key: Sequence[str]) -> list[dict[str, Any]]:
    """``items`` (each with ``records``) summarized, runs of one key combined, in order."""
    groups: dict[tuple[Any, ...], list[dict[str, Any]]] = {}
    for item in items:
        groups.setdefault(tuple(item[k] for k in key), []).append(summarize(item["records"]))
    return [{**dict(zip(key, k, strict=True)), **combine(runs)} for k, runs in groups.items()]


def _ratio(a: float, b: float) -> float | None:
    return None if math.isnan(a) or math.isnan(b) or b <= 0 else a / b


def _meets(value: float, base: float, ratio: float | None, bound: float) -> bool | None:
    """``value <= bound * base``, or within `NOISE_MS` of it (``None``: no ratio)."""
    return None if ratio is None else ratio <= bound or value - bound * base <= NOISE_MS


def with_targets(cells: Sequence[Mapping[str, Any]],
                 unloaded: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:  # fmt: skip
    """``cells`` with the three targets' ratios and verdicts (module docstring)."""
    alone = {(u["service_ms"], u["max_tokens"]): u["high_p95_ms"] for u in unloaded}
    plain = {(c["service_ms"], c["max_tokens"], c["process"]): c for c in cells
             if c["variant"] == NO_MARKS}  # fmt: skip
    out = []
    for cell in cells:
        row = dict(cell)
        base = alone.get((cell["service_ms"], cell["max_tokens"]), math.nan)
        row["unloaded_high_p95_ms"] = base
        row["high_p95_vs_unloaded"] = ratio = _ratio(cell["high_p95_ms"], base)
        row["meets_high_target"] = _meets(cell["high_p95_ms"], base, ratio, HIGH_VS_UNLOADED)
        ref = plain.get((cell["service_ms"], cell["max_tokens"], cell["process"]))
        low = high = None
        if ref is not None and cell["variant"] != NO_MARKS:
            low = _ratio(cell["low_p50_ms"], ref["low_p50_ms"])
            high = _ratio(cell["high_p95_ms"], ref["high_p95_ms"])
        row["low_p50_vs_no_marks"], row["high_p95_vs_no_marks"] = low, high
        if ref is not None:
            row["meets_low_target"] = _meets(cell["low_p50_ms"], ref["low_p50_ms"], low,
                                             LOW_VS_NO_MARKS)  # fmt: skip
            row["meets_marked_target"] = _meets(cell["high_p95_ms"], ref["high_p95_ms"], high, 1.0)
        else:
            row["meets_low_target"] = row["meets_marked_target"] = None
        out.append(row)
    return out


def tables(results: Results) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The cells (with targets) and the unloaded rows, runs combined."""
    unloaded = _grouped(results.unloaded, ("service_ms", "max_tokens"))
    for row in unloaded:  # the trickle alone has no low group
        for name in ("low_n", "low_ok", "low_p50_ms", "low_p95_ms"):
            row.pop(name, None)
    return with_targets(_grouped(results.cells, _KEY), unloaded), unloaded


def _ms(value: Any) -> str:
    """Milliseconds: whole ones, tenths under 100 (the instant upstream's)."""
    if value is None or math.isnan(float(value)):
        return ""
    return f"{float(value):,.0f}" if float(value) >= 100 else f"{float(value):.1f}"


def _errors(errors: Mapping[str, Mapping[str, int]]) -> str:
    parts = [f"{group} " + " ".join(f"{s}:{n}" for s, n in sorted(counts.items()))
             for group, counts in sorted(errors.items())]  # fmt: skip
    return "; ".join(parts) or "none"


def _verdict(ratio: float | None, met: bool | None) -> str:
    return "" if ratio is None or met is None else f"{'yes' if met else 'NO'} ({ratio:.2f}x)"


def cells_table(cells: Sequence[Mapping[str, Any]]) -> str:
    """``results.md``'s main table: one row per cell."""
    header = ("upstream", "max_tokens", "process", "variant", "high p50 / p95 / max (ms)",
              "high > 1 s", "low p50 / p95 (ms)", "not 200",
              f"high p95 ≤ {HIGH_VS_UNLOADED:g}x unloaded",
              f"low p50 ≤ {LOW_VS_NO_MARKS:g}x no marks", "high p95 ≤ no marks")  # fmt: skip
    body = [
        (upstream_label(c["service_ms"]), str(c["max_tokens"]), c["process"], c["variant"],
         f"{_ms(c['high_p50_ms'])} / {_ms(c['high_p95_ms'])} / {_ms(c['high_max_ms'])}",
         f"{c['high_over_1s']:g} of {c['high_n']:g}",
         f"{_ms(c['low_p50_ms'])} / {_ms(c['low_p95_ms'])}", _errors(c["errors"]),
         _verdict(c["high_p95_vs_unloaded"], c["meets_high_target"]),
         _verdict(c["low_p50_vs_no_marks"], c["meets_low_target"]),
         _verdict(c["high_p95_vs_no_marks"], c["meets_marked_target"]))
        for c in cells
    ]  # fmt: skip
    return md_table(header, body)


def unloaded_table(unloaded: Sequence[Mapping[str, Any]]) -> str:
    """The trickle alone: its p50/p95/max per upstream and ``max_tokens``."""
    body = [(upstream_label(u["service_ms"]), str(u["max_tokens"]),
             f"{_ms(u['high_p50_ms'])} / {_ms(u['high_p95_ms'])} / {_ms(u['high_max_ms'])}",
             _errors(u["errors"])) for u in unloaded]  # fmt: skip
    return md_table(("upstream", "max_tokens", "p50 / p95 / max (ms)", "not 200"), body)


def _met(cells: Sequence[Mapping[str, Any]]) -> str:
    parts = []
    for name, label in (("meets_high_target", "high p95 vs unloaded"),
                        ("meets_low_target", "low p50 vs no marks"),
                        ("meets_marked_target", "high p95 vs no marks")):  # fmt: skip
        judged = [c[name] for c in cells if c[name] is not None]
        parts.append(f"{label}: {sum(judged)} of {len(judged)}")
    return "Targets met: " + "; ".join(parts) + "."


def markdown(document: Mapping[str, Any]) -> str:
    """``results.md`` from the ``results.json`` document."""
    config, meta = document["config"], document["machine"]
    lines = ["# Priority through semisched serve", "",
             f"Made by `{document['command']}` in {document['wall_s']:.0f} s on "
             f"{meta['machine']} with {meta['cpus']} cores (load average "
             f"{meta['load_average'][0]:.2f} before, {document['load_average_after'][0]:.2f} "
             "after), every process on 127.0.0.1.", "",
             f"An upstream with {config['slots']} slots (the rest wait in order) answering "
             f"min(max_tokens, {config['cap']}) tokens after its service time; a fresh "
             f"`semisched serve` process per cell with `max_inflight = {config['slots']}`; a "
             f"low-priority flood of {config['flood']} requests at {config['flood_rate']:g}/s "
             f"and a high-priority trickle of {config['trickle']} at "
             f"{config['trickle_rate']:g}/s, starting together. Fresh: the process has served "
             f"{config['warmup']} requests before; warm: its second flood. Latencies of 200 "
             "answers, from send to the whole answer; runs per cell: "
             f"{config['runs']} (medians).", "",
             _met(document["cells"]), "", cells_table(document["cells"]), "",
             "## Unloaded: the trickle alone", "",
             unloaded_table(document["unloaded"]), ""]  # fmt: skip
    for variant, reason in document["skipped"].items():
        lines += [f"Skipped: `{variant}`: {reason}", ""]
    peaks = ", ".join(f"{k}: {v}" for k, v in document["upstream_peak_in_service"].items())
    lines += [f"The upstream's most requests in service at once: {peaks}.", ""]
    return "\n".join(lines)


def _plain(value: Any) -> Any:
    """NaN as ``null`` (JSON has no NaN), recursively."""
    if isinstance(value, float) and math.isnan(value):
        return None
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value


def write_results(out: Path, run: PriorityRun, results: Results, meta: Mapping[str, Any]) -> Path:
    """Write ``results.json`` and ``results.md`` to ``out``; the markdown's path."""
    cells, unloaded = tables(results)
    variants = {v.name: {"marks": v.marks,
                         "file": gateway_toml("http://127.0.0.1:PORT/v1", v,
                                              max_inflight=run.slots)}
                for v in VARIANTS if v.name in run.variants}  # fmt: skip
    document = _plain({**meta, "config": {**asdict(run), "variants_run": variants},
                       "skipped": results.skipped,
                       "upstream_peak_in_service": results.upstream_peaks,
                       "unloaded": unloaded, "cells": cells})  # fmt: skip
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps(document, indent=1) + "\n")
    path = out / "results.md"
    path.write_text(markdown(_numbers(document)))
    return path


def _numbers(document: Mapping[str, Any]) -> dict[str, Any]:
    """``document`` with ``null`` figures back to NaN (what the tables print as blank)."""

    def fix(row: Mapping[str, Any]) -> dict[str, Any]:
        return {k: math.nan if v is None and k.endswith("_ms") else v for k, v in row.items()}

    return {**document, "cells": [fix(c) for c in document["cells"]],
            "unloaded": [fix(u) for u in document["unloaded"]]}  # fmt: skip


def priority_block(root: Path) -> str:
    """The docs' block: the 200 ms upstream's cells, high p95 / low p50 per variant."""
    document = _numbers(json.loads((root / RESULTS).read_text(encoding="utf-8")))
    config = document["config"]
    service = max(config["service_ms"])
    cells = [c for c in document["cells"] if c["service_ms"] == service]
    variants = [v for v in config["variants"] if any(c["variant"] == v for c in cells)]
    alone = {u["max_tokens"]: u["high_p95_ms"] for u in document["unloaded"]
             if u["service_ms"] == service}  # fmt: skip
    header = ("process", "max_tokens", "alone: high p95",
              *(f"{v}: high p95 / low p50" for v in variants))  # fmt: skip
    body = []
    for process in ("fresh", "warm"):
        for max_tokens in config["max_tokens"]:
            mine = {c["variant"]: c for c in cells
                    if c["process"] == process and c["max_tokens"] == max_tokens}  # fmt: skip
            body.append((process, str(max_tokens), _s(alone.get(max_tokens)),
                         *(f"{_s(mine[v]['high_p95_ms'])} / {_s(mine[v]['low_p50_ms'])}"
                           if v in mine else "" for v in variants)))  # fmt: skip
    caption = (
        f"Through `semisched serve` on loopback: an upstream with {config['slots']} slots "
        f"answering in {service:g} ms behind `max_inflight = {config['slots']}`, a "
        f"low-priority flood of {config['flood']} requests at {config['flood_rate']:g}/s "
        f"beside a high-priority trickle of {config['trickle']} at "
        f"{config['trickle_rate']:g}/s; seconds. Fresh: a new gateway process; warm: its "
        f"second flood. Generated by `{document['command']}`; every cell, the instant "
        "upstream and the targets: `docs/results/gateway-priority/results.md`."
    )  # fmt: skip
    notes = [f"Not run: `{v}`: {reason}" for v, reason in document["skipped"].items()]
    return "\n\n".join([caption, md_table(header, body), *notes])


def _s(ms: float | None) -> str:
    return "" if ms is None or math.isnan(ms) else f"{ms / 1000:.2f}"
