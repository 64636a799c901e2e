"""Configuration: frozen, keyword-only, validated dataclasses and the named presets.

Every knob of the three policy layers lives here with its default and where the
default comes from. Construction validates through `semisched.core.checks`:
a bad value raises ``ValueError`` naming the field (``f"{field}=... must be ..."``),
a nested config of the wrong class ``TypeError``. Policies are chosen by *name*
(``AllocationConfig.policy`` and friends), checked here against
`ALLOCATION_POLICY_NAMES` and friends when the config is built; the engine
resolves names through the read-only registries in
`semisched.core.allocation`, `semisched.core.ordering` and
`semisched.core.overload` and never branches on which one it runs.

Presets (Scheduling the Unschedulable §4.5–4.6 strategy names) are built by `preset`.

This module holds values only; it decides nothing and does no I/O.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Any

from semisched.core.buckets import Bucket
from semisched.core.checks import (
    check_choice,
    check_instance,
    check_int,
    check_named,
    check_positive,
)
from semisched.core.lifecycle import RetryPolicy
from semisched.core.policy_config import (
    ALLOCATION_POLICY_NAMES,
    DEFAULT_CLASSES,
    ORDERING_POLICY_NAMES,
    OVERLOAD_LEVELS,
    OVERLOAD_POLICY_NAMES,
    AllocationConfig,
    BudgetConfig,
    ClassSpec,
    OrderingConfig,
    OverloadConfig,
    SignalsConfig,
)
from semisched.core.routing_config import ROUTING_POLICY_NAMES, RoutingConfig
from semisched.core.tenants.config import TenantConfig

__all__ = [
    "ALLOCATION_POLICY_NAMES",
    "ORDERING_POLICY_NAMES",
    "OVERLOAD_LEVELS",
    "OVERLOAD_POLICY_NAMES",
    "PRESETS",
    "ROUTING_POLICY_NAMES",
    "AllocationConfig",
    "BudgetConfig",
    "ClassSpec",
    "OrderingConfig",
    "OverloadConfig",
    "RoutingConfig",
    "SchedulerConfig",
    "SignalsConfig",
    "preset",
]


@dataclass(frozen=True, kw_only=True)
class SchedulerConfig:
    """Everything the engine needs.

    Attributes:
        classes: The scheduling classes, in round-robin order.
        max_inflight: An optional ceiling on the requests in flight at once, over
            every endpoint. The scheduler's concurrency is the sum of its
            endpoints' limits (each endpoint's ``max_concurrency``, or the limit
            it learned: ``RoutingConfig.concurrency``); ``None`` (the default)
            adds no ceiling. With ``concurrency="fixed"`` and no caps, ``None``
            sends on arrival (direct dispatch).
        max_inflight_tokens: Optional budget on in-flight estimated tokens
            (p90 output + input); one request is always allowed through. The
            budget is checked against the request allocation and ordering
            picked: when it does not fit, sending waits for capacity rather
            than skipping to a smaller request of another class (no
            starvation of large requests by small ones).
        input_token_weight: Cost of one prompt token relative to one output
            token. 1/512: a prefill chunk of 512 tokens costs one iteration,
            like one decoded token (FleetOpt eq. 4).
        budget: Optional requests/tokens-per-window budget
            (`semisched.core.budget`); sends wait until it can pay.
        retry: What happens after a failed attempt
            (`semisched.core.lifecycle`): which failures are retried,
            how often, after what back-off; never past the deadline.
        routing: Which endpoint executes each send, circuit breakers and
            failover (`RoutingConfig`).
        tenants: Who shares this scheduler, with what entitlement and
            service class ([`TenantConfig`][semisched.core.tenants.config.TenantConfig];
            default: one tenant).
        allocation, ordering, overload, signals: Layer configs.
    """

    classes: tuple[ClassSpec, ...] = DEFAULT_CLASSES
    max_inflight: int | None = None
    max_inflight_tokens: float | None = None
    input_token_weight: float = 1.0 / 512.0
    budget: BudgetConfig | None = None
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    routing: RoutingConfig = field(default_factory=RoutingConfig)
    tenants: TenantConfig = field(default_factory=TenantConfig)
    allocation: AllocationConfig = field(default_factory=AllocationConfig)
    ordering: OrderingConfig = field(default_factory=OrderingConfig)
    overload: OverloadConfig = field(default_factory=OverloadConfig)
    signals: SignalsConfig = field(default_factory=SignalsConfig)

    def __post_init__(self) -> None:
        check_named("classes", self.classes, ClassSpec, "class")
        check_int("max_inflight", self.max_inflight, minimum=1, optional=True)
        check_positive("max_inflight_tokens", self.max_inflight_tokens, optional=True)
        check_positive("input_token_weight", self.input_token_weight, allow_zero=True)
        check_instance("budget", self.budget, BudgetConfig, optional=True)
        check_instance("retry", self.retry, RetryPolicy)
        check_instance("routing", self.routing, RoutingConfig)
        check_instance("tenants", self.tenants, TenantConfig)
        check_instance("allocation", self.allocation, AllocationConfig)
        check_instance("ordering", self.ordering, OrderingConfig)
        check_instance("overload", self.overload, OverloadConfig)
        check_instance("signals", self.signals, SignalsConfig)
        names = [c.name for c in self.classes]
        for tenant in self.tenants.tenants:
            if tenant.default_class is not None and tenant.default_class not in names:
                raise ValueError(f"tenant {tenant.name!r}: default_class="
                                 f"{tenant.default_class!r} must be one of {names}")  # fmt: skip
        guarded = sum(c.min_share or 0.0 for c in self.classes)
        if guarded >= 1.0:
            raise ValueError(f"the classes' min_share add up to {guarded:g}, must be < 1")

    def class_for(self, bucket: Bucket, tenant: str | None = None) -> str:
        """Default class of a request routed by ``bucket`` when the caller names none:
        its tenant's ``default_class`` when it has one, else the first interactive class
        for short requests and the first other class for the rest (the main paper's
        short versus heavy lanes)."""
        klass = self.tenants.default_class(tenant)
        if klass is not None:
            return klass
        if bucket is Bucket.SHORT:
            for spec in self.classes:
                if spec.interactive:
                    return spec.name
        for spec in self.classes:
            if not spec.interactive:
                return spec.name
        return self.classes[0].name

    def deadline_for(self, klass: str, asked_s: float | None) -> float | None:
        """The deadline (seconds from submission) of a request of ``klass`` whose call
        asked for ``asked_s`` (``None``: none): the sooner of that and the class's
        ``deadline_s``."""
        for spec in self.classes:
            if spec.name == klass and spec.deadline_s is not None:
                return spec.deadline_s if asked_s is None else min(asked_s, spec.deadline_s)
        return asked_s

    def with_(self, **changes: Any) -> SchedulerConfig:
        """Return a copy with fields replaced (validated again)."""
        return replace(self, **changes)


def _presets() -> dict[str, SchedulerConfig]:
    no_olc = OverloadConfig(policy="none")
    full = SchedulerConfig()
    return {
        # Send on arrival, no client queue: every request goes straight into
        # the provider (Scheduling the Unschedulable "direct naive dispatch").
        "direct_naive": SchedulerConfig(
            max_inflight=None,
            routing=RoutingConfig(concurrency="fixed"),
            allocation=AllocationConfig(policy="fifo"),
            ordering=OrderingConfig(policy="fifo"),
            overload=no_olc,
        ),
        # Fixed per-class in-flight quotas, FIFO inside a class: shares of a fixed
        # in-flight budget (the paper's 32), so the budget is told, not learned.
        "quota_tiered": SchedulerConfig(
            max_inflight=32,
            routing=RoutingConfig(concurrency="fixed"),
            allocation=AllocationConfig(policy="quota_tiered"),
            ordering=OrderingConfig(policy="fifo"),
            overload=no_olc,
        ),
        # Adaptive DRR + feasible-set ordering, no overload control.
        "adaptive_drr": SchedulerConfig(overload=no_olc),
        # The full stack: adaptive DRR + ordering + cost-ladder overload control.
        "final_adrr_olc": full,
        # Allocation swapped, ordering and overload unchanged (Scheduling the Unschedulable §4.6).
        "fair_queuing": full.with_(allocation=AllocationConfig(policy="fair_queuing")),
        "short_priority": full.with_(allocation=AllocationConfig(policy="short_priority")),
        # Beyond the paper: a batch job's makespan. One class, longest predicted
        # work first, nothing shed (every request of a batch is wanted).
        "batch_makespan": SchedulerConfig(
            classes=(ClassSpec(name="batch"),),
            allocation=AllocationConfig(policy="fifo"),
            ordering=OrderingConfig(policy="longest_first"),
            overload=no_olc,
        ),
        # The same under a rate budget: requests chosen so that neither the request
        # nor the token window idles while the other is full (longest first while
        # tokens are the long pole); LPT when no budget binds.
        "batch_packing": SchedulerConfig(
            classes=(ClassSpec(name="batch"),),
            allocation=AllocationConfig(policy="fifo"),
            ordering=OrderingConfig(policy="rate_packing"),
            overload=no_olc,
        ),
    }


class _Presets(Mapping[str, SchedulerConfig]):
    """The presets, built on first use: a config checks its policy names in the
    registries, which the policy modules (above this one) fill as they load."""

    __slots__ = ("_built",)

    def __init__(self) -> None:
        self._built: Mapping[str, SchedulerConfig] | None = None

    def _all(self) -> Mapping[str, SchedulerConfig]:
        if self._built is None:
            self._built = MappingProxyType(_presets())
        return self._built

    def __getitem__(self, name: str) -> SchedulerConfig:
        return self._all()[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._all())

    def __len__(self) -> int:
        return len(self._all())


#: Named strategies from Scheduling the Unschedulable (read-only: `preset` returns
#: changed copies).
PRESETS: Mapping[str, SchedulerConfig] = _Presets()


def preset(name: str, **changes: Any) -> SchedulerConfig:
    """Return the named preset, optionally with fields replaced.

    For example, ``preset("final_adrr_olc", max_inflight=16)``, or with tenants,
    ``preset("final_adrr_olc", tenants=TenantConfig(tenants=(...), default="web"))``.

    Args:
        name: A preset's name (`PRESETS`): ``direct_naive``, ``quota_tiered``,
            ``adaptive_drr``, ``final_adrr_olc`` (the default), ``fair_queuing``,
            ``short_priority``, ``batch_makespan``, ``batch_packing``.
        **changes: Fields of `SchedulerConfig` to replace (``budget=``, ``tenants=``,
            ``routing=``, ``retry=``, ``max_inflight=``, ...), validated again.

    Raises:
        ValueError: If ``name`` is not a preset, or a changed field is invalid.
        TypeError: A field that `SchedulerConfig` does not have.
    """
    check_choice("name", name, PRESETS)
    base = PRESETS[name]
    return base.with_(**changes) if changes else base
