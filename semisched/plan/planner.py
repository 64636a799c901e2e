"""FleetOpt's offline planner (FleetOpt Algorithm 1) for a client's fleet.

Given a workload (`semisched.plan.workload`), an arrival rate, SLOs and a
unit profile, `make_plan` answers:

1. **One pool**: the fewest units, every unit configured for the profile's full
   context, that meet the SLOs (the paper's "homogeneous" fleet).
2. **Two pools** (Algorithm 1): for every candidate boundary ``B`` and
   compression bandwidth ``γ``, requests whose routed total (prompt + reserved
   output, `Workload.route_tokens`) is at most ``B`` go to a short pool of
   units configured for context ``B`` (``slots * context // B`` slots each,
   `UnitProfile.slots_for`); the borderline band ``(B, γB]`` goes there
   too when its prompt can be compressed to ``B - reserved output`` (FleetOpt
   eq. 15's ``T_c``); the rest to the long pool. Each pool is sized on its own
   (`semisched.plan.pools.size_pool`) from the requests it receives
   (lines 7-8: the long pool's service law is recalibrated for every ``γ``).
   The cheapest ``(B, γ)`` is the plan. Proposition 1's equal-marginal-cost
   condition is what the sweep finds at integer granularity; we do not solve
   it in closed form, as the paper does not.
3. **Compress-and-route**: the borderline fraction ``β = F(γB) - F(B)`` and
   what compression saves over the best plan without it (``γ = 1``).

Which borderline requests compress: where the workload knows each prompt's
compression floor (``floor_tokens``, from the prompt text), exactly those
whose floor fits ``B - reserved output``; otherwise a seeded draw of the
given compressibility ``p_c`` (eq. 1's ``α' = α + β p_c``).

Candidate boundaries (the paper's "hardware-feasible" set): the profile's
context divided by powers of two and by 1.5 times powers of two (8192, 6144,
4096, 3072, ... for an 8K unit: 8K, 4K and 1.5K are the paper's), where a
short slot count exceeds the long one and both pools get traffic.

The per-request numbers the sweep reuses (sorted by routed tokens) and the
demand of any part of them are `semisched.plan.demand`'s; this module is the
sweep and its answer.

Pure numpy; no clock, no I/O.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np
import numpy.typing as npt

from semisched.core.checks import check_fraction, check_number
from semisched.plan.demand import Requests
from semisched.plan.pools import Infeasible, PoolDemand, PoolPlan, Unit, evaluate, size_pool
from semisched.plan.profile import UnitProfile
from semisched.plan.slo import Slo
from semisched.plan.workload import Workload

__all__ = [
    "GAMMAS",
    "MAX_UTILISATION",
    "Infeasible",
    "Plan",
    "Split",
    "assign",
    "candidates",
    "make_plan",
    "predict_pool",
]

#: The paper's γ sweep: 1.0, 1.1, ..., 2.0.
GAMMAS: tuple[float, ...] = tuple(round(1.0 + 0.1 * i, 1) for i in range(11))
#: The paper's utilisation cap (§4.1).
MAX_UTILISATION = 0.85

IntArray = npt.NDArray[np.int64]


@dataclass(frozen=True, slots=True)
class Split:
    """One two-pool candidate ``(B, γ)``.

    Attributes:
        boundary: ``B_short``: the short pool's context.
        gamma: The compression bandwidth (1.0: no compression).
        alpha: ``F(B)``: the share of requests routed short as they are.
        beta: ``F(γB) - F(B)``: the borderline share.
        compressed: The share of all requests compressed into the short pool.
        short: The sized short pool (``None`` when infeasible).
        long: The sized long pool (``None`` when infeasible).
        infeasible: Why no size works (``""`` when sized).
    """

    boundary: int
    gamma: float
    alpha: float
    beta: float
    compressed: float
    short: PoolPlan | None
    long: PoolPlan | None
    infeasible: str = ""

    @property
    def cost_per_hour(self) -> float:
        if self.short is None or self.long is None:
            return math.inf
        return self.short.cost_per_hour + self.long.cost_per_hour

    @property
    def units(self) -> int:
        if self.short is None or self.long is None:
            return 0
        return self.short.units + self.long.units


@dataclass(frozen=True, slots=True)
class Plan:
    """The planner's answer (module docstring).

    Attributes:
        rate: Arrivals per second planned for.
        slos: The objectives.
        profile: The unit.
        requests: Requests in the workload.
        one_pool: The one-pool fleet.
        routed: The cheapest two-pool split without compression (``None``: none feasible).
        best: The cheapest two-pool split, compression allowed (``routed`` without it).
        splits: Every candidate evaluated (for the cost-against-``B`` figure).
        compressibility: ``p_c`` assumed (``None``: per-request floors were used).
    """

    rate: float
    slos: tuple[Slo, ...]
    profile: UnitProfile
    requests: int
    one_pool: PoolPlan
    routed: Split | None
    best: Split | None
    splits: tuple[Split, ...]
    compressibility: float | None

    @property
    def two_pools_win(self) -> bool:
        """The best two-pool split costs less than one pool."""
        return self.best is not None and self.best.cost_per_hour < self.one_pool.cost_per_hour

    @property
    def saving(self) -> float:
        """The best split's cost saving over one pool (a fraction; <= 0: no saving)."""
        if self.best is None:
            return 0.0
        return 1.0 - self.best.cost_per_hour / self.one_pool.cost_per_hour

    @property
    def compress_gain(self) -> float:
        """What compression saves over the best split without it, per hour."""
        if self.best is None or self.routed is None:
            return 0.0
        return self.routed.cost_per_hour - self.best.cost_per_hour


def candidates(profile: UnitProfile, route_tokens: IntArray) -> tuple[int, ...]:
    """The boundaries worth trying (module docstring), smallest first."""
    top = int(route_tokens.max())
    found = set()
    power = 2
    while profile.context_tokens // power >= 128:
        for value in (profile.context_tokens // power, 3 * profile.context_tokens // (2 * power)):
            if value < profile.context_tokens:
                found.add(value)
        power *= 2
    keep = []
    for value in sorted(found):
        share = float(np.mean(route_tokens <= value))
        if share > 0.0 and value < top and profile.slots_for(value) > profile.slots:
            keep.append(value)
    return tuple(keep)


def _unit(profile: UnitProfile, context: int) -> Unit:
    return Unit(
        w=profile.base_iter_ms / 1e3,
        h=profile.per_slot_ms / 1e3,
        slots=profile.slots_for(context),
        context_tokens=context,
        overhead=profile.overhead_ms / 1e3,
        cost=profile.cost_per_hour,
    )


def make_plan(
    workload: Workload,
    *,
    rate: float,
    slos: Sequence[Slo],
    profile: UnitProfile,
    compressibility: float = 0.0,
    max_utilisation: float = MAX_UTILISATION,
    boundaries: Sequence[int] | None = None,
    gammas: Sequence[float] | None = None,
    seed: int = 0,
) -> Plan:
    """Plan a fleet (module docstring).

    Args:
        workload: The requests.
        rate: Arrivals per second (> 0).
        slos: At least one objective.
        profile: The unit.
        compressibility: ``p_c``, the share of borderline requests whose prompt
            compresses into the short pool, where the workload has no
            per-request floors (0: no compression planned).
        max_utilisation: The utilisation cap ``ϱ_max`` in (0, 1).
        boundaries: Candidate ``B`` values (default: `candidates`).
        gammas: Candidate ``γ`` values (default `GAMMAS` when compression is
            planned, else ``(1.0,)``).
        seed: The draw of compressible requests under ``compressibility``.

    Raises:
        ValueError: Bad arguments, or requests longer than the unit's context.
        Infeasible: No one-pool fleet meets the SLOs (the message says what it would take).
    """
    _check_plan(workload, rate, slos, profile, compressibility, max_utilisation)
    reqs = Requests(workload, profile, compressibility, seed)
    sweep = _Sweep(reqs, rate, tuple(slos), profile, max_utilisation)
    one = sweep.size(reqs.demand(rate, [reqs.part(0, reqs.n)]), sweep.full)
    compress = workload.floor_tokens is not None or compressibility > 0.0
    gamma_set = tuple(gammas) if gammas is not None else (GAMMAS if compress else (1.0,))
    for gamma in gamma_set:
        check_number("gamma", gamma, minimum=1.0)
    splits: list[Split] = []
    for boundary in boundaries if boundaries is not None else candidates(profile, reqs.route):
        for gamma in gamma_set:
            split = sweep.split(boundary, gamma)
            if split is not None:
                splits.append(split)
    feasible = [s for s in splits if not s.infeasible]
    return Plan(
        rate=rate,
        slos=sweep.slos,
        profile=profile,
        requests=reqs.n,
        one_pool=one,
        routed=_best_of([s for s in feasible if s.gamma == 1.0]),
        best=_best_of(feasible),
        splits=tuple(splits),
        compressibility=None if workload.floor_tokens is not None else compressibility,
    )


def _check_plan(
    workload: Workload,
    rate: float,
    slos: Sequence[Slo],
    profile: UnitProfile,
    compressibility: float,
    max_utilisation: float,
) -> None:
    """`make_plan`'s argument checks (its ``Raises``)."""
    check_number("rate", rate, minimum=0.0, strict_min=True)
    check_fraction("compressibility", compressibility)
    check_number(
        "max_utilisation",
        max_utilisation,
        minimum=0.0,
        maximum=1.0,
        strict_min=True,
        strict_max=True,
    )
    if not slos:
        raise ValueError("slos must name at least one objective (e.g. ttft_p99<=2)")
    for slo in slos:
        if slo.klass is not None and slo.klass not in workload.class_names:
            known = ", ".join(workload.class_names)
            raise ValueError(f"{slo.label()}: the workload has no class {slo.klass!r} ({known})")
    route = workload.route_tokens
    too_long = int(np.count_nonzero(route > profile.context_tokens))
    if too_long:
        raise ValueError(
            f"{too_long} request(s) need more than the unit's {profile.context_tokens}-token "
            f"context (the longest needs {int(route.max())}): give a profile with a larger "
            "context_tokens, or leave those requests out of the workload"
        )


def _best_of(options: list[Split]) -> Split | None:
    if not options:
        return None
    return min(options, key=lambda s: (s.cost_per_hour, s.units, s.gamma, -s.boundary))


class _Sweep:
    """One candidate split at a time (Algorithm 1's inner loop); long pools sized once
    per distinct set of requests they receive."""

    def __init__(
        self,
        reqs: Requests,
        rate: float,
        slos: tuple[Slo, ...],
        profile: UnitProfile,
        max_utilisation: float,
    ) -> None:
        self.reqs = reqs
        self.rate = rate
        self.slos = slos
        self.profile = profile
        self.max_utilisation = max_utilisation
        self.full = _unit(profile, profile.context_tokens)
        self._long: dict[tuple[int, bytes], PoolPlan | str] = {}

    def size(self, demand: PoolDemand, unit: Unit) -> PoolPlan:
        return size_pool(demand, unit, self.slos, max_utilisation=self.max_utilisation)

    def split(self, boundary: int, gamma: float) -> Split | None:
        """The split at ``(B, γ)``; ``None`` when it leaves the long pool nothing."""
        reqs = self.reqs
        cut = reqs.index(boundary)
        top = reqs.index(gamma * boundary) if gamma > 1.0 else cut
        band = np.arange(cut, top)
        need = (
            reqs.floor[cut:top]
            if reqs.floor is not None
            else np.where(reqs.draw[cut:top], 1, 2**62)
        )
        fits = boundary - reqs.reserve[cut:top] >= need
        moved, kept = band[fits], band[~fits]
        split = Split(
            boundary=boundary,
            gamma=gamma,
            alpha=cut / reqs.n,
            beta=(top - cut) / reqs.n,
            compressed=len(moved) / reqs.n,
            short=None,
            long=None,
        )
        if top == reqs.n and not len(kept):
            return None
        parts = [reqs.part(0, cut)] + ([reqs.part(0, 0, moved, boundary)] if len(moved) else [])
        try:
            short = self.size(reqs.demand(self.rate, parts), _unit(self.profile, boundary))
        except Infeasible as exc:
            return _with(split, infeasible=f"short pool: {exc}")
        long = self._long_pool(top, fits, kept)
        if isinstance(long, str):
            return _with(split, infeasible=long)
        return _with(split, short=short, long=long)

    def _long_pool(self, top: int, fits: npt.NDArray[np.bool_], kept: IntArray) -> PoolPlan | str:
        key = (top, np.packbits(fits).tobytes())
        if key not in self._long:
            reqs = self.reqs
            parts = [reqs.part(top, reqs.n)] + ([reqs.part(0, 0, kept)] if len(kept) else [])
            try:
                self._long[key] = self.size(reqs.demand(self.rate, parts), self.full)
            except Infeasible as exc:
                self._long[key] = f"long pool: {exc}"
        return self._long[key]


def predict_pool(
    workload: Workload,
    *,
    rate: float,
    profile: UnitProfile,
    context_tokens: int,
    units: int,
    slos: Sequence[Slo],
) -> PoolPlan:
    """The model's state and tails of ``units`` units (configured for ``context_tokens``)
    serving every request of ``workload`` at ``rate`` (no search: what-if for one size)."""
    reqs = Requests(workload, profile, 0.0, 0)
    demand = reqs.demand(rate, [reqs.part(0, reqs.n)])
    return evaluate(demand, _unit(profile, context_tokens), units, tuple(slos))


def assign(
    workload: Workload, boundary: int, gamma: float, *, compressibility: float = 0.0, seed: int = 0
) -> tuple[npt.NDArray[np.bool_], IntArray]:
    """Which requests a split sends to the short pool, and the prompt tokens each is sent with.

    The same rule `make_plan` sizes the pools by (module docstring), in
    the workload's order: ``(short, prompt_tokens)``, compressed prompts cut to
    ``boundary - reserved output``.
    """
    route = workload.route_tokens
    short = route <= boundary
    prompt = workload.prompt_tokens.copy()
    if gamma > 1.0:
        band = ~short & (route <= gamma * boundary)
        budget = boundary - workload.reserve_tokens
        if workload.floor_tokens is not None:
            fits = budget >= workload.floor_tokens
        else:
            fits = (np.random.default_rng(seed).random(len(workload)) < compressibility) & (
                budget >= 1
            )
        moved = band & fits
        prompt[moved] = np.minimum(prompt[moved], budget[moved])
        short |= moved
    return short, prompt


def _with(split: Split, **changes: object) -> Split:
    return replace(split, **changes)  # type: ignore[arg-type]
