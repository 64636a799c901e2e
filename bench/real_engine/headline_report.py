"""The headline on the real engine: its run over the matrix and its files.

`headline_main` runs `.headline`'s matrix (strategies x loads x seeds, engine
and sim) and writes ``headline.csv`` (every row), ``headline.md`` (medians over seeds,
engine beside sim, each load's intended and achieved load (`.headline`'s
definitions), and per load the ratio of ``direct_naive``'s short P95 to
``final_adrr_olc``'s) and ``headline_run.json`` (wall time, load average before and after,
cores, the engine's commit, the mock profile that set its arrivals and ran its simulated
side, and where that profile came from: `.profiles`). The csv is rewritten after
each engine run, so an interrupted run keeps what it measured.

`headline_markdown` and `ratio_rows` are the report alone (no engine), so a
test checks them.
"""

from __future__ import annotations

import csv
import json
import math
import os
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from bench.real_engine.compare import write_rows
from bench.real_engine.headline import INFORMATION, STRATEGIES, median
from bench.workloads import CONGESTION
from mockprovider.physics_params import PhysicsParams

__all__ = [
    "headline_main",
    "headline_markdown",
    "median_rows",
    "ratio_rows",
    "rewrite_markdown",
    "summary_markdown",
    "write_rows",
]

_COLUMNS = (
    ("short P95 s", "short_p95_ms", 1e-3, 2),
    ("global P95 s", "global_p95_ms", 1e-3, 2),
    ("completion", "completion_rate", 1.0, 3),
    ("satisfaction", "satisfaction", 1.0, 3),
    ("goodput /s", "goodput_rps", 1.0, 3),
    ("achieved load", "achieved_load", 1.0, 2),
)
#: The table's caption on load (`.headline`'s definitions).
LOAD_CAPTION = (
    "Intended load: the congestion level, the offered work (each request's seconds of a "
    "full batch in the profile) per second of arrivals over the engine's capacity; achieved "
    "load: the same offered work over the time the run took (first arrival to last answer), "
    "over the capacity."
)
_BASE, _FULL = "direct_naive", "final_adrr_olc"


def median_rows(
    rows: Sequence[Mapping[str, object]],
) -> dict[tuple[str, str, str], dict[str, float]]:
    """Per (load, strategy, mode): each metric's median over the seeds."""
    groups: dict[tuple[str, str, str], list[Mapping[str, object]]] = {}
    for row in rows:
        key = (str(row["load"]), str(row["strategy"]), str(row["mode"]))
        groups.setdefault(key, []).append(row)
    return {
        key: {metric: median([_number(r.get(metric)) for r in group])
              for _, metric, _, _ in (*_COLUMNS, ("", "intended_load", 1.0, 2))}
        for key, group in groups.items()
    }  # fmt: skip


def ratio_rows(rows: Sequence[Mapping[str, object]]) -> list[dict[str, object]]:
    """Per load: ``direct_naive``'s median short P95 over ``final_adrr_olc``'s, engine and sim."""
    medians = median_rows(rows)
    out = []
    for load in dict.fromkeys(str(r["load"]) for r in rows):
        row: dict[str, object] = {"load": load}
        for mode in ("engine", "sim"):
            base = medians.get((load, _BASE, mode), {}).get("short_p95_ms", math.nan)
            full = medians.get((load, _FULL, mode), {}).get("short_p95_ms", math.nan)
            row[mode] = base / full if full > 0 else math.nan
        out.append(row)
    return out


def _number(value: object) -> float:
    """A csv or row value as a float (``nan`` where there is none: a row from before a
    column existed)."""
    try:
        return float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return math.nan


def _cell(engine: float, sim: float, scale: float, digits: int) -> str:
    return f"{engine * scale:.{digits}f} / {sim * scale:.{digits}f}"


def headline_markdown(rows: Sequence[Mapping[str, object]]) -> str:
    """The report (module docstring): one table of medians, one of ratios."""
    medians = median_rows(rows)
    seeds = sorted({int(str(r["seed"])) for r in rows})
    head = " | ".join(f"{name}: engine / sim" for name, *_ in _COLUMNS[:-1])
    head += f" | intended load | {_COLUMNS[-1][0]}: engine / sim"
    rates = {str(r["load"]): f"{float(r['rate_per_s']):.2f}/s, {r['requests']} requests"  # type: ignore[arg-type]
             for r in rows if "rate_per_s" in r}  # fmt: skip
    offered = "; ".join(f"{load}: {rate}" for load, rate in rates.items())
    arrivals = f" Arrivals per run: {offered}." if offered else ""
    lines = [
        f"Medians over seeds {seeds}; each cell is engine / sim (the simulator with the "
        f"profile that set the arrivals).{arrivals} {LOAD_CAPTION}",
        "",
        f"| load | strategy | {head} |",
        "|---|---|" + "---|" * (len(_COLUMNS) + 1),
    ]
    loads = list(dict.fromkeys(str(r["load"]) for r in rows))
    for load in loads:
        for strategy in STRATEGIES:
            engine = medians.get((load, strategy, "engine"))
            sim = medians.get((load, strategy, "sim"))
            if engine is None or sim is None:
                continue
            cells = [_cell(engine[m], sim[m], s, d) for _, m, s, d in _COLUMNS]
            cells.insert(-1, f"{engine['intended_load']:.2f}")
            lines.append(f"| {load} | {strategy} | " + " | ".join(cells) + " |")
    lines += ["", f"Short P95, {_BASE} / {_FULL} (medians):", "",
              "| load | engine | sim |", "|---|---|---|"]  # fmt: skip
    for row in ratio_rows(rows):
        lines.append(f"| {row['load']} | {row['engine']:.2f} | {row['sim']:.2f} |")
    return "\n".join(lines) + "\n"


def summary_markdown(rows: Sequence[Mapping[str, object]]) -> str:
    """The README's lines: per load, ``direct_naive``'s short P95 over ``final_adrr_olc``'s
    on the engine and in the simulator, and the full stack's completion and satisfaction
    on the engine (medians over the seeds)."""
    medians = median_rows(rows)
    seeds = len({str(r["seed"]) for r in rows})
    lines = [f"| load | short P95 {_BASE} / {_FULL}: engine | simulated | {_FULL} on the "
             "engine: completion | satisfaction |", "|---|---:|---:|---:|---:|"]  # fmt: skip
    for row in ratio_rows(rows):
        full = medians.get((str(row["load"]), _FULL, "engine"), {})
        lines.append(f"| {row['load']} | {row['engine']:.1f}x | {row['sim']:.1f}x | "
                     f"{full.get('completion_rate', math.nan):.3f} | "
                     f"{full.get('satisfaction', math.nan):.3f} |")  # fmt: skip
    requests = sorted({str(r.get("requests", "?")) for r in rows})
    tail = f"Medians over {seeds} seeds, {', '.join(requests)} requests a run."
    return "\n".join(lines) + "\n\n" + tail


def rewrite_markdown(out: Path) -> Path:
    """``out/headline.md`` from the rows in ``out/headline.csv`` (after an interrupted run,
    or a change of the report alone).

    Raises:
        FileNotFoundError: No ``headline.csv`` in ``out``.
    """
    with open(out / "headline.csv", newline="", encoding="utf-8") as handle:
        rows = list(csv.DictReader(handle))
    path = out / "headline.md"
    path.write_text(headline_markdown(rows), encoding="utf-8")
    return path


def _load_average() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def headline_main(
    out: Path,
    *,
    seeds: Sequence[int],
    loads: Sequence[str],
    requests: int,
    parallel: int,
    profile: str = "machine",
) -> Path:
    """Run the matrix on one llama-server and the simulator, its load sized by ``profile``
    (`bench.real_engine.profiles.engine_profile`); write the files (module
    docstring). Returns ``headline.md``."""
    from dataclasses import asdict

    from bench.real_engine.client import Job, run_jobs
    from bench.real_engine.launcher import LlamaServer, ServerOptions
    from bench.real_engine.profiles import engine_profile
    from bench.real_engine.setup import EnginePaths, engine_commit

    chosen = engine_profile(out, profile, parallel)
    print(f"load sized by {chosen.source}", flush=True)
    paths = EnginePaths.default()
    rows: list[dict[str, object]] = []
    runs: list[dict[str, object]] = []
    before, started = _load_average(), time.perf_counter()
    options = ServerOptions(binary=paths.server, model=paths.gguf, parallel=parallel)
    with LlamaServer(options) as srv:
        run_jobs(srv.base_url, [Job(arrival=0.0, prompt=(5, 6, 7), max_tokens=8)])  # warm-up
        for load in loads:
            for seed in seeds:
                _one_cell(srv.base_url, chosen.physics, load, seed, requests, parallel,
                          rows, runs, out)  # fmt: skip
    run = {"wall_s": round(time.perf_counter() - started, 1), "load_average_before": before,
           "load_average_after": _load_average(), "cores": os.cpu_count(),
           "engine_commit": engine_commit(paths), "parallel": parallel,
           "information": INFORMATION, "profile": asdict(chosen.physics),
           "profile_source": chosen.source, "runs": runs}  # fmt: skip
    (out / "headline_run.json").write_text(json.dumps(run, indent=2) + "\n", encoding="utf-8")
    (out / "headline.md").write_text(headline_markdown(rows), encoding="utf-8")
    print(headline_markdown(rows))
    return out / "headline.md"


def _one_cell(
    url: str, physics: PhysicsParams, load: str, seed: int, requests: int, parallel: int,
    rows: list[dict[str, object]], runs: list[dict[str, object]], out: Path,
) -> None:  # fmt: skip
    """Every strategy on one load and seed, engine and sim; rows and runs appended, the
    csv rewritten after each engine run."""
    import anyio
    from tokenizers import Tokenizer

    from bench.real_engine.headline import (
        achieved_load,
        engine_jobs,
        engine_run,
        metric_row,
        offered_work_s,
        simulate_jobs,
        strategy_config,
    )
    from bench.real_engine.setup import EnginePaths
    from predictors.priors import information_source

    vocab = Tokenizer.from_file(str(EnginePaths.default().tokenizer)).get_vocab_size()
    source = information_source(INFORMATION, seed=seed)
    jobs, rate = engine_jobs(physics, source, load=load, requests=requests, seed=seed,
                             vocab=vocab)  # fmt: skip
    work = offered_work_s(physics, jobs)
    keys = {"load": load, "seed": seed, "requests": requests, "rate_per_s": round(rate, 4),
            "intended_load": CONGESTION[load]}  # fmt: skip
    for strategy in STRATEGIES:
        config = strategy_config(strategy, parallel)
        sim = simulate_jobs(jobs, config, physics, seed)
        t0, load_before = time.perf_counter(), _load_average()
        records, _ = anyio.run(engine_run, {"engine": url}, jobs, config, seed)
        wall = round(time.perf_counter() - t0, 1)
        for mode, done in (("sim", sim), ("engine", records)):
            row = metric_row(done, strategy=strategy, mode=mode, **keys)
            row["achieved_load"] = achieved_load(work, 1.0, _number(row["makespan_ms"]))
            rows.append(row)
        runs.append({**keys, "strategy": strategy, "wall_s": wall, "load_average_after":
                     _load_average(), "load_average_before": load_before})  # fmt: skip
        print(f"{load} seed {seed} {strategy}: {wall} s", flush=True)
        write_rows(out / "headline.csv", rows)
