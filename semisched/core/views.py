"""What the policies read of the engine: one small object per view.

- `Pressure` is the `LaneHost` every
  lane reads (and through it each allocation policy): the overload severity of
  the current decision, the concurrency in force, the learned per-request cost
  and the ordering policy's pick. Overload control reads its severity too.
- `Packing` is the `PackingView` an ordering
  policy may read of the rate budget and the backlog.

Each holds the parts it reads (the book, the fleet), never the engine.
Pure: no clock, no I/O.
"""

from __future__ import annotations

from semisched.core.book import Book
from semisched.core.config import SchedulerConfig
from semisched.core.fleet.endpoint import Circuit
from semisched.core.fleet.fleet import Fleet
from semisched.core.ordering import OrderingPolicy
from semisched.core.queue import ClassQueue, Entry
from semisched.core.signals import SignalSnapshot

__all__ = ["Packing", "Pressure"]

_CLOSED = Circuit.CLOSED


class Pressure:
    """The load the policies see (module docstring): a
    `LaneHost`.

    ``severity`` and ``request_tokens`` are the values of the current decision: `refresh`
    reads them at its start, and the lanes read them until the next one.
    """

    __slots__ = (
        "_book",
        "_config",
        "_estimate",
        "_fleet",
        "_order",
        "_request_tokens",
        "_signals",
        "_weights",
        "request_tokens",
        "severity",
    )  # fmt: skip

    def __init__(
        self, config: SchedulerConfig, book: Book, fleet: Fleet, order: OrderingPolicy
    ) -> None:
        self._config = config
        self._request_tokens = config.allocation.request_tokens
        self._weights = config.overload
        self._book = book
        self._fleet = fleet
        self._signals = fleet.signals
        self._estimate = fleet.signals.estimate_latency
        self._order = order
        self.severity = 0.0
        self.request_tokens = self.request_cost()

    @property
    def max_inflight(self) -> int | None:
        """The concurrency in force: the sum of the endpoints' caps when each has one
        (learned or set), at most ``config.max_inflight``; ``None``: no limit."""
        return self._fleet.in_force

    def request_cost(self) -> float:
        """What one request costs in allocation besides its tokens, now: the configured
        ``AllocationConfig.request_tokens``, or the fleet's learned one."""
        fixed = self._request_tokens
        return self._fleet.request_tokens if fixed is None else fixed

    def choose(self, queue: ClassQueue) -> Entry:
        """The ordering policy's pick in ``queue`` now."""
        return self._order.choose(queue, self._book.now, self._estimate)

    def refresh(self) -> float:
        """The overload severity now (engine rule 6; the fleet's pressure, rule 5), and
        the request cost now: what the lanes read (``severity``, ``request_tokens``)
        until the next refresh. Returns the severity.

        An endpoint alone in the fleet whose circuit is closed is read through the
        fleet's own signals (they are its signals) and no fleet pressure: its load
        over its cap is never above the load the severity reads, and its tail is
        the signals' own.
        """
        book, fleet = self._book, self._fleet
        fixed = self._request_tokens
        self.request_tokens = fleet.request_tokens if fixed is None else fixed
        alone = fleet.alone
        if alone is not None and alone.circuit is _CLOSED:
            severity = self._signals.severity(
                book.inflight, fleet.in_force, book.queued_tokens, self._weights
            )
        else:
            tail, load = fleet.pressure(book.now)
            # positional: the hot path of admission and dispatch
            severity = self._signals.severity(
                book.inflight, fleet.in_force, book.queued_tokens, self._weights, tail, load
            )
        self.severity = severity
        return severity

    def snapshot(self) -> SignalSnapshot:
        """The overload signals now, as a frozen snapshot."""
        book = self._book
        tail, load = self._fleet.pressure(book.now)
        return self._signals.snapshot(
            inflight=book.inflight,
            max_inflight=self.max_inflight,
            queued_tokens=book.queued_tokens,
            weights=self._config.overload,
            tail=tail,
            load_floor=load,
        )


class Packing:
    """What an ordering policy may see of the rate budget and the backlog: a
    `PackingView`."""

    __slots__ = ("_book", "_fleet")

    def __init__(self, book: Book, fleet: Fleet) -> None:
        self._book = book
        self._fleet = fleet

    def budget_limits(self) -> tuple[int | None, int | None]:
        """The rate budget's effective (requests, tokens) per window, if any."""
        return self._fleet.budgets.limits()

    def fits_now(self, tokens: float) -> bool:
        """Whether one request charging ``tokens`` fits the rate budget now."""
        return self._fleet.budgets.fits_now(tokens, self._book.now)

    def backlog(self) -> tuple[float, float]:
        """Queued requests (all classes) and the sum of their rate charges."""
        return self._book.backlog()
