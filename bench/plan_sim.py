"""The simulator side of ``python -m bench plan``: planned requests run on the mock's physics.

`simulate_pool` runs some of a workload's requests (the planned sample, with
its arrival times) through the real core against the mock's physics, on one
or more pools of units, each endpoint capped at its slots so that the client
holds the one queue (M/G/c); `measured` reads a simulated tail off the result,
per SLO.

A simulated tail is measured over the requests that arrived between 20% and
90% of the arrival span (`STEADY`): the simulated fleet starts empty and
drains after the last arrival, while the model is a steady state. Near its
load-dependent fixed point a pool of large batches takes minutes of arrivals
to settle (a 2% change in offered work moves its per-token time by ~8%), so
whole-run tails read ~5% faster than the steady state the plan is for.

The cases, the plans and the checks that compare both are `bench.plan`'s.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from mockprovider.physics import PhysicsParams
from semisched.core.config import ClassSpec, RoutingConfig, preset
from semisched.core.fleet.endpoint import EndpointSpec
from semisched.core.request import Prior, Request
from semisched.plan.profile import UnitProfile
from semisched.plan.slo import Slo
from semisched.plan.workload import Workload
from semisched.sim.simulator import SimEndpoint, SimJob, Simulator

__all__ = ["NO_TIMEOUT_S", "STEADY", "measured", "simulate_pool"]

#: The share of the arrival span whose requests a simulated tail is measured over: the
#: simulated fleet starts empty and drains after the last arrival, the model is a steady
#: state (a pool near its load-dependent fixed point takes minutes to reach it).
STEADY = (0.2, 0.9)
NO_TIMEOUT_S = 1e7  # a saturated pool's queue grows; nothing times out, every wait is counted


def _jobs(workload: Workload, idx: np.ndarray, prompt: np.ndarray) -> list[SimJob]:
    jobs = []
    assert workload.arrivals is not None
    for i in idx:
        out, tokens = int(workload.output_tokens[i]), int(prompt[i])
        request = Request(
            id=f"r{i}",
            klass=workload.class_names[int(workload.classes[i])],
            prior=Prior(p50=max(1, out), p90=max(1, out)),
            input_tokens=float(tokens),
            arrival=float(workload.arrivals[i]),
            max_output_tokens=int(workload.reserve_tokens[i]),
        )
        jobs.append(SimJob(request=request, output_tokens=out, input_tokens=tokens))
    return jobs


def simulate_pool(
    workload: Workload,
    idx: np.ndarray,
    prompt: np.ndarray,
    pools: Sequence[tuple[str | None, int, UnitProfile, int]],
    routing: RoutingConfig | None = None,
) -> dict[str, np.ndarray]:
    """Simulate ``idx``'s requests on ``pools`` (``(pool, units, profile, context)`` each).

    Returns per-request arrays in ``idx`` order: ``ttft`` and ``e2e`` seconds
    (``inf`` for a request that did not complete) and the ``pool`` it ran in.
    """
    fleet = []
    for pool, units, profile, context in pools:
        physics = PhysicsParams(**profile.physics(context), timeout_s=NO_TIMEOUT_S)
        for u in range(units):
            spec = EndpointSpec(
                name=f"{pool or 'unit'}-{u}",
                max_concurrency=physics.slots,
                pool=pool,
                context_tokens=context,
            )
            fleet.append(SimEndpoint(spec=spec, physics=physics))
    routing = routing or RoutingConfig(policy="least_outstanding")
    config = preset(
        "direct_naive",
        classes=tuple(ClassSpec(name=n) for n in workload.class_names),
        routing=routing,
    )
    result = Simulator(config, fleet=fleet).run(_jobs(workload, idx, prompt))
    rows = {r.id: r for r in result.rows}
    ttft, e2e, where = [], [], []
    for i in idx:
        row = rows[f"r{i}"]
        done = row.outcome == "completed" and row.end is not None
        ttft.append(
            row.first_token - row.arrival if done and row.first_token is not None else np.inf
        )
        e2e.append(row.end - row.arrival if done and row.end is not None else np.inf)
        where.append(row.endpoint.rsplit("-", 1)[0])
    return {"ttft": np.array(ttft), "e2e": np.array(e2e), "pool": np.array(where)}


def measured(workload: Workload, idx: np.ndarray, times: dict[str, np.ndarray], slo: Slo) -> float:
    """The simulated quantile of ``slo`` over ``idx``'s requests (its class only) that
    arrived inside `STEADY` (module docstring: the model is a steady state)."""
    assert workload.arrivals is not None
    arrivals = workload.arrivals[idx]
    first, last = workload.arrivals[0], workload.arrivals[-1]
    low, high = (first + share * (last - first) for share in STEADY)
    keep = (arrivals >= low) & (arrivals <= high)
    if slo.klass is not None:
        keep &= workload.classes[idx] == workload.class_names.index(slo.klass)
    values = times[slo.metric][keep]
    return float(np.quantile(values, slo.quantile)) if values.size else float("nan")
