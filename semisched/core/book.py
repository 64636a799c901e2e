"""The flight book: where every request is, its counts, and the timers.

`Book` holds what the `Engine` must know
of each request it has not finished: the entries by id, how many are queued,
deferred and in flight (and their tokens), the timer heap (deferral returns and
deadlines) and the wake last reported to the shell. Its methods move one entry
from place to place and keep those counts exact (rule 3 of the engine: a request
is in exactly one place).

It decides nothing and knows no policy: the engine decides, then tells the book.
It reads the clock only as the ``now`` the engine was given (`advance`).
Pure: no clock, no I/O.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable

from semisched.core.actions import Wake
from semisched.core.queue import Entry, EntryState
from semisched.core.states import MOVES, Event, advance, illegal

__all__ = ["DEADLINE", "OVERDUE", "WAKE", "Book"]

#: Timer kinds: a deferred entry's return, a deadline, a sent entry's first token late.
WAKE = 0
DEADLINE = 1
OVERDUE = 2
_QUEUED, _DEFERRED = EntryState.QUEUED, EntryState.DEFERRED
_INFLIGHT = EntryState.INFLIGHT
_SEND, _DEFER = Event.SEND, Event.DEFER
_SENT = MOVES[_SEND]

Timer = tuple[float, int, int, Entry]


def _nothing() -> None:
    """No lane to tell (the engine wires `Book.on_ready`)."""


class Book:
    """Every unfinished request, where it is, and the timers (module docstring).

    Args:
        max_inflight: The fleet-wide ceiling on requests in flight (``None``: none).
        max_inflight_tokens: The ceiling on reserved tokens in flight (``None``: none).

    ``on_ready`` is called when a lane's queue becomes empty or non-empty (the
    tenant layer's list of ready lanes follows it; the engine wires it).
    """

    __slots__ = (
        "_inflight_cap",
        "_reported_wake",
        "_seq",
        "_token_cap",
        "deferred",
        "entries",
        "inflight",
        "inflight_tokens",
        "now",
        "on_ready",
        "queued",
        "queued_charge",
        "queued_tokens",
        "send_wake",
        "timers",
    )

    def __init__(self, max_inflight: int | None, max_inflight_tokens: float | None) -> None:
        self.on_ready: Callable[[], None] = _nothing
        self._inflight_cap = math.inf if max_inflight is None else max_inflight
        self._token_cap = max_inflight_tokens
        #: Every request not yet terminal, by id.
        self.entries: dict[str, Entry] = {}
        self.timers: list[Timer] = []
        self._seq = 0
        self.now = float("-inf")
        self.queued = 0
        self.queued_tokens = 0.0  # the queued entries' costs (work tokens)
        self.queued_charge = 0.0  # the queued entries' rate charges (PackingView.backlog)
        self.deferred = 0
        self.inflight = 0
        self.inflight_tokens = 0.0  # the in-flight entries' reserves
        self._reported_wake: float | None = None
        #: When the head of the queue can next be sent (a budget refills, a circuit
        #: half-opens): a timer of its own, without an entry.
        self.send_wake: float | None = None

    # -- time and order -----------------------------------------------------------------

    def advance(self, now: float) -> None:
        """The engine's time moves to ``now``.

        Raises:
            ValueError: ``now`` is earlier than the last ``now``.
        """
        if not now >= self.now:
            raise ValueError(f"now={now!r} must not be earlier than the last now={self.now!r}")
        self.now = now

    # -- timers ---------------------------------------------------------------------------

    def push_timer(self, at: float, kind: int, entry: Entry) -> None:
        """Fire ``kind`` (`WAKE` or `DEADLINE`) for ``entry`` at ``at``."""
        self._seq += 1  # timer ties and enqueue order share one count
        heapq.heappush(self.timers, (at, self._seq, kind, entry))

    @staticmethod
    def live(timer: Timer) -> bool:
        """Whether ``timer`` still means something (its entry has not moved on)."""
        at, _, kind, entry = timer
        if kind == WAKE:
            return entry.state == _DEFERRED and entry.wake_at == at
        if kind == OVERDUE:
            return entry.state == _INFLIGHT and entry.overdue_at == at
        return entry.state == _QUEUED or entry.state == _DEFERRED

    def due(self, now: float) -> Timer | None:
        """The next live timer due at or before ``now``, taken off the heap (``None``:
        none is due)."""
        timers = self.timers
        while timers and timers[0][0] <= now:
            timer = heapq.heappop(timers)
            if self.live(timer):
                return timer
        return None

    def next_wakeup(self) -> float | None:
        """The earliest pending timer or send wake, if any."""
        timers = self.timers
        while timers and not self.live(timers[0]):
            heapq.heappop(timers)
        first = timers[0][0] if timers else None
        send = self.send_wake
        if send is not None and (first is None or send < first):
            return send
        return first

    def wake_send_at(self, at: float) -> None:
        """Ask for a poll at ``at`` (kept when it is earlier than the one asked for)."""
        if self.send_wake is None or at < self.send_wake:
            self.send_wake = at

    def wake(self, now: float) -> Wake | None:
        """The `Wake` to report: when the earliest timer moved earlier than the one
        last reported, or that one has passed (engine rule 7)."""
        timers = self.timers  # next_wakeup(), inlined: every event ends here
        while timers and not self.live(timers[0]):
            heapq.heappop(timers)
        wake = timers[0][0] if timers else None
        send = self.send_wake
        if send is not None and (wake is None or send < wake):
            wake = send
        last = self._reported_wake
        if wake is not None and (last is None or wake < last or last <= now):
            self._reported_wake = wake
            return Wake(wake)
        return None

    # -- moves ----------------------------------------------------------------------------

    def enqueue(self, entry: Entry, event: int) -> None:
        """``entry`` joins its lane's class queue by ``event`` (ENQUEUE, WAKE, REFUSED)."""
        lane = entry.lane
        try:  # advance(), inlined: every request's moves
            entry.state = MOVES[event][entry.state]
        except (IndexError, KeyError):
            raise illegal(entry, event) from None
        self._seq += 1
        entry.seq = self._seq
        lane.add(entry)
        self.queued += 1
        self.queued_tokens += entry.cost
        self.queued_charge += entry.charge
        if lane.queued == 1:  # the lane is ready now
            self.on_ready()

    def dequeue(self, entry: Entry) -> None:
        """``entry`` leaves its class queue."""
        lane = entry.lane
        lane.remove(entry)
        self.queued -= 1
        tokens = self.queued_tokens - entry.cost
        self.queued_tokens = tokens if tokens > 0.0 else 0.0  # max(0.0, ...), clamping drift
        charge = self.queued_charge - entry.charge
        self.queued_charge = charge if charge > 0.0 else 0.0
        if not lane.queued:  # the lane is not ready any more
            self.on_ready()

    def defer(self, entry: Entry, until: float, event: int = _DEFER) -> None:
        """``entry`` waits until ``until`` by ``event`` (DEFER or RETRY)."""
        advance(entry, event)
        entry.wake_at = until
        self.deferred += 1
        self.push_timer(until, WAKE, entry)

    def sent(self, entry: Entry, now: float) -> None:
        """``entry``, out of its queue, goes in flight at ``now``."""
        try:  # advance(), inlined
            entry.state = _SENT[entry.state]
        except KeyError:
            raise illegal(entry, _SEND) from None
        entry.attempts += 1
        entry.sent_at = now
        self.inflight += 1
        self.inflight_tokens += entry.reserve

    def take(self, request_id: str) -> Entry:
        """Take the in-flight ``request_id`` out of flight's counts; its state is left to
        the caller's move (its outcome, a retry, a refusal).

        Raises:
            ValueError: ``request_id`` is not in flight.
        """
        entry = self.entries.get(request_id)
        if entry is None or entry.state != _INFLIGHT:
            raise ValueError(f"request_id={request_id!r} is not in flight")
        self.inflight -= 1
        tokens = self.inflight_tokens - entry.reserve
        self.inflight_tokens = tokens if tokens > 0.0 else 0.0  # clamping drift
        lane = entry.lane
        lane.outstanding -= 1
        lane.inflight_by_class[entry.request.klass] -= 1
        return entry

    def terminal(self, entry: Entry, event: int) -> None:
        """``entry`` ends by ``event`` (its outcome) and leaves the book."""
        try:  # advance(), inlined
            entry.state = MOVES[event][entry.state]
        except (IndexError, KeyError):
            raise illegal(entry, event) from None
        self.entries.pop(entry.request.id, None)

    # -- what may be sent ---------------------------------------------------------------

    def has_capacity(self, reserve: float) -> bool:
        """Whether one more request reserving ``reserve`` tokens may fly (engine rule 4)."""
        if self.inflight >= self._inflight_cap:
            return False
        limit = self._token_cap
        return limit is None or self.inflight == 0 or self.inflight_tokens + reserve <= limit

    def backlog(self) -> tuple[float, float]:
        """Queued requests (all classes) and the sum of their rate charges."""
        return float(self.queued), self.queued_charge
