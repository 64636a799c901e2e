"""The gateway's configuration: a TOML file, flags for the simple case, one checked value.

This module holds the value (`GatewayConfig`, checked when it is built) and the
file's rules below; `semisched.gateway.configfile` reads a file, or the flags,
into it (`load_config`, `config_from_dict`).

A gateway file is a fleet file (`semisched.fleet.fleetfile`: ``routing``,
``[routing_options]``, ``[[endpoint]]`` tables, each endpoint's upstream key
named by ``key_env``) with the gateway's own tables beside it:

```toml
routing = "least_outstanding"          # top-level keys first (TOML)

[gateway]
port = 8080
max_inflight = 64                      # sends in flight at once, all upstreams
grace_s = 30                           # SIGTERM: how long in-flight calls may finish
# state = "redis://127.0.0.1:6379/0"   # share budgets and health across replicas
# max_body_bytes = 16777216            # what a client may send: the limits' defaults
# max_connections = 10240              # (semisched.gateway.limits)

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

[[spend_cap]]                          # optional: US dollars per hour, day or month,
usd = 50                               # at the endpoints' prices ([[endpoint]] price)
per = "day"
# tenant = "web"                       # one tenant's; without: every request's

[[class]]                              # optional: replace the preset's classes
name = "interactive"
interactive = true
[[class]]
name = "batch"
tier = 1                               # served after tier 0 ...
min_share = 0.1                        # ... but never starved below a tenth
deadline_s = 120                       # not sent within 120 s: 429 deadline_shed

[priority]                             # optional: an integer priority, service_tier
levels = [[0, "interactive"], [100, "batch"]]
above = "batch"
service_tier = { priority = "interactive", flex = "batch" }
```

Rules:

1. Unknown tables and fields are errors naming the file and the field; a
   ``[[tenant]]`` takes [`TenantSpec`][semisched.core.tenants.config.TenantSpec]'s
   fields (``default_class`` included: the class of its requests that name
   none) plus ``key_sha256`` (a hash or a list of hashes), ``service_tiers``
   (the OpenAI ``service_tier`` values beyond ``auto``/``default`` its keys may
   send, e.g. ``["priority"]``; default none: `semisched.gateway.params`),
   ``key_classes`` (``{key hash: class}`` for one key's requests that name no
   class) and ``deadline_s`` (its requests' deadline when they name none).
2. The file holds hashes of gateway keys, never keys; a value that is not 64
   hex digits is refused without being repeated. One key belongs to one tenant.
3. Without keys the gateway refuses to start unless ``auth = false``
   (``--no-auth``): every caller is then the default tenant.
4. Flags override the file's ``[gateway]`` values; ``--upstream URL`` is a
   one-endpoint fleet instead of a file (not both). ``--key TENANT=SHA256``
   adds a key (and the tenant, with weight 1, when the file has none of that name).
5. Upstream keys are read from the environment when the gateway starts
   (`semisched.fleet.fleetfile.build_endpoints`), never stored here.
6. ``[[class]]`` tables ([`ClassSpec`][semisched.core.config.ClassSpec]'s fields and
   ``deadline_s``) replace the preset's classes; ``[priority]`` maps an integer
   ``priority`` (``levels``, ``above``) and ``service_tier`` to classes
   (`semisched.gateway.priority_config`). Every class named anywhere (a
   tenant's ``default_class`` included) must be declared: by ``[[class]]``,
   else by the preset (``interactive`` and ``batch``). A value the core refuses
   (a weight, the ``min_share`` adding up to 1 or more) is an error naming the
   file. How they apply to a request: `semisched.gateway.priority`.

What this module is not: it reads no file (`semisched.gateway.configfile` does),
opens no socket and reads no upstream key.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Any, Final

from semisched.core.config import PRESETS, BudgetConfig, SchedulerConfig, preset
from semisched.core.errors import SemischedError
from semisched.core.spend import SpendCap
from semisched.core.tenants.config import TenantConfig
from semisched.fleet.fleetfile import FleetFile
from semisched.gateway.priority_config import PrioritySettings
from semisched.priors.default import PRIOR_CHOICES

__all__ = ["GatewayConfig", "GatewayConfigError"]


class GatewayConfigError(SemischedError, ValueError):
    """The gateway's file or flags are not usable; the message names the culprit."""


@dataclass(frozen=True, kw_only=True)
class GatewayConfig:
    """Everything ``semisched serve`` runs with (module rules).

    Attributes:
        fleet: The upstreams (a fleet file's endpoints and routing).
        keys: ``{sha256 hex: tenant}`` of the gateway keys.
        tenants: The tenants, or ``None`` (one default tenant).
        service_tiers: ``{tenant: service tiers}`` each may ask the upstream for
            beyond ``auto``/``default`` (``[[tenant]] service_tiers``).
        priority: The classes, the ``[priority]`` maps, the keys' classes and the
            default deadlines (rule 6).
        auth: Require a key (``False``: ``--no-auth``, everyone the default tenant).
        host, port: Where to listen.
        preset: The scheduler preset.
        max_inflight: Sends in flight at once over the fleet (``None``: the preset's).
        max_pending: Requests held at once (queued or in flight); beyond: 429.
        budget: The fleet's shared RPM/TPM budget, or ``None``.
        spend_caps: ``[[spend_cap]]`` tables: US dollars per calendar hour, day or month,
            for a tenant or every request ([`SpendCap`][semisched.SpendCap]); a request that
            would pass one is answered 429 ``spend_cap_exceeded``.
        state: A Redis URL shared by the replicas, or ``None`` (in-process).
        namespace: The state's key namespace.
        priors: ``heuristic`` (default: no model loaded), ``auto`` or ``learned``.
        models: Model ids ``GET /v1/models`` lists (empty: the endpoints' own lists).
        grace_s: After SIGTERM, how long calls in flight may finish.
        retry_after_s: ``Retry-After`` of the 503 answered while shutting down, and
            the least of a 429 ``deadline_shed`` (otherwise the scheduler's estimate
            of how long its queue takes to drain).
        timeout_s: An upstream call's read timeout.
        max_request_s: The deadline of a request that names none
            (``x-semisched-deadline``), queue, retries and a stream's last chunk
            included: past it the answer is a 504 (``deadline_exceeded``; an SSE
            ``error`` event in a stream). 600 s, the OpenAI clients' own default
            timeout: a client that did not say otherwise has given up by then, and
            a hung upstream holds it no longer than that, however many retries.
        max_retry_after_s: The longest an upstream's ``Retry-After`` keeps its endpoint
            off for every tenant (then one request probes it) and a request's
            retry waits: 30 s (the core's ``RetryPolicy.max_retry_after_s``).
        max_body_bytes: A request body's limit (413 beyond). 16 MiB: a million-token
            text prompt (the largest context windows, ~4 MB of text) fits four times
            over, where nginx's 1 MB default would refuse long prompts; base64 images
            in messages can be larger (raise it for them).
        max_json_depth: A body's JSON nesting limit (400 beyond). 128: OpenAI's
            structured outputs allow 10 levels of schema nesting, about 40 JSON
            levels with ``anyOf`` and the body's own; at most 512, under Python's
            parser's recursion.
        max_header_bytes: The request line and headers' limit (431 beyond). 32 KiB,
            nginx's ``large_client_header_buffers`` (4 x 8 KiB) in all.
        header_timeout_s: Total time to receive a request's headers (408 beyond);
            nginx's ``client_header_timeout``, 60 s.
        body_timeout_s: Total time to receive a request's body once its headers
            are in (408 beyond). 60 s, nginx's ``client_body_timeout`` (which times
            each gap between reads; a total cannot be held open by a trickle); a
            full 16 MiB body needs about 2.2 Mbit/s.
        keepalive_timeout_s: How long an idle connection stays open between
            requests. 75 s, nginx's ``keepalive_timeout``: longer than the clients'
            own pool expiry (httpx 5 s) and a cloud load balancer's idle 60 s, so
            the gateway is not the one closing a connection a request is racing onto.
        max_connections: Open connections at once; one more is answered 503 and
            closed at once. 10,240: above ``max_pending``'s 10,000 (an HTTP/1.1
            connection carries one request at a time), so a full queue's 429
            stays the overload answer, with room for health checks and scrapes.
    """

    fleet: FleetFile
    keys: Mapping[str, str] = field(default_factory=dict)
    tenants: TenantConfig | None = None
    service_tiers: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    priority: PrioritySettings = field(default_factory=PrioritySettings)
    auth: bool = True
    host: str = "127.0.0.1"
    port: int = 8080
    preset: str = "final_adrr_olc"
    max_inflight: int | None = None
    max_pending: int | None = 10_000
    budget: BudgetConfig | None = None
    spend_caps: tuple[SpendCap, ...] = ()
    state: str | None = None
    namespace: str = "semisched"
    priors: str = "heuristic"
    models: tuple[str, ...] = ()
    grace_s: float = 30.0
    retry_after_s: float = 1.0
    timeout_s: float = 600.0
    max_request_s: float = 600.0
    max_retry_after_s: float = 30.0
    max_body_bytes: int = 16 * 1024 * 1024
    max_json_depth: int = 128
    max_header_bytes: int = 32 * 1024
    header_timeout_s: float = 60.0
    body_timeout_s: float = 60.0
    keepalive_timeout_s: float = 75.0
    max_connections: int = 10_240

    def __post_init__(self) -> None:
        object.__setattr__(self, "keys", MappingProxyType(dict(self.keys)))
        object.__setattr__(self, "service_tiers", MappingProxyType(dict(self.service_tiers)))
        _check(self)

    def scheduler_config(self) -> SchedulerConfig:
        """The scheduler's config: the preset with the limits, tenants and routing put in."""
        config = preset(self.preset)
        changes: dict[str, Any] = {
            "budget": self.budget,
            "retry": replace(config.retry, max_retry_after_s=self.max_retry_after_s),
        }
        if self.priority.classes:
            changes["classes"] = self.priority.classes
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
    for name in ("max_request_s", "max_retry_after_s"):
        value = getattr(c, name)
        if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
            raise _fail(f"{name}={value!r} must be a number of seconds > 0")
    for name in ("max_inflight", "max_pending"):
        value = getattr(c, name)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int)
                                  or value < 1):  # fmt: skip
            raise _fail(f"{name}={value!r} must be an integer >= 1")
    _check_limits(c)
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
    _check_classes(c)


def _check_classes(c: GatewayConfig) -> None:
    """Rule 6: the scheduler's config builds (the core's checks: the classes, their
    ``min_share``, the tenants' ``default_class``), and every class named is declared."""
    try:
        config = c.scheduler_config()
        c.priority.check([k.name for k in config.classes], c.keys)
    except (ValueError, TypeError) as exc:
        raise _fail(str(exc)) from None


#: The client limits' integer fields and their ranges (semisched.gateway.limits).
_LIMIT_RANGES: Final = {"max_body_bytes": (1, None), "max_json_depth": (1, 512),
                        "max_header_bytes": (1024, None), "max_connections": (1, None)}  # fmt: skip


def _check_limits(c: GatewayConfig) -> None:
    """The client limits: integers in their ranges, timeouts finite seconds > 0."""
    for name, (low, high) in _LIMIT_RANGES.items():
        value = getattr(c, name)
        if (isinstance(value, bool) or not isinstance(value, int) or value < low
                or (high is not None and value > high)):  # fmt: skip
            where = f">= {low}" if high is None else f"in {low}..{high}"
            raise _fail(f"{name}={value!r} must be an integer {where}")
    for name in ("header_timeout_s", "body_timeout_s", "keepalive_timeout_s"):
        value = getattr(c, name)
        if (isinstance(value, bool) or not isinstance(value, int | float) or not value > 0
                or value == float("inf")):  # fmt: skip
            raise _fail(f"{name}={value!r} must be a finite number of seconds > 0")
