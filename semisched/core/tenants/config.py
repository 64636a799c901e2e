"""Tenants as configuration: who shares this scheduler, with what entitlement and class.

The token pools of "Token Management in Multi-Tenant AI Inference Platforms",
client-side. A *tenant* is a customer, team or feature sending through one
scheduler (often over one API key). Each has an *entitlement* (a ``weight``:
its share of what the scheduler sends, plus optional hard caps on requests and
tokens per minute and on concurrency) and a *service class* with the meaning of
§3.2 of "Token Management in Multi-Tenant AI Inference Platforms", read for a
client:

==============  =========================================================
class           what it gets
==============  =========================================================
``guaranteed``  served before everyone else while inside its entitlement;
                overload control never sheds it there. Beyond it, it
                competes like ``elastic`` (give it caps to forbid bursts,
                the paper's "no burst").
``elastic``     its entitlement over time, through debt (below); may use
                idle share and is shed sooner while it does.
``best_effort`` surplus only: sent when no other tenant can send; shed
                first. No entitlement, no debt (the Token Management paper's *spot*).
==============  =========================================================

Entitlements are ``weight / sum(weights)`` over the guaranteed and elastic
tenants (they add up to 1; best-effort tenants are weighted among themselves).

Which tenant sends next is the tenant policy's choice
(`semisched.core.tenants.policies`), chosen by name through
`TenantConfig.policy`. Usage (the work tokens a tenant was served)
decays with ``half_life_s``: the tenant's *debt* is its decayed usage above its
entitlement's part of everyone's.

A request names its tenant (``Request.tenant``); one that names none goes to
`TenantConfig.default`. An undeclared name is an error, never silently a
default tenant: a typo must not change who pays. Values only; no I/O.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass

from semisched.core.checks import (
    check_choice,
    check_fraction,
    check_instance,
    check_int,
    check_named,
    check_number,
    check_str,
)
from semisched.core.registry import TENANT

__all__ = [
    "DEFAULT_TENANT",
    "TENANT_POLICY_NAMES",
    "ServiceClass",
    "TenantConfig",
    "TenantSpec",
]

#: The one tenant of a scheduler that declares none.
DEFAULT_TENANT = "default"

#: Valid ``TenantConfig.policy`` names: the tenant registry
#: (`semisched.core.registry`), which the policies of
#: `semisched.core.tenants.policies` fill under their ``name`` as they load.
TENANT_POLICY_NAMES: Mapping[str, type] = TENANT


class ServiceClass(enum.Enum):
    """A tenant's service class (the Token Management paper §3.2; module table)."""

    GUARANTEED = "guaranteed"
    ELASTIC = "elastic"
    BEST_EFFORT = "best_effort"


@dataclass(frozen=True, slots=True, kw_only=True)
class TenantSpec:
    """One tenant and its entitlement.

    Attributes:
        name: What ``submit(..., tenant=)`` and ``Request.tenant`` call it.
        weight: Relative share of what the scheduler sends (> 0).
        service: Its `ServiceClass` (or the class's value, e.g. ``"guaranteed"``).
        rpm: At most this many requests sent per minute (``None``: no cap).
        tpm: At most this many tokens (prompt plus ``max_tokens``, else the
            prior's p90, as a provider counts them) sent per minute.
        max_concurrency: At most this many requests in flight at once.
        default_class: The scheduling class of this tenant's requests that name
            none (``None``: chosen from the request's predicted size).
    """

    name: str
    weight: float = 1.0
    service: ServiceClass | str = ServiceClass.ELASTIC
    rpm: int | None = None
    tpm: int | None = None
    max_concurrency: int | None = None
    default_class: str | None = None

    def __post_init__(self) -> None:
        check_str("name", self.name)
        check_str("default_class", self.default_class, optional=True)
        check_number("weight", self.weight, minimum=0, strict_min=True)
        if isinstance(self.service, str):
            check_choice("service", self.service, [s.value for s in ServiceClass])
            object.__setattr__(self, "service", ServiceClass(self.service))
        check_instance("service", self.service, ServiceClass)
        check_int("rpm", self.rpm, minimum=1, optional=True)
        check_int("tpm", self.tpm, minimum=1, optional=True)
        check_int("max_concurrency", self.max_concurrency, minimum=1, optional=True)

    @property
    def has_entitlement(self) -> bool:
        """Guaranteed and elastic tenants are entitled to a share; best-effort ones are not."""
        return self.service is not ServiceClass.BEST_EFFORT


@dataclass(frozen=True, slots=True, kw_only=True)
class TenantConfig:
    """The tenants sharing one scheduler and how the next sender is chosen.

    Attributes:
        tenants: The declared tenants (unique names, at least one).
        default: The tenant of a request that names none. ``None``: the only
            tenant when one is declared; with several, a request must name its own.
        policy: ``"fair_share"`` (the Token Management paper: classes, entitlements, debt; the
            default), ``"fifo"`` (tenant-blind: oldest request first) or
            ``"static_quota"`` (each tenant at most its share of
            ``max_inflight`` in flight, never lent: a fixed per-team cap), or a
            `TenantPolicy` subclass.
        half_life_s: Usage (and so debt) halves every this many seconds. Seed
            002's experiment decays debt with an EWMA of factor 0.7 per update
            and sees it return to near zero within ~50 s; 60 s is our default.
        headroom: ``fair_share`` only: the fraction of ``max_inflight`` (at
            least one request, never all of them) kept for tenants inside their entitlement while
            one of them has work or recent usage. A tenant beyond its
            entitlement, and every best-effort tenant, then sends only below
            ``max_inflight`` minus that, so a returning owner's request leaves
            at once instead of waiting for a borrower's answer, and a flood
            does not fill the provider's batch (which slows every request in
            it). It costs throughput while the owners have little work. 1/8:
            4 of the default 32 (``python -m bench tenants`` measures the
            trade-off, with and without it); 0 keeps nothing.
    """

    tenants: tuple[TenantSpec, ...] = (TenantSpec(name=DEFAULT_TENANT),)
    default: str | None = None
    policy: str | type = "fair_share"
    half_life_s: float = 60.0
    headroom: float = 0.125

    def __post_init__(self) -> None:
        if isinstance(self.tenants, list):
            object.__setattr__(self, "tenants", tuple(self.tenants))
        names = check_named("tenants", self.tenants, TenantSpec, "tenant")
        check_str("default", self.default, optional=True)
        if self.default is not None and self.default not in names:
            raise ValueError(f"default={self.default!r} must be one of the tenants {names}")
        if isinstance(self.policy, type):
            if not isinstance(getattr(self.policy, "name", None), str):
                raise ValueError(f"policy={self.policy!r} must have a str class attribute 'name'")
        else:
            check_choice("policy", self.policy, TENANT_POLICY_NAMES)
        check_number("half_life_s", self.half_life_s, minimum=0, strict_min=True)
        check_fraction("headroom", self.headroom, strict_max=True)

    @property
    def names(self) -> tuple[str, ...]:
        """The declared tenants' names, in order."""
        return tuple(t.name for t in self.tenants)

    def default_class(self, name: str | None) -> str | None:
        """The ``default_class`` of the tenant a request naming ``name`` belongs to
        (``None``: it has none, or no tenant applies)."""
        if not any(t.default_class for t in self.tenants):
            return None
        try:
            tenant = self.tenant_for(name)
        except ValueError:
            return None
        return next(t.default_class for t in self.tenants if t.name == tenant)

    def tenant_for(self, name: str | None) -> str:
        """The tenant a request naming ``name`` (``None`` or ``""``: none) belongs to.

        Raises:
            ValueError: ``name`` is not declared, or it is missing and no default applies.
        """
        if name:
            for spec in self.tenants:
                if spec.name == name:
                    return name
            names = list(self.names)
            raise ValueError(f"tenant={name!r} must be one of the declared tenants {names}")
        if self.default is not None:
            return self.default
        if len(self.tenants) == 1:
            return self.tenants[0].name
        raise ValueError(
            f"tenant is required: the declared tenants are {list(self.names)} and "
            "TenantConfig.default names none"
        )
