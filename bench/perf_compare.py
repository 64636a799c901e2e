"""``python -m bench perf``: this tree against a baseline, alternating, one table of ratios.

Timings on a shared machine drift by tens of percent from minute to minute, so a
figure alone says little; a ratio against a baseline measured in the same run,
the two sides taking turns, says what changed. Each measure runs in a fresh
process whose working directory and ``PYTHONPATH`` are the tree's root, so that
tree's own ``semisched`` and ``bench`` are imported; the baseline is a folder
(a worktree) or a commit, checked out for the run into a temporary worktree.

Measures (each the median over the rounds, per side):

* one scheduling decision at 10k queued, one endpoint and one tenant: dispatch
  and admission p50 and p99 (``bench.perf._decision_cost_at``);
* the simulator's requests per wall second and per CPU second of its process
  (``bench.perf.sim_speed``; CPU time is what a busy machine disturbs least);
* one routing pick at 16 endpoints and 10k queued: p99 per policy and the worst
  (``bench.perf.routing_cost``; ``-`` where the baseline has no fleets).

A ratio is current over baseline; ``better`` says which way is good. With
``instructions``, each side's CPU instructions per decision and per simulated
request are counted once, by valgrind's cachegrind (`bench.perf_count`): a count
the machine's load does not move. After the rounds, ``sim_profile.md`` says where
this tree's simulator spends its time (`bench.perf_profile`).
"""

from __future__ import annotations

import csv
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from bench.perf_count import COUNTS, count_instructions

__all__ = ["MEASURES", "perf_compare", "ratio_rows"]

#: What each measure's probe prints: a JSON object of named figures (``null``: the tree
#: cannot measure it). Run with the tree's root first on ``sys.path``.
_PROBES: dict[str, str] = {
    "decision": (
        "import json; from bench.perf import _decision_cost_at as f; "
        "print(json.dumps(f(10000, {samples}, 0)))"
    ),
    "sim": (  # wall and CPU seconds of the simulation alone (the requests are built before)
        "import json, time, bench.perf as p\n"
        "run, cpu = p.simulate, []\n"
        "def timed(*a, **k):\n"
        "    t = time.process_time(); out = run(*a, **k); cpu.append(time.process_time() - t)\n"
        "    return out\n"
        "p.simulate = timed\n"
        "r = p.sim_speed(requests={requests})\n"
        "r['requests_per_cpu_s'] = r['requests'] / cpu[0]\n"
        "print(json.dumps(r))"
    ),
    "routing": (
        "import json, bench.perf as p\n"
        "f = getattr(p, 'routing_cost', None)\n"
        "rows = [] if f is None else f(endpoints=16, queued=10000, samples={samples})\n"
        "print(json.dumps({{'pick_p99_us.' + r['policy']: r['pick_p99_us'] for r in rows}}))"
    ),
}

#: ``(probe, figure, label, better)``: the rows of the table, in order.
MEASURES: tuple[tuple[str, str, str, str], ...] = (
    ("decision", "dispatch_p50_us", "decision at 10k queued: dispatch p50 (µs)", "lower"),
    ("decision", "dispatch_p99_us", "decision at 10k queued: dispatch p99 (µs)", "lower"),
    ("decision", "admission_p50_us", "decision at 10k queued: admission p50 (µs)", "lower"),
    ("decision", "admission_p99_us", "decision at 10k queued: admission p99 (µs)", "lower"),
    ("sim", "requests_per_s", "simulator: requests per wall second", "higher"),
    ("sim", "requests_per_cpu_s", "simulator: requests per CPU second", "higher"),
)


def _run_probe(tree: Path, probe: str, **params: int) -> dict[str, float]:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    code = _PROBES[probe].format(**params)
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=tree, env=env, capture_output=True, text=True
    )
    if done.returncode != 0:
        raise RuntimeError(f"{probe} in {tree} failed:\n{done.stderr[-2000:]}")
    last = done.stdout.strip().splitlines()[-1]
    return {k: float(v) for k, v in json.loads(last).items()}


@contextmanager
def baseline_tree(baseline: str, repo: Path) -> Iterator[Path]:
    """``baseline`` as a folder: itself when it is one, else a temporary worktree of
    ``repo`` at that commit (removed afterwards).

    Raises:
        ValueError: Neither a folder nor a commit of ``repo``.
    """
    path = Path(baseline)
    if path.is_dir():
        yield path.resolve()
        return
    found = subprocess.run(
        ["git", "-C", str(repo), "rev-parse", "--verify", "--quiet", f"{baseline}^{{commit}}"],
        capture_output=True,
        text=True,
    )
    if found.returncode != 0:
        raise ValueError(f"baseline={baseline!r} must be a folder or a commit of {repo}")
    with tempfile.TemporaryDirectory(prefix="semisched-baseline-") as tmp:
        tree = Path(tmp) / "tree"
        subprocess.run(
            ["git", "-C", str(repo), "worktree", "add", "--detach", str(tree), baseline],
            check=True,
            capture_output=True,
        )
        try:
            yield tree
        finally:
            subprocess.run(
                ["git", "-C", str(repo), "worktree", "remove", "--force", str(tree)],
                capture_output=True,
            )


def _commit(tree: Path) -> str:
    done = subprocess.run(
        ["git", "-C", str(tree), "rev-parse", "--short", "HEAD"], capture_output=True, text=True
    )
    return done.stdout.strip() or "?"


def ratio_rows(
    samples: dict[str, list[dict[str, float]]],
) -> list[dict[str, Any]]:
    """The table from each side's figures per round (``samples["baseline"]``,
    ``samples["current"]``: one merged dict per round). A figure either side lacks
    is ``None``, and so is its ratio."""
    rows: list[dict[str, Any]] = []
    labels = {fig: (label, better) for _, fig, label, better in MEASURES}
    labels.update({fig: (label, "lower") for fig, label, _ in COUNTS})
    extra = sorted({k for r in samples["current"] for k in r if k.startswith("pick_p99_us.")})
    for fig in [*labels, *extra]:
        if fig in labels:
            label, better = labels[fig]
        else:
            label = f"routing pick p99 at 16 endpoints, {fig.split('.', 1)[1]} (µs)"
            better = "lower"
        side = {}
        for name in ("baseline", "current"):
            values = [r[fig] for r in samples[name] if fig in r]
            side[name] = statistics.median(values) if values else None
        base, cur = side["baseline"], side["current"]
        ratio = cur / base if base and cur is not None else None
        rows.append(
            {"measure": label, "better": better, "baseline": base, "current": cur, "ratio": ratio}
        )
    return rows


def perf_compare(
    out: Path,
    baseline: str,
    *,
    current: Path | None = None,
    rounds: int = 2,
    samples: int = 3000,
    requests: int = 20_000,
    progress: bool = True,
    profile: bool = True,
    instructions: bool = False,
) -> list[dict[str, Any]]:
    """Measure ``current`` (default: this tree) against ``baseline`` in ``rounds`` rounds,
    the sides taking turns (which one goes first alternates too); write
    ``out/perf.csv`` and ``out/perf.json`` (commits, machine, rounds) and, with
    ``profile``, ``out/sim_profile.md`` (`bench.perf_profile`); return the rows. With
    ``instructions``, each side's instruction counts join the table (`bench.perf_count`).

    Raises:
        ValueError: ``rounds`` < 1, or a baseline that is neither folder nor commit.
        RuntimeError: ``instructions`` without valgrind on ``PATH``.
    """
    if rounds < 1:
        raise ValueError(f"rounds={rounds!r} must be >= 1")
    if instructions and shutil.which("valgrind") is None:
        raise RuntimeError("instructions=True needs valgrind on PATH (apt install valgrind)")
    here = (current or Path(__file__).resolve().parent.parent).resolve()
    got: dict[str, list[dict[str, float]]] = {"baseline": [], "current": []}
    with baseline_tree(baseline, here) as base:
        trees = {"baseline": base, "current": here}
        for k in range(rounds):
            order = ("baseline", "current") if k % 2 == 0 else ("current", "baseline")
            for side in order:
                figures: dict[str, float] = {}
                for probe in _PROBES:
                    if progress:
                        print(f"perf: round {k + 1}/{rounds}, {side}, {probe}", flush=True)
                    figures.update(
                        _run_probe(trees[side], probe, samples=samples, requests=requests)
                    )
                got[side].append(figures)
        if instructions:  # once per side: a count does not drift between rounds
            for side, tree in trees.items():
                if progress:
                    print(f"perf: counting instructions, {side}", flush=True)
                got[side][0].update(count_instructions(tree))
        commits = {side: _commit(tree) for side, tree in trees.items()}
    rows = ratio_rows(got)
    out.mkdir(parents=True, exist_ok=True)
    with (out / "perf.csv").open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        for row in rows:
            writer.writerow({k: _cell(v) for k, v in row.items()})
    meta = {
        "commits": commits,
        "rounds": rounds,
        "instructions": instructions,
        "samples": samples,
        "requests": requests,
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
        "load_average": os.getloadavg(),
    }
    (out / "perf.json").write_text(json.dumps(meta, indent=2) + "\n")
    if profile:
        from bench.perf_profile import write_sim_profile

        if progress:
            print("perf: profiling the simulator (this tree)", flush=True)
        write_sim_profile(out, requests)
    return rows


def _cell(value: object) -> object:
    if value is None:
        return "-"
    if isinstance(value, float):  # large figures whole (an instruction count to the unit)
        return f"{value:.0f}" if abs(value) >= 1_000 else f"{value:.4g}"
    return value


def _shown(value: object) -> object:
    """A cell as the table shows it: large figures (instructions, requests per second)
    whole, with thousands separators; the rest as in the CSV."""
    if isinstance(value, float) and abs(value) >= 1_000:
        return f"{value:,.0f}"
    return _cell(value)


def table(rows: list[dict[str, Any]]) -> str:
    """The rows as a Markdown table (the command's printout and the README's block)."""
    lines = [
        "| measure | better | baseline | current | current / baseline |",
        "|---|---|---:|---:|---:|",
    ]
    for r in rows:
        cells = [_shown(r[k]) for k in ("baseline", "current", "ratio")]
        lines.append(f"| {r['measure']} | {r['better']} | " + " | ".join(map(str, cells)) + " |")
    return "\n".join(lines)
