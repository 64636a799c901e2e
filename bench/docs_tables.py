"""What the generated blocks of `bench.docs` are made of: where the committed results
live, their CSV rows, and a Markdown table."""

from __future__ import annotations

import csv
from collections.abc import Mapping, Sequence
from pathlib import Path

__all__ = ["DOCS", "Row", "read_rows", "table"]

#: Where the committed results live, relative to the repository root.
DOCS = Path("docs/results")

Row = Mapping[str, str]


def read_rows(path: Path) -> list[dict[str, str]]:
    """The rows of the CSV file ``path``, as strings."""
    with path.open(newline="") as fh:
        return list(csv.DictReader(fh))


def table(header: Sequence[str], body: Sequence[Sequence[str]]) -> str:
    """A Markdown table of ``header`` and ``body`` (cells already formatted)."""
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(cells) + " |" for cells in body]
    return "\n".join(lines)
