"""A plan as people and programs read it: a table, and JSON.

`plan_table` prints the one-pool fleet, the best two-pool split without
compression, the best with it (when compression is planned) and the
recommendation; `plan_json` gives the same numbers, and every candidate
split, as one JSON-ready dict (``semisched plan --json``). Numbers are the
planner's; nothing here computes a plan.
"""

from __future__ import annotations

import math
from dataclasses import asdict, fields
from typing import Any

from semisched.plan.planner import Plan, Split
from semisched.plan.pools import PoolPlan

__all__ = ["plan_json", "plan_table", "recommendation"]


def _tails(*pools: PoolPlan | None) -> str:
    cells = []
    for pool in pools:
        if pool is not None:
            cells.append("/".join(f"{t.seconds:.3g}" for t in pool.tails) or "-")
    return " | ".join(cells)


def _row(
    label: str,
    units: str,
    short: str,
    long: str,
    b: str,
    g: str,
    cost: float,
    saving: str,
    tails: str,
    bound: str,
) -> str:
    return (
        f"{label:<22}{units:>6}{short:>12}{long:>12}{b:>9}{g:>5}{cost:>10.2f}{saving:>8}"
        f"  {tails:<24}{bound}"
    )


def _pool(pool: PoolPlan) -> str:
    return f"{pool.units}x{pool.slots}"


def _split_row(label: str, split: Split, one: PoolPlan) -> str:
    assert split.short is not None and split.long is not None
    saving = 1.0 - split.cost_per_hour / one.cost_per_hour
    return _row(
        label,
        str(split.units),
        _pool(split.short),
        _pool(split.long),
        f"{split.boundary:,}",
        f"{split.gamma:.1f}",
        split.cost_per_hour,
        f"{100 * saving:.1f}%",
        _tails(split.short, split.long),
        f"{split.short.bound}/{split.long.bound}",
    )


def recommendation(plan: Plan) -> str:
    """One sentence: what to build."""
    one = plan.one_pool
    if not plan.two_pools_win or plan.best is None:
        return (
            f"Recommended: one pool of {one.units} unit{'s' if one.units > 1 else ''} "
            f"({one.slots} slots each, "
            f"{one.cost_per_hour:.2f}/h): no two-pool split is cheaper."
        )
    best = plan.best
    assert best.short is not None and best.long is not None
    text = (
        f"Recommended: two pools split at B_short = {best.boundary:,} tokens: {best.short.units} "
        f"short unit{'s' if best.short.units > 1 else ''} ({best.short.slots} slots of "
        f"{best.boundary:,} tokens) and {best.long.units} long "
        f"unit{'s' if best.long.units > 1 else ''} ({best.long.slots} slots of "
        f"{best.long.context_tokens:,}), {best.cost_per_hour:.2f}/h, "
        f"{100 * plan.saving:.1f}% less than one pool"
    )
    if best.gamma > 1.0:
        text += (
            f"; compress-and-route at γ = {best.gamma:.1f} moves {100 * best.compressed:.1f}% "
            f"of requests into the short pool"
        )
    return text + "."


def plan_table(plan: Plan, *, source: str = "") -> str:
    """The plan as a fixed-width table with a header and the recommendation."""
    lines = [*_header(plan, source), *_rows(plan), ""]
    tails = "; ".join(s.label() for s in plan.slos)
    lines.append(f"Tails are per pool (short | long), one per SLO in order: {tails}.")
    lines += _compression_note(plan)
    lines.append(recommendation(plan))
    return "\n".join(lines)


def _header(plan: Plan, source: str) -> list[str]:
    """The workload, the unit and the column heads."""
    p = plan.profile
    slos = ", ".join(s.label() for s in plan.slos)
    heads = _row(
        "plan", "units", "short", "long", "B_short", "γ", 0.0, "saving",
        "predicted tails (s)", "bound by",
    ).replace("      0.00", "    cost/h")  # fmt: skip
    return [
        f"Capacity plan: {plan.requests:,} requests{f' ({source})' if source else ''}, "
        f"{plan.rate:g} req/s; SLO: {slos}",
        f"Unit '{p.name}': W {p.base_iter_ms:g} ms, H {p.per_slot_ms:g} ms/slot, {p.slots} slots "
        f"of {p.context_tokens:,} tokens (at most {p.max_slots}), prefill chunk {p.prefill_chunk}, "
        f"overhead {p.overhead_ms:g} ms, {p.cost_per_hour:g}/h",
        "",
        heads,
    ]


def _rows(plan: Plan) -> list[str]:
    """One row per fleet: one pool, two pools, two pools with compress-and-route."""
    one = plan.one_pool
    cells = ("one pool", str(one.units), "-", f"{one.units}x{one.slots}", "-", "-")
    lines = [_row(*cells, one.cost_per_hour, "-", _tails(one), one.bound)]
    if plan.routed is not None:
        lines.append(_split_row("two pools", plan.routed, one))
    if plan.best is not None and plan.best is not plan.routed:
        lines.append(_split_row("two pools + C&R", plan.best, one))
    if plan.routed is None:
        reasons = {s.infeasible for s in plan.splits if s.infeasible}
        lines.append(
            "two pools: no feasible split" + (f" ({sorted(reasons)[0]})" if reasons else "")
        )
    return lines


def _compression_note(plan: Plan) -> list[str]:
    """What compress-and-route does for this plan, when it was planned."""
    best = plan.best
    if best is None or not (best.gamma > 1.0 or plan.compressibility != 0.0):
        return []
    pc = (
        "per-request compression floors"
        if plan.compressibility is None
        else f"compressibility p_c = {plan.compressibility:g}"
    )
    if best.gamma > 1.0:
        return [
            f"Borderline band at B_short = {best.boundary:,}, γ = {best.gamma:.1f}: "
            f"β = {100 * best.beta:.1f}% of requests, {100 * best.compressed:.1f}% "
            f"compressed ({pc}); compress-and-route saves {plan.compress_gain:.2f}/h over the "
            "best split without it."
        ]
    return [f"Compress-and-route ({pc}): no γ > 1 is cheaper at any B_short."]


def _pool_json(pool: PoolPlan | None) -> dict[str, Any] | None:
    if pool is None:
        return None
    out: dict[str, Any] = {
        f.name: _finite(getattr(pool, f.name)) for f in fields(pool) if f.name != "tails"
    }
    out["tails"] = [
        {"slo": t.slo.key(), "seconds": _finite(t.seconds), "met": t.met} for t in pool.tails
    ]
    return out


def _finite(value: Any) -> Any:
    """A number JSON can hold: ``None`` for an infinite one (an unstable pool's tail)."""
    return None if isinstance(value, float) and not math.isfinite(value) else value


def _split_json(split: Split | None) -> dict[str, Any] | None:
    if split is None:
        return None
    return {
        "boundary": split.boundary,
        "gamma": split.gamma,
        "alpha": split.alpha,
        "beta": split.beta,
        "compressed": split.compressed,
        "units": split.units,
        "cost_per_hour": _finite(split.cost_per_hour),
        "short": _pool_json(split.short),
        "long": _pool_json(split.long),
        "infeasible": split.infeasible or None,
    }


def plan_json(plan: Plan, *, source: str = "", elapsed_s: float | None = None) -> dict[str, Any]:
    """The plan as a JSON-ready dict (``semisched plan --json``)."""
    p = plan.profile
    return {
        "source": source,
        "requests": plan.requests,
        "rate": plan.rate,
        "slos": [s.key() for s in plan.slos],
        "profile": asdict(p),
        "compressibility": plan.compressibility,
        "one_pool": _pool_json(plan.one_pool),
        "two_pools": _split_json(plan.routed),
        "best": _split_json(plan.best),
        "recommended": "two_pools" if plan.two_pools_win else "one_pool",
        "saving": plan.saving if plan.two_pools_win else 0.0,
        "compress_gain_per_hour": plan.compress_gain,
        "splits": [_split_json(s) for s in plan.splits],
        "planning_s": elapsed_s,
    }
