"""A congestion-aware, OpenAI-compatible mock LLM provider.

``mockprovider.physics`` is the pure service model (used by the simulator and by the HTTP app);
``mockprovider.faults`` holds the pure rate-limit, quota and fault bookkeeping and
``mockprovider.gate`` the decisions made from it; ``mockprovider.stats`` names what the mock
reports (``MockStats``, also for HTTP clients via ``MockStats.from_json``). The HTTP app
(``create_app``, ``MockConfig``; ``mockprovider.wire``, ``driver`` and ``responses`` behind it)
needs the ``mock`` extra (starlette; uvicorn to serve it with ``python -m mockprovider``) and is
imported lazily, so importing this package for the physics alone does not load starlette.
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

__all__ = [
    "PROFILES",
    "ConnectionDropped",
    "EventKind",
    "MockConfig",
    "MockCounters",
    "MockStats",
    "PhysicsParams",
    "PhysicsStats",
    "ProviderEvent",
    "ProviderPhysics",
    "create_app",
    "profile",
]

_LAZY = frozenset({"ConnectionDropped", "MockConfig", "create_app"})


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        from mockprovider import app

        return getattr(app, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
