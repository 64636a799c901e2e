"""The gateway's JSON status document (``GET /semisched/status``).

One read of the scheduler's statistics, shaped for an operator:

```text
{"draining": false,
 "queues": {"web": {"interactive": {"queued": 2, "in_flight": 5}}, ...},
 "queued_by_class": {...}, "inflight": 5, "deferred": 0, "severity": 0.12,
 "cancelled": {"queued": 0, "in_flight": 1},
 "endpoints": [{"name", "state", "circuit", "circuit_reason", "inflight", "sent",
                "completed", "failed_attempts", "throttled", "resent",
                "consecutive_failures",
                "limit", "limit_policy", "last_limit_change": {"at", "old", "new",
                "rule", "reason"} | null, "budget": {...} | null}, ...],
 "budget": {...} | null,
 "tenants": [{"name", "service", "entitlement", "share", "queued", "inflight",
              "completed", "rejected"}, ...],
 "counters": {"submitted", "completed", "rejected", "expired", ...},
 "state": {"backend", "namespace", "workers"} | null,
 "spend": {"spent_usd", "reserved_usd", "refused", "by_tenant", "by_endpoint",
           "caps"} | null}
```

An endpoint's ``resent`` counts requests its upstream connections sent once more
because a reused connection closed before any byte of the answer
(`semisched.gateway.wire` rule 5): not failures, so ``failed_attempts`` leaves
them out.

`fleet_health` is ``GET /readyz``'s view of the same endpoints: whether
any of them can take a request now, and which are failing.

What this module is not: it reads nothing itself; the caller gives the statistics.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict
from typing import Any

from semisched.core.budget import BudgetSnapshot
from semisched.core.fleet.limits import LimitChange
from semisched.runtime.spending import SpendStats
from semisched.runtime.stats import SchedulerStats

__all__ = ["fleet_health", "status_document"]


def _budget(snapshot: BudgetSnapshot | None) -> dict[str, Any] | None:
    if snapshot is None:
        return None
    return {
        "limit_requests": snapshot.limit_requests,
        "limit_tokens": snapshot.limit_tokens,
        "used_requests": round(snapshot.used_requests, 3),
        "used_tokens": round(snapshot.used_tokens, 3),
        "paused_until": snapshot.paused_until,
    }


def _change(change: LimitChange | None) -> dict[str, Any] | None:
    if change is None:
        return None
    return {"at": change.at, "old": change.old, "new": change.new, "rule": change.rule,
            "reason": change.reason}  # fmt: skip


def status_document(
    stats: SchedulerStats,
    queues: dict[str, dict[str, dict[str, int]]],
    *,
    draining: bool,
    cancelled: dict[str, int],
    resent: Mapping[str, int] | None = None,
) -> dict[str, Any]:
    """The status document (module docstring) from one ``statistics()`` snapshot;
    ``resent``: each endpoint's upstream resends (0 for one not named)."""
    engine = stats.engine
    resent = resent or {}
    endpoints = [
        {"name": e.name, "state": e.state, "circuit": e.circuit,
         "circuit_reason": e.circuit_reason, "inflight": e.inflight, "sent": e.sent,
         "completed": e.completed, "failed_attempts": e.failed_attempts,
         "throttled": e.throttled, "resent": resent.get(e.name, 0),
         "consecutive_failures": e.consecutive_failures,
         "limit": e.limit, "limit_policy": e.limit_policy,
         "last_limit_change": _change(e.last_limit_change), "budget": _budget(e.budget)}
        for e in engine.endpoints
    ]  # fmt: skip
    tenants = [
        {"name": t.name, "service": t.service, "entitlement": round(t.entitlement, 4),
         "share": round(t.share, 4), "queued": t.queued, "inflight": t.inflight,
         "completed": t.completed, "rejected": t.rejected}
        for t in engine.tenants
    ]  # fmt: skip
    state = stats.state
    return {
        "draining": draining,
        "queues": queues,
        "queued_by_class": dict(engine.queued),
        "inflight": engine.inflight,
        "deferred": engine.deferred,
        "severity": round(engine.signals.severity, 4),
        "cancelled": dict(cancelled),
        "endpoints": endpoints,
        "budget": _budget(engine.budget),
        "tenants": tenants,
        "counters": asdict(engine.counters),
        "state": None if state is None else {"backend": state.backend,
                                             "namespace": state.namespace,
                                             "workers": state.workers},
        "spend": _spend(stats.spend),
    }  # fmt: skip


def _spend(spend: SpendStats | None) -> dict[str, Any] | None:
    """What this replica spent at the endpoints' prices (``None``: no prices, no caps)."""
    if spend is None:
        return None
    return {"spent_usd": round(spend.spent_usd, 6), "reserved_usd": round(spend.reserved_usd, 6),
            "refused": spend.refused,
            "by_tenant": {k or "default": round(v, 6) for k, v in spend.by_tenant.items()},
            "by_endpoint": {k: round(v, 6) for k, v in spend.by_endpoint.items()},
            "caps": list(spend.caps)}  # fmt: skip


def fleet_health(
    stats: SchedulerStats, failure_threshold: int
) -> tuple[bool, dict[str, dict[str, Any]]]:
    """``GET /readyz``'s view of the fleet: whether any endpoint can take a request now
    (in service, its circuit not open), and each endpoint's state.

    An endpoint is ``failing`` when it cannot take a request now, or when its last
    ``failure_threshold`` attempts or more failed: a lone endpoint's circuit never
    opens (nowhere else to send), so its run of failures is what says it is failing.
    Such a run does not make the gateway unready (module docstring of
    `semisched.core.fleet.fleet`, rule 6; the gateway guide says why).
    """
    usable = False
    health: dict[str, dict[str, Any]] = {}
    for e in stats.engine.endpoints:
        takes = e.state == "active" and e.circuit != "open"
        usable = usable or takes
        health[e.name] = {"state": e.state, "circuit": e.circuit, "reason": e.circuit_reason,
                          "consecutive_failures": e.consecutive_failures,
                          "failing": not takes or e.consecutive_failures >= failure_threshold}
    return usable, health
