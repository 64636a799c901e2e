"""Learned against told over several real-engine routing runs: each seed's pair of runs,
pooled.

One run of ``python -m bench real-engine routing --caps slots,learned`` gives five
seeds; on two cores shared with the client, five seeds' medians move by more than the
10% a learned limit is meant to stay within. Each seed runs both conditions with the
same requests, so the ratio of a seed's two runs (learned short P95 over told) is a
paired reading; pooled over runs, their geometric mean and median say more than any
one run's medians.

`pooled_rows` reads the runs' ``routing.csv`` files; `pooled_markdown` is the table the
real-engine guide and the README show (rendered by ``python -m bench docs``).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from bench.docs_tables import read_rows, table

__all__ = ["POOLED_RUNS", "PairStats", "pooled_markdown", "pooled_rows"]

#: The runs pooled, under ``docs/results/real-engine/``: those of round robin and
#: ``token_budget`` made after the two fixes the engine showed (a kept-alive connection
#: the server closed idle is resent, not failed; a learned limit rises above what first
#: tokens proved only on proof). Earlier runs measured the scheduler before them.
POOLED_RUNS: tuple[str, ...] = (
    "routing-two-policies",
    "routing-two-policies-repeat",
    "routing-two-policies-alternating",
    "routing-two-policies-fourth",
)


@dataclass(frozen=True)
class PairStats:
    """One policy's seed pairs (learned short P95 over told), in one run or pooled.

    Attributes:
        run: The run's folder, or ``"all"``.
        policy: The routing policy.
        pairs: Seeds with both conditions.
        geomean: Geometric mean of the engine's ratios.
        median: Median of the engine's ratios.
        within: Pairs within 10% of told (ratio in [0.9, 1.1]).
        faster: Pairs where learned was faster (ratio < 1).
        sim_geomean: Geometric mean of the simulator's ratios for the same seeds.
        completed: Whether every request of every learned run completed.
        load: The median achieved load on the engine (offered work over the time the run
            took, over the pair's capacity), told and learned runs together; ``nan`` when
            the runs did not record it.
        intended: The load the runs were sized for (the largest, if they differ).
    """

    run: str
    policy: str
    pairs: int
    geomean: float
    median: float
    within: int
    faster: int
    sim_geomean: float
    completed: bool
    load: float
    intended: float


def _ratios(rows: Sequence[dict[str, str]], policy: str, key: str) -> list[float]:
    """Each seed's learned over told ``key`` for ``policy`` (seeds with both)."""
    by = {(r["caps"], r["seed"]): float(r[key]) for r in rows if r["policy"] == policy}
    return [by[("learned", s)] / by[("slots", s)]
            for (caps, s) in sorted(by) if caps == "slots" and ("learned", s) in by]  # fmt: skip


def _stats(run: str, policy: str, rows: Sequence[dict[str, str]]) -> PairStats | None:
    engine = _ratios(rows, policy, "short_p95_ms")
    if not engine:
        return None
    sim = _ratios(rows, policy, "sim_short_p95_ms")
    learned = [r for r in rows if r["policy"] == policy and r["caps"] == "learned"]
    loads = [float(r["achieved_load"]) for r in rows
             if r["policy"] == policy and r.get("achieved_load")]  # fmt: skip
    intended = [float(r["intended_load"]) for r in rows if r.get("intended_load")]
    return PairStats(
        run=run,
        policy=policy,
        pairs=len(engine),
        geomean=math.exp(statistics.fmean(math.log(x) for x in engine)),
        median=statistics.median(engine),
        within=sum(0.9 <= x <= 1.1 for x in engine),
        faster=sum(x < 1.0 for x in engine),
        sim_geomean=math.exp(statistics.fmean(math.log(x) for x in sim)) if sim else math.nan,
        completed=all(float(r["completion_rate"]) == 1.0 for r in learned),
        load=statistics.median(loads) if loads else math.nan,
        intended=max(intended, default=math.nan),
    )


def pooled_rows(folder: Path, runs: Sequence[str] = POOLED_RUNS) -> list[PairStats]:
    """Each run's pairs per policy, then every run's together (``run="all"``); runs not
    in ``folder`` are left out.

    Raises:
        KeyError: A ``routing.csv`` without the columns a routing run writes.
    """
    per_run: dict[str, list[dict[str, str]]] = {}
    for run in runs:
        path = folder / run / "routing.csv"
        if path.exists():
            per_run[run] = read_rows(path)
    policies = list(dict.fromkeys(r["policy"] for rows in per_run.values() for r in rows))
    out: list[PairStats] = []
    for run, rows in per_run.items():
        out += [s for p in policies if (s := _stats(run, p, rows)) is not None]
    # Pool by (run, seed): a seed number means the same requests in every run.
    pooled = [{**r, "seed": f"{run}/{r['seed']}"} for run, rows in per_run.items() for r in rows]
    out += [s for p in policies if (s := _stats("all", p, pooled)) is not None]
    return out


def pooled_markdown(
    folder: Path, runs: Sequence[str] = POOLED_RUNS, *, pooled_only: bool = False
) -> str:
    """The table (``pooled_only``: its pooled rows), or a line saying no run is there yet."""
    every = pooled_rows(folder, runs)
    stats = [s for s in every if s.run == "all" or not pooled_only]
    if not stats:
        return "Not run yet: `python -m bench real-engine routing --caps slots,learned`."
    body = [
        (s.run if s.run == "all" else f"`{s.run}`", s.policy, str(s.pairs), f"{s.geomean:.2f}",
         f"{s.median:.2f}", f"{s.within} of {s.pairs}", f"{s.faster} of {s.pairs}",
         f"{s.sim_geomean:.2f}", "yes" if s.completed else "no",
         f"{s.load:.2f} of {s.intended:.1f}")
        for s in stats
    ]  # fmt: skip
    header = ("run", "policy", "seed pairs", "learned / told short P95: geometric mean",
              "median pair", "pairs within 10%", "pairs learned faster",
              "simulator: geometric mean", "every request completed",
              "load: achieved (median) of intended")  # fmt: skip
    runs_read = len({s.run for s in every} - {"all"})
    return (
        table(header, body)
        + f"\n\n{runs_read} runs, pooled by seed. Each pair is one seed's two runs, the slots"
        " told and nothing told (each endpoint's limit learned), with the same requests;"
        " the ratio is learned over told. Load: achieved on the engine (offered work over"
        " the time the run took, over the pair's capacity) of the intended."
    )
