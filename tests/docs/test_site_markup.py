"""The built docs site shows no reStructuredText: every docstring the API reference renders
is Markdown, so no Sphinx role (``:class:`X```) or literal-block marker (``Example::``)
reaches a page as text.

It builds the site (``mkdocs build --strict``, a few seconds, the ``docs`` extra), so it is
marked slow; CI runs it after installing that extra (``.ci/run``).
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
#: What a Sphinx role or a literal block looks like once rendered as text.
RST = re.compile(r":(?:class|meth|mod|func|attr|data|exc|obj|file):(?:`|<code>)|Example::")

pytestmark = pytest.mark.slow


def test_the_built_site_has_no_sphinx_markup(tmp_path: Path) -> None:
    pytest.importorskip("mkdocs", reason="the docs extra builds the site")
    pytest.importorskip("mkdocstrings_handlers.python", reason="the docs extra")
    site = tmp_path / "site"
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    pages = sorted(site.rglob("*.html"))
    assert any(p.match("reference/api/index.html") for p in pages)
    found = [
        f"{page.relative_to(site)}: ...{text[max(0, m.start() - 60) : m.end() + 40]}..."
        for page in pages
        for text in [page.read_text(encoding="utf-8")]
        for m in RST.finditer(text)
    ]
    assert found == []
