"""``semisched batch`` with compress-and-route turned on in the fleet file: the borderline
line goes to the short endpoint compressed, and the summary says how many were."""

from __future__ import annotations

from pathlib import Path

import pytest
from batch_testkit import chat_line, mock_fleet, records, write_lines

from semisched.batch.cli import main_async

pytestmark = pytest.mark.anyio

FLEET_TOML = """
routing = "token_budget"

[routing_options]
short_pool_tokens = 1024
compress_band = {band}

[[endpoint]]
name = "short"
base_url = "http://short/v1"
pool = "short"
context_tokens = 1024

[[endpoint]]
name = "long"
base_url = "http://long/v1"
pool = "long"
context_tokens = 8192
"""


def report(sentences: int) -> str:
    """Prose of distinct short sentences (about 50 bytes each)."""
    return " ".join(f"Week {i}: the routing figures moved by {i * 7 % 90} percent."
                    for i in range(sentences))  # fmt: skip


async def run(tmp_path: Path, band: float) -> tuple[dict[str, int], list[int]]:
    """Two lines, a borderline report and a small one: the requests each endpoint served
    and the prompt tokens each answer reports."""
    text = report(90)
    assert 1024 < -(-len(text) // 4) + 128 <= 1.5 * 1024  # in the band: ~1.1k + 128
    lines = [chat_line(0, max_tokens=128), chat_line(1, max_tokens=128)]
    lines[0]["body"]["messages"] = [{"role": "user", "content": text}]
    write_lines(tmp_path / "in.jsonl", lines)
    (tmp_path / "fleet.toml").write_text(FLEET_TOML.format(band=band))
    argv = ["batch", str(tmp_path / "in.jsonl"), "-o", str(tmp_path / "out.jsonl"),
            "--priors", "heuristic", "--fleet", str(tmp_path / "fleet.toml")]  # fmt: skip
    async with mock_fleet(short={}, long={}) as fleet:
        assert await main_async(argv, make_client=fleet.client) == 0
        served = {n: fleet.stats(n).counters.completed for n in ("short", "long")}
    out = sorted(records(tmp_path / "out.jsonl"), key=lambda r: r["custom_id"])
    (tmp_path / "out.jsonl").unlink()
    usage = [r["response"]["body"]["usage"]["prompt_tokens"] for r in out]
    return served, usage


async def test_the_borderline_line_goes_short_compressed_and_the_summary_says_so(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")  # the endpoints' default key variable
    served, (report_tokens, _) = await run(tmp_path, 1.5)
    err = capsys.readouterr().err
    assert served == {"short": 2, "long": 0}
    assert report_tokens <= 1024 - 128  # cut to fit beside its max_tokens
    assert "compress-and-route: 1 sent compressed (" in err
    assert "0 spilled whole, 0 too long to compress" in err
    served, (whole, _) = await run(tmp_path, 1.0)
    err = capsys.readouterr().err
    assert served == {"short": 1, "long": 1} and whole > 1024 - 128  # off: long, whole
    assert "compress-and-route" not in err
