"""``python -m bench batch``'s parts that need no server: workloads, contenders, floor, table."""

from __future__ import annotations

import csv
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

import bench.batch_bench as bb
import bench.batch_workloads as bw
from bench.__main__ import main
from semisched.core import PRESETS, makespan_floor
from semisched.core.buckets import Bucket, bucket_for_tokens
from semisched.runtime.estimate import content_kind

CHAT = "/v1/chat/completions"


def chat_line(custom_id: str, content: str, **caps: int) -> dict[str, Any]:
    body = {"model": "mock-1", "messages": [{"role": "user", "content": content}], **caps}
    return {"custom_id": custom_id, "method": "POST", "url": CHAT, "body": body}


def hinted(line: dict[str, Any]) -> int:
    return int(line["body"]["metadata"]["mock_output_tokens"])


# -- the mixed workload -------------------------------------------------------------------


def test_mixed_workload_has_the_issues_mix_caps_hints_and_prompts() -> None:
    lines = bw.mixed_workload(400, seed=0)
    assert len({line["custom_id"] for line in lines}) == 400
    buckets = Counter(bucket_for_tokens(hinted(line)) for line in lines)
    assert buckets == {Bucket.SHORT: 200, Bucket.MEDIUM: 100, Bucket.LONG: 60, Bucket.XLONG: 40}
    caps = {b.name: b.high for b in bw.MIXED_BUCKETS}
    low_words, high_words = bw.PROMPT_WORDS
    for line in lines:
        body = line["body"]
        assert line["url"] == CHAT
        # max_tokens is the bucket's upper bound, and the hinted answer fits under it
        assert body["max_tokens"] == caps[bucket_for_tokens(hinted(line)).value]
        assert 8 <= hinted(line) <= body["max_tokens"] <= 2000
        text = body["messages"][0]["content"]
        assert low_words <= len(text.split()) <= high_words
        assert content_kind(text) == "prose"
    # shuffled: the buckets are not in blocks
    assert {bucket_for_tokens(hinted(line)) for line in lines[:40]} == set(buckets)


@pytest.mark.parametrize(
    ("requests", "counts"),
    [
        # 3.5, 1.75, 1.05, 0.7: floors 3, 1, 1, 0; the two largest remainders get one more
        (7, (3, 2, 1, 1)),
        (1, (1, 0, 0, 0)),
        (20, (10, 5, 3, 2)),
    ],
)
def test_mixed_workload_apportions_the_shares_exactly(
    requests: int, counts: tuple[int, ...]
) -> None:
    lines = bw.mixed_workload(requests, seed=3)
    found = Counter(line["body"]["max_tokens"] for line in lines)
    assert tuple(found[b.high] for b in bw.MIXED_BUCKETS) == counts


def test_mixed_workload_is_deterministic_in_its_seed() -> None:
    assert bw.mixed_workload(50, seed=5) == bw.mixed_workload(50, seed=5)
    assert bw.mixed_workload(50, seed=5) != bw.mixed_workload(50, seed=6)
    with pytest.raises(ValueError, match="requests"):
        bw.mixed_workload(0)


def test_at_the_issues_limits_both_rpm_and_tpm_bind() -> None:
    floor = bb.floor_for(bw.mixed_workload(400, seed=0), rpm=100, tpm=40_000)
    assert floor.requests_s == pytest.approx(240.0)
    # issue 11: "Its TPM floor ... is about 348 virtual s"
    assert floor.tokens_s == pytest.approx(348.0, rel=0.03)
    assert floor.binding == "tokens"
    assert floor.requests_s > 0.6 * floor.tokens_s  # the request limit is not idle
    mean_charge = floor.charged_tokens / floor.requests
    assert 1.0 < mean_charge / (40_000 / 100) < 1.6  # TPM/RPM near the mean charge


# -- the floor ----------------------------------------------------------------------------


def test_floor_counts_what_semisched_and_the_mock_charge() -> None:
    lines = [
        chat_line("a", "abcd" * 10, max_tokens=50),  # 40 bytes: 10 tokens + 50
        chat_line("b", "é" * 4 + "x", max_completion_tokens=100),  # 9 bytes: 3 tokens + 100
        chat_line("c", "hi"),  # 1 token + the heuristic's p90 (550), no cap
    ]
    requests = bb.core_requests(lines)
    assert [r.input_tokens for r in requests] == [10, 3, 1]
    assert [r.max_output_tokens for r in requests] == [50, 100, None]
    assert [(r.prior.p50, r.prior.p90) for r in requests] == [(50, 50), (100, 100), (250, 550)]
    floor = bb.floor_for(lines, rpm=2, tpm=714)
    assert floor.charged_tokens == 60 + 103 + 551
    assert floor.requests_s == pytest.approx(90.0)  # 3 / 2 per minute
    assert floor.tokens_s == pytest.approx(60.0)
    assert floor.binding == "requests" and floor.floor_s == pytest.approx(90.0)
    assert floor == makespan_floor(requests, rpm=2, tpm=714, max_inflight=bb.CONCURRENCY)


# -- contenders ---------------------------------------------------------------------------


def test_contenders_are_the_recipe_then_one_row_per_policy_name() -> None:
    mixed = bb.WORKLOADS["mixed"]
    rows = bb.contenders(mixed, learned=True)  # mixed has no learned rows
    assert [(c.name, c.recipe, c.policy) for c in rows] == [
        ("fixed-rate (recipe)", True, None),
        ("semisched batch", False, None),
        ("semisched batch --policy batch_makespan", False, "batch_makespan"),
        ("semisched batch --policy adaptive_drr", False, "adaptive_drr"),
    ]
    assert all(c.priors == "heuristic" for c in rows)
    # any preset by name: a new one needs no code here
    extra = bb.contenders(mixed, policies=["default", *sorted(PRESETS)])
    assert [c.policy for c in extra[2:]] == sorted(set(PRESETS) - {bb.DEFAULT_POLICY})
    # the default preset named again adds no row
    again = bb.contenders(
        mixed, policies=["default", bb.DEFAULT_POLICY, "batch_makespan", "adaptive_drr"]
    )
    assert [c.name for c in again] == [c.name for c in rows]
    with pytest.raises(ValueError, match="nope"):
        bb.contenders(mixed, policies=["default", "nope"])
    sharegpt = [c.name for c in bb.contenders(bb.WORKLOADS["sharegpt"], learned=True)]
    assert sharegpt == [
        "fixed-rate (recipe)",
        "fixed-rate, cap 32",
        "semisched batch",
        "semisched batch --policy adaptive_drr",
        "semisched batch, learned",
        "semisched batch, learned, LPT",
    ]
    assert bb.DEFAULT_POLICY in PRESETS


# -- the table, end to end without servers -----------------------------------------------


def test_benchmark_writes_the_floor_column_and_its_bounds(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    runs: list[tuple[str, tuple[int, int], str]] = []

    def fake_one(
        scenario: str, limits: tuple[int, int], repeat: int, name: str, run: Any, scale: float
    ) -> dict[str, Any]:
        runs.append((scenario, limits, name))
        make = {"fixed-rate (recipe)": 500.0, "semisched batch": 400.0}.get(name, 380.0)
        return {"scenario": scenario, "contender": name, "repeat": repeat,
                "makespan_s": make + repeat * 10, "succeeded": 20, "retries": 1 - repeat,
                "p50_s": 3.0, "p95_s": 9.0, "provider_429s": 2 * repeat,
                "provider_requests": 21, "first_second_requests": 4 + repeat,
                "wall_s": 2.0}  # fmt: skip

    monkeypatch.setattr(bb, "_one", fake_one)
    table = bb.batch_benchmark(tmp_path, workload="mixed", requests=20, repeats=2)
    lines = bw.mixed_workload(20)
    full = bb.floor_for(lines, rpm=100, tpm=40_000)
    two_thirds = bb.floor_for(lines, rpm=67, tpm=26_667)
    assert {limits for _, limits, _ in runs} == {(100, 40_000), (67, 26_667)}
    assert len(runs) == 2 * 2 * 4  # scenarios x repeats x contenders
    with (tmp_path / "runs.csv").open() as handle:
        written = list(csv.DictReader(handle))
    assert {float(r["floor_s"]) for r in written} == {full.floor_s, two_thirds.floor_s}
    assert (tmp_path / "table.md").read_text() == table
    # every bound in the caption, at the provider's limits of each scenario
    assert (
        f"provider 100 RPM / 40000 TPM, 32 in flight): requests {full.requests_s:.0f} s, "
        f"tokens {full.tokens_s:.0f} s, serving {full.serving_s:.0f} s -> "
        f"**{full.floor_s:.0f} s** ({full.binding})"
    ) in table
    assert "provider 67 RPM / 26667 TPM" in table
    make = 405.0  # mean of 400 and 410
    assert (
        f"| budget = provider limit | semisched batch | 405 | {make / 505:.2f} | "
        f"{make / full.floor_s:.2f} | 1.0 | 0.5 | 20 | 3.0 | 9.0 | 21 | 4 | 2.0 |"
    ) in table
    assert "| provider at 2/3 of the budget | fixed-rate (recipe) | 505 | 1.00 | " in table
    assert f"without `--policy` runs the default preset (`{bb.DEFAULT_POLICY}`)" in table
    assert "10% xlong (1025–2000 tokens, max_tokens 2000)" in table


def test_cli_passes_the_workload_and_refuses_an_unknown_policy_before_running(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    calls: list[dict[str, Any]] = []

    def fake(out: Path, **kwargs: Any) -> str:
        calls.append(kwargs)
        return "table"

    monkeypatch.setattr(bb, "batch_benchmark", fake)
    assert main(["batch", "--workload", "mixed", "--out", str(tmp_path), "--repeats", "1",
                 "--policies", "default, batch_makespan"]) == 0  # fmt: skip
    assert calls == [
        {
            "workload": "mixed",
            "requests": None,  # the workload's defaults
            "rpm": None,
            "tpm": None,
            "time_scale": None,
            "repeats": 1,
            "policies": ["default", "batch_makespan"],
            "seed": 0,
        }
    ]
    with pytest.raises(SystemExit):
        main(["batch", "--workload", "mixed", "--policies", "default,nope"])
    assert "nope" in capsys.readouterr().err
    assert len(calls) == 1
