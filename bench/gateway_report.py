"""The tables of ``python -m bench gateway``: its ``summary.md`` and the README's blocks.

Each ``*_table`` takes a part's CSV rows (as read back: strings) and returns a header
and rows of cells; `summary` writes them, with the headlines, as markdown.
`bench.docs` renders the same tables into the README, so the two never differ.
"""

from __future__ import annotations

import csv
import math
from collections.abc import Mapping, Sequence
from pathlib import Path

__all__ = ["overhead_table", "replicas_table", "summary", "tenants_table"]

Row = Mapping[str, str]
Table = tuple[Sequence[str], Sequence[Sequence[str]]]


def _f(row: Row, key: str, digits: int = 2) -> str:
    value = row.get(key, "")
    if value in ("", None):
        return ""
    number = float(value)
    return "∞" if math.isinf(number) else f"{number:.{digits}f}"


def overhead_table(rows: Sequence[Row]) -> Table:
    """Per path and rate: open-loop p50/p99, what the gateway adds, closed-loop requests/s,
    the server process's CPU per request and what that makes on one core."""
    header = ("path", "rate (req/s)", "p50 ms", "p99 ms", "added p50 / p99 ms",
              "requests/s (closed loop)", "server CPU ms/req", "req/s per core (1000/CPU)",
              "errors")  # fmt: skip
    body = []
    for r in rows:
        added = f"{_f(r, 'added_p50_ms')} / {_f(r, 'added_p99_ms')}" if r.get("added_p50_ms") \
            else ""
        cpu = float(r["cpu_ms_per_request"]) if r.get("cpu_ms_per_request") else math.nan
        per_core = f"{1000 / cpu:.0f}" if cpu > 0 else ""
        body.append((r["path"], f"{float(r['rate']):.0f}", _f(r, "p50_ms"), _f(r, "p99_ms"),
                     added, _f(r, "requests_per_s", 0), _f(r, "cpu_ms_per_request", 3),
                     per_core, r["errors"]))  # fmt: skip
    return header, body


def tenants_table(rows: Sequence[Row]) -> Table:
    """Per condition, scenario and tenant: short P95 against its own base (and the
    simulator's for the same jobs and config), the misses."""
    header = ("condition", "scenario", "tenant", "requests", "short P95 s", "vs base",
              "simulated: vs base", "short missed", "deadline misses", "answers")  # fmt: skip
    body = []
    for r in rows:
        flood = r["scenario"] != "base"
        body.append((r["condition"], r["scenario"], r["tenant"], r["requests"],
                     _f(r, "short_p95_s", 3), f"{_f(r, 'p95_vs_base')}x" if flood else "",
                     f"{_f(r, 'sim_p95_vs_base')}x" if flood else "",
                     f"{r['short_missed']} of {r['short']}", r["deadline_misses"],
                     r["statuses"]))  # fmt: skip
    return header, body


def replicas_table(rows: Sequence[Row]) -> Table:
    """Per condition: requests, answers, the upstream's 429s (the makespan is in the CSV:
    `bench.gateway_replicas` says why it is not the shared window's)."""
    header = ("state", "replicas", "limit (rpm / window s)", "requests", "answers",
              "upstream 429s")  # fmt: skip
    body = [(r["condition"], r["replicas"], f"{r['rpm']} / {_f(r, 'window_s', 0)}",
             r["requests"], r["statuses"], r["upstream_429s"]) for r in rows]  # fmt: skip
    return header, body


def markdown(table: Table) -> str:
    header, body = table
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(cells) + " |" for cells in body]
    return "\n".join(lines)


def read(path: Path) -> list[dict[str, str]]:
    with path.open(newline="") as f:
        return list(csv.DictReader(f))


def _headlines(folder: Path) -> list[str]:
    lines = []
    if (folder / "overhead.csv").exists():
        for r in read(folder / "overhead.csv"):
            if r["path"] == "gateway":
                lines.append(f"- At {float(r['rate']):.0f} requests/s the gateway adds "
                             f"{_f(r, 'added_p50_ms')} ms at p50 and {_f(r, 'added_p99_ms')} ms "
                             "at p99.")  # fmt: skip
    if (folder / "tenants.csv").exists():
        for r in read(folder / "tenants.csv"):
            if r["tenant"] == "Q" and r["scenario"] == "flood":
                lines.append(f"- {r['condition']}: the quiet tenant's short P95 beside the flood "
                             f"is {_f(r, 'p95_vs_base')}x its own beside a tenant within its "
                             f"share (the simulator, same jobs and config: "
                             f"{_f(r, 'sim_p95_vs_base')}x); {r['deadline_misses']} of "
                             f"{r['requests']} of its requests missed their deadline.")  # fmt: skip
    if (folder / "replicas.csv").exists():
        for r in read(folder / "replicas.csv"):
            lines.append(f"- Two replicas, {r['condition']} state: {r['upstream_429s']} "
                         "upstream 429s.")  # fmt: skip
    return lines


def summary(folder: Path, *, generator: str) -> str:
    """``summary.md`` over the parts' CSVs found in ``folder``."""
    parts = [("overhead.csv", "Overhead: straight to an instant upstream vs through the gateway",
              overhead_table),
             ("tenants.csv", "Noisy neighbour through the gateway (congested mock)",
              tenants_table),
             ("replicas.csv", "Two replicas on one key", replicas_table)]  # fmt: skip
    lines = ["# semisched serve: cost and benefit on this machine", "",
             f"Load generator: {generator}" + (" (asyncio/httpx2: itself the bottleneck above "
             "a few hundred requests/s)" if generator == "python" else " (http, keep-alive)")
             + "; every process shares the machine's cores.", "", *_headlines(folder)]  # fmt: skip
    for name, title, table in parts:
        if (folder / name).exists():
            lines += ["", f"## {title}", "", markdown(table(read(folder / name)))]
    return "\n".join(lines) + "\n"
