"""Tenants in ``semisched batch``: the ``--tenant`` options and each line's ``metadata.tenant``.

A job declares who shares it with repeated ``--tenant
NAME[,weight=W][,service=guaranteed|elastic|best_effort][,rpm=N][,tpm=N][,max-concurrency=N]``
options (`parse_tenant_option`), ``--tenant-policy`` and
``--default-tenant`` (`tenant_config`: a
[`TenantConfig`][semisched.core.tenants.config.TenantConfig]). Each input line names its
tenant in its body's ``metadata``:

```json
{"custom_id": "r1", "method": "POST", "url": "/v1/chat/completions",
 "body": {"model": "gpt-4o-mini", "messages": [...], "metadata": {"tenant": "acme"}}}
```

Rules:

1. ``metadata.tenant`` is the scheduler's, never the provider's:
   `take_tenant` removes it from the body before it is validated or
   sent, and drops ``metadata`` when nothing else is left in it.
2. A line naming an undeclared tenant, or naming none when no default applies
   (several tenants and no ``--default-tenant``), is an invalid line, reported
   with its number before anything is sent (`line_tenant_problem`). A
   typo must not change who pays. With no ``--tenant`` at all, a line naming
   a tenant is invalid too: the message says to declare it.
3. The summary has one line per tenant when more than one is declared
   (`tenant_lines`): what completed, was rejected or expired, the work
   tokens served and their share of the job's, next to its entitlement.

What this module is not: it schedules nothing (the core's tenant layer,
`semisched.core.tenants.lanes`, decides who sends next) and reads no file.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from types import MappingProxyType
from typing import Any, Final

from semisched.core.stats import TenantStats
from semisched.core.tenants.config import TENANT_POLICY_NAMES, TenantConfig, TenantSpec
from semisched.fleet.fleetfile import FleetFileError, option_pairs

__all__ = [
    "TENANT_KEY",
    "line_tenant_problem",
    "parse_tenant_option",
    "take_tenant",
    "tenant_config",
    "tenant_lines",
]

#: The key of a body's ``metadata`` that names the line's tenant.
TENANT_KEY: Final = "tenant"

#: ``parse_tenant_option`` keys after ``NAME``, and the field and type each sets.
_OPTION_KEYS: Final[Mapping[str, tuple[str, type]]] = MappingProxyType(
    {
        "weight": ("weight", float),
        "service": ("service", str),
        "rpm": ("rpm", int),
        "tpm": ("tpm", int),
        "max-concurrency": ("max_concurrency", int),
    }
)


def parse_tenant_option(text: str) -> TenantSpec:
    """The CLI's ``NAME[,weight=W][,service=CLASS][,rpm=N][,tpm=N][,max-concurrency=N]``
    (``_`` may stand for ``-`` in keys).

    Raises:
        ValueError: A malformed option, an unknown key or a bad value, naming it.
    """
    name, *pairs = text.split(",")
    name = name.strip()
    if not name or "=" in name:
        raise ValueError(f"--tenant {text!r}: must be NAME[,weight=W][,service=CLASS]...")
    where = f"tenant {name!r}"
    values: dict[str, Any] = {"name": name}
    try:
        option_pairs(pairs, _OPTION_KEYS, where, values)  # a FleetFileError is a ValueError
        return TenantSpec(**values)
    except (ValueError, TypeError) as exc:
        message = str(exc) if isinstance(exc, FleetFileError) else f"{where}: {exc}"
        raise ValueError(message) from None


def tenant_config(
    specs: Sequence[TenantSpec], *, policy: str | None = None, default: str | None = None
) -> TenantConfig | None:
    """The job's tenants (``None``: none declared, the scheduler's one default tenant).

    Args:
        specs: The ``--tenant`` options, in order.
        policy: ``--tenant-policy`` (``None``: ``fair_share``).
        default: ``--default-tenant``: the tenant of lines that name none.

    Raises:
        ValueError: ``policy`` or ``default`` without any tenant, two tenants
            with one name, an unknown policy, or a default not declared.
    """
    if not specs:
        flags = (("--tenant-policy", policy), ("--default-tenant", default))
        given = [f"{flag} {value}" for flag, value in flags if value is not None]
        if given:
            raise ValueError(f"{' and '.join(given)} needs at least one --tenant")
        return None
    if policy is not None and policy not in TENANT_POLICY_NAMES:
        raise ValueError(f"--tenant-policy {policy!r} must be one of {list(TENANT_POLICY_NAMES)}")
    try:
        return TenantConfig(tenants=tuple(specs), default=default, policy=policy or "fair_share")
    except ValueError as exc:
        raise ValueError(f"--tenant: {exc}") from None


def take_tenant(body: dict[str, Any]) -> str | None:
    """Remove ``metadata.tenant`` from ``body`` (module rule 1) and return it (``None``:
    the body names no tenant). ``body``'s own ``metadata`` is not changed: a copy
    without the key replaces it, or none when nothing else was in it.

    Raises:
        ValueError: ``metadata.tenant`` is not a non-empty string.
    """
    metadata = body.get("metadata")
    if not isinstance(metadata, Mapping) or TENANT_KEY not in metadata:
        return None
    rest = {k: v for k, v in metadata.items() if k != TENANT_KEY}
    if rest:
        body["metadata"] = rest
    else:
        del body["metadata"]
    tenant = metadata[TENANT_KEY]
    if not isinstance(tenant, str) or not tenant:
        raise ValueError(f"'body.metadata.tenant' {tenant!r} must be a non-empty string")
    return tenant


def line_tenant_problem(tenant: str | None, tenants: TenantConfig | None) -> str | None:
    """What is wrong with a line naming ``tenant`` (``None``: it names none) in a job
    declaring ``tenants`` (``None``: no ``--tenant``), or ``None`` when nothing is
    (module rule 2)."""
    if tenants is None:
        if tenant is None:
            return None
        return (
            f"'body.metadata.tenant' {tenant!r} is not declared: no tenants are "
            f"(declare it with --tenant {tenant})"
        )
    try:
        tenants.tenant_for(tenant)
    except ValueError:
        names = ", ".join(tenants.names)
        if tenant is None:
            return (
                f"'body.metadata.tenant' is missing: the job declares several tenants ({names}) "
                "and no --default-tenant"
            )
        return f"'body.metadata.tenant' {tenant!r} is not a declared tenant (--tenant: {names})"
    return None


def tenant_lines(tenants: Sequence[TenantStats]) -> list[str]:
    """One summary line per tenant, when more than one is declared (module rule 3).

    Its share is of the work tokens served over the whole job (not the
    scheduler's decayed share, which by the end of a job tells mostly who
    finished last), next to its entitlement.
    """
    if len(tenants) < 2:
        return []
    total = sum(t.served_tokens for t in tenants)
    return [
        f"  tenant {t.name} ({t.service}): completed {t.completed}, rejected {t.rejected}, "
        f"expired {t.expired}; served {t.served_tokens:.0f} work tokens ({t.output_tokens:.0f} "
        f"output), {t.served_tokens / total if total else 0.0:.0%} of the job's "
        f"(entitled {t.entitlement:.0%})"
        for t in tenants
    ]
