"""Which concurrency limit each endpoint gets: the built-in policies by name.

``RoutingConfig.concurrency`` names one of `CONCURRENCY_POLICIES` (or is your
own [`ConcurrencyLimit`][semisched.core.fleet.limits.ConcurrencyLimit] subclass);
`make_limit` builds an endpoint's, and an explicit ``max_concurrency`` wins.
Pure: no clock, no I/O.
"""

from __future__ import annotations

from semisched.core.fleet.limits import ConcurrencyLimit, FixedLimit
from semisched.core.fleet.queue_delay import QueueDelayLimit

__all__ = ["CONCURRENCY_POLICIES", "make_limit"]

CONCURRENCY_POLICIES: dict[str, type[ConcurrencyLimit]] = {
    FixedLimit.name: FixedLimit,
    QueueDelayLimit.name: QueueDelayLimit,
}


def make_limit(
    policy: str | type[ConcurrencyLimit], max_concurrency: int | None
) -> ConcurrencyLimit:
    """The limit of an endpoint: its explicit ``max_concurrency`` wins over ``policy`` (a
    name of `CONCURRENCY_POLICIES`, or your own subclass, built without arguments)."""
    kind = CONCURRENCY_POLICIES[policy] if isinstance(policy, str) else policy
    if max_concurrency is not None or not kind.learns:
        return FixedLimit(max_concurrency)
    return kind()
