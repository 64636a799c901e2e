"""Ordering layer: which waiting request of the chosen class goes next.

Policies implement `OrderingPolicy` and are chosen by name through
`ORDERING_POLICIES`. They only *read* a `ClassQueue`; the engine
removes the chosen entry.

``fifo``
    The entry enqueued first.
``feasible_set``
    Scheduling the Unschedulable §3.1's slowdown-aware score over a bounded candidate set:

    ```text
    score = w_wait * wait / (cost/ref) - w_size * cost/ref + w_urgency * urgency
    ```

    Candidates are the longest-waiting entry of every cost band plus the
    ``urgent_candidates`` earliest deadlines (see `semisched.core.queue`);
    scoring them all would make one decision O(queue length). Inside a band
    costs differ by less than ``band_ratio``, so the band head is the entry
    the wait term favours up to that factor; this is the approximation we
    accept for O(bands) decisions.
``longest_first``
    The head of the highest-cost band (LPT at band resolution), feasible
    requests first: minimises a batch job's makespan (beyond the paper).

Infeasible requests: an entry is *infeasible* when it has a deadline and
``now + estimated_latency(q) > deadline``, ``q`` the prior's
``OrderingConfig.feasibility_quantile`` (the paper reads p50; 0.25 gives an
uncertain prior the benefit of the doubt, so a request that may well be short
is not given up on while it can still make it). Infeasible candidates are never
dropped here; they rank after every feasible candidate, so they are sent only
when nothing feasible is found (the engine counts such sends). So that an
infeasible band head does not hide a feasible request queued behind it, the
first feasible entry among the next ``infeasible_lookahead`` of that band is
also a candidate; beyond that look-ahead (many infeasible requests of one
size waiting at once) an infeasible request can still go first. Once its
deadline has actually passed, the engine expires a waiting request with an
explicit ``Expire`` action (the main paper's "handled explicitly, never silently").
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Mapping
from typing import ClassVar, Protocol

from semisched.core.config import OrderingConfig
from semisched.core.queue import ClassQueue, Entry
from semisched.core.registry import ORDERING, policy_class

__all__ = [
    "ORDERING_POLICIES",
    "FeasibleSetOrdering",
    "FifoOrdering",
    "OrderingPolicy",
    "make_ordering",
]

#: Estimated seconds from send to completion for a given token cost.
LatencyEstimate = Callable[[float], float]


def is_feasible(entry: Entry, now: float, estimate: LatencyEstimate) -> bool:
    """Whether ``entry`` can still meet its deadline if sent at ``now``."""
    deadline = entry.request.deadline
    return deadline is None or now + estimate(entry.hopeful) <= deadline


class PackingView(Protocol):
    """What the engine shows an ordering policy of its rate budget (all at the current time)."""

    def budget_limits(self) -> tuple[int | None, int | None]:
        """The effective (requests, tokens) per window; ``(None, None)`` without a budget."""
        ...

    def fits_now(self, tokens: float) -> bool:
        """Whether one request charging ``tokens`` fits the budget now."""
        ...

    def backlog(self) -> tuple[float, float]:
        """Queued requests (all classes) and the sum of their rate charges."""
        ...


class OrderingPolicy(ABC):
    """Pick the next entry of one non-empty class queue."""

    name: ClassVar[str]

    def __init__(self, cfg: OrderingConfig) -> None:
        self.cfg = cfg

    def attach(self, view: PackingView) -> None:  # noqa: B027 - optional hook, no-op by default
        """Called once by the engine with its budget view; most policies ignore it."""

    @abstractmethod
    def choose(self, queue: ClassQueue, now: float, estimate: LatencyEstimate) -> Entry:
        """Return the entry to send next; ``queue`` is non-empty."""


@ORDERING.register
class FifoOrdering(OrderingPolicy):
    """First enqueued, first sent."""

    name = "fifo"

    def choose(self, queue: ClassQueue, now: float, estimate: LatencyEstimate) -> Entry:
        entry = queue.oldest()
        if entry is None:
            raise ValueError(f"queue {queue.name!r} is empty")
        return entry


@ORDERING.register
class FeasibleSetOrdering(OrderingPolicy):
    """Slowdown-aware feasible-set scoring (Scheduling the Unschedulable §3.1)."""

    name = "feasible_set"

    def choose(self, queue: ClassQueue, now: float, estimate: LatencyEstimate) -> Entry:
        cfg = self.cfg
        ref, horizon = cfg.size_ref_tokens, cfg.urgency_horizon_s
        lookahead = cfg.infeasible_lookahead
        w_wait, w_size, w_urg = cfg.w_wait, cfg.w_size, cfg.w_urgency
        best: Entry | None = None
        best_key = (False, -math.inf, 0)
        candidates = queue.heads()
        if len(queue) == 1:  # a lone entry is the choice, feasible or not
            return candidates[0]
        if cfg.urgent_candidates:
            # The earliest deadline is often a band head too; scoring it twice changes nothing.
            urgent = queue.earliest_deadlines(cfg.urgent_candidates)
            candidates += [entry for entry in urgent if entry not in candidates]
        # One pass; an infeasible candidate appends its band's first feasible peer, which
        # this same loop then scores (a list iterated while it grows).
        for entry in candidates:
            # The module docstring's score and feasibility, in one pass (the hot path).
            request = entry.request
            rel = (entry.cost if entry.cost > 1.0 else 1.0) / ref
            wait = now - request.arrival
            score = w_wait * (wait if wait > 0.0 else 0.0) / rel - w_size * rel
            feasible = True
            deadline = request.deadline
            if deadline is not None:
                slack = deadline - now - estimate(entry.hopeful)
                feasible = slack >= 0.0
                urgency = 1.0 - slack / horizon
                score += w_urg * (0.0 if urgency < 0.0 else 1.0 if urgency > 1.0 else urgency)
                if not feasible and lookahead:
                    # An infeasible band head must not hide a feasible peer queued behind it.
                    peer = _first_feasible(queue.band_front(entry, lookahead + 1), now, estimate)
                    if peer is not None:
                        candidates.append(peer)
            key = (feasible, score, -entry.seq)
            if key > best_key:
                best, best_key = entry, key
        if best is None:
            raise ValueError(f"queue {queue.name!r} is empty")
        return best


@ORDERING.register
class LongestFirstOrdering(OrderingPolicy):
    """Longest predicted job first (LPT), for makespan: the batch-job ordering.

    A batch job wants its *last* answer early. Once the client's budget (not
    the provider) sets the pace, the job ends when the last-sent requests
    finish generating; sending the longest predicted work first leaves the
    shortest for the end (Graham's LPT rule for makespan). Resolution is the
    queue's cost bands: the head of the highest-cost band goes next (FIFO
    within a band), so a decision stays O(bands). Requests that can still meet
    their deadline go before those that cannot.
    """

    name = "longest_first"

    def choose(self, queue: ClassQueue, now: float, estimate: LatencyEstimate) -> Entry:
        best: Entry | None = None
        best_key = (False, -math.inf, 0)
        for entry in queue.heads():
            key = (is_feasible(entry, now, estimate), entry.cost, -entry.seq)
            if key > best_key:
                best, best_key = entry, key
        if best is None:
            raise ValueError(f"queue {queue.name!r} is empty")
        return best


@ORDERING.register
class RatePackingOrdering(OrderingPolicy):
    """Keep every rate window busy, longest work first: a batch job at its makespan floor.

    Under a requests-per-window and a tokens-per-window budget a job cannot end
    before ``max(n / rpm, tokens / tpm)`` windows (`semisched.core.floor`);
    it ends there only if neither window idles while the other is exhausted.
    Sending cheap requests first fills the request window while the token
    window idles (and leaves the long work for the tail); sending only the
    largest does the opposite at the end. So the choice balances what is left:

    while what is queued needs more token windows than request windows
    (``tokens / tpm >= requests / rpm``: tokens are the long pole),
    the largest request goes next, waiting for room if it must (Graham's LPT:
    the longest work is not left for the tail); once requests are the long
    pole, the cheapest request that fits now goes, which keeps the request
    window busy and leaves tokens to the larger work. Each send moves the
    balance towards the other case, so the two windows are used together.
    Candidates are the band heads that can still meet their deadline. Without
    a budget on both axes it is LPT.
    """

    name = "rate_packing"

    def __init__(self, cfg: OrderingConfig) -> None:
        super().__init__(cfg)
        self._view: PackingView | None = None

    def attach(self, view: PackingView) -> None:
        self._view = view

    def choose(self, queue: ClassQueue, now: float, estimate: LatencyEstimate) -> Entry:
        heads = queue.heads()
        if not heads:
            raise ValueError(f"queue {queue.name!r} is empty")
        candidates = [e for e in heads if is_feasible(e, now, estimate)] or heads
        view = self._view
        if view is None:
            return max(candidates, key=_longest)
        rpm, tpm = view.budget_limits()
        requests, tokens = view.backlog()
        if rpm is None or tpm is None or tokens / tpm >= requests / rpm:
            # Tokens are the long pole (or the only limit): the largest goes next, and
            # waits for room if it must; skipping it for smaller ones would starve it
            # into the tail while the token window stays just as full.
            return max(candidates, key=_longest)
        # Requests are the long pole: the cheapest that fits now keeps the request
        # window busy and leaves tokens to the larger work still queued.
        fitting = [e for e in candidates if view.fits_now(e.charge)] or candidates
        return min(fitting, key=lambda e: (e.charge, e.seq))


def _longest(entry: Entry) -> tuple[float, float, int]:
    """LPT's key under a budget: the largest charge (its ``max_tokens`` bounds its
    output), then the largest predicted cost, then the oldest."""
    return (entry.charge, entry.cost, -entry.seq)


def _first_feasible(
    entries: Iterable[Entry], now: float, estimate: LatencyEstimate
) -> Entry | None:
    """The first of ``entries`` that can still meet its deadline (see `is_feasible`)."""
    return next((entry for entry in entries if is_feasible(entry, now, estimate)), None)


#: The built-in policies by name (read-only: each registers itself under its ``name``,
#: in the order defined above; a config checks its name here when it is built).
ORDERING_POLICIES: Mapping[str, type[OrderingPolicy]] = ORDERING


def make_ordering(cfg: OrderingConfig) -> OrderingPolicy:
    """Build the ordering policy ``cfg.policy`` names (or is: a user's class).

    Raises:
        ValueError: For an unknown policy name (only reachable by bypassing the
            config's own check, which runs when the config is built).
        TypeError: For a class that is not a policy of this layer.
    """
    return policy_class(cfg.policy, OrderingPolicy, ORDERING_POLICIES)(cfg)
