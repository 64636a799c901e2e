"""Control events: the fleet changes and sending is held or released.

:class:`EngineControl` adds to the :class:`~semisched.core.book.EngineBook` the
events that change what may be sent without deciding about any request: an
endpoint added, drained or removed, sending held and released, other processes'
usage of a tenant observed. Each then lets
the engine dispatch (:meth:`~semisched.core.engine.Engine` decides). Pure: no
clock, no I/O.
"""

from __future__ import annotations

from semisched.core.actions import Action
from semisched.core.book import EngineBook
from semisched.core.fleet.endpoint import EndpointSpec

__all__ = ["EngineControl"]


class EngineControl(EngineBook):
    """The engine's control events (module docstring)."""

    def add_endpoint(self, spec: EndpointSpec, now: float) -> list[Action]:
        """Add an endpoint to the fleet and dispatch (queued work may go there).

        Raises:
            ValueError: An endpoint of that name is already in the fleet.
        """
        self._advance(now)
        self._fleet.add(spec)
        return self._after_release(now, [])

    def drain_endpoint(self, name: str, now: float) -> list[Action]:
        """Send nothing new to ``name``; its in-flight requests finish. Queued requests
        no remaining endpoint can serve are rejected as they come up.

        Raises:
            ValueError: No endpoint has that name.
        """
        self._advance(now)
        self._fleet.drain(name)
        return self._after_release(now, [])

    def remove_endpoint(self, name: str, now: float) -> list[Action]:
        """Drain ``name`` and drop it from the fleet (:meth:`drain_endpoint`).

        Raises:
            ValueError: No endpoint has that name.
        """
        self._advance(now)
        self._fleet.remove(name)
        return self._after_release(now, [])

    def hold(self, now: float) -> list[Action]:
        """Stop sending: queued requests stay queued (deadlines still expire them)."""
        self._advance(now)
        self._held = True
        return self._finish(now, [])

    def release(self, now: float) -> list[Action]:
        """Undo :meth:`hold` and dispatch."""
        self._advance(now)
        self._held = False
        return self._after_release(now, [])

    def observe_tenant_usage(self, tenant: str, fleet_usage: float, now: float) -> list[Action]:
        """Every process's decayed usage of ``tenant`` at ``now`` (work tokens, from a
        shared state): shares, debt and the tenant policy count it from now on, and
        what the new standing lets go is sent.

        Raises:
            ValueError: ``tenant`` is not declared, or ``fleet_usage`` is not a number >= 0.
        """
        self._observe_usage(tenant, fleet_usage, now)
        return self._after_release(now, [])

    def _after_release(self, now: float, actions: list[Action]) -> list[Action]:
        """Run due timers, dispatch and report the wake (the engine's decisions)."""
        raise NotImplementedError
