"""``python -m bench gateway-priority``'s pieces: the upstream's answers and slots, the gateway
files it writes (read by the gateway's own loader), the load plan, the summaries and targets,
the tables and the docs' block; and the whole run at ``--quick`` sizes (slow).

Nothing here asserts a timing: only counts, files, ratios of given numbers and what a
table says."""

from __future__ import annotations

import asyncio
import json
import math
import re
import tomllib
from pathlib import Path
from typing import Any

import pytest

from bench.__main__ import main
from bench.gateway_priority import (
    QUICK,
    VARIANTS,
    PriorityRun,
    Record,
    Results,
    gateway_toml,
    load_plan,
)
from bench.gateway_priority_report import (
    RESULTS,
    combine,
    percentile,
    priority_block,
    summarize,
    with_targets,
    write_results,
)
from bench.gateway_priority_upstream import SlotUpstream, answer
from semisched.gateway.config import GatewayConfigError
from semisched.gateway.configfile import config_from_dict

UPSTREAM = "http://127.0.0.1:9/v1"


def test_the_upstream_answers_min_of_max_tokens_and_its_cap_with_real_usage() -> None:
    body = {"model": "mock-1", "messages": [{"role": "user", "content": "two words"}]}
    short = answer({**body, "max_tokens": 1}, cap=40)
    long = answer({**body, "max_tokens": 256}, cap=40)
    assert (short["choices"][0]["finish_reason"], short["usage"]["completion_tokens"]) == (
        "length", 1)  # fmt: skip
    assert (long["choices"][0]["finish_reason"], long["usage"]["completion_tokens"]) == (
        "stop", 40)  # fmt: skip
    assert long["usage"] == {"prompt_tokens": 2, "completion_tokens": 40, "total_tokens": 42}
    assert len(long["choices"][0]["message"]["content"].split()) == 40


async def _call(app: SlotUpstream, method: str, path: str, body: bytes) -> tuple[int, bytes]:
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": body, "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    await app({"type": "http", "method": method, "path": path, "headers": []}, receive, send)
    return sent[0]["status"], sent[1]["body"]


@pytest.mark.wallclock
def test_the_upstream_holds_at_most_its_slots_in_service() -> None:
    app = SlotUpstream(slots=4, service_s=0.05)
    request = json.dumps({"model": "mock-1", "messages": [], "max_tokens": 3}).encode()

    async def run() -> list[tuple[int, bytes]]:
        return list(await asyncio.gather(
            *(_call(app, "POST", "/v1/chat/completions", request) for _ in range(9))))  # fmt: skip

    answers = asyncio.run(run())
    assert [status for status, _ in answers] == [200] * 9
    assert (app.received, app.peak, app.in_service) == (9, 4, 0)
    models = asyncio.run(_call(app, "GET", "/v1/models", b""))
    assert json.loads(models[1])["data"][0]["id"] == "mock-1"


@pytest.mark.parametrize("variant", VARIANTS[:2], ids=lambda v: v.name)
def test_the_gateway_file_caps_inflight_without_keys_on_one_endpoint(variant: Any) -> None:
    config = config_from_dict(tomllib.loads(gateway_toml(UPSTREAM, variant)))
    assert (config.max_inflight, config.auth, config.preset) == (4, False, "final_adrr_olc")
    assert [(e.name, e.base_url) for e in config.fleet.endpoints] == [("upstream", UPSTREAM)]
    assert config.scheduler_config().max_inflight == 4


def test_the_strict_tiers_file_declares_two_tiers() -> None:
    data = tomllib.loads(gateway_toml(UPSTREAM, VARIANTS[2]))
    assert data["class"] == [{"name": "interactive", "interactive": True, "tier": 0},
                             {"name": "batch", "tier": 1, "min_share": 0.1}]  # fmt: skip
    try:
        config = config_from_dict(data)
    except GatewayConfigError as exc:
        if "'class'" not in str(exc):
            raise
        pytest.skip("this gateway has no [[class]] tables yet (the bench skips the variant)")
    classes = {c.name: (c.tier, c.min_share) for c in config.scheduler_config().classes}
    assert classes == {"interactive": (0, None), "batch": (1, 0.1)}


def test_the_load_plan_marks_the_trickle_interactive_and_the_flood_batch() -> None:
    run = PriorityRun(flood=6, flood_rate=30, trickle=2, trickle_rate=2)
    marked = load_plan(run, 256, marks=True)
    assert [s.group for s in marked].count("low") == 6 and len(marked) == 8
    assert [s.at_s for s in marked] == sorted(s.at_s for s in marked)
    assert max(s.at_s for s in marked if s.group == "high") == 0.5
    for send in marked:
        klass = "interactive" if send.group == "high" else "batch"
        assert f"x-semisched-class: {klass}".encode() in send.data
        assert b'"max_tokens": 256' in send.data
    assert not any(b"x-semisched-class" in s.data for s in load_plan(run, 1, marks=False))
    assert {s.group for s in load_plan(run, 1, marks=True, flood=False)} == {"high"}


def test_bad_sizes_are_refused_naming_the_field() -> None:
    with pytest.raises(ValueError, match="flood_rate"):
        PriorityRun(flood_rate=0)
    with pytest.raises(ValueError, match="variants"):
        PriorityRun(variants=("nope",))
    with pytest.raises(SystemExit):
        main(["gateway-priority", "--runs", "0"])


def _records(high: list[float], low: list[float], failed: int = 0) -> list[Record]:
    return [*(Record("high", "200", s, 0.0) for s in high),
            *(Record("low", "200", s, 0.001) for s in low),
            *(Record("low", "429", 0.01, 0.0) for _ in range(failed))]  # fmt: skip


def test_a_summary_counts_slow_high_requests_and_errors_by_status() -> None:
    s = summarize(_records([0.2, 0.4, 1.5], [1.0, 3.0], failed=2))
    assert (s["high_n"], s["high_over_1s"], s["low_n"], s["low_ok"]) == (3, 1, 4, 2)
    assert (s["high_p50_ms"], s["high_max_ms"], s["low_p50_ms"]) == (400.0, 1500.0, 2000.0)
    assert s["high_p95_ms"] == pytest.approx(1390.0)
    assert s["errors"] == {"low": {"429": 2}}
    assert s["client_late_max_ms"] == pytest.approx(1.0)
    assert math.isnan(percentile([], 0.5))


def test_runs_combine_to_medians_and_summed_errors() -> None:
    runs = [summarize(_records([x], [1.0], failed=1)) for x in (0.1, 0.3, 0.2)]
    combined = combine(runs)
    assert combined["runs"] == 3 and combined["high_p95_ms"] == pytest.approx(200.0)
    assert combined["errors"] == {"low": {"429": 3}}


def _cell(variant: str, high_p95: float, low_p50: float) -> dict[str, Any]:
    return {"service_ms": 200.0, "max_tokens": 1, "process": "fresh", "variant": variant,
            "high_p95_ms": high_p95, "low_p50_ms": low_p50}  # fmt: skip


def test_the_targets_compare_with_the_trickle_alone_and_the_unmarked_cell() -> None:
    cells = [_cell("no marks", 800.0, 500.0), _cell("default + marks", 300.0, 590.0),
             _cell("strict tiers + marks", 900.0, 700.0)]  # fmt: skip
    unloaded = [{"service_ms": 200.0, "max_tokens": 1, "high_p95_ms": 200.0}]
    plain, marked, strict = with_targets(cells, unloaded)
    assert (plain["high_p95_vs_unloaded"], plain["meets_high_target"]) == (4.0, False)
    assert plain["meets_low_target"] is None and plain["meets_marked_target"] is None
    assert (marked["meets_high_target"], marked["meets_low_target"]) == (True, True)
    assert marked["low_p50_vs_no_marks"] == pytest.approx(1.18)
    assert (marked["high_p95_vs_no_marks"], marked["meets_marked_target"]) == (0.375, True)
    assert (strict["meets_low_target"], strict["meets_marked_target"]) == (False, False)


def test_the_results_and_the_docs_block_come_from_the_same_summaries(tmp_path: Path) -> None:
    run = PriorityRun(service_ms=(200.0,), max_tokens=(1,))
    results = Results(skipped={"strict tiers + marks": "the gateway refuses its file: x"},
                      upstream_peaks={"200 ms": 4})  # fmt: skip
    for process in ("fresh", "warm"):
        for variant, high in (("no marks", 0.8), ("default + marks", 0.4)):
            results.cells.append({"run": 1, "service_ms": 200.0, "max_tokens": 1,
                                  "variant": variant, "process": process, "seconds": 30.0,
                                  "records": _records([0.2, high], [0.5])})  # fmt: skip
    results.unloaded.append({"run": 1, "service_ms": 200.0, "max_tokens": 1,
                             "records": _records([0.2, 0.2], [])})  # fmt: skip
    meta = {"command": "python -m bench gateway-priority", "wall_s": 600.0,
            "machine": {"machine": "x86_64", "cpus": 2, "load_average": [1.0, 1.0, 1.0]},
            "load_average_after": [1.5, 1.0, 1.0]}  # fmt: skip
    written = write_results(tmp_path / RESULTS.parent, run, results, meta)
    document = json.loads((tmp_path / RESULTS).read_text())
    assert len(document["cells"]) == 4 and document["unloaded"][0]["high_p95_ms"] == 200.0
    text = written.read_text()
    assert "| 200 ms | 1 | fresh | default + marks | 300 / 390 / 400 | 0 of 2 |" in text
    assert "Skipped: `strict tiers + marks`" in text
    block = priority_block(tmp_path)
    assert "| fresh | 1 | 0.20 | 0.77 / 0.50 | 0.39 / 0.50 |" in block
    assert "Not run: `strict tiers + marks`" in block
    assert not re.search(r"\b[Ii]ssue [0-9]+", block + text)


@pytest.mark.slow
@pytest.mark.wallclock
@pytest.mark.timeout(300)
def test_the_quick_run_writes_every_cell(tmp_path: Path) -> None:
    assert main(["gateway-priority", "--quick", "--out", str(tmp_path)]) == 0
    document = json.loads((tmp_path / "results.json").read_text())
    cells = {(c["variant"], c["process"]) for c in document["cells"]}
    assert cells == {(v, p) for v in QUICK.variants for p in ("fresh", "warm")}
    for cell in document["cells"]:
        assert (cell["high_n"], cell["low_n"]) == (QUICK.trickle, QUICK.flood)
    assert document["unloaded"][0]["high_n"] == QUICK.trickle
    assert "| upstream | max_tokens | process | variant |" in (tmp_path / "results.md").read_text()
