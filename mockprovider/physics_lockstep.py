"""The engine under the mock's physics: a continuous batch in fluid lockstep.

What it is: `FluidLockstep`, the base class of `mockprovider.physics.ProviderPhysics`. It
holds the batch's state (the fluid iteration counter ``G``, its rate, the slots in use, the
hidden FIFO, the heaps of pending milestones and deadlines) and moves it: it brings ``G`` up
to a time, recomputes the iteration time when the membership or the prompt load changes,
admits FIFO heads into free slots, frees a slot or queue place, and applies every internal
transition (first token reached, batch work done, prompt done, doomed, released) up to a
time in (time, rank, seq) order, putting what a client will observe on the notes heap. The
model and the rules it keeps are those of `mockprovider.physics` (its docstring: "Fluid
lockstep", "Prompt tokens", "Context").

What it is not: the public face. Submitting, cancelling, resizing, the next event's time,
the observed events and the counters are `ProviderPhysics`'s. Split from
`mockprovider.physics` along that seam: this module moves the batch, that one says what a
client sees of it. Internal to the mock provider.
"""

from __future__ import annotations

import heapq
import math
from collections import deque

from mockprovider.physics_params import PhysicsParams, _is_real
from mockprovider.physics_records import (
    ACTIVE,
    DONE,
    DOOM,
    FINISH,
    FIRST,
    PREFILLED,
    QUEUED,
    RELEASE,
    Req,
    Transition,
)

__all__ = ["FluidLockstep"]


class FluidLockstep:
    """The batch's state and its internal transitions (see the module docstring).

    Args:
        params: The provider constants.
        start: The initial time; no transition is applied before it.
    """

    def __init__(self, params: PhysicsParams, *, start: float = 0.0) -> None:
        self._params = params
        self._overhead_s = params.overhead_ms / 1000.0
        self._now = float(start)
        self._t_last = float(start)  # time at which _g was last brought up to date
        self._g = 0.0  # global fluid iteration counter
        self._n = 0  # active (slot-holding) requests
        self._iter_s = params.iteration_ms(0) / 1000.0  # iteration time at G = _g
        self._slope_s = 0.0  # d(iteration time)/dG: K * n / 1000 (0 without a context cost)
        self._context_base = 0.0  # sum over active requests of input_tokens - started_g
        self._queue: deque[Req] = deque()
        self._queued = 0
        self._first: list[tuple[float, int, Req]] = []  # (G milestone, seq, request)
        self._prefill: list[tuple[float, int, Req]] = []  # prefill ends, when P > 0
        self._prefill_load = 0.0  # prompt tokens per iteration of the requests prefilling
        self._prefilling = 0
        self._finish: list[tuple[float, int, Req]] = []
        self._timeouts: list[Transition] = []  # (time, DOOM or RELEASE, seq, request)
        self._notes: list[tuple[float, int, int, Req]] = []  # (time, seq, 0 first/1 end, req)
        # next_event_time() is memoised until the next state change (all go through _enter).
        self._next_valid = False
        self._next_value: float | None = None
        # The last _peek() stays valid until a public method changes state after _enter.
        self._upcoming: Transition | None = None
        self._upcoming_known = False

    def _enter(self, now: float) -> None:
        """Check ``now``, then apply every internal transition up to it."""
        self._next_valid = False
        if not (type(now) is float or _is_real(now)) or not math.isfinite(now):
            raise ValueError(f"now={now!r} must be a finite number")
        if now < self._now:
            raise ValueError(f"now={now!r} is earlier than the last time seen ({self._now!r})")
        self._now = float(now)
        overhead = self._overhead_s
        nxt = self._upcoming if self._upcoming_known else self._peek()
        if nxt is None or nxt[0] > now:  # nothing due (a submit between two events)
            self._upcoming, self._upcoming_known = nxt, True
            return
        pop, push, notes = heapq.heappop, heapq.heappush, self._notes
        while nxt is not None and nxt[0] <= now:
            t, rank, seq, req = nxt
            if rank == FIRST:
                pop(self._first)
                push(notes, (t + overhead, seq, 0, req))
            elif rank == FINISH:
                pop(self._finish)
                self._g, self._t_last = req.finish_g, t
                req.tokens_done = req.output_tokens
                if not req.doomed:
                    req.terminal_time = t + overhead
                    push(notes, (t + overhead, seq, 1, req))
                self._leave(t, req)
            elif rank == PREFILLED:
                pop(self._prefill)
                self._g, self._t_last = req.started_g + req.prefill_iters, t
                self._drop_prefill(req)
                self._set_active(self._n)
            elif rank == DOOM:
                pop(self._timeouts)
                req.doomed = True
                req.terminal_time = req.deadline
                push(notes, (req.deadline, seq, 1, req))
                push(self._timeouts, (req.deadline, RELEASE, seq, req))
            else:
                pop(self._timeouts)
                if req.state == ACTIVE:
                    self._sync(t)
                    done = math.floor(self._g - req.started_g - req.prefill_iters)
                    req.tokens_done = min(max(done, 0), req.output_tokens)
                self._leave(t, req)
            nxt = self._peek()
        self._upcoming, self._upcoming_known = nxt, True

    def _peek(self) -> Transition | None:
        """The next internal transition in (time, rank, seq) order, dropping stale entries."""
        pop = heapq.heappop
        first, finish, tmo, pre = self._first, self._finish, self._timeouts, self._prefill
        while pre and (pre[0][2].state != ACTIVE or not pre[0][2].prefill_load):
            pop(pre)
        while first and (first[0][2].state != ACTIVE or first[0][2].doomed):
            pop(first)
        while finish and finish[0][2].state != ACTIVE:
            pop(finish)
        while tmo and (tmo[0][3].state == DONE or (tmo[0][1] == DOOM and tmo[0][3].doomed)):
            pop(tmo)
        # Each heap holds its own ranks (first 0, finish 1, timeouts 2-3): at equal times the
        # earlier heap's transition goes first, so ties need no (rank, seq) comparison.
        # The time G reaches g: t_last + d * (iter_s + slope/2 * d), d = g - G (the
        # iteration time grows by `slope` an iteration; with no context cost, d * iter_s).
        best: Transition | None = None
        g0, t0, it, half = self._g, self._t_last, self._iter_s, 0.5 * self._slope_s
        if pre:  # first at a tie: the rate changes before anything else happens then
            g, seq, req = pre[0]
            d = g - g0
            best = (t0 + d * (it + half * d), PREFILLED, seq, req)
        if first:
            g, seq, req = first[0]
            d = g - g0
            t = t0 + d * (it + half * d)
            if best is None or t < best[0]:
                best = (t, FIRST, seq, req)
        if finish:
            g, seq, req = finish[0]
            d = g - g0
            t = t0 + d * (it + half * d)
            if best is None or t < best[0]:
                best = (t, FINISH, seq, req)
        if tmo and (best is None or tmo[0][0] < best[0]):
            best = tmo[0]
        return best

    def _sync(self, t: float) -> None:
        """Bring the iteration counter up to ``t`` at the current rate."""
        if t > self._t_last:
            dt = t - self._t_last
            slope = self._slope_s
            if slope:  # dt = d * (it + slope/2 * d), solved for d (the stable root)
                it = self._iter_s
                d = 2.0 * dt / (it + math.sqrt(it * it + 2.0 * slope * dt))
                self._g += d
                self._iter_s = it + slope * d
            else:
                self._g += dt / self._iter_s
            self._t_last = t

    def _set_active(self, n: int) -> None:
        self._n = n
        params = self._params  # PhysicsParams.iteration_ms(n), inlined: twice per request
        ms = params.base_iter_ms + params.per_slot_ms * n
        if self._prefilling:
            ms += params.prefill_ms_per_token * self._prefill_load
        k = params.context_ms_per_token
        if k:  # the batch's context at G: each request's prompt and iterations so far
            if not n:
                self._context_base = 0.0  # no drift from the sums of an emptied batch
            ms += k * (self._context_base + n * self._g)
            self._slope_s = k * n / 1000.0
        self._iter_s = ms / 1000.0

    def _drop_prefill(self, req: Req) -> None:
        """``req`` no longer prefills: its prompt tokens leave the iteration time."""
        if req.prefill_load:
            self._prefilling -= 1
            self._prefill_load = self._prefill_load - req.prefill_load if self._prefilling else 0.0
            req.prefill_load = 0.0

    def _leave(self, t: float, req: Req) -> None:
        """Remove ``req`` from its slot or queue place at ``t`` (counter already synced)."""
        if req.state == ACTIVE:
            self._sync(t)
            req.state = DONE
            self._context_base -= req.input_tokens - req.started_g
            self._drop_prefill(req)
            self._set_active(self._n - 1)
            self._admit(t)
        elif req.state == QUEUED:
            req.state = DONE
            self._queued -= 1
            if self._queued == 0:
                self._queue.clear()

    def _admit(self, t: float) -> None:
        """Admit FIFO heads while slots are free; requests at their deadline are skipped."""
        if self._queued == 0 or self._n >= self._params.slots:
            return
        self._sync(t)
        queue, expiring = self._queue, []
        n = self._n
        while queue and n < self._params.slots:
            req = queue.popleft()
            if req.state != QUEUED:
                continue
            if req.deadline <= t:  # leaves at this very instant; admitting it would be noise
                expiring.append(req)
                continue
            req.state, req.started, req.started_g = ACTIVE, t, self._g
            req.finish_g = self._g + req.work
            self._context_base += req.input_tokens - self._g
            if req.output_tokens > 0:
                heapq.heappush(self._first, (self._g + req.prefill_iters + 1, req.seq, req))
            heapq.heappush(self._finish, (req.finish_g, req.seq, req))
            if req.prefill_iters and self._params.prefill_ms_per_token:
                req.prefill_load = req.input_tokens / req.prefill_iters
                self._prefill_load += req.prefill_load
                self._prefilling += 1
                heapq.heappush(self._prefill, (self._g + req.prefill_iters, req.seq, req))
            self._queued -= 1
            n += 1
        if expiring:
            queue.extendleft(reversed(expiring))
        self._set_active(n)
