"""The fleet's rate books: the key's budget and each endpoint's own.

A fleet has at most one fleet-wide `RateBudget`
(``SchedulerConfig.budget``: one key shared by every endpoint), and each
endpoint may have its own (``EndpointSpec.budget``). `Budgets` charges a
send to both, settles an answer on the provider's count, refunds a send that
never left, adopts what the provider's headers say, and answers what the
ordering layer and a shared state read of them. It decides nothing: where a
request may go is `semisched.core.fleet.picking`'s. Pure: no clock, no I/O.
"""

from __future__ import annotations

from semisched.core.budget import BudgetSnapshot, ProviderLimits, RateBudget
from semisched.core.config import BudgetConfig
from semisched.core.fleet.endpoint import EndpointState

__all__ = ["Budgets"]


class Budgets:
    """The key's rate budget and the endpoints' own (module docstring).

    Args:
        config: The fleet-wide budget (``None``: none).
        endpoints: The fleet's endpoints (the fleet's own list: it adds and removes).
    """

    __slots__ = ("_endpoints", "_outside", "key")

    def __init__(self, config: BudgetConfig | None, endpoints: list[EndpointState]) -> None:
        #: The fleet-wide budget: one key shared by every endpoint.
        self.key = RateBudget(config) if config is not None else None
        self._endpoints = endpoints
        self._outside = 0  # calls spent outside the scheduler, counted so far

    def charge(self, endpoint: EndpointState, now: float, request_id: str, tokens: float) -> None:
        """A send to ``endpoint`` charging ``tokens``."""
        if endpoint.budget is not None:
            endpoint.budget.charge(now, request_id, tokens)
        if self.key is not None:
            self.key.charge(now, request_id, tokens)

    def settle(self, endpoint: EndpointState, request_id: str, tokens: float, now: float) -> None:
        """The answer's own count of what it cost (``tokens``) replaces the estimate."""
        if endpoint.budget is not None:
            endpoint.budget.settle(request_id, tokens, now)
        if self.key is not None:
            self.key.settle(request_id, tokens, now)

    def refund(self, endpoint: EndpointState | None, request_id: str) -> None:
        """A send that never left: its charges are taken back."""
        if endpoint is not None and endpoint.budget is not None:
            endpoint.budget.refund(request_id)
        if self.key is not None:
            self.key.refund(request_id)

    def observe(
        self, endpoint: EndpointState | None, request_id: str, now: float, limits: ProviderLimits
    ) -> None:
        """Rate-limit headers from the answer to ``request_id`` (at ``endpoint``, if known)."""
        if endpoint is not None and endpoint.budget is not None:
            endpoint.budget.observe(request_id, now, limits)
        if self.key is not None:
            self.key.observe(request_id, now, limits)

    def spent(self, endpoint: EndpointState | None, now: float, tokens: float) -> None:
        """A call the scheduler did not send spent ``tokens`` (and one request) of the key
        (and of ``endpoint``'s own budget, if given): charged and settled at once."""
        self._outside += 1
        rid = f"~outside-{self._outside}"  # never a request's id: those are the shell's
        own = None if endpoint is None else endpoint.budget
        for budget in (own, self.key):
            if budget is not None:
                budget.charge(now, rid, tokens)
                budget.settle(rid, tokens, now)

    def governing(self, endpoint: EndpointState) -> RateBudget | None:
        """The budget a 429 from ``endpoint`` pauses: its own, else the key's."""
        return endpoint.budget if endpoint.budget is not None else self.key

    def limits(self) -> tuple[int | None, int | None]:
        """Effective (requests, tokens) per window: the key's budget, else the sum of
        the endpoints' own when every endpoint has one."""
        if self.key is not None:
            return self.key.limits()
        limits = [e.budget.limits() if e.budget is not None else (None, None)
                  for e in self._endpoints if not e.out_reason]  # fmt: skip
        requests = [r for r, _ in limits]
        tokens = [t for _, t in limits]
        return (
            None if not requests or None in requests else sum(r for r in requests if r),
            None if not tokens or None in tokens else sum(t for t in tokens if t),
        )

    def fits_now(self, tokens: float, now: float) -> bool:
        """Whether one request charging ``tokens`` could be paid for now."""
        if self.key is not None and self.key.wait(now, tokens) != 0.0:
            return False
        return any(
            e.budget is None or e.budget.wait(now, tokens) == 0.0
            for e in self._endpoints
            if not e.out_reason
        )

    def snapshot(self, now: float) -> BudgetSnapshot | None:
        """The key's budget's state, if there is one."""
        return None if self.key is None else self.key.snapshot(now)

    def shared(
        self, endpoint: EndpointState | None, ceiling: int | None
    ) -> tuple[int | None, int | None, int | None, float]:
        """What a shared state must hold across processes for ``endpoint`` (``None``: the
        fleet): its (requests, tokens) per window, configured or adopted from headers,
        its concurrency as set (``max_concurrency``; the fleet's ``ceiling``, a learned
        limit is each process's own), the window a charge counts for (engine seconds,
        the budget's margin included)."""
        budget = self.key if endpoint is None else endpoint.budget
        cap = ceiling if endpoint is None else endpoint.spec.max_concurrency
        if budget is None:
            return None, None, cap, 61.0
        requests, tokens = budget.limits()
        return requests, tokens, cap, budget.config.window_s + budget.config.margin_s
