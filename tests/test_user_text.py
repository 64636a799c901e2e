"""What users read names what things do, not where the work was tracked: no issue or seed
numbers and no section signs in the README, docs/, any command's --help, or the messages
the packages print, log or raise (papers are cited by title); --help is plain text.
"""

from __future__ import annotations

import argparse
import ast
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

#: "issue 12", "issues #3", "#14" (an issue reference), "seed 004", "§4.3".
TRACKING = re.compile(r"\bissues? #?\d|(?<![\w&#/])#\d{1,3}\b|\bseed `?0\d\d|§")
#: reStructuredText that argparse would print as it is.
RST = re.compile(r"``|:(?:mod|func|class|meth|data|attr):`|::\n")


def _helps(parser: argparse.ArgumentParser) -> Iterator[tuple[str, str]]:
    """``parser``'s --help and that of every subcommand, by program name."""
    yield parser.prog, parser.format_help()
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                yield from _helps(sub)


def _parsers() -> list[argparse.ArgumentParser]:
    from bench.__main__ import _parser as bench
    from mockprovider.__main__ import build_parser as mock
    from semisched.batch.args import parser as semisched
    from semisched.gateway.cli import parser as serve
    from semisched.plan.cli import _parser as plan
    from semisched.plan.fit import _parser as fit

    return [semisched(), plan(), fit(), serve(), bench(), mock()]


def _all_helps() -> dict[str, str]:
    return {prog: text for parser in _parsers() for prog, text in _helps(parser)}


def test_every_help_is_plain_text_without_tracking_numbers() -> None:
    helps = _all_helps()
    assert {"semisched batch", "semisched plan", "semisched serve", "python -m bench"} <= set(helps)
    found = {prog: m.group(0) for prog, text in helps.items() for m in [TRACKING.search(text)] if m}
    assert found == {}
    rst = {prog: m.group(0) for prog, text in helps.items() for m in [RST.search(text)] if m}
    assert rst == {}


def _docs() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


@pytest.mark.parametrize("path", _docs(), ids=lambda p: p.relative_to(ROOT).as_posix())
def test_the_readme_and_docs_name_no_issue_or_seed_numbers(path: Path) -> None:
    hits = [
        f"{n}: {line.strip()[:120]}"
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if TRACKING.search(line)
    ]
    assert hits == []


def _message_strings(path: Path) -> Iterator[tuple[int, str]]:
    """The string literals of a module that are not docstrings (messages, help, logs)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    docstrings = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
        and node.body
        and isinstance(node.body[0], ast.Expr)
        and isinstance(node.body[0].value, ast.Constant)
    }
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Constant)
            and isinstance(node.value, str)
            and (id(node) not in docstrings)
        ):
            yield node.lineno, node.value


@pytest.mark.parametrize("package", ["semisched", "mockprovider", "predictors", "bench"])
def test_no_message_a_package_prints_logs_or_raises_names_an_issue_or_seed(package: str) -> None:
    hits = [
        f"{path.relative_to(ROOT)}:{line}: {text[:100]!r}"
        for path in sorted((ROOT / package).rglob("*.py"))
        for line, text in _message_strings(path)
        if TRACKING.search(text)
    ]
    assert hits == []
