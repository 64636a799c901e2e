"""Shared state for schedulers in several processes (:mod:`semisched.state.base`).

``Scheduler(client, state="redis://127.0.0.1:6379/0", namespace="team-a")``
shares its budgets with every scheduler in the same namespace;
:class:`~semisched.state.local.LocalState` is the in-process equivalent.
The Redis backend (:mod:`semisched.state.redis`) needs the ``redis`` extra.
"""

from semisched.state.base import Grant, Scope, StateBackend, StateStats, StateUnavailable
from semisched.state.local import LocalState

__all__ = ["Grant", "LocalState", "Scope", "StateBackend", "StateStats", "StateUnavailable"]
