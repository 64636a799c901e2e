"""``python -m bench cost``: what the Batch API tier saves, and whether it keeps deadlines.

One mixed job under a key's limits (the mock provider, a real server process at a large
time scale): 30% of the lines due within 10 minutes, 70% within 24 hours (``metadata.
deadline_s``, virtual seconds). ``semisched batch`` runs it three ways, each against a
fresh mock: ``--tier realtime``, ``--tier batch`` and ``--tier auto``, at one price
(``--price``, the Batch API at half price); then ``--tier auto`` once more, killed with
SIGKILL while its batches run, and rerun. Each row: the job's cost (the output records'
``cost_usd``), its makespan (the run's clock), the deadlines it met; for the killed run,
the lines billed twice and the lines lost, counted from the mock's own statistics (lines
it answered real-time plus lines its batches completed, against the lines answered).

"The cheapest plan that meets every deadline" sends the urgent lines real-time and the
rest through the Batch API: its cost is each line's usage at the price (the real-time
run's usage), the relaxed lines discounted. ``tables.md`` reports ``auto``'s cost as a
ratio to it, and ``cost.csv`` holds the rows.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from mockprovider.launch import running_server
from mockprovider.stats import MockStats
from semisched import Price
from semisched.runtime.apis import APIS, ApiUsage

__all__ = ["FULL", "QUICK", "CostConfig", "CostRow", "add_parser", "cost_bench", "run"]


@dataclass(frozen=True, slots=True)
class CostConfig:
    """One benchmark's sizes (virtual seconds, US dollars per million tokens)."""

    lines: int = 300
    urgent_share: float = 0.3
    urgent_s: float = 600.0
    relaxed_s: float = 86_400.0
    rpm: int = 60
    time_scale: float = 200.0
    turnaround_s: float = 3600.0
    turnaround_sigma: float = 0.3
    poll_s: float = 60.0
    price_input: float = 0.15
    price_output: float = 0.60
    seed: int = 0

    @property
    def price(self) -> str:
        return f"input={self.price_input},output={self.price_output},batch_discount=0.5"


FULL = CostConfig()
QUICK = replace(FULL, lines=40, time_scale=600.0, rpm=120, turnaround_s=1200.0, poll_s=30.0)


@dataclass(frozen=True, slots=True)
class CostRow:
    """One way to run the job."""

    strategy: str
    cost_usd: float
    makespan_s: float
    met: int
    missed: int
    realtime_lines: int
    batch_lines: int
    billed_twice: int | None = None
    lost: int | None = None


def _is_urgent(i: int, share: float) -> bool:
    return (i * share) % 1.0 < share - 1e-9 or share >= 1.0


def write_input(path: Path, cfg: CostConfig) -> list[bool]:
    """The job's input; which lines are urgent."""
    urgent = [_is_urgent(i, cfg.urgent_share) for i in range(cfg.lines)]
    with path.open("w") as handle:
        for i, hurry in enumerate(urgent):
            due = cfg.urgent_s if hurry else cfg.relaxed_s
            body = {"model": "mock-1", "max_tokens": 400,
                    "messages": [{"role": "user", "content": f"question {i} " * 30}],
                    "metadata": {"deadline_s": str(due), "mock_output_tokens": str(60 + i % 90)}}
            line = {"custom_id": f"line-{i}", "method": "POST", "url": "/v1/chat/completions"}
            handle.write(json.dumps({**line, "body": body}) + "\n")  # fmt: skip
    return urgent


def _mock_args(cfg: CostConfig) -> list[str]:
    return ["--time-scale", str(cfg.time_scale), "--rpm", str(cfg.rpm), "--seed", str(cfg.seed),
            "--batch-turnaround-s", str(cfg.turnaround_s),
            "--batch-turnaround-sigma", str(cfg.turnaround_sigma)]  # fmt: skip


def command(url: str, folder: Path, tier: str, cfg: CostConfig) -> list[str]:
    """The ``semisched batch`` command of one run."""
    return [sys.executable, "-m", "semisched", "batch", str(folder / "in.jsonl"),
            "-o", str(folder / "out.jsonl"), "--base-url", url, "--api-key-env", "COST_BENCH_KEY",
            "--time-scale", str(cfg.time_scale), "--rpm", str(cfg.rpm), "--tier", tier,
            "--price", cfg.price, "--batch-poll", str(cfg.poll_s), "--priors", "heuristic",
            "--progress-every", "0"]  # fmt: skip


def _env() -> dict[str, str]:
    return {**os.environ, "COST_BENCH_KEY": "sk-cost-bench"}


def _stats(url: str) -> MockStats:
    with urllib.request.urlopen(f"{url}/mock/stats") as response:
        return MockStats.from_json(json.load(response))


def _records(path: Path) -> list[dict[str, Any]]:
    return [json.loads(raw) for raw in path.read_text().splitlines() if raw.strip()]


def _summary(stderr: str) -> tuple[float, int, int]:
    """Makespan, deadlines met and missed, from the run's summary."""
    done = re.search(r"^(?:done|interrupted) in ([\d.]+) s", stderr, re.M)
    met = re.search(r"deadlines: (\d+) met, (\d+) missed", stderr)
    if done is None:
        raise RuntimeError(f"semisched batch printed no summary: {stderr[-2000:]}")
    return float(done.group(1)), int(met.group(1)) if met else 0, int(met.group(2)) if met else 0


def _row(strategy: str, folder: Path, stderr: str) -> CostRow:
    records = _records(folder / "out.jsonl")
    makespan, met, missed = _summary(stderr)
    return CostRow(
        strategy=strategy,
        cost_usd=sum(r.get("cost_usd") or 0.0 for r in records),
        makespan_s=makespan, met=met, missed=missed,
        realtime_lines=sum(r.get("tier") == "realtime" for r in records),
        batch_lines=sum(r.get("tier") == "batch" for r in records),
    )  # fmt: skip


def run_tier(tier: str, folder: Path, cfg: CostConfig) -> CostRow:
    """One run of the job with ``--tier tier`` against a fresh mock."""
    write_input(folder / "in.jsonl", cfg)
    with running_server(*_mock_args(cfg)) as url:
        done = subprocess.run(command(url, folder, tier, cfg), capture_output=True, text=True,
                              env=_env(), timeout=1200)  # fmt: skip
    if done.returncode not in (0, 1):
        raise RuntimeError(f"--tier {tier} exited {done.returncode}: {done.stderr[-2000:]}")
    return _row(tier, folder, done.stderr)


def _wait_for_batches(
    folder: Path, proc: subprocess.Popen[str], records: int, timeout_s: float
) -> None:
    """Until the journal names a batch and the output holds ``records`` records (the
    real-time ones), or the run ends."""
    journal, out = folder / "out.jsonl.batches.jsonl", folder / "out.jsonl"
    end = time.monotonic() + timeout_s
    while time.monotonic() < end and proc.poll() is None:
        if journal.exists() and '"event":"batch"' in journal.read_text() and (
            out.exists() and len(out.read_bytes().splitlines()) >= records
        ):
            return
        time.sleep(0.05)
    raise RuntimeError("the auto run made no batch before it ended or timed out")


def run_killed(folder: Path, cfg: CostConfig) -> CostRow:
    """``--tier auto`` killed with SIGKILL while its batches run, then rerun to the end."""
    write_input(folder / "in.jsonl", cfg)
    with running_server(*_mock_args(cfg)) as url:
        args = command(url, folder, "auto", cfg)
        started = time.monotonic()
        proc = subprocess.Popen(args, stderr=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                text=True, env=_env())  # fmt: skip
        urgent = sum(_is_urgent(i, cfg.urgent_share) for i in range(cfg.lines))
        _wait_for_batches(folder, proc, urgent, timeout_s=300)
        time.sleep(0.2 * cfg.turnaround_s / cfg.time_scale)  # mid-job: the batch runs
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
        killed_after = (time.monotonic() - started) * cfg.time_scale
        done = subprocess.run(args, capture_output=True, text=True, env=_env(), timeout=1200)
        stats = _stats(url)
    if done.returncode not in (0, 1):
        raise RuntimeError(f"the resumed run exited {done.returncode}: {done.stderr[-2000:]}")
    records = _records(folder / "out.jsonl")
    answered = {r["custom_id"] for r in records if r.get("error") is None}
    billed = stats.counters.completed + stats.batches.lines_completed
    row = _row("auto, killed and resumed", folder, done.stderr)
    recorded = {r["custom_id"] for r in records}
    return replace(row, makespan_s=killed_after + row.makespan_s, met=0, missed=0,
                   billed_twice=max(0, billed - len(answered)),
                   lost=cfg.lines - len(recorded))  # fmt: skip


def cheapest_plan_usd(folders: list[Path], cfg: CostConfig) -> float:
    """Urgent lines real-time, the rest through the Batch API: each line's usage (from the
    first of ``folders``' outputs that answered it) at the price."""
    price = Price(input=cfg.price_input, output=cfg.price_output)
    urgent = [_is_urgent(i, cfg.urgent_share) for i in range(cfg.lines)]
    usage: dict[str, ApiUsage] = {}
    for folder in folders:
        for record in _records(folder / "out.jsonl"):
            if record.get("error") is None and record["custom_id"] not in usage:
                usage[record["custom_id"]] = APIS["chat"].usage(record["response"]["body"])
    total = 0.0
    for custom_id, used in usage.items():
        hurry = urgent[int(custom_id.removeprefix("line-"))]
        total += price.cost(used.prompt_tokens, used.output_tokens, used.cached_tokens,
                            batch=not hurry)  # fmt: skip
    return total


def _usd(value: float) -> str:
    return f"${value:,.4f}"


def _table(rows: list[CostRow], plan_usd: float, cfg: CostConfig, argv: str) -> list[str]:
    urgent = sum(_is_urgent(i, cfg.urgent_share) for i in range(cfg.lines))
    lines = [
        "# The Batch API tier: cost, makespan and deadlines",
        "",
        f"Generated by `{argv}` (do not edit). {cfg.lines} chat lines under a key's limit of "
        f"{cfg.rpm} requests a minute (the mock provider at {cfg.time_scale:g}x time); "
        f"{urgent} are due {cfg.urgent_s:g} s after the job's start, the others "
        f"{cfg.relaxed_s:g} s after. The mock's batches take {cfg.turnaround_s:g} s (median, "
        f"lognormal spread {cfg.turnaround_sigma:g}); the price is ${cfg.price_input} input "
        f"and ${cfg.price_output} output per million tokens, the Batch API at half price. "
        "Times are the mock's virtual seconds.",
        "",
        "| strategy | cost | vs cheapest plan | makespan (s) | deadlines met | missed | "
        "real-time lines | batch lines | billed twice | lost |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        extra = "-" if r.billed_twice is None else str(r.billed_twice)
        lost = "-" if r.lost is None else str(r.lost)
        met = "-" if r.billed_twice is not None else str(r.met)
        missed = "-" if r.billed_twice is not None else str(r.missed)
        ratio = r.cost_usd / plan_usd if plan_usd else float("nan")
        lines.append(f"| {r.strategy} | {_usd(r.cost_usd)} | {ratio:.3f} | {r.makespan_s:.0f} | "
                     f"{met} | {missed} | {r.realtime_lines} | {r.batch_lines} | {extra} | "
                     f"{lost} |")  # fmt: skip
    auto = next(r for r in rows if r.strategy == "auto")
    lines += [
        "",
        f"The cheapest plan that meets every deadline (urgent lines real-time, the rest "
        f"through the Batch API) costs {_usd(plan_usd)}; `auto` costs "
        f"{auto.cost_usd / plan_usd if plan_usd else float('nan'):.3f} x that and met "
        f"{auto.met} of {auto.met + auto.missed} deadlines. The killed run's lines billed "
        "twice and lost are counted from the mock's statistics (lines it answered "
        "real-time plus lines its batches completed); its resumed run's output holds every "
        "line once; its makespan runs from the first start to the resumed run's end.",
    ]
    return lines


def cost_bench(out: Path, cfg: CostConfig = FULL, *, argv: str = "python -m bench cost") -> Path:
    """Run the job every way; write ``cost.csv`` and ``tables.md`` under ``out``."""
    rows: list[CostRow] = []
    with tempfile.TemporaryDirectory(prefix="bench-cost-") as tmp:
        folders = {name: Path(tmp) / name for name in ("realtime", "batch", "auto", "killed")}
        for folder in folders.values():
            folder.mkdir()
        for tier in ("realtime", "batch", "auto"):
            rows.append(run_tier(tier, folders[tier], cfg))
        rows.append(run_killed(folders["killed"], cfg))
        plan_usd = cheapest_plan_usd([folders[t] for t in ("realtime", "auto", "batch")], cfg)
    out.mkdir(parents=True, exist_ok=True)
    with (out / "cost.csv").open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["strategy", "cost_usd", "vs_cheapest_plan", "makespan_s", "met",
                         "missed", "realtime_lines", "batch_lines", "billed_twice", "lost"])
        for r in rows:
            writer.writerow([r.strategy, f"{r.cost_usd:.6f}", f"{r.cost_usd / plan_usd:.4f}",
                             f"{r.makespan_s:.1f}", r.met, r.missed, r.realtime_lines,
                             r.batch_lines, "" if r.billed_twice is None else r.billed_twice,
                             "" if r.lost is None else r.lost])  # fmt: skip
        writer.writerow(["cheapest plan", f"{plan_usd:.6f}", "1.0000", "", "", "", "", "", "",
                         ""])  # fmt: skip
    (out / "tables.md").write_text("\n".join(_table(rows, plan_usd, cfg, argv)) + "\n")
    return out


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """The ``cost`` subcommand and its flags."""
    co = sub.add_parser("cost", help="the Batch API tier: realtime, batch and auto compared on "
                        "cost, makespan and deadlines; a killed auto run resumed")  # fmt: skip
    co.add_argument("--out", type=Path, default=Path("docs/results/cost"), help="output folder")
    co.add_argument("--lines", type=int, help=f"lines of the job ({FULL.lines})")
    co.add_argument("--time-scale", type=float,
                    help=f"the mock's time compression ({FULL.time_scale:g})")  # fmt: skip
    co.add_argument("--quick", action="store_true", help="a small job at a larger time scale")


def run(args: argparse.Namespace) -> Path:
    """Run the benchmark the flags ask for; print its table; the folder written."""
    cfg = QUICK if args.quick else FULL
    if args.lines is not None:
        cfg = replace(cfg, lines=args.lines)
    if args.time_scale is not None:
        cfg = replace(cfg, time_scale=args.time_scale)
    argv = "python -m bench cost" + "".join(f" {a}" for a in sys.argv[2:])
    written = cost_bench(args.out, cfg, argv=argv if sys.argv[1:2] == ["cost"] else
                         "python -m bench cost")  # fmt: skip
    print((written / "tables.md").read_text())
    return written
