"""A fleet of mock endpoints on one port: ``python -m mockprovider --fleet FILE.toml``.

What it is: the configuration and the ASGI app of several mock providers served together, as a
client with many deployments sees them (regions, keys with their own limits, a slower
self-hosted model beside a hosted one). Endpoint ``NAME`` is a whole ``mockprovider.app`` of
its own, mounted under the path prefix ``/NAME``: its own physics, limits, faults, outage
windows, capacity loss and statistics, answering at ``http://HOST:PORT/NAME/v1/...`` (so an
OpenAI client takes ``base_url="http://HOST:PORT/NAME/v1"``; its stats are at
``/NAME/v1/mock/stats``). ``GET /v1/mock/fleet`` at the root lists the endpoints;
``GET /metrics`` at the root serves every endpoint's Prometheus metrics, labelled
``endpoint="NAME"`` (``mockprovider.metrics``).

One clock. Every endpoint shares the fleet's ``time_scale`` and one clock origin
(`ClockOrigin`): virtual time 0 is the fleet's first request to any
endpoint, so the outage windows and capacity losses of different endpoints line up.

What it is not: no router. The mock does not pick an endpoint; the client (the SDK's routing
layer) does. Nothing here changes how one endpoint behaves.

The TOML file (read with `load_fleet`):

```toml
time_scale = 20.0          # fleet-wide: one clock (top level only)
seed = 0                   # fleet seed: an endpoint without its own seed gets seed + index
rpm = 600                  # any endpoint key at the top level is a default for every endpoint

[[endpoint]]
name = "fast-a"            # required; letters, digits, '.', '_', '~', '-' (URL-path-safe)
outages = [[60.0, 120.0]]  # virtual seconds [start, end), from the fleet's first request

[[endpoint]]
name = "slow"
profile = "default"        # a physics profile (mockprovider.physics.PROFILES) ...
base_iter_ms = 34.6        # ... with any PhysicsParams field overridden
per_slot_ms = 2.8
capacity_loss = [30.0, 0.5]
```

Endpoint keys: ``name``, ``profile``, the `PhysicsParams` fields
(``slots``, ``base_iter_ms``, ``per_slot_ms``, ``prefill_chunk``, ``prefill_ms_per_token``,
``context_ms_per_token``, ``overhead_ms``,
``timeout_s``), the `MockConfig` fields other than ``physics``,
``time_scale`` and ``api_key`` (``rpm``, ``tpm``, ``rate_window``, ``quota_tokens``,
``error_rate``, ``hang_rate``, ``drop_rate``, ``capacity_loss``, ``outages``, ``seed``,
``default_output_tokens``, ``model``, ``context_tokens``, ``batch_turnaround_s``,
``batch_turnaround_sigma``, ``batch_failure_rate``, ``batch_expiry_rate``,
``batch_window_s``), and ``api_key_env``: the name of
an environment variable holding the endpoint's API key (keys never sit in the file). Bad
input is a ``ValueError`` naming the file, the endpoint and the key.
"""

from __future__ import annotations

import math
import os
import re
import time
import tomllib
from collections.abc import Awaitable, Callable, Iterator, Mapping
from dataclasses import dataclass, fields, replace
from pathlib import Path
from types import MappingProxyType
from typing import Any, Final

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Mount, Route

from mockprovider.app import MockConfig, _http_error, create_app
from mockprovider.driver import ClockOrigin
from mockprovider.metrics import metrics_endpoint, metrics_registry
from mockprovider.physics import PhysicsParams, profile
from mockprovider.stats import MockStats

__all__ = [
    "ENDPOINT_KEYS",
    "FLEET_KEYS",
    "FleetConfig",
    "FleetEndpoint",
    "create_fleet_app",
    "fleet_from_dict",
    "load_fleet",
]

_NAME: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9._~-]{0,63}")
_RESERVED: Final = frozenset({"v1"})  # the root's own /v1/mock/fleet
_PHYSICS_KEYS: Final = tuple(f.name for f in fields(PhysicsParams))
_CONFIG_KEYS: Final = tuple(
    f.name for f in fields(MockConfig) if f.name not in ("physics", "time_scale", "api_key")
)

ENDPOINT_KEYS: Final = frozenset({"name", "profile", "api_key_env", *_PHYSICS_KEYS, *_CONFIG_KEYS})
"""The keys an ``[[endpoint]]`` table may hold."""
FLEET_KEYS: Final = frozenset({"time_scale", "endpoint"} | (ENDPOINT_KEYS - {"name"}))
"""The keys the top level may hold (every endpoint key but ``name`` is a default)."""


def _is_real(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


@dataclass(frozen=True, slots=True, kw_only=True)
class FleetEndpoint:
    """One named endpoint of a fleet.

    Attributes:
        name: Its path prefix: 1-64 letters, digits, ``.``, ``_``, ``~`` or ``-``, starting
            with a letter or digit (URL-path-safe); not ``v1`` (the root's own routes).
        config: Its mock provider's settings.
    """

    name: str
    config: MockConfig

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not _NAME.fullmatch(self.name):
            raise ValueError(
                f"name={self.name!r} must be 1-64 letters, digits, '.', '_', '~' or '-', "
                "starting with a letter or digit (a URL path segment)"
            )
        if self.name in _RESERVED:
            raise ValueError(f"name={self.name!r} is reserved for the fleet's own routes")
        if not isinstance(self.config, MockConfig):
            raise ValueError(f"config={self.config!r} must be a MockConfig")

    @property
    def base_path(self) -> str:
        """The path an OpenAI client's ``base_url`` ends with: ``/NAME/v1``."""
        return f"/{self.name}/v1"


@dataclass(frozen=True, slots=True, kw_only=True)
class FleetConfig:
    """Several mock endpoints served on one port, on one clock.

    Attributes:
        endpoints: The endpoints, at least one, with distinct names; all share one
            ``time_scale`` (a fleet runs on one clock).
    """

    endpoints: tuple[FleetEndpoint, ...]

    def __post_init__(self) -> None:
        if not isinstance(self.endpoints, tuple) or not self.endpoints:
            raise ValueError(f"endpoints={self.endpoints!r} must be a non-empty tuple")
        seen: set[str] = set()
        for endpoint in self.endpoints:
            if not isinstance(endpoint, FleetEndpoint):
                raise ValueError(f"endpoints: {endpoint!r} must be a FleetEndpoint")
            if endpoint.name in seen:
                raise ValueError(f"endpoints: duplicate endpoint name {endpoint.name!r}")
            seen.add(endpoint.name)
        scales = {e.config.time_scale for e in self.endpoints}
        if len(scales) > 1:
            each = ", ".join(f"{e.name}={e.config.time_scale!r}" for e in self.endpoints)
            raise ValueError(f"time_scale must be the same for every endpoint (one clock): {each}")

    def __iter__(self) -> Iterator[FleetEndpoint]:
        return iter(self.endpoints)

    def __len__(self) -> int:
        return len(self.endpoints)

    @property
    def time_scale(self) -> float:
        """Virtual seconds per wall second, shared by every endpoint."""
        return float(self.endpoints[0].config.time_scale)

    @property
    def names(self) -> tuple[str, ...]:
        """The endpoints' names, in order."""
        return tuple(e.name for e in self.endpoints)

    def config(self, name: str) -> MockConfig:
        """The settings of endpoint ``name``.

        Raises:
            KeyError: No endpoint has that name.
        """
        for endpoint in self.endpoints:
            if endpoint.name == name:
                return endpoint.config
        raise KeyError(name)


def load_fleet(
    path: str | os.PathLike[str], *, environ: Mapping[str, str] | None = None
) -> FleetConfig:
    """Read a fleet from a TOML file (the schema is in the module docstring).

    Args:
        path: The TOML file.
        environ: Where ``api_key_env`` variables are looked up (default ``os.environ``).

    Raises:
        OSError: The file cannot be read.
        ValueError: The file is not TOML or breaks the schema; the message starts with the
            file's path and names the endpoint and the key.
    """
    source = Path(path)
    try:
        with source.open("rb") as file:
            data = tomllib.load(file)
        return fleet_from_dict(data, environ=environ)
    except ValueError as exc:  # tomllib.TOMLDecodeError is a ValueError too
        raise ValueError(f"{source}: {exc}") from exc


def fleet_from_dict(
    data: Mapping[str, Any], *, environ: Mapping[str, str] | None = None
) -> FleetConfig:
    """Build a fleet from the parsed TOML document (see `load_fleet`).

    Raises:
        ValueError: The document breaks the schema (the message names the endpoint and key).
    """
    _no_unknown_keys(data, FLEET_KEYS, "top level")
    time_scale = data.get("time_scale", 1.0)
    if not _is_real(time_scale) or not math.isfinite(time_scale) or time_scale <= 0:
        raise ValueError(f"time_scale={time_scale!r} must be a finite number > 0")
    seed = data.get("seed", 0)
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise ValueError(f"seed={seed!r} must be an integer")
    tables = data.get("endpoint")
    if tables is None:
        raise ValueError("no endpoints: add at least one [[endpoint]] table with a name")
    if not isinstance(tables, list) or not all(isinstance(t, dict) for t in tables):
        raise ValueError("endpoint must be an array of tables: write [[endpoint]], not [endpoint]")
    if not tables:
        raise ValueError("no endpoints: add at least one [[endpoint]] table with a name")
    defaults = {k: v for k, v in data.items() if k not in ("time_scale", "seed", "endpoint")}
    env = os.environ if environ is None else environ
    endpoints = []
    for index, table in enumerate(tables):
        name = table.get("name")
        where = f"endpoint #{index + 1}" if name is None else f"endpoint {name!r}"
        if name is None:
            raise ValueError(f"{where}: name is required")
        if "time_scale" in table:
            raise ValueError(f"{where}: time_scale is fleet-wide; set it at the top level")
        _no_unknown_keys(table, ENDPOINT_KEYS, where)
        try:
            config = _endpoint_config(
                {**defaults, **table}, time_scale=time_scale, seed=seed + index, environ=env
            )
            endpoints.append(FleetEndpoint(name=name, config=config))
        except ValueError as exc:
            raise ValueError(f"{where}: {exc}") from exc
    return FleetConfig(endpoints=tuple(endpoints))


def _no_unknown_keys(table: Mapping[str, Any], known: frozenset[str], where: str) -> None:
    unknown = sorted(set(table) - known)
    if unknown:
        raise ValueError(
            f"{where}: unknown key{'s' if len(unknown) > 1 else ''} "
            f"{', '.join(map(repr, unknown))}; known keys: {', '.join(sorted(known))}"
        )


def _tupled(value: Any) -> Any:
    """TOML arrays as tuples (``outages``, ``capacity_loss``), recursively."""
    return tuple(_tupled(v) for v in value) if isinstance(value, list) else value


def _endpoint_config(
    keys: dict[str, Any], *, time_scale: float, seed: int, environ: Mapping[str, str]
) -> MockConfig:
    keys.pop("name")
    name = keys.pop("profile", "default")
    if not isinstance(name, str):
        raise ValueError(f"profile={name!r} must be a profile name (a string)")
    physics = replace(profile(name), **{k: keys.pop(k) for k in _PHYSICS_KEYS if k in keys})
    api_key: str | None = None
    variable = keys.pop("api_key_env", None)
    if variable is not None:
        if not isinstance(variable, str) or not variable:
            raise ValueError(f"api_key_env={variable!r} must be an environment variable name")
        api_key = environ.get(variable)
        if not api_key:
            raise ValueError(f"api_key_env: environment variable {variable} is unset or empty")
    keys.setdefault("seed", seed)
    settings = {k: _tupled(v) for k, v in keys.items()}
    return MockConfig(physics=physics, time_scale=time_scale, api_key=api_key, **settings)


def create_fleet_app(fleet: FleetConfig, *, clock: Callable[[], float] | None = None) -> Starlette:
    """Build one ASGI app serving every endpoint of ``fleet`` under ``/NAME``.

    Each endpoint is ``create_app(endpoint.config, clock=clock, origin=shared)``, mounted at
    ``/NAME``; all share one `ClockOrigin`, so virtual time 0 is the
    fleet's first request to any endpoint. ``GET /v1/mock/fleet`` lists the endpoints (name,
    ``base_path``, model); unknown paths get an OpenAI-format 404.

    Args:
        fleet: The endpoints.
        clock: Wall seconds, monotonic (default ``time.monotonic``); ``anyio.current_time``
            under trio's ``MockClock`` runs the whole fleet in virtual time.

    ``app.state.endpoint_apps`` maps each name to its endpoint's app (whose
    ``state.mock_stats()`` gives that endpoint's `MockStats`), and
    ``app.state.fleet_stats()`` returns every endpoint's stats by name, at one instant.
    ``GET /metrics`` at the root serves every endpoint's Prometheus metrics with an
    ``endpoint`` label (``app.state.metrics_registry``; `mockprovider.metrics`).
    """
    wall = time.monotonic if clock is None else clock
    origin = ClockOrigin()
    apps = {e.name: create_app(e.config, clock=wall, origin=origin) for e in fleet.endpoints}
    listing = {
        "object": "list",
        "time_scale": fleet.time_scale,
        "data": [
            {"name": e.name, "base_path": e.base_path, "model": e.config.model}
            for e in fleet.endpoints
        ],
    }

    async def fleet_endpoint(request: Request) -> Response:
        return JSONResponse(listing)

    def fleet_stats() -> dict[str, MockStats]:
        return {name: app.state.mock_stats() for name, app in apps.items()}

    registry = metrics_registry([(n, a.state.metrics_snapshot) for n, a in apps.items()])
    routes: list[BaseRoute] = [
        Route("/v1/mock/fleet", fleet_endpoint, methods=["GET"]),
        Route("/metrics", metrics_endpoint(registry), methods=["GET"]),
    ]
    routes += [Mount(f"/{name}", app=app) for name, app in apps.items()]
    handler: Callable[[Request, Exception], Response | Awaitable[Response]] = _http_error
    root = Starlette(routes=routes, exception_handlers={HTTPException: handler})
    root.state.endpoint_apps = MappingProxyType(apps)
    root.state.fleet_stats = fleet_stats
    root.state.metrics_registry = registry
    return root
