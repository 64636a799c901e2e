"""The README's result tables are generated from the committed results, never typed."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.docs import DOCS, render_readme

ROOT = Path(__file__).resolve().parents[2]


def test_the_readme_tables_match_the_committed_results() -> None:
    text = (ROOT / "README.md").read_text()
    from bench.docs import _BLOCKS

    assert text.count("<!-- bench:") == len(_BLOCKS)  # every block is in the README, once
    assert render_readme(text, ROOT) == text, "run `python -m bench docs --skip-live`"


def test_the_committed_figure_and_tables_exist() -> None:
    folder = ROOT / DOCS / "rate-limits"
    for name in ("summary.csv", "runs.csv", "tables.md", "rate_limits.png"):
        assert (folder / name).stat().st_size > 0
    assert (folder / "live-check" / "live_check.csv").stat().st_size > 0


def test_rendering_fills_an_empty_block_and_refuses_an_unknown_one() -> None:
    filled = render_readme("a\n<!-- bench:quick -->\n<!-- /bench:quick -->\nb", ROOT)
    assert "| final_adrr_olc |" in filled and filled.startswith("a\n") and filled.endswith("b")
    with pytest.raises(ValueError, match="'nope' must be one of"):
        render_readme("<!-- bench:nope -->\n<!-- /bench:nope -->", ROOT)
