"""The engine's per-request entry and the per-class queue that holds entries.

This is mechanism, not policy: a `ClassQueue` stores waiting entries so
that every ordering policy can find its candidates without scanning the whole
queue. Rules:

1. An entry is in at most one queue; ``entry.queued`` is True exactly while it is.
2. Removal is O(1): the entry is marked and dropped lazily when it reaches a
   band head or the deadline-heap top. Stored items carry the ``seq`` they were
   enqueued with, so a removed-then-re-enqueued entry never counts twice.
3. Entries live in *cost bands*: band ``b`` holds costs in
   ``[ratio**b, ratio**(b+1))``, each band a FIFO deque by enqueue order. The
   head of each band is that band's longest-queued entry.
4. Entries with a deadline are also on a min-heap by deadline.
5. ``len(queue)`` and ``queue.tokens`` count live entries only.

With a bounded number of bands (cost spans a few decades), finding the oldest
entry, each band's head, or the k earliest deadlines costs O(bands + k log n),
independent of how many entries wait.
"""

from __future__ import annotations

import heapq
import math
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from semisched.core.request import Request

__all__ = ["ClassQueue", "Entry", "EntryState"]


class EntryState:
    """String constants for an entry's lifecycle (terminal states last)."""

    QUEUED = "queued"
    DEFERRED = "deferred"
    INFLIGHT = "inflight"
    DONE = "done"


@dataclass(slots=True, eq=False)
class Entry:
    """Mutable engine-side state of one request.

    Attributes:
        request: The immutable request.
        cost: Estimated token cost (allocation currency): prior p50 plus
            weighted input tokens.
        reserve: Tokens reserved against the in-flight token budget
            (p90 + weighted input).
        seq: Enqueue sequence number; renewed on every (re-)enqueue.
        state: One of `EntryState`.
        queued: True while in a `ClassQueue`.
        defers: How many times overload control deferred it.
        attempts: How many times it was sent.
        sent_at: Time of the latest send.
        held: Requests its endpoint held when it was last sent, itself included.
        first_token_s: Seconds from that send to its answer's first token, when the
            shell saw one (a streamed answer; a learned concurrency limit reads it).
        left_before: Requests that had left its endpoint before that send.
        left_during: Requests that left its endpoint between that send and its first
            token (``None`` until then): one queued for a slot waits for one to leave.
        left_by_s: Seconds from that send to the last of them.
        awaiting_s: While a streamed request's first token is awaited at a learning
            endpoint, the first-token time it is counted with there (`Limits`);
            ``None`` otherwise.
        overdue_at: When its first token is next checked for lateness (``None``: not).
        wake_at: Time a deferred entry is due back.
        skip_admission: Re-enter the queue without an overload check (retries).
        charge: What a rate budget charges for it: prompt estimate plus
            ``max_tokens``, else the prior's p90 (``budget.rate_tokens``).
        hopeful: Output tokens the ordering tests a deadline with: the prior's
            ``OrderingConfig.feasibility_quantile`` (its p50 at 0.5).
        endpoint: Where its latest attempt was sent.
        avoid: The endpoints its failed attempts failed at (failover avoids them).
        lane: Its tenant's lane (`semisched.core.tenants.lanes`).
    """

    # The fields every decision reads come first, so that they share the object's first
    # cache lines (a queue of thousands is scanned at its band heads).
    request: Request
    cost: float
    reserve: float
    seq: int
    queued: bool = False
    hopeful: float = 0.0
    state: str = EntryState.QUEUED
    # A TenantLane and an EndpointState: typed loosely, since the tenant layer's and the
    # fleet's modules sit above this one (the core's imports run one way only).
    lane: Any = None
    charge: float = 0.0
    endpoint: Any = None
    sent_at: float | None = None
    attempts: int = 0
    defers: int = 0
    held: int = 0
    wake_at: float | None = None
    skip_admission: bool = field(default=False)
    avoid: tuple[Any, ...] = ()
    first_token_s: float | None = None
    left_before: int = 0
    left_during: int | None = None
    left_by_s: float = 0.0
    awaiting_s: float | None = None
    overdue_at: float | None = None


def _live(item: tuple[int, Entry]) -> bool:
    seq, entry = item
    return entry.queued and entry.seq == seq


class ClassQueue:
    """Waiting entries of one class, banded by cost (see module rules)."""

    __slots__ = ("_bands", "_deadlines", "_log_ratio", "_n", "name", "tokens")

    def __init__(self, name: str, band_ratio: float) -> None:
        self.name = name
        self._log_ratio = math.log(band_ratio)
        self._bands: dict[int, deque[tuple[int, Entry]]] = {}
        self._deadlines: list[tuple[float, int, Entry]] = []
        self._n = 0
        self.tokens = 0.0

    def __len__(self) -> int:
        return self._n

    def __bool__(self) -> bool:
        return self._n > 0

    def __repr__(self) -> str:
        return (
            f"<ClassQueue {self.name!r} live={self._n} tokens={self.tokens:.0f} "
            f"bands={len(self._bands)}>"
        )

    def _band(self, cost: float) -> int:
        return int(math.log(cost if cost > 1.0 else 1.0) / self._log_ratio)

    def add(self, entry: Entry) -> bool:
        """Append ``entry`` (rule 1: it must not already be queued); ``True`` when it is
        the only live entry now (the queue was empty)."""
        if entry.queued:
            raise ValueError(f"entry {entry.request.id!r} is already queued")
        entry.queued = True
        band = self._band(entry.cost)
        dq = self._bands.get(band)
        if dq is None:
            dq = self._bands[band] = deque()
        dq.append((entry.seq, entry))
        if entry.request.deadline is not None:
            heapq.heappush(self._deadlines, (entry.request.deadline, entry.seq, entry))
        self._n += 1
        self.tokens += entry.cost
        return self._n == 1

    def remove(self, entry: Entry) -> bool:
        """Mark ``entry`` as gone; storage is reclaimed lazily (rule 2). ``True`` when the
        queue is empty now."""
        if not entry.queued:
            raise ValueError(f"entry {entry.request.id!r} is not queued")
        entry.queued = False
        self._n -= 1
        self.tokens -= entry.cost
        if self._n == 0:
            self._bands.clear()
            self._deadlines.clear()
            self.tokens = 0.0
            return True
        return False

    def heads(self) -> list[Entry]:
        """The longest-queued live entry of every non-empty band (a new list)."""
        heads: list[Entry] = []
        empty: list[int] = []
        for band, dq in self._bands.items():
            while dq:
                seq, entry = dq[0]
                if entry.queued and entry.seq == seq:  # _live, inlined: once per band per decision
                    heads.append(entry)
                    break
                dq.popleft()
            else:
                empty.append(band)
        for band in empty:
            del self._bands[band]
        return heads

    def band_front(self, head: Entry, depth: int) -> Iterator[Entry]:
        """Up to ``depth`` live entries of ``head``'s band, from its head on (FIFO order)."""
        dq = self._bands.get(self._band(head.cost))
        if dq is None:
            return
        n = 0
        for item in dq:
            if _live(item):
                yield item[1]
                n += 1
                if n >= depth:
                    return

    def oldest(self) -> Entry | None:
        """The live entry enqueued first (smallest ``seq``), or None."""
        best: Entry | None = None
        for head in self.heads():
            if best is None or head.seq < best.seq:
                best = head
        return best

    def earliest_deadlines(self, k: int) -> list[Entry]:
        """Up to ``k`` live entries with the earliest deadlines, earliest first."""
        heap = self._deadlines
        while heap and not (heap[0][2].queued and heap[0][2].seq == heap[0][1]):  # _live, inlined
            heapq.heappop(heap)
        if k <= 0 or not heap:
            return []
        if k == 1:
            return [heap[0][2]]
        popped: list[tuple[float, int, Entry]] = []
        out: list[Entry] = []
        while heap and len(out) < k:
            item = heapq.heappop(heap)
            if _live(item[1:]):
                popped.append(item)
                out.append(item[2])
        for item in popped:
            heapq.heappush(heap, item)
        return out
