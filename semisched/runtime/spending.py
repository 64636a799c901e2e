"""Spend: each request's cost from its usage, and spend caps held before a request is sent.

The spend layer sits outermost in an endpoint's stack (`semisched.runtime.layers`)
when the run has spend caps or the endpoint has a price:

1. **Before an attempt**, when caps cover the request's tenant (or the whole key) and
   its endpoint prices its model, it reserves the request's estimated cost in each cap
   (`semisched.state.spend`): its prompt estimate plus its prior's p90 output
   (at most its ``max_tokens``), at the endpoint's price. A refusal sends nothing: the
   attempt comes back `Declined`, and the engine rejects the request (rule
   ``spend.cap``); its caller gets [`SpendCapExceeded`][semisched.errors.SpendCapExceeded].
2. **When the answer ends**, its cost comes from its usage: the provider's prompt count
   (the estimate when a stream did not say), its cached prompt tokens at the cached
   price, and its output; a stream closed early is charged its reservation (what it
   generated is unknown). The reservation is settled to that cost, and the cost is
   counted by tenant and endpoint (`SpendStats`, ``Finished.cost_usd``).
3. **When the attempt fails, is cancelled or is refused** by the rate budgets, its
   reservation is released; a cancel that lands while the store answers the
   reservation releases whatever it charged, by the request's id in each cap's current
   period.

Calendar periods run on the wall clock (Unix time, UTC) even when the scheduler's
clock is virtual: a cap per day means a day of the calendar.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING

from semisched.core.request import Request
from semisched.core.spend import Price, PriceTable, SpendCap, usd
from semisched.runtime.seam import Answer, Declined, Ended, Refused, Seam
from semisched.state.spend import LocalSpend, SpendBackend, spend_books_for

if TYPE_CHECKING:
    from semisched.runtime.pending import Pending

__all__ = ["SpendLayer", "SpendStats", "Spending", "estimated_cost", "run_spending"]


@dataclass(frozen=True, slots=True, kw_only=True)
class SpendStats:
    """What this process spent, at its endpoints' prices (US dollars).

    Attributes:
        spent_usd: Every finished request's cost.
        by_tenant: The same by tenant (``""``: the default tenant).
        by_endpoint: The same by endpoint.
        reserved_usd: Reservations of requests still in flight.
        refused: Requests a spend cap refused.
        caps: The spend caps in force, in a user's words.
    """

    spent_usd: float = 0.0
    by_tenant: Mapping[str, float] = field(default_factory=dict)
    by_endpoint: Mapping[str, float] = field(default_factory=dict)
    reserved_usd: float = 0.0
    refused: int = 0
    caps: tuple[str, ...] = ()

    def __str__(self) -> str:
        caps = "; ".join(self.caps) or "none"
        return (
            f"spent {usd(self.spent_usd)} (reserved {usd(self.reserved_usd)}), "
            f"{self.refused} refused by a spend cap; caps: {caps}"
        )


def estimated_cost(price: Price, request: Request) -> float:
    """What ``request`` is reserved at: its prompt estimate plus its prior's p90 output
    (at most its ``max_tokens``), at ``price``."""
    output = request.prior.p90
    cap = request.max_output_tokens
    if cap is not None and cap < output:
        output = cap
    return price.cost(request.input_tokens, output)


class Spending:
    """The run's spend caps, books and tally (module docstring).

    Args:
        caps: The caps in force.
        books: Where they are kept (default: this process's).
        wall: Unix seconds, for the books' calendar periods.
    """

    def __init__(
        self,
        caps: Sequence[SpendCap] = (),
        books: SpendBackend | None = None,
        wall: Callable[[], float] = time.time,
    ) -> None:
        self.caps = tuple(caps)
        self.books: SpendBackend = books if books is not None else LocalSpend(wall)
        self._by_tenant: dict[str, float] = {}
        self._by_endpoint: dict[str, float] = {}
        self._reserved: dict[str, float] = {}
        self._refused = 0

    def __repr__(self) -> str:
        return f"<Spending caps={len(self.caps)} {self.books!r}>"

    def caps_for(self, tenant: str) -> tuple[SpendCap, ...]:
        """The caps a request of ``tenant`` spends from."""
        return tuple(cap for cap in self.caps if cap.covers(tenant))

    def hold(self, request_id: str, usd: float) -> None:
        """``request_id``'s reservation of ``usd`` is outstanding."""
        self._reserved[request_id] = usd

    def unhold(self, request_id: str) -> float | None:
        """``request_id``'s reservation is over; what it was (``None``: none)."""
        return self._reserved.pop(request_id, None)

    def refused(self) -> None:
        """A spend cap refused a request."""
        self._refused += 1

    def spent(self, tenant: str, endpoint: str, usd: float) -> None:
        """Count a finished request's cost."""
        self._by_tenant[tenant] = self._by_tenant.get(tenant, 0.0) + usd
        self._by_endpoint[endpoint] = self._by_endpoint.get(endpoint, 0.0) + usd

    def statistics(self) -> SpendStats:
        """What this process spent so far."""
        return SpendStats(
            spent_usd=sum(self._by_endpoint.values()),
            by_tenant=MappingProxyType(dict(self._by_tenant)),
            by_endpoint=MappingProxyType(dict(self._by_endpoint)),
            reserved_usd=sum(self._reserved.values()),
            refused=self._refused,
            caps=tuple(cap.describe() for cap in self.caps),
        )


def run_spending(caps: Sequence[SpendCap], backend: object, priced: bool) -> Spending | None:
    """A run's spend caps and cost accounting (``Scheduler(spend_caps=...)``), kept beside
    its shared state ``backend`` when it has one; ``None`` when it has neither caps nor a
    ``priced`` endpoint.

    Raises:
        TypeError: ``caps`` is not a sequence of [`SpendCap`][semisched.SpendCap].
    """
    if isinstance(caps, SpendCap | str) or not isinstance(caps, Sequence):
        raise TypeError(f"spend_caps={caps!r} must be a sequence of semisched.SpendCap")
    for cap in caps:
        if not isinstance(cap, SpendCap):
            raise TypeError(f"spend_caps item {cap!r} must be a semisched.SpendCap")
    if not caps and not priced:
        return None
    return Spending(caps, spend_books_for(backend))


class SpendLayer:
    """Reserves a request's cost before its attempt and settles it after (module docstring).

    Args:
        inner: The seam it wraps.
        spending: The run's caps, books and tally.
        prices: The endpoint's prices (``None``: not priced).
        endpoint: The endpoint's name.
        spawn: Runs a coroutine function in the background (the scheduler's task group).
    """

    def __init__(
        self,
        inner: Seam,
        spending: Spending,
        prices: PriceTable | None,
        endpoint: str,
        spawn: Callable[..., None],
    ) -> None:
        self.inner = inner
        self.spending = spending
        self.prices = prices
        self.endpoint = endpoint
        self.spawn = spawn
        self._keys: dict[str, tuple[str, ...]] = {}

    def __repr__(self) -> str:
        return f"<SpendLayer around {self.inner!r}>"

    def _price(self, request: Request) -> Price | None:
        return None if self.prices is None else self.prices.for_model(request.model)

    async def send(self, pending: Pending) -> Answer | Refused | Declined:
        request, spending = pending.request, self.spending
        price = self._price(request)
        caps = spending.caps_for(request.tenant) if price is not None else ()
        if caps and price is not None:
            estimate = estimated_cost(price, request)
            try:
                grant = await spending.books.reserve_spend(pending.id, estimate, caps)
            except BaseException:  # cancelled while the store answered: it may hold a charge
                self.spawn(spending.books.release_spend, pending.id, caps)
                raise
            if not grant.ok:
                spending.refused()
                assert grant.cap is not None
                return Declined(grant.cap, grant.spent_usd, grant.reset_at)
            self._keys[pending.id] = grant.keys
            spending.hold(pending.id, estimate)
        try:
            result = await self.inner.send(pending)
        except BaseException:
            self._release(pending.id)
            raise
        if isinstance(result, Refused):
            self._release(pending.id)
        return result

    def ended(self, pending: Pending, end: Ended) -> None:
        self.inner.ended(pending, end)
        request = pending.request
        reserved = self.spending.unhold(pending.id)
        keys = self._keys.pop(pending.id, ())
        price = self._price(request)
        if price is None:
            return
        if end.output_tokens is None:  # a stream closed early: what it generated is unknown
            cost = reserved if reserved is not None else estimated_cost(price, request)
        else:
            prompt = end.prompt_tokens or request.input_tokens
            cost = price.cost(prompt, end.output_tokens, end.cached_tokens)
        pending.cost_usd = cost
        self.spending.spent(request.tenant, self.endpoint, cost)
        if keys:
            self.spawn(self.spending.books.settle_spend, pending.id, cost, keys)

    def _release(self, request_id: str) -> None:
        self.spending.unhold(request_id)
        keys = self._keys.pop(request_id, ())
        if keys:
            self.spawn(self.spending.books.settle_spend, request_id, 0.0, keys)
