"""The gateway file read: TOML tables into one checked `GatewayConfig`.

The file's tables, fields and rules are `semisched.gateway.config`'s (its module
docstring): here each table is read (``[gateway]``, ``[budget]``, ``[tenants]``
and ``[[tenant]]`` with their key hashes and service tiers, ``[[spend_cap]]``,
``[priority]`` and ``[[class]]`` through `semisched.gateway.priority_config`,
the fleet's own tables through `semisched.fleet.fleetfile`), an unknown table or
field refused naming the file (rule 1), and the ``[gateway]`` values overridden
by the flags' (rule 4). `read_toml` parses a file, `config_from_dict` builds the
config from parsed TOML (the CLI's flags make one without a file),
`load_config` does both.

What this module is not: it checks no value's range (`GatewayConfig` does when
it is built), opens no socket and reads no upstream key.
"""

from __future__ import annotations

import os
import tomllib
from collections.abc import Mapping, Sequence
from typing import Any, Final

from semisched.core.config import BudgetConfig
from semisched.core.spend import SpendCap
from semisched.core.tenants.config import TenantConfig, TenantSpec
from semisched.fleet.fleetfile import FLEET_FIELDS, fleet_from_dict
from semisched.gateway.config import GatewayConfig, GatewayConfigError
from semisched.gateway.keys import check_hash
from semisched.gateway.priority_config import known_fields, read_settings

__all__ = ["GATEWAY_FIELDS", "config_from_dict", "load_config", "read_toml"]

#: Keys of ``[gateway]``.
GATEWAY_FIELDS: Final = (
    "host", "port", "preset", "max_inflight", "max_pending", "grace_s", "retry_after_s",
    "state", "namespace", "priors", "models", "timeout_s", "max_request_s",
    "max_retry_after_s", "auth", "max_body_bytes", "max_json_depth", "max_header_bytes",
    "header_timeout_s", "body_timeout_s", "keepalive_timeout_s", "max_connections",
)  # fmt: skip
_TOP: Final = (*FLEET_FIELDS, "gateway", "budget", "tenants", "tenant", "class", "priority",
               "spend_cap")  # fmt: skip
_SPEND_CAP: Final = ("usd", "per", "tenant")
_TENANTS: Final = ("policy", "default", "half_life_s", "headroom")
_TENANT: Final = ("name", "weight", "service", "rpm", "tpm", "max_concurrency", "default_class",
                  "key_sha256", "service_tiers", "key_classes", "deadline_s")  # fmt: skip
_BUDGET: Final = ("rpm", "tpm", "window_s", "margin_s", "adapt")


def _fail(message: str) -> GatewayConfigError:
    return GatewayConfigError(message)


def _table(where: str, data: object, known: Sequence[str]) -> dict[str, Any]:
    """An optional table's known fields (`known_fields`; absent: none)."""
    if data is None:
        return {}
    try:
        return known_fields(where, data, known)
    except ValueError as exc:
        raise _fail(str(exc)) from None


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
        for name in ("service_tiers", "key_classes", "deadline_s"):
            table.pop(name, None)  # read by _service_tiers and read_settings
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


def _service_tiers(where: str, data: dict[str, Any]) -> dict[str, tuple[str, ...]]:
    """Each ``[[tenant]]``'s ``service_tiers``: a list of non-empty strings."""
    tiers: dict[str, tuple[str, ...]] = {}
    for i, table in enumerate(data.get("tenant") or [], 1):
        value = table.get("service_tiers") if isinstance(table, dict) else None
        if value is None:
            continue
        if not isinstance(value, list) or not all(isinstance(t, str) and t for t in value):
            raise _fail(f"{where}: tenant #{i}: service_tiers={value!r} must be a list of "
                        'service tier names, e.g. ["priority"]')  # fmt: skip
        tiers[str(table.get("name"))] = tuple(value)
    return tiers


def config_from_dict(
    data: Mapping[str, Any], *, where: str = "gateway", **overrides: Any
) -> GatewayConfig:
    """A `GatewayConfig` from parsed TOML; ``overrides`` replace ``[gateway]`` values.

    Raises:
        GatewayConfigError: Rules 1-3 (`semisched.gateway.config`), naming ``where``
            and the field.
    """
    data = dict(data)
    for key in data:
        if key not in _TOP:
            raise _fail(f"{where}: unknown table or field {key!r} (known: {', '.join(_TOP)})")
    gateway = _table(f"{where}: [gateway]", data.get("gateway"), GATEWAY_FIELDS)
    budget_table = _table(f"{where}: [budget]", data.get("budget"), _BUDGET)
    tenants, keys = _tenants(where, data)
    service_tiers = _service_tiers(where, data)
    try:
        priority = read_settings(data, keys)
    except (ValueError, TypeError) as exc:
        raise _fail(f"{where}: {exc}") from None
    fleet = fleet_from_dict({k: v for k, v in data.items() if k in FLEET_FIELDS}, where=where)
    if "models" in gateway:
        gateway["models"] = tuple(gateway["models"])
    gateway.update({k: v for k, v in overrides.items() if v is not None})
    try:
        budget = BudgetConfig(**budget_table) if budget_table else None
        caps = _spend_caps(where, data.get("spend_cap", []), tenants)
        return GatewayConfig(fleet=fleet, keys=keys, tenants=tenants, budget=budget,
                             service_tiers=service_tiers, priority=priority,
                             spend_caps=caps, **gateway)  # fmt: skip
    except GatewayConfigError as exc:
        raise _fail(f"{where}: {exc}") from None
    except (ValueError, TypeError) as exc:
        raise _fail(f"{where}: {exc}") from None


def _spend_caps(where: str, tables: object, tenants: TenantConfig | None) -> tuple[SpendCap, ...]:
    """The ``[[spend_cap]]`` tables, checked; a tenant a cap names must be declared."""
    if not isinstance(tables, list):
        raise _fail(f"{where}: 'spend_cap' must be an array of tables ([[spend_cap]])")
    names = set() if tenants is None else {t.name for t in tenants.tenants}
    caps = []
    for i, table in enumerate(tables, 1):
        cap = SpendCap(**_table(f"{where}: spend_cap #{i}", table, _SPEND_CAP))
        if cap.tenant is not None and cap.tenant not in names:
            raise _fail(f"{where}: spend_cap #{i}: tenant={cap.tenant!r} is not a [[tenant]]")
        caps.append(cap)
    return tuple(caps)


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
    """Read and check the gateway file at ``path`` (`config_from_dict`).

    Raises:
        GatewayConfigError: Unreadable, not TOML, or breaking the rules of
            `semisched.gateway.config`.
    """
    return config_from_dict(read_toml(path), where=os.fspath(path), **overrides)
