"""``python -m bench concurrency``: the learned per-endpoint concurrency limit, simulated.

Each endpoint's concurrency limit is either told (``EndpointSpec(max_concurrency=N)``,
a fixed cap) or learned from queueing delay (``RoutingConfig.concurrency="learned"``,
the default: `semisched.core.fleet.limits`). This benchmark asks what learning
it costs against being told the truth, and how fast it follows a server that loses
half its slots. The real core runs against the mock provider's physics
(`semisched.sim.simulator.Simulator`, one physics per endpoint).

**The matrix.** Fleets of 1, 4 and 16 endpoints; each endpoint's slots are drawn
from {8, 16, 32, 64} by ``random.Random(seed)`` (`fleet_slots`), so a seed fixes
the fleet and the jobs together. The workload is the paper's balanced mix
(``bench.workloads``, ``regime("balanced/high")``: coarse priors, bucket deadlines)
with the load relative to the *fleet's* full-batch capacity (the sum of its
endpoints' ``capacity_tokens_per_s``): congestion ``high`` is an offered load of 1.1
(``bench.workloads.CONGESTION``), so the arrivals ask for 1.1x what the fleet can
decode. Every run uses ``final_adrr_olc`` (the full stack) under one of
`CONDITIONS`:

``caps``
    each endpoint's true slots told (``max_concurrency``): the reference;
``learned``
    nothing told, defaults (the learned limit, no ``max_inflight``);
``learned-nostream``
    the same, but the engine never hears a first token, as for answers that are not
    streamed: the limit reads its wait from the endpoint's fitted intercept instead.
    The simulator has no option for it; the run's engine is wrapped in a thin proxy
    (`Unstreamed`) whose ``first_token`` does nothing, everything else passed
    through;
``old32``
    the previous default: no per-endpoint cap, 32 in flight for the whole client
    (``max_inflight=32``, ``RoutingConfig(concurrency="fixed")``).

Per run: short P95 and goodput (`semisched.sim.metrics.summarize`), each against
the ``caps`` run of the same fleet and jobs (same size, same seed), and each endpoint's
limit at the end (``EndpointStats.limit``) against its slots: the mean absolute error
and the mean signed error (bias), in slots. The summary takes the median over seeds
of each metric (of the per-seed ratios for the ratios), but the mean of the limits'
errors (over every endpoint of every seed).

**The halving.** One endpoint of 32 slots, nothing told, the same mix at 1.1x its
capacity; at the arrival time of the middle request the provider keeps
``max(1, round(32 * 0.5))`` = 16 slots (``ProviderModel(capacity_loss=(T, 0.5))``;
``mockprovider.faults.capacity_slots``; the physics' ``set_slots``: the requests
already running keep their slots, and nothing new is admitted until fewer than 16
run). Every change of the limit is recorded: after the simulator is built its
engine's change log (``engine._fleet.limits.changes``, which keeps the latest 256)
is replaced by an unbounded deque, so the whole log is read after the run. Reported:
the limit before the halving, the seconds and the answers (completions) from the
halving until the limit is first at most the new slots + 1 (17), and the figure
``convergence.png``.
"""

from __future__ import annotations

import math
import random
import statistics
import time
from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import cast

from bench.experiments import ProgressReporter
from bench.report import write_csv
from bench.workloads import generate, regime
from mockprovider.faults import capacity_slots
from mockprovider.physics import PhysicsParams
from predictors.priors import information_source
from semisched.core.config import RoutingConfig, SchedulerConfig, preset
from semisched.core.engine import Engine
from semisched.core.fleet.endpoint import EndpointSpec
from semisched.sim.metrics import summarize
from semisched.sim.model import Outcome, ProviderModel, SimEndpoint, SimJob
from semisched.sim.simulator import Simulator

__all__ = [
    "CONDITIONS",
    "SIZES",
    "Cell",
    "Halving",
    "Unstreamed",
    "concurrency",
    "fleet_slots",
    "run_cell",
    "run_halving",
    "summary_rows",
]

SIZES: tuple[int, ...] = (1, 4, 16)
SLOT_CHOICES: tuple[int, ...] = (8, 16, 32, 64)
#: The conditions compared, the reference first (module docstring).
CONDITIONS: tuple[str, ...] = ("caps", "learned", "learned-nostream", "old32")
REGIME = "balanced/high"
OLD_MAX_INFLIGHT = 32
HALVING_SLOTS = 32
HALVING_FRACTION = 0.5
DEFAULT_OUT = Path("docs/results/concurrency")


def fleet_slots(n: int, seed: int) -> list[int]:
    """The slots of each of ``n`` endpoints for ``seed``."""
    rng = random.Random(seed)
    return [rng.choice(SLOT_CHOICES) for _ in range(n)]


def _jobs(
    physics: Sequence[PhysicsParams], seed: int, requests: int, stream: bool = True
) -> list[SimJob]:
    """The balanced mix at congestion ``high`` (1.1x) of the fleet's summed capacity, its
    calls streamed (``Request.stream``) or not."""
    capacity = sum(p.capacity_tokens_per_s() for p in physics)
    source = information_source("coarse", seed=seed)
    reg = regime(REGIME, requests=requests)
    jobs = generate(reg, seed, source, physics[0], capacity_tokens_per_s=capacity)
    return [replace(job, request=replace(job.request, stream=stream)) for job in jobs]


def _config(condition: str) -> SchedulerConfig:
    base = preset("final_adrr_olc")
    if condition == "old32":
        return base.with_(max_inflight=OLD_MAX_INFLIGHT, routing=RoutingConfig(concurrency="fixed"))
    return base


def _specs(condition: str, slots: Sequence[int]) -> list[EndpointSpec]:
    told = condition == "caps"
    return [
        EndpointSpec(name=f"e{i}", max_concurrency=s if told else None) for i, s in enumerate(slots)
    ]


class Unstreamed:
    """An engine that never hears a first token (answers not streamed); the rest passes
    through to the wrapped engine."""

    __slots__ = ("_engine",)

    def __init__(self, engine: Engine) -> None:
        self._engine = engine

    def first_token(self, request_id: str, now: float) -> None:
        """Not heard."""

    def __len__(self) -> int:
        return len(self._engine)

    def __getattr__(self, name: str) -> object:
        return getattr(self._engine, name)


def _simulator(config: SchedulerConfig, fleet: Sequence[SimEndpoint], streamed: bool) -> Simulator:
    sim = Simulator(config, fleet=fleet)
    if not streamed:
        sim.engine = cast(Engine, Unstreamed(sim.engine))
    return sim


@dataclass(frozen=True, slots=True)
class Cell:
    """One run of the matrix: a fleet size, a condition, a seed."""

    n: int
    condition: str
    seed: int
    requests: int = 2000


def _limit_errors(limits: Sequence[int | None], slots: Sequence[int]) -> tuple[float, float]:
    """Mean absolute and mean signed error of the limits against the slots (NaN: no limit)."""
    if any(limit is None for limit in limits):
        return math.nan, math.nan
    diffs = [cast(int, limit) - s for limit, s in zip(limits, slots, strict=True)]
    return sum(abs(d) for d in diffs) / len(diffs), sum(diffs) / len(diffs)


def run_cell(cell: Cell) -> dict[str, object]:
    """Simulate one run; its metrics, its fleet's slots and final limits."""
    slots = fleet_slots(cell.n, cell.seed)
    physics = [PhysicsParams(slots=s) for s in slots]
    streamed = cell.condition != "learned-nostream"
    jobs = _jobs(physics, cell.seed, cell.requests, stream=streamed)
    fleet = [
        SimEndpoint(spec=spec, physics=p)
        for spec, p in zip(_specs(cell.condition, slots), physics, strict=True)
    ]
    sim = _simulator(_config(cell.condition), fleet, streamed=streamed)
    result = sim.run(jobs)
    limits = [e.limit for e in result.engine.endpoints]
    mae, bias = _limit_errors(limits, slots)
    row: dict[str, object] = {"n": cell.n, "condition": cell.condition, "seed": cell.seed}
    row.update(summarize(result.rows))
    row.update(
        slots=" ".join(map(str, slots)),
        limits=" ".join("none" if limit is None else str(limit) for limit in limits),
        limit_mae=mae,
        limit_bias=bias,
    )
    return row


def add_ratios(rows: Sequence[dict[str, object]]) -> None:
    """Each run's short P95 and goodput over its ``caps`` twin's (same size, same seed)."""
    caps = {(r["n"], r["seed"]): r for r in rows if r["condition"] == "caps"}
    for row in rows:
        ref = caps.get((row["n"], row["seed"]))
        for metric, column in (("short_p95_ms", "short_p95_vs_caps"),
                               ("goodput_rps", "goodput_vs_caps")):  # fmt: skip
            base = math.nan if ref is None else float(cast(float, ref[metric]))
            value = float(cast(float, row[metric]))
            row[column] = value / base if base and not math.isnan(base) else math.nan


#: What the summary keeps of each run (medians over seeds).
SUMMARY_METRICS: tuple[str, ...] = (
    "short_p95_ms",
    "goodput_rps",
    "short_p95_vs_caps",
    "goodput_vs_caps",
    "completion_rate",
    "satisfaction",
    "limit_mae",
    "limit_bias",
)


def _median(values: Iterable[object]) -> float:
    present = [float(cast(float, v)) for v in values]
    present = [v for v in present if not math.isnan(v)]
    return statistics.median(present) if present else math.nan


def _mean(values: Iterable[object]) -> float:
    present = [float(cast(float, v)) for v in values]
    if not present or any(math.isnan(v) for v in present):
        return math.nan
    return statistics.mean(present)


def summary_rows(rows: Sequence[dict[str, object]]) -> list[dict[str, object]]:
    """One row per (size, condition): the median over seeds of each summary metric, but the
    limits' errors are means (over every endpoint of every seed: the fleets are the same size)."""
    groups: dict[tuple[object, object], list[dict[str, object]]] = {}
    for row in rows:
        groups.setdefault((row["n"], row["condition"]), []).append(row)
    out: list[dict[str, object]] = []
    for (n, condition), runs in groups.items():
        summary: dict[str, object] = {"n": n, "condition": condition, "seeds": len(runs)}
        summary.update({m: _median(r[m] for r in runs) for m in SUMMARY_METRICS})
        summary.update({m: _mean(r[m] for r in runs) for m in ("limit_mae", "limit_bias")})
        out.append(summary)
    return out


@dataclass(frozen=True, slots=True)
class Halving:
    """The halving run: its limit over time and how fast it followed.

    Attributes:
        at: When the provider lost half its slots (engine seconds).
        slots: Its slots before and after.
        trace: ``(time, limit)`` at the start and at every change.
        rules: The rule of each change (``""`` for the start).
        before: The limit just before the halving.
        reached_s: Seconds from the halving until the limit was first at most the new
            slots + 1 (``None``: never).
        reached_answers: Answers (completions) in that time (``None``: never).
        final: The limit at the end of the run.
        end: When the run ended.
    """

    at: float
    slots: tuple[int, int]
    trace: tuple[tuple[float, int], ...]
    rules: tuple[str, ...]
    before: int
    reached_s: float | None
    reached_answers: int | None
    final: int
    end: float

    @property
    def target(self) -> int:
        """The limit the halving is followed at: the new slots + 1."""
        return self.slots[1] + 1


def run_halving(requests: int = 2500, seed: int = 0) -> Halving:
    """One endpoint of 32 slots, halved at the middle arrival; the limit's every change."""
    physics = PhysicsParams(slots=HALVING_SLOTS)
    jobs = _jobs([physics], seed, requests)
    at = jobs[len(jobs) // 2].request.arrival
    after = capacity_slots(HALVING_SLOTS, HALVING_FRACTION)
    provider = ProviderModel(capacity_loss=(at, HALVING_FRACTION))
    fleet = [SimEndpoint(spec=EndpointSpec(name="e0"), physics=physics, provider=provider)]
    sim = Simulator(_config("learned"), fleet=fleet)
    limits = sim.engine._fleet.limits
    limits.changes = deque(maxlen=None)  # the whole change log, not the latest 256
    start = sim.engine.statistics().endpoints[0].limit
    result = sim.run(jobs)
    assert start is not None
    trace = [(0.0, start)] + [(c.at, c.new) for c in limits.changes if c.new is not None]
    rules = [""] + [c.rule for c in limits.changes if c.new is not None]
    before = [limit for t, limit in trace if t < at][-1]
    later = [(at, before)] + [(t, limit) for t, limit in trace if t >= at]
    hit = next((t for t, limit in later if limit <= after + 1), None)
    answers = None
    if hit is not None:
        answers = sum(r.outcome == Outcome.COMPLETED and r.end is not None and at < r.end <= hit
                      for r in result.rows)  # fmt: skip
    return Halving(
        at=at,
        slots=(HALVING_SLOTS, after),
        trace=tuple(trace),
        rules=tuple(rules),
        before=before,
        reached_s=None if hit is None else hit - at,
        reached_answers=answers,
        final=trace[-1][1],
        end=result.end_time,
    )


def command_line(
    out: Path, seeds: int, requests: int, sizes: Sequence[int], halving_requests: int
) -> str:
    """The command that writes these results (defaults left out)."""
    parts = ["python -m bench concurrency"]
    if seeds != 3:
        parts.append(f"--seeds {seeds}")
    if requests != 2000:
        parts.append(f"--requests {requests}")
    if tuple(sizes) != SIZES:
        parts.append("--sizes " + ",".join(map(str, sizes)))
    if halving_requests != 2500:
        parts.append(f"--halving-requests {halving_requests}")
    if out != DEFAULT_OUT:
        parts.append(f"--out {out}")
    return " ".join(parts)


def concurrency(
    out: Path = DEFAULT_OUT,
    *,
    seeds: int = 3,
    requests: int = 2000,
    sizes: Sequence[int] = SIZES,
    halving_requests: int = 2500,
) -> Path:
    """Run the matrix and the halving; write ``runs.csv``, ``summary.csv``,
    ``convergence.csv``, ``tables.md`` and ``convergence.png`` to ``out``."""
    from bench.concurrency_report import halving_rows, tables_markdown, write_figure

    cells = [Cell(n, c, s, requests) for n in sizes for c in CONDITIONS for s in range(seeds)]
    out.mkdir(parents=True, exist_ok=True)
    progress = ProgressReporter()
    start = time.perf_counter()
    rows: list[dict[str, object]] = []
    for i, cell in enumerate(cells, 1):
        rows.append(run_cell(cell))
        progress(i, len(cells) + 1, time.perf_counter() - start)
    add_ratios(rows)
    halving = run_halving(halving_requests)
    progress(len(cells) + 1, len(cells) + 1, time.perf_counter() - start)
    summary = summary_rows(rows)
    write_csv(out / "runs.csv", rows)
    write_csv(out / "summary.csv", summary)
    write_csv(out / "convergence.csv", halving_rows(halving))
    command = command_line(out, seeds, requests, sizes, halving_requests)
    text = tables_markdown(summary, rows, halving, command=command, requests=requests)
    (out / "tables.md").write_text(text)
    write_figure(halving, out / "convergence.png")
    return out
