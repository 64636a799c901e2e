"""A congestion-aware, OpenAI-compatible mock LLM provider.

``mockprovider.physics`` is the pure service model (used by the simulator and by the HTTP app);
``mockprovider.faults`` holds the pure rate-limit, quota and fault bookkeeping and
``mockprovider.gate`` the decisions made from it; ``mockprovider.stats`` names what the mock
reports (``MockStats``, also for HTTP clients via ``MockStats.from_json``). The HTTP app
(``create_app``, ``MockConfig``; ``mockprovider.provider``, ``wire``, ``completions``,
``apis``, ``errors``, ``driver`` and ``responses`` behind it) needs the ``mock`` extra
(starlette; uvicorn to serve it with ``python -m mockprovider``) and is imported lazily, so
importing this package for the physics alone does not load starlette. So is
``mockprovider.fleet`` (``FleetConfig``, ``load_fleet``, ``create_fleet_app``): several
endpoints on one port under path prefixes (``python -m mockprovider --fleet FILE.toml``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from mockprovider.physics import (
    PROFILES,
    EventKind,
    PhysicsParams,
    PhysicsStats,
    ProviderEvent,
    ProviderPhysics,
    profile,
)
from mockprovider.stats import MockCounters, MockStats

if TYPE_CHECKING:
    from mockprovider.app import ConnectionDropped, MockConfig, create_app
    from mockprovider.fleet import FleetConfig, FleetEndpoint, create_fleet_app, load_fleet

__all__ = [
    "PROFILES",
    "ConnectionDropped",
    "EventKind",
    "FleetConfig",
    "FleetEndpoint",
    "MockConfig",
    "MockCounters",
    "MockStats",
    "PhysicsParams",
    "PhysicsStats",
    "ProviderEvent",
    "ProviderPhysics",
    "create_app",
    "create_fleet_app",
    "load_fleet",
    "profile",
]

_LAZY = {
    **dict.fromkeys(("ConnectionDropped", "MockConfig", "create_app"), "app"),
    **dict.fromkeys(("FleetConfig", "FleetEndpoint", "create_fleet_app", "load_fleet"), "fleet"),
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(f"mockprovider.{_LAZY[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
