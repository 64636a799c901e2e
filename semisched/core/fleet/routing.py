"""Routing layer: which endpoint executes a send.

Routing comes after allocation and ordering (the request is already chosen).
The fleet (`semisched.core.fleet.fleet`) hands a policy the endpoints that can
take the request *now* (serving its model, big enough for it, circuit not
open, below their concurrency, inside their budgets); the policy picks one.
Policies implement `RoutingPolicy` and are chosen by name through
`ROUTING_POLICIES`; the fleet never asks which one runs.

``round_robin``
    The next endpoint in fleet order after the last one chosen.
``random``
    Weighted random choice (LiteLLM's default "simple-shuffle"): the baseline.
``least_outstanding``
    Fewest requests in flight per unit of weight (LiteLLM's "least-busy").
``latency_ewma``
    Lowest EWMA of observed seconds per output token (LiteLLM's
    "latency-based-routing"): size-blind, it herds onto whichever endpoint
    answered fastest lately.
``anticipated_load``
    PreServe §4.3.3 read from the client's side: the endpoint whose
    in-flight work, predicted from the priors and the time each request has
    been running, plus this request's own predicted cost, drains soonest at
    the endpoint's learned decode speed
    (`anticipated_s`). The
    server-side memory penalty of the paper has no client analogue (the client
    cannot see KV memory) and is left out.
``token_budget``
    Token-Budget-Aware Pool Routing, Algorithm 1: the request's estimated total tokens (prompt
    estimate, from the runtime's bytes-per-token EMA, plus ``max_tokens``, or
    the prior's p90 when the call sets no cap) at most
    ``RoutingConfig.short_pool_tokens`` prefers the short pool, else the long
    pool; endpoints whose ``context_tokens`` are too small never see it (the
    hard constraint, enforced by the fleet for every policy). Spillover: when
    every endpoint of the preferred pool is overloaded
    (``RoutingConfig.spill_outstanding``) and the other pool is not, it goes
    there. Inside a pool: ``RoutingConfig.pool_policy`` (``anticipated_load``
    by default). Compress-and-route (FleetOpt §5, ``RoutingConfig.compress_band``
    γ > 1): a request in ``(B_short, γ B_short]`` whose
    ``Request.compressed_tokens`` (its prompt after compression, which the
    runtime sets when compression is on) fits ``B_short`` prefers the short
    pool; the runtime sends it compressed only if it lands there.

Pure: no clock, no randomness of its own (``random`` draws from the source the
shell seeds), no I/O.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from typing import ClassVar

from semisched.core.config import RoutingConfig
from semisched.core.fleet.endpoint import EndpointSpec, EndpointState
from semisched.core.lifecycle import JitterSource
from semisched.core.queue import Entry
from semisched.core.registry import ROUTING, policy_class
from semisched.core.request import Request

__all__ = [
    "ROUTING_POLICIES",
    "AnticipatedLoadRouting",
    "LatencyEwmaRouting",
    "LeastOutstandingRouting",
    "RandomRouting",
    "RoundRobinRouting",
    "RoutingPolicy",
    "TokenBudgetRouting",
    "make_routing",
    "request_total",
    "sends_compressed",
    "smallest_total",
    "total_tokens",
]


def total_tokens(entry: Entry) -> float:
    """Token-Budget-Aware Pool Routing, eq. 3: prompt tokens plus ``max_tokens`` (the
    prior's p90 without a cap)."""
    return request_total(entry.request)


def request_total(request: Request) -> float:
    """`total_tokens` of a request: its prompt estimate plus its reserved output."""
    out = request.max_output_tokens
    return request.input_tokens + (out if out is not None else request.prior.p90)


def sends_compressed(request: Request, endpoint: EndpointSpec) -> bool:
    """Whether ``request``, sent to ``endpoint``, goes with its compressed prompt.

    The one rule of compress-and-route's send: the request has a compressed prompt
    (``compressed_tokens``) and the endpoint's ``context_tokens`` cannot hold its
    original total (`request_total`). Anywhere else (a long endpoint it spilled
    to, an endpoint without a declared context) the original prompt goes.
    """
    if request.compressed_tokens is None:
        return False
    limit = endpoint.context_tokens
    return limit is not None and request_total(request) > limit


def smallest_total(entry: Entry) -> float:
    """`total_tokens` with the compressed prompt, when the request has one: the least
    context an endpoint needs to take it (compressed, if the original does not fit)."""
    request = entry.request
    compressed = request.compressed_tokens
    if compressed is None:
        return total_tokens(entry)
    return total_tokens(entry) - request.input_tokens + compressed


class RoutingPolicy(ABC):
    """Picks one endpoint of those that can take a request now.

    Subclasses set ``name`` and implement `choose`. They are built with
    ``(config, draw)``: the routing config and a uniform ``[0, 1)`` source.
    """

    name: ClassVar[str]

    def __init__(self, config: RoutingConfig, draw: JitterSource) -> None:
        self.config = config
        self._draw = draw

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name}>"

    @abstractmethod
    def choose(
        self, entry: Entry, candidates: Sequence[EndpointState], now: float
    ) -> EndpointState:
        """Return one of ``candidates`` (in fleet order) for ``entry``. They are two or
        more endpoints that can take it now, or the one left with room it has shown while
        others have only a probe (`semisched.core.fleet.fleet` rule 9): a policy that keeps
        state, such as round robin's turn, sees that choice too."""


@ROUTING.register
class RoundRobinRouting(RoutingPolicy):
    """The next candidate in fleet order after the last one chosen."""

    name = "round_robin"

    def __init__(self, config: RoutingConfig, draw: JitterSource) -> None:
        super().__init__(config, draw)
        self._last = -1

    def choose(
        self, entry: Entry, candidates: Sequence[EndpointState], now: float
    ) -> EndpointState:
        last = self._last
        chosen = candidates[0]
        for endpoint in candidates:
            if endpoint.index > last:
                chosen = endpoint
                break
        self._last = chosen.index
        return chosen


@ROUTING.register
class RandomRouting(RoutingPolicy):
    """Weighted random choice (LiteLLM's simple-shuffle)."""

    name = "random"

    def choose(
        self, entry: Entry, candidates: Sequence[EndpointState], now: float
    ) -> EndpointState:
        total = 0.0
        for endpoint in candidates:
            total += endpoint.weight
        point = self._draw() * total
        for endpoint in candidates:
            point -= endpoint.weight
            if point < 0.0:
                return endpoint
        return candidates[-1]


@ROUTING.register
class LeastOutstandingRouting(RoutingPolicy):
    """Fewest in flight per unit of weight (ties: fleet order)."""

    name = "least_outstanding"

    def choose(
        self, entry: Entry, candidates: Sequence[EndpointState], now: float
    ) -> EndpointState:
        best = candidates[0]
        best_score = best.inflight / best.weight
        for endpoint in candidates:  # one loop, no key calls: a routing read per candidate
            score = endpoint.inflight / endpoint.weight
            if score < best_score:
                best, best_score = endpoint, score
        return best


@ROUTING.register
class LatencyEwmaRouting(RoutingPolicy):
    """Lowest observed seconds per output token (EWMA), per unit of weight (ties: fleet
    order)."""

    name = "latency_ewma"

    def choose(
        self, entry: Entry, candidates: Sequence[EndpointState], now: float
    ) -> EndpointState:
        best = candidates[0]
        best_score = best.latency_ewma / best.weight
        for endpoint in candidates:
            score = endpoint.latency_ewma / endpoint.weight
            if score < best_score:
                best, best_score = endpoint, score
        return best


@ROUTING.register
class AnticipatedLoadRouting(RoutingPolicy):
    """Least anticipated drain time, this request included (module docstring)."""

    name = "anticipated_load"

    def choose(
        self, entry: Entry, candidates: Sequence[EndpointState], now: float
    ) -> EndpointState:
        return _least_anticipated(candidates, entry.cost, now)


def _least_anticipated(
    candidates: Sequence[EndpointState], cost: float, now: float
) -> EndpointState:
    best = candidates[0]
    best_s = best.anticipated_s(now, cost)
    for endpoint in candidates[1:]:
        seconds = endpoint.anticipated_s(now, cost)
        if seconds < best_s:
            best, best_s = endpoint, seconds
    return best


@ROUTING.register
class TokenBudgetRouting(RoutingPolicy):
    """Token-Budget-Aware Pool Routing's short and long pools with spillover (module docstring)."""

    name = "token_budget"

    def __init__(self, config: RoutingConfig, draw: JitterSource) -> None:
        super().__init__(config, draw)
        self._inner = ROUTING_POLICIES[config.pool_policy](config, draw)

    def choose(
        self, entry: Entry, candidates: Sequence[EndpointState], now: float
    ) -> EndpointState:
        away = "long" if self.fits_short(entry) else "short"  # the pool it does not want
        preferred: list[EndpointState] = []
        other: list[EndpointState] = []
        for endpoint in candidates:  # one pass (pool None serves both: preferred)
            (other if endpoint.spec.pool == away else preferred).append(endpoint)
        pool = preferred
        if not preferred or (other and self._overloaded(preferred) and not self._overloaded(other)):
            pool = other
        return pool[0] if len(pool) == 1 else self._inner.choose(entry, pool, now)

    def fits_short(self, entry: Entry) -> bool:
        """The request belongs in the short pool: its total fits ``B_short``, or it is in
        the compress band ``(B_short, γ B_short]`` and its compressed prompt fits."""
        cfg = self.config
        total = request_total(entry.request)
        if total <= cfg.short_pool_tokens:
            return True
        if (
            entry.request.compressed_tokens is None
            or total > cfg.compress_band * cfg.short_pool_tokens
        ):
            return False
        return smallest_total(entry) <= cfg.short_pool_tokens

    def _overloaded(self, pool: Sequence[EndpointState]) -> bool:
        limit = self.config.spill_outstanding
        for endpoint in pool:
            cap = endpoint.cap if endpoint.cap is not None and endpoint.cap < limit else limit
            if endpoint.inflight < cap:
                return False
        return True


#: The built-in policies by name (read-only: each registers itself under its ``name``,
#: in the order defined above; a config checks its name here when it is built).
ROUTING_POLICIES: Mapping[str, type[RoutingPolicy]] = ROUTING


def make_routing(cfg: RoutingConfig, draw: JitterSource) -> RoutingPolicy:
    """Build the routing policy ``cfg.policy`` names (or is: a user's class).

    Raises:
        ValueError: For an unknown policy name.
        TypeError: For a class that is not a routing policy.
    """
    return policy_class(cfg.policy, RoutingPolicy, ROUTING_POLICIES)(cfg, draw)
