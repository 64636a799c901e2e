"""Where a request can go now: the fleet's rules 1-4 as one object, `Picker`.

`Fleet` owns the endpoints, their budgets and their
health; its picker reads them through `PickView` and answers
`Picker.pick` with a value: the endpoint, `WaitUntil` (a time to try
again, `BUSY` when none is known) or `NoRoute` (no endpoint ever can,
and why). The rules themselves are drawn in `semisched.core.fleet.fleet`; `shown`
is its rule 9 (a probe last).

Pure: no clock, no I/O; the engine passes ``now``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple, Protocol

from semisched.core.budget import RateBudget
from semisched.core.fleet.endpoint import Circuit, EndpointState
from semisched.core.fleet.routing import RoutingPolicy, smallest_total
from semisched.core.queue import Entry
from semisched.core.stats import EngineTally

__all__ = ["BUSY", "NoRoute", "PickView", "Picker", "WaitUntil", "shown"]


class NoRoute(NamedTuple):
    """`Picker.pick`'s answer when no endpoint can ever take the request."""

    reason: str


class WaitUntil(NamedTuple):
    """`Picker.pick`'s answer when no endpoint can take the request now:
    try again at ``at`` (``None``: no time is known; a completion frees one)."""

    at: float | None


#: No endpoint can take it now, and no time to try again is known.
BUSY = WaitUntil(None)
_CLOSED = Circuit.CLOSED


class PickView(Protocol):
    """What the picker reads of its fleet (all of it owned and kept by the fleet)."""

    #: The lone endpoint of the fast path (no budget, limit or model list), else ``None``.
    solo: EndpointState | None
    #: A shared budget refused a send: nothing goes anywhere before this time.
    paused_until: float
    #: The fleet-wide rate budget (one key for every endpoint), if any.
    budget: RateBudget | None
    #: The routing policy that chooses among two or more candidates.
    policy: RoutingPolicy
    #: The endpoints with free room, in fleet order (kept on every send and answer).
    room: list[EndpointState]
    #: How many endpoints the fleet has.
    count: int

    @property
    def endpoints(self) -> tuple[EndpointState, ...]:
        """The endpoints in fleet order."""
        ...

    def eligible(self, model: str) -> tuple[EndpointState, ...]:
        """Endpoints that serve ``model`` and take new work."""
        ...


def shown(candidates: list[EndpointState]) -> list[EndpointState]:
    """Rule 9: of ``candidates`` (two or more), those with room below the part of their
    limit they have shown (``sure``), when any has; else all of them."""
    found = [e for e in candidates if e.sure is None or e.inflight < e.sure]
    if len(found) == len(candidates) or not found:
        return candidates
    return found


class Picker:
    """The fleet's rules 1-4: where ``entry`` can be sent now (module docstring)."""

    __slots__ = ("_fleet", "_tally")

    def __init__(self, fleet: PickView, tally: EngineTally) -> None:
        self._fleet = fleet
        self._tally = tally  # budget waits and rejects are counted here

    def pick(self, entry: Entry, now: float) -> EndpointState | NoRoute | WaitUntil:
        """Where ``entry`` can be sent now (rules 1-4): the endpoint; else
        `WaitUntil` (a time to try again, or `BUSY` when none is known)
        or `NoRoute` (no endpoint ever can; rule 3). (One plain endpoint with
        room is answered by `pick` itself.)"""
        fleet = self._fleet
        if fleet.paused_until > now:
            return WaitUntil(fleet.paused_until)
        charge = entry.charge
        budget = fleet.budget
        if budget is not None:
            wait = budget.wait(now, charge)
            if wait is None:
                self._tally.budget_rejects += 1
                return NoRoute(
                    f"its token charge ({charge:.0f}) exceeds the token budget "
                    f"({budget.limits()[1]} per {budget.config.window_s:g} s): it can never be sent"
                )
            if wait > 0.0:
                self._tally.budget_waits += 1
                return WaitUntil(now + wait)
        eligible = fleet.eligible(entry.request.model)
        if not entry.avoid:
            if len(eligible) == 1:
                found = self._pick_one(eligible[0], entry, now)
                if found is not None:
                    return found
            elif len(eligible) == fleet.count:  # every endpoint may take it
                roomy = self._pick_roomy(entry, now)
                if roomy is not None:
                    return roomy
        return self._pick_among(eligible, entry, now)

    def _pick_roomy(self, entry: Entry, now: float) -> EndpointState | None:
        """The common case, over the endpoints with free room only (a cost that follows
        the free endpoints, not the fleet's size): when none of them is out, paused or
        throttled, their candidates are exactly `_pick_among`'s, in the same order,
        with the same budgets asked. ``None``: no candidate, or a case to leave to it."""
        candidates: list[EndpointState] = []
        total = -1.0
        charge = entry.charge
        for endpoint in self._fleet.room:
            if (
                endpoint.circuit is not _CLOSED
                or endpoint.paused_until > now
                or endpoint.throttled_until > now
            ):
                return None
            limit = endpoint.spec.context_tokens
            if limit is not None:
                if total < 0.0:
                    total = smallest_total(entry)
                if total > limit:
                    continue
            own = endpoint.budget
            if own is not None and own.wait(now, charge) != 0.0:
                continue  # waits there, or never fits there
            candidates.append(endpoint)
        if not candidates:
            return None
        if len(candidates) == 1:
            return candidates[0]
        return self._fleet.policy.choose(entry, shown(candidates), now)

    def _pick_one(
        self, endpoint: EndpointState, entry: Entry, now: float
    ) -> EndpointState | WaitUntil | None:
        """The one-endpoint case, without the lists (``None``: ask the general case)."""
        if not (self._fits(endpoint, entry) and endpoint.sendable(now)):
            return None
        if endpoint.paused_until > now:
            return WaitUntil(endpoint.paused_until)
        if endpoint.cap is not None and endpoint.inflight >= endpoint.cap:
            return BUSY
        own = endpoint.budget
        if own is None:
            return endpoint
        wait = own.wait(now, entry.charge)
        if wait == 0.0:
            return endpoint
        if wait is not None:
            self._tally.budget_waits += 1
            return WaitUntil(now + wait)
        return None

    def _pick_among(
        self, eligible: Sequence[EndpointState], entry: Entry, now: float
    ) -> EndpointState | NoRoute | WaitUntil:
        """The general case of `pick` over every eligible endpoint (rules 1-4)."""
        candidates: list[EndpointState] = []
        later = float("inf")
        alive = 0  # endpoints that could take it, now or later
        fresh = 0  # of those, ones it has not failed at and that are not throttled
        avoid = entry.avoid
        waited = False  # an endpoint's budget made it wait (statistics)
        for endpoint in eligible:
            limit = endpoint.spec.context_tokens
            if limit is not None and smallest_total(entry) > limit:
                continue
            back = self._out_until(endpoint, now)
            if back is not None:  # out for now (a circuit comes back, a pause ends)
                alive += 1
                if back < later:
                    later = back
                continue
            wait = self._wait_at(endpoint, entry, now)
            if wait is None:
                continue
            alive += 1
            if endpoint not in avoid and endpoint.throttled_until <= now:
                fresh += 1
            if endpoint.cap is not None and endpoint.inflight >= endpoint.cap:
                continue
            if wait > 0.0:
                waited = True
                if now + wait < later:
                    later = now + wait
                continue
            candidates.append(endpoint)
        if fresh and len(candidates) > 0:  # rule 2: while a fresh endpoint exists, wait for it
            tainted = [e for e in candidates if e in avoid or e.throttled_until > now]
            if tainted:
                candidates = [e for e in candidates if e not in tainted]
                for endpoint in tainted:
                    if now < endpoint.throttled_until < later:
                        later = endpoint.throttled_until
        if not candidates:
            if not alive:
                return NoRoute(self._why_never(entry))
            if waited:
                self._tally.budget_waits += 1
            return BUSY if later == float("inf") else WaitUntil(later)
        if len(candidates) == 1:
            return candidates[0]
        return self._fleet.policy.choose(entry, shown(candidates), now)

    @staticmethod
    def _out_until(endpoint: EndpointState, now: float) -> float | None:
        """When ``endpoint``, out for now, is back (``inf``: a half-open circuit's probe
        is out, no time known); ``None``: it takes work now."""
        if endpoint.circuit is not _CLOSED and not endpoint.sendable(now):
            return endpoint.open_until if endpoint.circuit is Circuit.OPEN else float("inf")
        if endpoint.paused_until > now:
            return endpoint.paused_until
        return None

    @staticmethod
    def _wait_at(endpoint: EndpointState, entry: Entry, now: float) -> float | None:
        """How long ``entry`` waits for ``endpoint``'s own budget (``0.0``: none);
        ``None``: it never fits there."""
        own = endpoint.budget
        if own is None:
            return 0.0
        if endpoint.cap is not None and endpoint.inflight >= endpoint.cap:
            # No wait() for an endpoint that cannot take it now anyway: only "never".
            tokens = own.limits()[1]
            return None if tokens is not None and entry.charge > tokens else 0.0
        return own.wait(now, entry.charge)

    @staticmethod
    def _fits(endpoint: EndpointState, entry: Entry) -> bool:
        limit = endpoint.spec.context_tokens
        return limit is None or smallest_total(entry) <= limit

    def _why_never(self, entry: Entry) -> str:
        model = entry.request.model
        serving = [e for e in self._fleet.endpoints if e.spec.serves(model)]
        what = f"model {model!r}" if model else "it"
        if not serving:
            return f"no endpoint serves {what}"
        live = [e for e in serving if not e.out_reason]
        if not live:
            states = ", ".join(f"{e.name}: {e.out_reason}" for e in serving)
            return f"no endpoint can take {what} ({states})"
        fitting = [e for e in live if self._fits(e, entry)]
        if not fitting:
            return (
                f"its estimated {smallest_total(entry):.0f} tokens exceed every endpoint's "
                f"context ({', '.join(f'{e.name}: {e.spec.context_tokens}' for e in live)})"
            )
        return (
            f"its token charge ({entry.charge:.0f}) exceeds the token budget of every "
            f"endpoint that serves {what}: it can never be sent"
        )

    def alternative(self, entry: Entry, failed: EndpointState, now: float) -> bool:
        """Whether an endpoint other than ``failed`` could serve ``entry`` (failover)."""
        for endpoint in self._fleet.eligible(entry.request.model):
            if endpoint is failed or not self._fits(endpoint, entry):
                continue
            if endpoint.circuit is Circuit.OPEN and now < endpoint.open_until:
                continue
            own = endpoint.budget
            if own is None or own.wait(now, entry.charge) is not None:
                return True
        return False
