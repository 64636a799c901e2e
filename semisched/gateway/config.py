"""The gateway's configuration: a TOML file, flags for the simple case, one checked value.

A gateway file is a fleet file (:mod:`semisched.fleet.fleetfile`: ``routing``,
``[routing_options]``, ``[[endpoint]]`` tables, each endpoint's upstream key
named by ``key_env``) with the gateway's own tables beside it::

    routing = "least_outstanding"          # top-level keys first (TOML)

    [gateway]
    port = 8080
    max_inflight = 64                      # sends in flight at once, all upstreams
    grace_s = 30                           # SIGTERM: how long in-flight calls may finish
    # state = "redis://127.0.0.1:6379/0"   # share budgets and health across replicas

    [budget]                               # the fleet's shared limits
    rpm = 500
    tpm = 200000

    [tenants]
    policy = "fair_share"

    [[tenant]]
    name = "web"
    weight = 3
    service = "guaranteed"
    key_sha256 = ["<sha256 of a gateway key>"]

    [[endpoint]]
    name = "openai"
    base_url = "https://api.openai.com/v1"
    key_env = "OPENAI_API_KEY"

Rules:

1. Unknown tables and fields are errors naming the file and the field; a
   ``[[tenant]]`` takes :class:`~semisched.core.tenants.config.TenantSpec`'s
   fields plus ``key_sha256`` (a hash or a list of hashes).
2. The file holds hashes of gateway keys, never keys; a value that is not 64
   hex digits is refused without being repeated. One key belongs to one tenant.
3. Without keys the gateway refuses to start unless ``auth = false``
   (``--no-auth``): every caller is then the default tenant.
4. Flags override the file's ``[gateway]`` values; ``--upstream URL`` is a
   one-endpoint fleet instead of a file (not both). ``--key TENANT=SHA256``
   adds a key (and the tenant, with weight 1, when the file has none of that name).
5. Upstream keys are read from the environment when the gateway starts
   (:func:`semisched.fleet.fleetfile.build_endpoints`), never stored here.

What this module is not: it opens no socket and reads no upstream key.
"""

from __future__ import annotations

import os
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Any, Final

from semisched.core.config import PRESETS, BudgetConfig, SchedulerConfig, preset
from semisched.core.errors import SemischedError
from semisched.core.tenants.config import TenantConfig, TenantSpec
from semisched.fleet.fleetfile import FLEET_FIELDS, FleetFile, fleet_from_dict
from semisched.gateway.keys import check_hash
from semisched.priors.default import PRIOR_CHOICES

__all__ = ["GATEWAY_FIELDS", "GatewayConfig", "GatewayConfigError", "config_from_dict",
           "load_config", "read_toml"]  # fmt: skip

#: Keys of ``[gateway]``.
GATEWAY_FIELDS: Final = ("host", "port", "preset", "max_inflight", "max_pending", "grace_s",
                         "retry_after_s", "state", "namespace", "priors", "models",
                         "timeout_s", "auth")  # fmt: skip
_TOP: Final = (*FLEET_FIELDS, "gateway", "budget", "tenants", "tenant")
_TENANTS: Final = ("policy", "default", "half_life_s", "headroom")
_TENANT: Final = ("name", "weight", "service", "rpm", "tpm", "max_concurrency", "key_sha256")
_BUDGET: Final = ("rpm", "tpm", "window_s", "margin_s", "adapt")


class GatewayConfigError(SemischedError, ValueError):
    """The gateway's file or flags are not usable; the message names the culprit."""


@dataclass(frozen=True, kw_only=True)
class GatewayConfig:
    """Everything ``semisched serve`` runs with (module rules).

    Attributes:
        fleet: The upstreams (a fleet file's endpoints and routing).
        keys: ``{sha256 hex: tenant}`` of the gateway keys.
        tenants: The tenants, or ``None`` (one default tenant).
        auth: Require a key (``False``: ``--no-auth``, everyone the default tenant).
        host, port: Where to listen.
        preset: The scheduler preset.
        max_inflight: Sends in flight at once over the fleet (``None``: the preset's).
        max_pending: Requests held at once (queued or in flight); beyond: 429.
        budget: The fleet's shared RPM/TPM budget, or ``None``.
        state: A Redis URL shared by the replicas, or ``None`` (in-process).
        namespace: The state's key namespace.
        priors: ``heuristic`` (default: no model loaded), ``auto`` or ``learned``.
        models: Model ids ``GET /v1/models`` lists (empty: the endpoints' own lists).
        grace_s: After SIGTERM, how long calls in flight may finish.
        retry_after_s: ``Retry-After`` of the 503 answered while shutting down.
        timeout_s: An upstream call's read timeout.
    """

    fleet: FleetFile
    keys: Mapping[str, str] = field(default_factory=dict)
    tenants: TenantConfig | None = None
    auth: bool = True
    host: str = "127.0.0.1"
    port: int = 8080
    preset: str = "final_adrr_olc"
    max_inflight: int | None = None
    max_pending: int | None = 10_000
    budget: BudgetConfig | None = None
    state: str | None = None
    namespace: str = "semisched"
    priors: str = "heuristic"
    models: tuple[str, ...] = ()
    grace_s: float = 30.0
    retry_after_s: float = 1.0
    timeout_s: float = 600.0

    def __post_init__(self) -> None:
        object.__setattr__(self, "keys", MappingProxyType(dict(self.keys)))
        _check(self)

    def scheduler_config(self) -> SchedulerConfig:
        """The scheduler's config: the preset with the limits, tenants and routing put in."""
        config = preset(self.preset)
        changes: dict[str, Any] = {"budget": self.budget}
        if self.max_inflight is not None:
            changes["max_inflight"] = self.max_inflight
        if self.tenants is not None:
            changes["tenants"] = self.tenants
        if self.fleet.routing is not None:
            changes["routing"] = self.fleet.routing
        return replace(config, **changes)

    def default_tenant(self) -> str:
        """The tenant of a caller without a key (``--no-auth``)."""
        return "" if self.tenants is None else self.tenants.tenant_for(None)


def _fail(message: str) -> GatewayConfigError:
    return GatewayConfigError(message)


def _check(c: GatewayConfig) -> None:
    """Rules 2 and 3, and each value's range (``GatewayConfigError`` naming the field)."""
    if c.preset not in PRESETS:
        raise _fail(f"preset={c.preset!r} must be one of {sorted(PRESETS)}")
    if c.priors not in PRIOR_CHOICES:
        raise _fail(f"priors={c.priors!r} must be one of {list(PRIOR_CHOICES)}")
    if not 0 <= c.port <= 65535:
        raise _fail(f"port={c.port!r} must be in 0..65535")
    for name in ("grace_s", "retry_after_s", "timeout_s"):
        value = getattr(c, name)
        if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
            raise _fail(f"{name}={value!r} must be a number of seconds >= 0")
    for name in ("max_inflight", "max_pending"):
        value = getattr(c, name)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int)
                                  or value < 1):  # fmt: skip
            raise _fail(f"{name}={value!r} must be an integer >= 1")
    if c.state is not None and not c.state.startswith(("redis://", "rediss://", "unix://")):
        raise _fail(f"state={c.state!r} must be a redis:// URL")
    names = () if c.tenants is None else c.tenants.names
    for tenant in c.keys.values():
        if tenant not in names:
            raise _fail(f"a key belongs to tenant {tenant!r}, which is not declared")
    if c.auth and not c.keys:
        raise _fail("no gateway keys: give each [[tenant]] a key_sha256 (or --key "
                    "TENANT=SHA256), or run without authentication with --no-auth")  # fmt: skip
    if not c.auth:
        try:
            c.default_tenant()
        except ValueError:
            raise _fail("--no-auth with several tenants needs [tenants] default") from None


def _table(where: str, data: object, known: Sequence[str]) -> dict[str, Any]:
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise _fail(f"{where} must be a table")
    for key in data:
        if key not in known:
            raise _fail(f"{where}: unknown field {key!r} (known: {', '.join(known)})")
    return dict(data)


def _hashes(where: str, value: object) -> list[str]:
    items = [value] if isinstance(value, str) else value
    if not isinstance(items, list):
        raise _fail(f"{where}: key_sha256 must be a hash or a list of hashes")
    try:
        return [check_hash(item, where) for item in items]
    except ValueError as exc:
        raise _fail(str(exc)) from None


def _tenants(where: str, data: dict[str, Any]) -> tuple[TenantConfig | None, dict[str, str]]:
    """The ``[tenants]`` options and ``[[tenant]]`` tables, and the keys they hold."""
    options = _table(f"{where}: [tenants]", data.get("tenants"), _TENANTS)
    tables = data.get("tenant") or []
    if not isinstance(tables, list):
        raise _fail(f"{where}: 'tenant' must be an array of tables ([[tenant]])")
    specs: list[TenantSpec] = []
    keys: dict[str, str] = {}
    for i, table in enumerate(tables, 1):
        label = f"{where}: tenant #{i}"
        table = _table(label, table, _TENANT)
        hashes = _hashes(f"{label} ({table.get('name')!r})", table.pop("key_sha256", []))
        try:
            specs.append(TenantSpec(**table))
        except (ValueError, TypeError) as exc:
            raise _fail(f"{label}: {exc}") from None
        for h in hashes:
            if h in keys:
                raise _fail(f"{label}: a key hash is given twice (one key, one tenant)")
            keys[h] = specs[-1].name
    if not specs:
        if options:
            raise _fail(f"{where}: [tenants] needs at least one [[tenant]]")
        return None, keys
    try:
        return TenantConfig(tenants=tuple(specs), **options), keys
    except (ValueError, TypeError) as exc:
        raise _fail(f"{where}: [tenants]: {exc}") from None


def config_from_dict(
    data: Mapping[str, Any], *, where: str = "gateway", **overrides: Any
) -> GatewayConfig:
    """A :class:`GatewayConfig` from parsed TOML; ``overrides`` replace ``[gateway]`` values.

    Raises:
        GatewayConfigError: Rules 1-3, naming ``where`` and the field.
    """
    data = dict(data)
    for key in data:
        if key not in _TOP:
            raise _fail(f"{where}: unknown table or field {key!r} (known: {', '.join(_TOP)})")
    gateway = _table(f"{where}: [gateway]", data.get("gateway"), GATEWAY_FIELDS)
    budget_table = _table(f"{where}: [budget]", data.get("budget"), _BUDGET)
    tenants, keys = _tenants(where, data)
    fleet = fleet_from_dict({k: v for k, v in data.items() if k in FLEET_FIELDS}, where=where)
    if "models" in gateway:
        gateway["models"] = tuple(gateway["models"])
    gateway.update({k: v for k, v in overrides.items() if v is not None})
    try:
        budget = BudgetConfig(**budget_table) if budget_table else None
        return GatewayConfig(fleet=fleet, keys=keys, tenants=tenants, budget=budget, **gateway)
    except GatewayConfigError as exc:
        raise _fail(f"{where}: {exc}") from None
    except (ValueError, TypeError) as exc:
        raise _fail(f"{where}: {exc}") from None


def read_toml(path: str | os.PathLike[str]) -> dict[str, Any]:
    """The TOML at ``path``, parsed.

    Raises:
        GatewayConfigError: Unreadable or not TOML, naming the path.
    """
    where = os.fspath(path)
    try:
        with open(path, "rb") as handle:
            return tomllib.load(handle)
    except OSError as exc:
        raise _fail(f"cannot read gateway file {where!r}: {exc.strerror or exc}") from None
    except tomllib.TOMLDecodeError as exc:
        raise _fail(f"{where}: not valid TOML: {exc}") from None


def load_config(path: str | os.PathLike[str], **overrides: Any) -> GatewayConfig:
    """Read and check the gateway file at ``path`` (:func:`config_from_dict`).

    Raises:
        GatewayConfigError: Unreadable, not TOML, or breaking the module rules.
    """
    return config_from_dict(read_toml(path), where=os.fspath(path), **overrides)
