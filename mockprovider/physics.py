"""Physics of a congestion-aware mock LLM provider: continuous batching in fluid lockstep.

What it is: the pure state machine behind the mock provider. It decides when each request is
admitted to a batch slot, when its first token and its completion are observed, and when it
times out. The discrete-event simulator drives it in virtual time; the HTTP mock server drives
it in (scaled) real time. The service model is FleetOpt eq. 3-4 (``t_iter = W + H*n``; a
request holds a slot for ``ceil(L_in / C_chunk) + L_out`` iterations); the per-token cost is
calibrated to Scheduling the Unschedulable §4.1 (``latency_ms = 3294 + 18.7 * output_tokens``).

What it is not: no I/O, no clock reads, no randomness, no threads, no token contents and no
KV-cache memory model. Every call takes an explicit ``now`` (seconds, float).

Rules (invariants every caller may rely on):

1. Time never goes backwards: each call that takes ``now`` raises ``ValueError`` when ``now``
   is earlier than the last ``now`` seen.
2. At most ``slots`` requests are admitted; ``active`` exceeds ``slots`` only after
   ``set_slots`` lowered the capacity, and then nothing is admitted until ``active < slots``.
3. Waiting requests sit in one FIFO, invisible to clients, and are admitted strictly in
   submission order at the exact instant a slot frees (never at or after their deadline).
4. Every submitted request gets exactly one terminal event, ``COMPLETED`` or ``TIMED_OUT``,
   unless it is cancelled first; a cancelled request emits nothing after its cancellation.
   ``FIRST_TOKEN`` (only for ``output_tokens >= 1``) comes before ``COMPLETED``.
5. ``COMPLETED`` is observed at batch finish + ``overhead_ms`` and only if that is no later than
   ``submit + timeout_s`` (exactly at the deadline counts as completed); otherwise
   ``TIMED_OUT`` is observed at exactly ``submit + timeout_s``. The slot or queue place is
   held until the batch finishes the work or the deadline passes, whichever is first.
6. ``advance(now)`` returns every event with ``time <= now``, ordered by (time, submission
   sequence, first token before terminal). Splitting the advance calls differently (many
   small steps or one big one) yields the identical event list: state changes only at
   event-determined instants, never at the instants ``advance`` happens to be called.
7. ``next_event_time()`` is the time of the next event ``advance`` would return if nothing
   else is submitted, cancelled or resized before it (``None`` when idle).

Fluid lockstep. A real engine steps all active sequences in discrete iterations. Here a global
iteration counter ``G`` advances continuously at ``1 / t_iter(n_active)`` iterations per second
(piecewise constant between membership changes); a request admitted at counter value ``G0``
finishes at ``G0 + work`` and shows its first token at ``G0 + prefill_iters + 1``. Event times
follow in O(log n) per event, with no per-iteration or per-token loop. Relative to exact
lockstep, each membership change takes effect mid-iteration instead of at the next iteration
boundary, which moves times by less than one iteration per change.

Prompt tokens: ``input_tokens = 0`` means zero prefill iterations; every request needs at least
one iteration in total. ``output_tokens = 0`` is a prefill-only request (an embedding): it
holds its slot for its prefill iterations only, shows no first token and completes when its
prompt is done (no decode step). With ``prefill_ms_per_token`` (``P``) above 0, each
prefilling request adds ``P * input_tokens / prefill_iters`` ms to every iteration until its
prompt is done (one more transition per request, where the rate changes), so a prompt slows
the whole batch the way a CPU engine's prompt processing does; with ``P = 0`` nothing changes.

Context: with ``context_ms_per_token`` (``K``) above 0, every iteration also costs ``K`` per
token of context the batch holds: each active request's prompt plus the iterations it has
been in the batch. That context grows by ``n`` tokens an iteration, so between membership
changes the iteration time grows linearly in ``G`` (``dt/dG = a + b*G``, ``b = K*n``) and
``G`` follows from the time by the quadratic's root: still O(log n) per event. With
``K = 0`` the rate is piecewise constant as above.

Where it lives: `ProviderPhysics` here is the public face (submitting, cancelling, resizing,
the next event's time, the observed events and the counters); the engine it stands on, which
moves the counter, admits and releases requests and applies the internal transitions, is
`FluidLockstep` (``mockprovider.physics_lockstep``). Its constants and the values it reports
are in ``mockprovider.physics_params`` and its per-request records in
``mockprovider.physics_records``; this module re-exports the public names of the first.
"""

from __future__ import annotations

import heapq
import math
from dataclasses import replace
from typing import Final

from mockprovider.physics_lockstep import FluidLockstep
from mockprovider.physics_params import (
    PROFILES,
    EventKind,
    PhysicsParams,
    PhysicsStats,
    ProviderEvent,
    _check_int,
    profile,
)
from mockprovider.physics_records import DOOM, FINISH, FIRST, Req

__all__ = [
    "COMPLETED",
    "FIRST_TOKEN",
    "PROFILES",
    "TIMED_OUT",
    "EventKind",
    "PhysicsParams",
    "PhysicsStats",
    "ProviderEvent",
    "ProviderPhysics",
    "profile",
]

#: `ProviderPhysics.drain`'s event codes (``EventKind`` as small ints).
FIRST_TOKEN: Final = 0
COMPLETED: Final = 1
TIMED_OUT: Final = 2

# Looked up once: attribute access on an Enum class is slow, and _event runs twice per request.
_FIRST_TOKEN_EVENT = EventKind.FIRST_TOKEN
_COMPLETED_EVENT = EventKind.COMPLETED
_TIMED_OUT_EVENT = EventKind.TIMED_OUT


class ProviderPhysics(FluidLockstep):
    """Event-driven continuous-batching provider (see the module docstring for the rules).

    Args:
        params: The provider constants; ``set_slots`` later replaces ``slots`` only.
        start: The initial time; the first call's ``now`` must not be earlier.
    """

    def __init__(self, params: PhysicsParams, *, start: float = 0.0) -> None:
        super().__init__(params, start=start)
        self._live: dict[str, Req] = {}
        self._seq = 0
        self._completed = 0
        self._timed_out = 0
        self._cancelled = 0

    @property
    def params(self) -> PhysicsParams:
        """The current constants (``slots`` reflects the last ``set_slots``)."""
        return self._params

    @property
    def now(self) -> float:
        """The last time seen by any call."""
        return self._now

    def submit(self, now: float, request_id: str, input_tokens: int, output_tokens: int) -> None:
        """Submit a request; it is admitted at once if a slot is free, else queued FIFO.

        Raises:
            ValueError: Negative or non-integer token counts, ``now`` earlier than the last
                time seen, or ``request_id`` still live (its terminal event lies after ``now``).
        """
        _check_int("input_tokens", input_tokens, 0)
        _check_int("output_tokens", output_tokens, 0)
        self._enter(now)
        self._upcoming_known = False
        old = self._live.get(request_id)
        if old is not None and (old.terminal_time is None or old.terminal_time > now):
            raise ValueError(f"request_id={request_id!r} is already live")
        params = self._params
        prefill = -(-input_tokens // params.prefill_chunk)
        # Positional, in field order: keywords make this dataclass call ~40% dearer.
        req = Req(
            self._seq,  # seq
            request_id,
            now,  # submitted
            now + params.timeout_s,  # deadline
            input_tokens,
            output_tokens,
            prefill,  # prefill_iters
            max(1, prefill + output_tokens),  # work
        )
        self._seq += 1
        self._live[request_id] = req
        heapq.heappush(self._timeouts, (req.deadline - self._overhead_s, DOOM, req.seq, req))
        self._queue.append(req)
        self._queued += 1
        self._admit(now)

    def cancel(self, now: float, request_id: str) -> bool:
        """Withdraw a queued or running request; it emits nothing after ``now``.

        Returns:
            ``False`` if the id is unknown or its terminal event is due at or before ``now``.
        """
        self._enter(now)
        self._upcoming_known = False
        req = self._live.get(request_id)
        if req is None or (req.terminal_time is not None and req.terminal_time <= now):
            return False
        del self._live[request_id]
        req.cancelled_at = now
        self._cancelled += 1
        self._leave(now, req)
        return True

    def set_slots(self, now: float, slots: int) -> None:
        """Change the capacity; running requests keep running, a raise admits at once."""
        _check_int("slots", slots, 1)
        self._enter(now)
        self._upcoming_known = False
        self._params = replace(self._params, slots=slots)
        self._admit(now)

    def next_event_time(self) -> float | None:
        """Time of the earliest pending event, or ``None`` when nothing is pending."""
        if not self._next_valid:
            self._next_value = self._compute_next()
            self._next_valid = True
        return self._next_value

    def _compute_next(self) -> float | None:
        notes = self._notes
        while notes:
            cancelled_at = notes[0][3].cancelled_at  # _note_stale, inlined
            if cancelled_at is None or notes[0][0] <= cancelled_at:
                break
            heapq.heappop(notes)
        best = notes[0][0] if notes else math.inf
        if not self._upcoming_known:
            self._upcoming, self._upcoming_known = self._peek(), True
        nxt = self._upcoming
        if nxt is None:
            return None if best == math.inf else best
        t, rank, _, req = nxt
        if rank == DOOM:
            produced = req.deadline
        elif rank == FIRST or (rank == FINISH and not req.doomed):
            produced = t + self._overhead_s
        else:  # a doomed request leaving: its TIMED_OUT is already in `notes`
            produced = math.inf
        if produced < best:
            best = produced
        return t if best == math.inf else best

    def advance(self, now: float) -> list[ProviderEvent]:
        """Move to ``now`` and return all events with ``time <= now`` in order (rule 6)."""
        self._enter(now)
        notes = self._notes
        events: list[ProviderEvent] = []
        while notes and notes[0][0] <= now:
            note = heapq.heappop(notes)
            if not self._note_stale(note):
                events.append(self._event(note[0], note[2], note[3]))
        return events

    def drain(self, now: float) -> list[tuple[int, str, float, int, int]]:
        """`advance` as plain tuples, for the simulator's hot path: the same events in
        the same order, counted the same, each ``(code, request_id, time, input_tokens,
        output_tokens)`` with ``code`` one of ``FIRST_TOKEN``, ``COMPLETED``, ``TIMED_OUT``."""
        self._enter(now)
        notes, pop = self._notes, heapq.heappop
        events: list[tuple[int, str, float, int, int]] = []
        while notes and notes[0][0] <= now:
            time, _, rank, req = pop(notes)
            cancelled_at = req.cancelled_at
            if cancelled_at is not None and time > cancelled_at:
                continue  # stale: cancelled before it was observed
            if rank == 0:
                events.append((FIRST_TOKEN, req.request_id, time, req.input_tokens, 1))
            else:
                code, tokens = self._settle(req)
                events.append((code, req.request_id, time, req.input_tokens, tokens))
        return events

    def statistics(self) -> PhysicsStats:
        """Current occupancy and event counters."""
        return PhysicsStats(
            active=self._n,
            queued=self._queued,
            slots=self._params.slots,
            submitted=self._seq,
            completed=self._completed,
            timed_out=self._timed_out,
            cancelled=self._cancelled,
            iteration_ms=self._params.iteration_ms(self._n),
        )

    def __repr__(self) -> str:
        return (
            f"ProviderPhysics(now={self._now!r}, active={self._n}, queued={self._queued}, "
            f"slots={self._params.slots}, G={self._g!r})"
        )

    # -- internals -------------------------------------------------------------------------

    @staticmethod
    def _note_stale(note: tuple[float, int, int, Req]) -> bool:
        cancelled_at = note[3].cancelled_at
        return cancelled_at is not None and note[0] > cancelled_at

    def _event(self, time: float, rank: int, req: Req) -> ProviderEvent:
        if rank == 0:
            kind, tokens = _FIRST_TOKEN_EVENT, 1
        else:
            code, tokens = self._settle(req)
            kind = _COMPLETED_EVENT if code == COMPLETED else _TIMED_OUT_EVENT
        # Positional (kind, request_id, time, submitted, started, input_tokens, output_tokens):
        # two events per request, and keywords cost a third more here.
        return ProviderEvent(
            kind, req.request_id, time, req.submitted, req.started, req.input_tokens, tokens
        )

    def _settle(self, req: Req) -> tuple[int, int]:
        """The terminal event of ``req`` is observed: forget it, count it; its code and tokens."""
        if self._live.get(req.request_id) is req:
            del self._live[req.request_id]
        if req.doomed:
            self._timed_out += 1
            return TIMED_OUT, req.tokens_done
        self._completed += 1
        return COMPLETED, req.output_tokens
