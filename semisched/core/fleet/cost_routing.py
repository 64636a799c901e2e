"""The ``cost`` routing policy: the cheapest endpoint that can still meet the deadline.

Among the endpoints that can take the request now (the fleet has already removed the
ones that cannot: model, context, circuit, concurrency, budgets), it keeps those whose
anticipated finish meets the request's deadline and picks the one where the request
costs least at its price (`PriceTable`): the prompt
estimate at the input price plus the output the ordering tests deadlines with (the
prior's quantile, ``Entry.hopeful``) at the output price. Ties (equal prices, or no
prices at all) go to the least anticipated drain time (``anticipated_load``), so an
unpriced fleet routes as that policy does.

The anticipated finish is ``now`` plus the endpoint's fitted latency intercept plus the
time to drain what it holds and this request
(`anticipated_s`). A request with no
deadline can wait anywhere, so it goes to the cheapest endpoint. When no endpoint can
meet the deadline, it goes where it would finish soonest: the least late.

An endpoint with no price bills nothing (a self-hosted server already paid for), so it
is the cheapest. Pure: no clock, no I/O.
"""

from __future__ import annotations

from collections.abc import Sequence

from semisched.core.fleet.endpoint import EndpointState
from semisched.core.fleet.routing import RoutingPolicy
from semisched.core.queue import Entry
from semisched.core.registry import ROUTING

__all__ = ["CostRouting", "expected_cost"]


def expected_cost(entry: Entry, endpoint: EndpointState) -> float:
    """US dollars ``entry`` is expected to cost at ``endpoint`` (0: not priced)."""
    table = endpoint.spec.price
    if table is None:
        return 0.0
    request = entry.request
    price = table.for_model(request.model)
    if price is None:
        return 0.0
    output = entry.hopeful
    if request.max_output_tokens is not None and request.max_output_tokens < output:
        output = request.max_output_tokens
    return price.cost(request.input_tokens, output)


@ROUTING.register
class CostRouting(RoutingPolicy):
    """The cheapest endpoint that meets the deadline (module docstring)."""

    name = "cost"

    def choose(
        self, entry: Entry, candidates: Sequence[EndpointState], now: float
    ) -> EndpointState:
        deadline = entry.request.deadline
        work = entry.cost
        best: EndpointState | None = None
        best_key = (0.0, 0.0)
        soonest = candidates[0]
        soonest_s = float("inf")
        for endpoint in candidates:
            drain_s = endpoint.anticipated_s(now, work)
            finish_s = endpoint.fit.intercept_s + drain_s
            if finish_s < soonest_s:
                soonest, soonest_s = endpoint, finish_s
            if deadline is not None and now + finish_s > deadline:
                continue
            key = (expected_cost(entry, endpoint), drain_s)
            if best is None or key < best_key:
                best, best_key = endpoint, key
        return soonest if best is None else best
