"""Spend caps' shared books: reserve a request's cost before it is sent, settle it after.

A [`SpendCap`][semisched.core.spend.SpendCap] allows ``usd`` per calendar hour, day or
month (UTC). Its book, for each period, holds the settled total and each request's
outstanding reservation. The runtime (`semisched.spend`):

1. **reserves** a request's estimated cost (its prompt plus its prior's p90 output, at
   the endpoint's price) in every cap it falls under, atomically: all or none. A
   reservation that would take a period past its cap is refused, naming the cap, what
   the period holds and when it resets;
2. **settles** it on the real usage once the answer is known (the period keeps the
   real cost), or **releases** it when the request failed or was not sent.

So the caps hold across processes as the rate budgets do: each reservation sees every
other process's settled spend and outstanding reservations. What a period can pass its
cap by: the real cost of the requests in flight beyond their reservations (a request
that ran past its p90), nothing more.

Backends: `LocalSpend` (one process; the default) and
`semisched.state.spend_redis.RedisSpend` (a Lua script per step on the shared
state's Redis, the server's clock deciding the period). `SpendGuard` keeps the
rules the budgets keep when the store is lost (`semisched.state.guard`): this
worker goes on alone with its share of what each cap had left at the last answer, and
records what it spent meanwhile once the store is back.

Amounts are kept in nano-dollars (integers), so sums are exact.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from contextlib import suppress
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

from semisched.core.spend import SpendCap
from semisched.state.base import StateUnavailable

__all__ = [
    "NANO",
    "LocalSpend",
    "SpendBackend",
    "SpendGrant",
    "SpendGuard",
    "nano",
]

#: The end of a fallback's book keys.
_LOCAL = "#local"

#: Nano-dollars per US dollar: the books' integer unit.
NANO = 1_000_000_000


def nano(usd: float) -> int:
    """``usd`` in nano-dollars (rounded up: a reservation never undercounts)."""
    if isinstance(usd, bool) or not isinstance(usd, int | float) or not math.isfinite(usd):
        raise ValueError(f"usd={usd!r} must be a finite number >= 0")
    if usd < 0:
        raise ValueError(f"usd={usd!r} must be a finite number >= 0")
    return math.ceil(usd * NANO - 1e-6)


@dataclass(frozen=True, slots=True)
class SpendGrant:
    """The answer to a spend reservation.

    Attributes:
        ok: Reserved in every cap.
        keys: When ``ok``, the period books it was charged in (settle and release them).
        cap: When refused, the cap that refused (the first one too full).
        spent_usd: When refused, what that cap's period holds (settled plus reserved).
        reset_at: When refused, when that period ends (Unix seconds, UTC).
        remaining_usd: What each cap had left after the reservation (``(cap key, usd)``),
            when the backend reports it; a fallback starts from it.
    """

    ok: bool
    keys: tuple[str, ...] = ()
    cap: SpendCap | None = None
    spent_usd: float = 0.0
    reset_at: float = 0.0
    remaining_usd: tuple[tuple[str, float], ...] = field(default=(), compare=False)


@runtime_checkable
class SpendBackend(Protocol):
    """Where spend caps' books live (module docstring). Async; a shared one may raise
    [`StateUnavailable`][semisched.state.base.StateUnavailable]."""

    async def reserve_spend(
        self, request_id: str, usd: float, caps: Sequence[SpendCap]
    ) -> SpendGrant:
        """Reserve ``usd`` in every cap's current period, or in none (a refusal)."""

    async def settle_spend(self, request_id: str, usd: float, keys: Sequence[str]) -> None:
        """Replace the request's reservation in each book of ``keys`` with ``usd``
        (0: release it); a book without it is left as it is."""

    async def record_spend(self, usd: float, caps: Sequence[SpendCap]) -> None:
        """Add ``usd`` already spent (without the books) to every cap's current period."""

    async def release_spend(self, request_id: str, caps: Sequence[SpendCap]) -> None:
        """Release the request's reservation, if it holds one, in every cap's current period
        (a reservation whose answer was lost to a cancel)."""


class LocalSpend:
    """Spend books in this process (module docstring), on ``wall`` (Unix seconds).

    ``limits`` overrides a cap's allowance by its key (a fallback's share); ``suffix``
    ends every book's key (a fallback's: ``"#local"``).
    """

    def __init__(self, wall: Callable[[], float] = time.time, suffix: str = "") -> None:
        self._wall = wall
        self._suffix = suffix
        self._books: dict[str, dict[str, int]] = {}  # period key -> member -> nano ("": total)
        self.limits: dict[str, int] = {}

    def __repr__(self) -> str:
        return f"LocalSpend(books={len(self._books)})"

    def _book(self, cap: SpendCap, now: float) -> tuple[str, dict[str, int], float]:
        start, end = cap.period(now)
        key = f"{cap.key}:{int(start)}{self._suffix}"
        book = self._books.get(key)
        if book is None:
            for old in [k for k in self._books if k.startswith(cap.key + ":")]:
                del self._books[old]  # a past period of this cap: nothing reads it again
            book = self._books[key] = {"": 0}
        return key, book, end

    async def reserve_spend(
        self, request_id: str, usd: float, caps: Sequence[SpendCap]
    ) -> SpendGrant:
        amount, now = nano(usd), self._wall()
        books = [self._book(cap, now) for cap in caps]
        for cap, (_, book, end) in zip(caps, books, strict=True):
            limit = self.limits.get(cap.key, nano(cap.usd))
            if book[""] - book.get(request_id, 0) + amount > limit:
                return SpendGrant(False, cap=cap, spent_usd=book[""] / NANO, reset_at=end)
        remaining = []
        for cap, (_, book, _end) in zip(caps, books, strict=True):
            book[""] += amount - book.get(request_id, 0)
            book[request_id] = amount
            remaining.append((cap.key, (nano(cap.usd) - book[""]) / NANO))
        return SpendGrant(True, keys=tuple(k for k, _, _ in books), remaining_usd=tuple(remaining))

    async def settle_spend(self, request_id: str, usd: float, keys: Sequence[str]) -> None:
        amount = nano(usd)
        for key in keys:
            book = self._books.get(key)
            if book is None or request_id not in book:
                continue
            book[""] += amount - book.pop(request_id)

    async def record_spend(self, usd: float, caps: Sequence[SpendCap]) -> None:
        now = self._wall()
        for cap in caps:
            self._book(cap, now)[1][""] += nano(usd)

    async def release_spend(self, request_id: str, caps: Sequence[SpendCap]) -> None:
        now = self._wall()
        for cap in caps:
            book = self._book(cap, now)[1]
            if request_id in book:
                book[""] -= book.pop(request_id)

    def outstanding(self) -> int:
        """Reservations not yet settled or released, in every period's book."""
        return sum(len(book) - 1 for book in self._books.values())

    def spent(self, cap: SpendCap) -> float:
        """What ``cap``'s current period holds, settled and reserved (US dollars)."""
        return self._book(cap, self._wall())[1][""] / NANO


class SpendGuard:
    """A shared spend backend with the budgets' fallback (module docstring).

    Args:
        shared: The shared books.
        workers: How many workers share them now (read when the store is lost).
        wall: Unix seconds (the fallback's clock).
        retry_s: Wall seconds between attempts to rejoin a lost store.
    """

    def __init__(
        self,
        shared: SpendBackend,
        workers: Callable[[], int],
        wall: Callable[[], float] = time.time,
        retry_s: float = 5.0,
    ) -> None:
        self.shared = shared
        self._workers = workers
        self._wall = wall
        self._retry_s = retry_s
        self._remaining: dict[str, float] = {}  # cap key -> usd left at the last report
        self._local: LocalSpend | None = None
        self._lost_at = 0.0
        self._unrecorded: dict[SpendCap, float] = {}
        self.fallbacks = 0

    def __repr__(self) -> str:
        return f"SpendGuard({self.shared!r}, lost={self.lost})"

    @property
    def lost(self) -> bool:
        """Whether the shared books are lost and this worker spends from its share."""
        return self._local is not None

    async def reserve_spend(
        self, request_id: str, usd: float, caps: Sequence[SpendCap]
    ) -> SpendGrant:
        if self._local is not None and self._wall() - self._lost_at >= self._retry_s:
            await self._rejoin()
        if self._local is None:
            try:
                grant = await self.shared.reserve_spend(request_id, usd, caps)
            except StateUnavailable:
                self._lose(caps)
            else:
                self._remaining.update(grant.remaining_usd)
                return grant
        assert self._local is not None
        grant = await self._local.reserve_spend(request_id, usd, caps)
        if grant.ok:
            for cap in caps:
                self._unrecorded[cap] = self._unrecorded.get(cap, 0.0) + usd
        return grant

    async def settle_spend(self, request_id: str, usd: float, keys: Sequence[str]) -> None:
        if self._local is not None and all(k.endswith(_LOCAL) for k in keys):
            await self._local.settle_spend(request_id, usd, keys)
            return
        with suppress(StateUnavailable):  # else its reservation stands: it overcounts, never under
            await self.shared.settle_spend(request_id, usd, keys)

    async def record_spend(self, usd: float, caps: Sequence[SpendCap]) -> None:
        await self.shared.record_spend(usd, caps)

    async def release_spend(self, request_id: str, caps: Sequence[SpendCap]) -> None:
        if self._local is not None:
            await self._local.release_spend(request_id, caps)
            return
        with suppress(StateUnavailable):  # else its reservation stands: it overcounts, never under
            await self.shared.release_spend(request_id, caps)

    def _lose(self, caps: Sequence[SpendCap]) -> None:
        self.fallbacks += 1
        self._lost_at = self._wall()
        local = LocalSpend(self._wall, suffix=_LOCAL)
        workers = max(1, self._workers())
        for cap in caps:
            left = self._remaining.get(cap.key, cap.usd)
            local.limits[cap.key] = nano(max(left, 0.0) / workers)
        self._local = local

    async def _rejoin(self) -> None:
        self._lost_at = self._wall()
        try:
            for cap, usd in list(self._unrecorded.items()):
                await self.shared.record_spend(usd, (cap,))
                del self._unrecorded[cap]
        except StateUnavailable:
            return
        self._local = None



def spend_books_for(backend: object, wall: Callable[[], float] = time.time) -> SpendBackend:
    """Where a run's spend caps are kept: beside its shared state (a Redis server's, with
    `SpendGuard`'s fallback; an in-process state's own books, so schedulers sharing
    one share them), or in this process when it has none."""
    from semisched.state.local import LocalState

    if isinstance(backend, LocalState):
        return backend.spend_books
    try:
        from semisched.state.redis import RedisState
    except ImportError:  # no redis package: no Redis backend either
        RedisState = None  # type: ignore[assignment,misc]
    if RedisState is not None and isinstance(backend, RedisState):
        from semisched.state.spend_redis import RedisSpend

        state = backend
        return SpendGuard(RedisSpend(state), lambda: state.statistics().workers, wall)
    return LocalSpend(wall)
