"""Shared state for schedulers in several processes (`semisched.state.base`).

``Scheduler(client, state="redis://127.0.0.1:6379/0", namespace="team-a")``
shares its budgets (rate windows, concurrency leases, 429 pauses, open
circuits) and its tenants' usage (work tokens decayed with the tenants'
half-life, so shares and debt are fleet-wide; `semisched.state.usage`)
with every scheduler in the same namespace;
`LocalState` is the in-process equivalent.
Losing the store mid-run never loses a request: budgets fall back to this
worker's share, tenant sharing pauses, and both resume when it is back
(`semisched.state.guard`).
The Redis backend (`semisched.state.redis`) needs the ``redis`` extra.
"""

from semisched.state.base import (
    Grant,
    Scope,
    StateBackend,
    StateForgotten,
    StateStats,
    StateUnavailable,
)
from semisched.state.local import LocalState

__all__ = [
    "Grant",
    "LocalState",
    "Scope",
    "StateBackend",
    "StateForgotten",
    "StateStats",
    "StateUnavailable",
]
