"""Writing a plan as fleet files: the client's (``semisched batch --fleet``, ``Scheduler``)
and, to try it, the mock provider's (``python -m mockprovider --fleet``).

The client's fleet file (`semisched.fleet.fleetfile`'s schema) names one
endpoint per unit: ``short-0 .. short-{n_s - 1}`` with ``pool = "short"`` and
``context_tokens = B_short``, ``long-0 ..`` with ``pool = "long"`` and the
unit's full context, and ``token_budget`` routing at ``short_pool_tokens =
B_short`` (with ``compress_band = γ`` when the plan compresses), choosing
inside a pool by ``least_outstanding``: the plan assumes evenly loaded units,
and balancing predicted *work* instead puts many short requests on one unit,
whose fuller batch decodes each of their tokens more slowly. Spillover waits
until a pool's every slot is busy (``spill_outstanding`` = the most slots of
any unit): at the default 16, a short pool of 128-slot units counts as
"overloaded" at an eighth of its capacity and pours its requests into the
long pool, which was not sized for them. Each
endpoint's ``max_concurrency`` is its slots, so the client holds the queue
and a unit never queues hidden work: the pool is the one-queue M/G/c the plan
assumed. A one-pool plan names ``unit-0 ..`` with no pools. ``base_url``
comes from a template with ``{name}`` (default: the mock fleet's layout on
``127.0.0.1:8200``, the port the docs start it on); ``key_env`` names the variable holding each key.

The mock's fleet file gives each endpoint the unit's physics with its slots
(the short units' larger batch included), so a plan can be run as planned.

The text is built here and checked by reading it back with the loaders
(`semisched.fleet.fleetfile.fleet_from_dict`), so a file this writes always loads.
"""

from __future__ import annotations

import json
import tomllib
from dataclasses import dataclass

from semisched.fleet.fleetfile import fleet_from_dict
from semisched.plan.planner import Plan
from semisched.plan.profile import UnitProfile

__all__ = ["DEFAULT_BASE_URL", "PlannedEndpoint", "client_fleet_toml", "mock_fleet_toml", "planned"]

DEFAULT_BASE_URL = "http://127.0.0.1:8200/{name}/v1"


@dataclass(frozen=True, slots=True)
class PlannedEndpoint:
    """One unit of a plan as an endpoint."""

    name: str
    pool: str | None
    context_tokens: int
    slots: int


def planned(plan: Plan) -> tuple[tuple[PlannedEndpoint, ...], int | None, float]:
    """The recommended fleet's endpoints, its ``B_short`` (``None``: one pool) and ``γ``."""
    if not plan.two_pools_win or plan.best is None:
        one = plan.one_pool
        units = tuple(
            PlannedEndpoint(f"unit-{i}", None, one.context_tokens, one.slots)
            for i in range(one.units)
        )
        return units, None, 1.0
    best = plan.best
    assert best.short is not None and best.long is not None
    short = [
        PlannedEndpoint(f"short-{i}", "short", best.short.context_tokens, best.short.slots)
        for i in range(best.short.units)
    ]
    long = [
        PlannedEndpoint(f"long-{i}", "long", best.long.context_tokens, best.long.slots)
        for i in range(best.long.units)
    ]
    return (*short, *long), best.boundary, best.gamma


def _q(text: str) -> str:
    return json.dumps(text)  # a TOML basic string is a JSON string for these characters


def client_fleet_toml(
    plan: Plan, *, base_url: str = DEFAULT_BASE_URL, key_env: str | None = None
) -> str:
    """The client's fleet file for the recommended fleet (module docstring)."""
    if "{name}" not in base_url:
        raise ValueError(f"base_url={base_url!r} must contain {{name}} (each unit's endpoint name)")
    endpoints, boundary, gamma = planned(plan)
    lines = [f"# {line}" for line in _summary(plan)]
    if boundary is not None:
        lines += ['routing = "token_budget"', "", "[routing_options]"]
        lines.append(f"short_pool_tokens = {boundary}")
        lines.append('pool_policy = "least_outstanding"')
        lines.append(f"spill_outstanding = {max(e.slots for e in endpoints)}")
        if gamma > 1.0:
            lines.append(f"compress_band = {gamma}")
    for endpoint in endpoints:
        lines += ["", "[[endpoint]]", f"name = {_q(endpoint.name)}"]
        lines.append(f"base_url = {_q(base_url.format(name=endpoint.name))}")
        if key_env:
            lines.append(f"key_env = {_q(key_env)}")
        if endpoint.pool is not None:
            lines.append(f"pool = {_q(endpoint.pool)}")
        lines.append(f"context_tokens = {endpoint.context_tokens}")
        lines.append(f"max_concurrency = {endpoint.slots}")
    text = "\n".join(lines) + "\n"
    fleet_from_dict(tomllib.loads(text), where="planned fleet")  # it must load
    return text


def mock_fleet_toml(plan: Plan, *, time_scale: float = 1.0, seed: int = 0) -> str:
    """The mock provider's fleet file serving the recommended fleet's units."""
    endpoints, _, _ = planned(plan)
    profile: UnitProfile = plan.profile
    lines = [f"# {line}" for line in _summary(plan)]
    lines += [f"time_scale = {float(time_scale)}", f"seed = {seed}"]
    lines += [
        f"base_iter_ms = {profile.base_iter_ms}",
        f"per_slot_ms = {profile.per_slot_ms}",
        f"prefill_chunk = {profile.prefill_chunk}",
        f"overhead_ms = {profile.overhead_ms}",
    ]
    for endpoint in endpoints:
        lines += ["", "[[endpoint]]", f"name = {_q(endpoint.name)}", f"slots = {endpoint.slots}"]
    return "\n".join(lines) + "\n"


def _summary(plan: Plan) -> list[str]:
    slos = ", ".join(s.label() for s in plan.slos)
    return [
        "Written by `semisched plan`: the recommended fleet",
        f"for {plan.rate:g} req/s, {slos}, unit '{plan.profile.name}'.",
    ]
