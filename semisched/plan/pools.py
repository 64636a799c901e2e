"""Sizing one pool: the fewest units whose predicted tail meets every SLO.

A pool is ``n`` identical units of ``s`` slots (FleetOpt §3.1): an M/G/c queue
with ``c = n s`` servers in front of one FIFO (the client holds the queue and
sends when a slot is free, so the pool really is one queue). What this module
adds to the paper's model, and why:

- **Load-dependent service.** Eq. 3-4 give a request's slot time as
  ``(ceil(L_in / C_chunk) + L_out) t_iter`` with ``t_iter = W + H n`` and take
  ``n = n_max``. With the mock's physics (and vLLM's) a fuller batch decodes
  each token more slowly, so the service time depends on the pool's own
  utilisation ``ϱ``. A request in service sees itself plus ``ϱ (s - 1)``
  others on average, ``t_iter = W + H (1 + ϱ (s - 1))``, and ``ϱ = λ E[S] / c``
  closes the loop in closed form:
  ``ϱ = λ k (W + H) / (n s - λ k H (s - 1))`` (``k``: mean iterations per
  request). An idle pool serves at ``W + H`` per iteration (the lone-request
  speed), a saturated one at ``W + H s``.
- **Tails as sojourn quantiles** (`semisched.plan.queueing.sojourn_quantile`),
  per class, rather than eq. 8's sum of two P99s.

The search (eq. 11): the smallest ``n`` at or above the utilisation cap's
bound ``ϱ <= ϱ_max`` whose tails all meet their SLOs; a galloping search, since
the tail falls as ``n`` grows. When no ``n`` can meet an SLO (its service
alone, on idle units, is too slow), `Infeasible` says what it would take.

Pure numpy; no clock, no I/O.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np
import numpy.typing as npt

from semisched.core.errors import SemischedError
from semisched.plan.queueing import erlang_c, kimura_rate, sojourn_quantile
from semisched.plan.slo import Slo

__all__ = ["Histogram", "Infeasible", "PoolDemand", "PoolPlan", "Tail", "size_pool"]

FloatArray = npt.NDArray[np.float64]
#: Iteration counts up to this are their own histogram bin; above, bins 1% wide.
EXACT_BINS = 64
GROWTH = 1.01
MAX_UNITS = 1_000_000


class Infeasible(SemischedError):
    """No number of units meets an SLO; the message says what it would take."""


@dataclass(frozen=True, slots=True)
class Histogram:
    """A distribution of iteration counts: representative values and their weights."""

    values: FloatArray
    weights: FloatArray

    @property
    def total(self) -> float:
        return float(self.weights.sum())

    def quantile(self, q: float) -> float:
        order = np.argsort(self.values, kind="stable")
        cum = np.cumsum(self.weights[order]) / self.total
        return float(self.values[order][min(int(np.searchsorted(cum, q - 1e-12)), len(cum) - 1)])


def bin_index(iterations: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
    """The histogram bin of each iteration count (exact below `EXACT_BINS`)."""
    k = np.maximum(iterations, 1).astype(np.float64)
    log_bin = EXACT_BINS + np.floor(np.log(k / EXACT_BINS) / math.log(GROWTH)).astype(np.int64)
    return np.where(k < EXACT_BINS, k.astype(np.int64), log_bin)


def bin_values(count: int) -> FloatArray:
    """The representative iteration count of bins ``0 .. count - 1`` (a log bin's midpoint)."""
    idx = np.arange(count, dtype=np.float64)
    low = EXACT_BINS * GROWTH ** (idx - EXACT_BINS)
    logs = low * (1.0 + GROWTH) / 2.0
    return np.where(idx < EXACT_BINS, np.maximum(idx, 1.0), logs)


@dataclass(frozen=True, slots=True)
class PoolDemand:
    """What one pool must serve.

    Attributes:
        rate: Arrivals per second.
        mean_iterations: Mean slot occupancy in iterations (prefill + decode).
        scv: Squared coefficient of variation of the occupancy (``C_s²``).
        ttft: Per class, the histogram of iterations to the first token.
        e2e: Per class, the histogram of iterations to completion.
    """

    rate: float
    mean_iterations: float
    scv: float
    ttft: dict[str, Histogram]
    e2e: dict[str, Histogram]


@dataclass(frozen=True, slots=True)
class Tail:
    """One SLO's predicted tail in a pool."""

    slo: Slo
    seconds: float

    @property
    def met(self) -> bool:
        return self.seconds <= self.slo.seconds


@dataclass(frozen=True, slots=True)
class PoolPlan:
    """A sized pool.

    Attributes:
        units: Units in the pool.
        slots: Slots per unit (its configured batch).
        context_tokens: The context each slot is configured for.
        rate: Arrivals per second it serves.
        utilisation: ``ϱ``, the mean share of busy slots.
        iteration_ms: ``t_iter`` at that utilisation.
        p_wait: Erlang-C, the probability a request waits for a slot.
        tails: Each applicable SLO's predicted quantile.
        bound: What set ``units``: ``"slo"``, or ``"utilisation"`` (the cap ``ϱ_max``).
        cost_per_hour: ``units`` times the unit's cost.
    """

    units: int
    slots: int
    context_tokens: int
    rate: float
    utilisation: float
    iteration_ms: float
    p_wait: float
    tails: tuple[Tail, ...]
    bound: str
    cost_per_hour: float


@dataclass(frozen=True, slots=True)
class Unit:
    """The numbers of one unit configuration the sizing needs (seconds)."""

    w: float
    h: float
    slots: int
    context_tokens: int
    overhead: float
    cost: float


def utilisation(demand: PoolDemand, unit: Unit, units: int) -> float:
    """``ϱ`` of ``units`` units (module docstring); ``inf`` when they cannot keep up."""
    work = demand.rate * demand.mean_iterations
    spare = units * unit.slots - work * unit.h * (unit.slots - 1)
    if spare <= 0.0:
        return math.inf
    return work * (unit.w + unit.h) / spare


def evaluate(demand: PoolDemand, unit: Unit, units: int, slos: Sequence[Slo]) -> PoolPlan:
    """The predicted state and tails of ``units`` units serving ``demand``."""
    rho = utilisation(demand, unit, units)
    servers = units * unit.slots
    stable = rho < 1.0  # else the queue grows without bound: every tail is infinite
    t_iter = unit.w + unit.h * (1.0 + min(rho, 1.0) * (unit.slots - 1))
    p_wait = erlang_c(servers, rho * servers) if stable else 1.0
    theta = kimura_rate(servers, 1.0 / (demand.mean_iterations * t_iter), demand.rate, demand.scv)
    found: list[Tail] = []
    for slo in slos:
        hist = _histogram(demand, slo)
        if hist is None:
            continue
        seconds = hist.values * t_iter + unit.overhead
        tail = sojourn_quantile(seconds, hist.weights, p_wait, theta, slo.quantile)
        found.append(Tail(slo, tail if stable else math.inf))
    return PoolPlan(
        units=units,
        slots=unit.slots,
        context_tokens=unit.context_tokens,
        rate=demand.rate,
        utilisation=rho,
        iteration_ms=t_iter * 1e3,
        p_wait=p_wait,
        tails=tuple(found),
        bound="slo",
        cost_per_hour=units * unit.cost,
    )


def _histogram(demand: PoolDemand, slo: Slo) -> Histogram | None:
    table = demand.ttft if slo.metric == "ttft" else demand.e2e
    if slo.klass is None:
        hists = [h for h in table.values() if h.total > 0]
        if not hists:
            return None
        if len(hists) == 1:
            return hists[0]
        return Histogram(hists[0].values, np.sum([h.weights for h in hists], axis=0))
    hist = table.get(slo.klass)
    return hist if hist is not None and hist.total > 0 else None


def idle_tail(demand: PoolDemand, unit: Unit, slo: Slo) -> float:
    """The SLO's quantile on idle units: no wait, every iteration at ``W + H``."""
    hist = _histogram(demand, slo)
    if hist is None:
        return 0.0
    return hist.quantile(slo.quantile) * (unit.w + unit.h) + unit.overhead


def size_pool(
    demand: PoolDemand, unit: Unit, slos: Sequence[Slo], *, max_utilisation: float
) -> PoolPlan:
    """The fewest units that meet every SLO at utilisation at most ``max_utilisation``.

    Raises:
        Infeasible: An SLO cannot be met by any number of units.
    """
    for slo in slos:
        idle = idle_tail(demand, unit, slo)
        if idle > slo.seconds:
            raise Infeasible(_impossible(demand, unit, slo, idle))
    low = 1
    while utilisation(demand, unit, low) > max_utilisation:
        low = low * 2 if low < 1024 else low + max(1, low // 4)
        if low > MAX_UNITS:
            raise Infeasible(f"more than {MAX_UNITS:,} units would be needed")
    # The cap's bound is the smallest n with ϱ(n) <= ϱ_max: search back from `low`.
    hi_cap, lo_cap = low, max(1, low // 2)
    while lo_cap < hi_cap:
        mid = (lo_cap + hi_cap) // 2
        if utilisation(demand, unit, mid) <= max_utilisation:
            hi_cap = mid
        else:
            lo_cap = mid + 1
    first = evaluate(demand, unit, hi_cap, slos)
    if all(t.met for t in first.tails):
        return _bound(first, "utilisation")
    step, known_bad = 1, hi_cap
    while True:
        candidate = known_bad + step
        if candidate > MAX_UNITS:
            raise Infeasible(f"more than {MAX_UNITS:,} units would be needed")
        plan = evaluate(demand, unit, candidate, slos)
        if all(t.met for t in plan.tails):
            break
        known_bad, step = candidate, step * 2
    good = plan
    low_n, high_n = known_bad + 1, candidate
    while low_n < high_n:
        mid = (low_n + high_n) // 2
        trial = evaluate(demand, unit, mid, slos)
        if all(t.met for t in trial.tails):
            high_n, good = mid, trial
        else:
            low_n = mid + 1
    return _bound(good if good.units == high_n else evaluate(demand, unit, high_n, slos), "slo")


def _bound(plan: PoolPlan, bound: str) -> PoolPlan:
    return replace(plan, bound=bound)


def _impossible(demand: PoolDemand, unit: Unit, slo: Slo, idle: float) -> str:
    hist = _histogram(demand, slo)
    assert hist is not None
    iterations = hist.quantile(slo.quantile)
    budget = slo.seconds - unit.overhead
    what = f"{slo.label()} cannot be met by any number of units: even idle units take {idle:.3g} s"
    what += f" ({iterations:.0f} iterations at {1e3 * (unit.w + unit.h):.3g} ms"
    what += f" plus {unit.overhead:.3g} s overhead)" if unit.overhead else ")"
    if budget <= 0:
        return (
            f"{what}; the fixed overhead alone exceeds it. It would take an SLO above {idle:.3g} s"
        )
    need_ms = 1e3 * budget / iterations
    return (
        f"{what}. It would take an SLO of at least {idle:.3g} s, or a unit whose lone-request "
        f"iteration (W + H) is at most {need_ms:.3g} ms"
    )
