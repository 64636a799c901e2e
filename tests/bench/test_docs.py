"""The result tables of the README and the guides are generated from the committed results,
never typed."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from bench.docs import DOCS, RENDERED, render_files, render_readme

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("name", RENDERED, ids=str)
def test_the_generated_tables_match_the_committed_results(name: Path) -> None:
    text = (ROOT / name).read_text(encoding="utf-8")
    assert render_readme(text, ROOT) == text, "run `python -m bench docs --render-only`"


def test_every_block_is_shown_and_every_page_with_blocks_is_rendered() -> None:
    from bench.docs import _BLOCKS

    shown = {m for name in RENDERED for m in _blocks((ROOT / name).read_text(encoding="utf-8"))}
    assert shown == set(_BLOCKS)
    pages = [ROOT / "README.md", *(ROOT / "docs").rglob("*.md")]
    with_blocks = {p.relative_to(ROOT) for p in pages if _blocks(p.read_text(encoding="utf-8"))}
    assert with_blocks <= set(RENDERED)  # a block outside RENDERED would never be re-rendered


def test_render_files_rewrites_a_stale_block_in_a_guide(tmp_path: Path) -> None:
    for name in RENDERED:
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("")
    (tmp_path / DOCS).parent.mkdir(parents=True, exist_ok=True)
    (tmp_path / DOCS).symlink_to(ROOT / DOCS)
    guide = tmp_path / "docs/guides/research.md"
    guide.write_text("# x\n<!-- bench:quick -->\nstale\n<!-- /bench:quick -->\n")
    render_files(tmp_path)
    assert "| final_adrr_olc |" in guide.read_text() and "stale" not in guide.read_text()


def _blocks(text: str) -> list[str]:
    return re.findall(r"<!-- bench:([\w-]+) -->", text)


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
