"""The routing layer's configuration: `RoutingConfig`, with the names of the built-in
routing policies.

Routing is the fleet's layer (`semisched.core.fleet`): which endpoint executes a
send, the circuit breaker, failover and each endpoint's concurrency limit; it is
the one layer config that reads the fleet's concurrency limits. A frozen,
keyword-only, validated dataclass (`semisched.core.checks`);
`semisched.core.policy_config` (beside the other layers' configs) and
`semisched.core.config` re-export it. Values only: it decides nothing and does
no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from semisched.core.checks import (
    check_bool,
    check_choice,
    check_fraction,
    check_int,
    check_number,
    check_policy,
    check_positive,
)
from semisched.core.fleet.concurrency import CONCURRENCY_POLICIES
from semisched.core.fleet.limits import ConcurrencyLimit
from semisched.core.registry import ROUTING

__all__ = ["ROUTING_POLICY_NAMES", "RoutingConfig"]

#: Valid ``RoutingConfig.policy`` names (the routing registry).
ROUTING_POLICY_NAMES: Mapping[str, type] = ROUTING


@dataclass(frozen=True, kw_only=True)
class RoutingConfig:
    """Routing layer: which endpoint executes a send (`semisched.core.fleet.routing`).

    Routing comes after allocation and ordering: it never changes *which*
    request is sent next, only *where*. With one endpoint it has nothing to
    choose, and only the circuit breaker and failover rules below apply.

    Attributes:
        policy: ``round_robin``; ``random`` (weighted by ``weight``: LiteLLM's
            default simple-shuffle); ``least_outstanding`` (fewest in flight per
            unit of weight: LiteLLM's least-busy); ``latency_ewma`` (lowest EWMA
            of observed seconds per output token: LiteLLM's latency-based);
            ``anticipated_load`` (PreServe §4.3.3, read client-side:
            least predicted remaining work in flight, from the priors and the
            elapsed time, over the endpoint's learned decode speed);
            ``token_budget`` (Token-Budget-Aware Pool Routing, Algorithm 1: short
            and long pools split at ``short_pool_tokens``, with spillover); or your own
            [`RoutingPolicy`][semisched.core.RoutingPolicy] subclass (the class itself).
        failover: A failed attempt that is retried goes at once to another
            endpoint when one can serve it (no back-off: the back-off is for the
            endpoint that failed). ``insufficient_quota`` is then retried too.
        failure_threshold: Consecutive failed attempts (5xx, timeouts,
            connection errors) that open an endpoint's circuit. 5: LiteLLM's
            ``allowed_fails`` default is 3 per minute; consecutive failures are
            a stricter count, so a little more.
        cooloff_s: How long an open circuit sends nothing; then one probe is
            let through (half-open): success closes it, failure opens it again.
            30 s: a typical gateway cool-off (LiteLLM's default is 5 s per
            deployment, Envoy's outlier ejection 30 s).
        auth_cooloff_s: How long a circuit opened by a refused key (401, 403)
            sends nothing before one probe (`semisched.core.fleet.endpoint`
            rule 5). 600 s: a key does not heal by itself, so its endpoint's
            work goes elsewhere; a probe every ten minutes costs one refused
            attempt (which fails over) and finds a fixed key or a granted access.
        speed_decay: Per-observation decay of the exponentially weighted
            least-squares fit of latency against output tokens behind each
            endpoint's decode speed (0.98: an effective memory of ~50 answers).
        short_pool_tokens: ``token_budget``'s B_short: a request whose estimated
            total (prompt tokens plus ``max_tokens``, or the prior's p90 when
            the call sets no cap) is at most this prefers the short pool. 8192:
            Token-Budget-Aware Pool Routing §2.2's starting point.
        spill_outstanding: ``token_budget``'s spillover limit, token-budget routing's
            queue depth read client-side: a pool is overloaded when each of its
            endpoints has this many requests in flight (or its
            ``max_concurrency``, whichever is smaller); a request then goes
            to the other pool if that pool is not overloaded too.
        pool_policy: ``token_budget``'s choice inside a pool: any other policy
            name. ``anticipated_load`` balances predicted work;
            ``least_outstanding`` balances requests, which keeps each unit's
            batch (and so its per-token time) even: what ``semisched plan``
            writes, since its model assumes evenly loaded units.
        compress_band: ``token_budget``'s compress-and-route bandwidth γ ("FleetOpt:
            Analytical Fleet Provisioning for LLM Inference", §5): a request whose
            total is in ``(B_short, γ B_short]`` and whose prompt compresses to fit
            ``B_short`` goes to the short pool, sent compressed. 1.0 (the default) turns it off.
        concurrency: How many requests each endpoint without a ``max_concurrency``
            may hold (`semisched.core.fleet.limits`): ``learned`` (the default:
            a limit learned online from the wait for a slot, 429s and failures, in
            the spirit of TCP Vegas), ``fixed`` (no limit of its own), or your own
            [`ConcurrencyLimit`][semisched.core.ConcurrencyLimit] subclass (the class). An
            endpoint's explicit ``max_concurrency`` always wins; the scheduler's
            total is the sum of its endpoints' limits, ``max_inflight`` a ceiling.
    """

    policy: str | type = "anticipated_load"
    failover: bool = True
    failure_threshold: int = 5
    cooloff_s: float = 30.0
    auth_cooloff_s: float = 600.0
    speed_decay: float = 0.98
    short_pool_tokens: float = 8192.0
    spill_outstanding: int = 16
    pool_policy: str = "anticipated_load"
    compress_band: float = 1.0
    concurrency: str | type[ConcurrencyLimit] = "learned"

    def __post_init__(self) -> None:
        check_policy(self.policy, ROUTING_POLICY_NAMES)
        own = isinstance(self.concurrency, type) and issubclass(self.concurrency, ConcurrencyLimit)
        if not own:
            check_choice("concurrency", self.concurrency, tuple(CONCURRENCY_POLICIES))
        check_bool("failover", self.failover)
        check_int("failure_threshold", self.failure_threshold, minimum=1)
        check_positive("cooloff_s", self.cooloff_s)
        check_positive("auth_cooloff_s", self.auth_cooloff_s)
        check_fraction("speed_decay", self.speed_decay, strict_min=True, strict_max=True)
        check_positive("short_pool_tokens", self.short_pool_tokens)
        check_int("spill_outstanding", self.spill_outstanding, minimum=1)
        check_choice(
            "pool_policy",
            self.pool_policy,
            [n for n in ROUTING_POLICY_NAMES if n != "token_budget"],
        )
        check_number("compress_band", self.compress_band, minimum=1.0)
