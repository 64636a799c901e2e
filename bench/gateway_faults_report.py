"""The tables of ``python -m bench gateway-faults``: ``faults.csv`` and ``faults.md``.

``faults.csv`` holds every scenario's rows (a ``scenario`` column first, each scenario's
own columns after); ``faults.md`` one table per scenario, under the command that made it.
Nothing here is typed by hand: every cell is a measured value.

What this module is not: it runs nothing (`bench.gateway_faults`).
"""

from __future__ import annotations

import math
import platform
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from bench.report import write_csv

__all__ = ["TITLES", "markdown", "write_results"]

#: Each scenario's heading and what it did.
TITLES: Mapping[str, tuple[str, str]] = {
    "storm": ("1. Disconnect storm",
              "Runs on one gateway process; half the clients stream, 30% disconnect at a "
              "random moment (before the answer, or after a stream's first event); the "
              "upstream answers after 0-0.2 s. After each run: /healthz, /readyz, one fresh "
              "request, and the internal-error counters the gateway exposes."),
    "slow": ("2. Slow clients",
             "[gateway] header_timeout_s = body_timeout_s = keepalive_timeout_s = 2. "
             "Seconds from when the limit's clock starts (the connection, or the answer "
             "for keep-alive) to the gateway's close."),
    "hostile": ("3. Hostile requests",
                "One at a time; the upstream's request count is read after each "
                "(anything but 0 means it was forwarded). Response bytes: the body's."),
    "memory": ("4. Memory",
               "8 clients at once, each sending a chat body of exactly max_body_bytes; "
               "the gateway process's VmHWM (peak RSS) from /proc before and after."),
    "upstream": ("5. Upstream faults",
                 "One gateway process per case (stalled stream and hung upstream share one)."),
    "sigterm": ("6. SIGTERM under load",
                "Requests at once, max_inflight = 20, the upstream answering after 1 s, "
                "grace_s = 5; SIGTERM once the upstream holds 20 of them."),
}  # fmt: skip


def _cell(value: Any) -> str:
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return "" if math.isnan(value) else f"{value:.2f}"
    return "" if value is None else str(value).replace("|", "\\|")


def _table(rows: Sequence[Mapping[str, Any]]) -> list[str]:
    columns: list[str] = []
    for row in rows:
        columns.extend(k for k in row if k not in columns)
    lines = ["| " + " | ".join(c.replace("_", " ") for c in columns) + " |",
             "|" + "---|" * len(columns)]  # fmt: skip
    lines += ["| " + " | ".join(_cell(row.get(c)) for c in columns) + " |" for row in rows]
    return lines


def markdown(results: Mapping[str, Sequence[Mapping[str, Any]]], *, command: str) -> str:
    """``faults.md``: a table per scenario under the command that made it."""
    lines = ["# semisched serve under faults", "",
             f"Made by `{command}` on {platform.machine()} Linux with "
             f"{_cores()} cores, every process on loopback (a real `semisched serve` process "
             "in front of a fake upstream the benchmark switches between faults). Measured "
             "values only; `faults.csv` holds the same rows.", ""]  # fmt: skip
    for name, rows in results.items():
        title, about = TITLES.get(name, (name, ""))
        lines += [f"## {title}", "", about, "", *_table(rows), ""]
    return "\n".join(lines)


def _cores() -> int:
    import os

    return os.cpu_count() or 1


def write_results(out: Path, results: Mapping[str, Sequence[Mapping[str, Any]]], *,
                  command: str) -> Path:  # fmt: skip
    """Write ``faults.csv`` and ``faults.md`` to ``out``; the markdown's path."""
    out.mkdir(parents=True, exist_ok=True)
    write_csv(out / "faults.csv", [{"scenario": name, **row} for name, rows in results.items()
                                   for row in rows])  # fmt: skip
    path = out / "faults.md"
    path.write_text(markdown(results, command=command))
    return path
