"""What one ``semisched batch`` run is asked to do: its options, checked, and the scheduler
config they make.

What this module is not: it reads no file and sends nothing (`semisched.batch.run`).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from semisched.batch.input import ModelCheck
from semisched.batch.tier import TIERS
from semisched.core.checks import check_choice, check_instance, check_int, check_number, check_str
from semisched.core.config import PRESETS, BudgetConfig, RoutingConfig, SchedulerConfig, preset
from semisched.core.spend import Price
from semisched.core.tenants.config import TenantConfig
from semisched.fleet.fleetfile import EndpointDef, check_unique
from semisched.state.address import check_namespace, check_state_url

__all__ = ["BatchOptions"]


@dataclass(frozen=True, kw_only=True)
class BatchOptions:
    """What ``semisched batch`` was asked to do (see the CLI's ``--help``).

    The job goes to one endpoint (``base_url``) or to a fleet (``endpoints``:
    ``--endpoint`` options or a ``--fleet`` file); exactly one of the two.
    ``api_key_env`` names the key variable of ``base_url`` and of every
    endpoint without its own ``key_env``. ``routing`` replaces the preset's
    [`RoutingConfig`][semisched.core.config.RoutingConfig] (``--routing``, a fleet
    file's ``routing``); with one endpoint only its failure rules apply.
    ``state`` (a Redis URL) and ``namespace`` share the budgets (``--rpm``,
    ``--tpm``, ``--max-concurrency``, each endpoint's) with every other runner
    in the namespace (``--state``, ``--namespace``). ``tenants`` (``--tenant``,
    ``--tenant-policy``, ``--default-tenant``) replaces the preset's one tenant;
    each line names its own in ``metadata.tenant`` (`semisched.batch.tenants`).
    ``tier`` (``--tier``) chooses who answers each line: real-time through the scheduler,
    the provider's Batch API, or each line by its deadline (`semisched.batch.tier`,
    with ``batch_turnaround_s``, ``batch_safety`` and ``batch_poll_s``); ``price``
    (``--price``) is the one endpoint's (a fleet's are its endpoints').
    """

    input: Path
    output: Path
    base_url: str | None = None
    endpoints: tuple[EndpointDef, ...] = ()
    routing: RoutingConfig | None = None
    state: str | None = None
    namespace: str = "semisched"
    tenants: TenantConfig | None = None
    api_key_env: str = "OPENAI_API_KEY"
    model: str | None = None
    max_concurrency: int = 32
    rpm: int | None = None
    tpm: int | None = None
    deadline_s: float | None = None
    policy: str = "batch_packing"
    skip_invalid: bool = False
    retry_failed: bool = False
    priors: str = "auto"
    time_scale: float = 1.0
    grace_s: float = 10.0
    budget_margin_s: float | None = None
    max_attempts: int = 6
    window: int = 2000
    request_timeout_s: float = 600.0
    tier: str = "realtime"
    batch_turnaround_s: float = 3600.0
    batch_safety: float = 1.5
    batch_poll_s: float = 60.0
    price: Price | None = None

    def __post_init__(self) -> None:
        self._check_target()
        check_str("api_key_env", self.api_key_env)
        if self.state is not None:  # the command's --state, --namespace: exit 2 before any file
            check_state_url(self.state)
        check_namespace(self.namespace)
        check_instance("tenants", self.tenants, TenantConfig, optional=True)
        check_choice("policy", self.policy, PRESETS)
        check_choice("priors", self.priors, ("auto", "learned", "heuristic"))
        for name in ("max_concurrency", "window", "max_attempts"):
            check_int(name, getattr(self, name), minimum=1)
        check_number("deadline_s", self.deadline_s, minimum=0, strict_min=True, optional=True)
        for name in ("time_scale", "request_timeout_s"):
            check_number(name, getattr(self, name), minimum=0, strict_min=True)
        check_number("grace_s", self.grace_s, minimum=0)
        check_choice("tier", self.tier, TIERS)
        for name in ("batch_turnaround_s", "batch_poll_s"):
            check_number(name, getattr(self, name), minimum=0, strict_min=True)
        check_number("batch_safety", self.batch_safety, minimum=1)
        check_instance("price", self.price, Price, optional=True)
        if self.price is not None and self.endpoints:
            raise ValueError("price is the one endpoint's: a fleet's endpoints name their own")
        self.scheduler_config()  # the budget's own checks (rpm, tpm, margin)

    def _check_target(self) -> None:
        """Exactly one of ``base_url`` and ``endpoints``; the endpoints unique."""
        check_str("base_url", self.base_url, optional=True)
        check_instance("endpoints", self.endpoints, tuple)
        for i, endpoint in enumerate(self.endpoints):
            check_instance(f"endpoints[{i}]", endpoint, EndpointDef)
        if (self.base_url is None) == (not self.endpoints):
            raise ValueError(
                f"base_url={self.base_url!r} and endpoints=({len(self.endpoints)} given): "
                "give exactly one (--base-url, --endpoint or --fleet)"
            )
        check_unique(self.endpoints, "endpoints")
        check_instance("routing", self.routing, RoutingConfig, optional=True)

    def model_check(self) -> ModelCheck | None:
        """Whether the fleet serves a model, when every endpoint maps models (else ``None``:
        any model goes), and what it serves (for the invalid line's message)."""
        defs = self.endpoints
        if not defs or any(d.model_map is None for d in defs):
            return None
        served = "; ".join(f"{d.name}: {', '.join(sorted(d.model_map or ()))}" for d in defs)
        return (lambda model: any(model in (d.model_map or ()) for d in defs)), served

    def input_checks(self) -> dict[str, Any]:
        """The keyword arguments of `read_input` for this
        job: the default model, what the fleet serves, the declared tenants."""
        return {"default_model": self.model, "models": self.model_check(), "tenants": self.tenants}

    @property
    def fleet(self) -> bool:
        """Whether the job goes to a fleet of endpoints (not one ``base_url``)."""
        return bool(self.endpoints)

    @property
    def tiered(self) -> bool:
        """Whether the Batch API may answer lines (``tier`` is ``batch`` or ``auto``)."""
        return self.tier != "realtime"

    @property
    def margin_s(self) -> float:
        """The rate budget's transit margin: 1 s, and never under 100 ms of wall time
        (compressed time against the mock shrinks real transit jitter's allowance)."""
        if self.budget_margin_s is not None:
            return self.budget_margin_s
        return max(1.0, 0.1 * self.time_scale)

    def scheduler_config(self) -> SchedulerConfig:
        """The policy preset with this job's concurrency, rate budget, routing and tenants."""
        base = preset(self.policy)
        return replace(
            base,
            max_inflight=self.max_concurrency,
            budget=BudgetConfig(rpm=self.rpm, tpm=self.tpm, margin_s=self.margin_s),
            routing=base.routing if self.routing is None else self.routing,
            tenants=base.tenants if self.tenants is None else self.tenants,
        )
