"""The dependency directions of DESIGN.md, checked on the import statements themselves."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def imported(path: Path) -> set[str]:
    """Top-level and lazy (function-level) imports of one module, as dotted names."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.add(node.module)
    return names


def modules(package: str) -> list[Path]:
    return sorted((ROOT / package).rglob("*.py"))


def offenders(package: str, forbidden: tuple[str, ...], allowed: tuple[str, ...] = ()) -> list[str]:
    found = []
    for path in modules(package):
        rel = path.relative_to(ROOT).as_posix()
        if rel in allowed:
            continue
        for name in imported(path):
            if any(name == f or name.startswith(f + ".") for f in forbidden):
                found.append(f"{rel}: {name}")
    return found


@pytest.mark.parametrize(
    ("package", "forbidden", "allowed"),
    [
        # The core is the model: nothing else of the project.
        ("semisched/core", ("semisched.runtime", "semisched.sim", "predictors", "mockprovider",
                            "bench", "anyio", "openai", "httpx", "httpx2"), ()),
        # The SDK owns the prior protocol; only the default-priors chooser may load the
        # learned predictor, lazily (``priors="auto"``/``"learned"``, ``--priors``).
        ("semisched", ("predictors", "bench"), ("semisched/default_priors.py",)),
        # The mock never depends on the SDK's shells or the benchmarks.
        ("mockprovider", ("semisched", "bench", "predictors"), ()),
        ("predictors", ("bench", "mockprovider", "semisched.runtime", "semisched.sim"), ()),
    ],
)  # fmt: skip
def test_packages_import_only_what_the_design_allows(
    package: str, forbidden: tuple[str, ...], allowed: tuple[str, ...]
) -> None:
    assert offenders(package, forbidden, allowed) == []


def test_the_sdk_loads_the_predictor_only_lazily() -> None:
    tree = ast.parse((ROOT / "semisched/default_priors.py").read_text())
    top = {
        node.module
        for node in tree.body
        if isinstance(node, ast.ImportFrom) and node.module is not None
    }
    assert not any(name.startswith("predictors") for name in top)
