"""Module and function sizes of the product packages (docs/architecture.md, "Sizes").

A module holds one job and is cut where a seam is; a long module or function is
where the next feature would pile up. The limits are the architecture page's:
no product module over 500 lines, no function over 60.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PRODUCT = ("semisched", "mockprovider", "predictors")
MODULE_LINES = 500
FUNCTION_LINES = 60
#: Open debt, listed so that it can only shrink (none now: a module that grows past the
#: limit is cut along a seam, as the engine's admission layer and the fleet's picker were).
KNOWN_LONG: dict[str, int] = {}


def _sources() -> list[Path]:
    return sorted(p for package in PRODUCT for p in (ROOT / package).rglob("*.py"))


def test_no_product_module_is_over_500_lines() -> None:
    long = {
        p.relative_to(ROOT).as_posix(): n
        for p in _sources()
        if (n := len(p.read_text(encoding="utf-8").splitlines())) > MODULE_LINES
    }
    grown = {name: n for name, n in long.items() if n > KNOWN_LONG.get(name, MODULE_LINES)}
    assert grown == {}
    assert set(long) == set(KNOWN_LONG), "a listed module is under the limit now: unlist it"


def test_no_product_function_is_over_60_lines() -> None:
    long = {}
    for path in _sources():
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                assert node.end_lineno is not None
                lines = node.end_lineno - node.lineno + 1
                if lines > FUNCTION_LINES:
                    long[f"{path.relative_to(ROOT).as_posix()}:{node.lineno} {node.name}"] = lines
    assert long == {}
