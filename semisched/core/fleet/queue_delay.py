"""A concurrency limit learned online from the wait for a slot (``learned``).

The interface it implements is `semisched.core.fleet.limits`.

Why queueing delay. The classic adaptive limits, TCP Vegas, Netflix's
concurrency-limits (``VegasLimit``, ``Gradient2Limit``) and Envoy's adaptive
concurrency filter, compare each round trip with the smallest seen: a latency that
grows means a queue. An LLM server breaks that reading twice. Its answers vary a
thousandfold in length, so a round trip alone says little; and it batches, so every
request's decode step grows smoothly with the number running (a step of
``W + H * n``) long before anything waits. A gradient on latency stops far below the
server's slots. What does jump at the knee is the wait for a slot: a server with
``S`` slots starts a request's prefill at once while fewer than ``S`` run, and queues
it otherwise, so its first token waits for another request to finish. Measured in
decode steps (the request's own, so that batching cancels out), the time before the
first token is a small constant (prefill, the round trip) below the knee and jumps
by a sizeable part of a whole answer above it.

`QueueDelayLimit`'s rules:

1. *Its evidence.* What an answer spent before decoding, against its *floor*: a
   streamed answer's time to first token; one that was not streamed, its latency
   less its tokens at the endpoint's fitted step
   (`SpeedFit`), once the fit has seen
   ``mature`` answers (never below zero). The floor is a slowly rising minimum of
   that time, kept apart for streamed and unstreamed answers and for each size class
   of prompt (an eighth of an octave: prefill takes time, on a CPU engine a lot).
   The first answer of a size class only sets its floor. The excess over the floor,
   in decode steps (streamed: the slowest of the recent answers' own steps, a full
   batch's, so that a prefill beside a small batch does not read as many steps; not
   streamed: the fitted one), is the answer's *wait*. A streamed answer is read
   twice: at its first token (a queue is seen a whole answer sooner; only a queue is
   acted on then), and when it ends.
2. *Queued.* A wait above a threshold means the endpoint held more than it serves at
   once when that request was sent. The threshold is ``tolerance`` steps, plus
   ``spread`` times the mean wait of the streamed answers that certainly had a slot
   (how much prefill and batching scatter at this endpoint; it starts from a prior
   of ``tolerance`` worth four readings). Certainly: sent alone, or with no more in
   flight than first tokens proved served (rule 7), or no request of ours left
   before its first token. A wait that may have been a queue's, however short, would
   widen the allowance that is there to tell a queue from scatter, and so hide the
   queue it grows with. Plus ``token_slack`` steps a token for an unstreamed
   answer (its step is the fit's average). A request sent alone (one in
   flight) waited for nothing of this client's; nor did a streamed one whose first
   token came before any request of this client left the endpoint (``left``: a slot
   frees only when one leaves). Its wait was scatter (another request's prefill,
   another client's load), however long. One that ``left`` requests preceded
   waited for at most that many, so the endpoint serves at least ``held - left``.
   Without that count (not streamed), a wait within ``strong`` times the threshold
   is a *suspect*: one reading a little above is what another request's prefill
   can cost on a CPU engine, so it acts only when a request sent after the
   suspect's wait ended also waits (within ``confirm_rounds`` rounds): a queue makes
   every request sent into it wait, a burst of prefill only those beside it. The
   limit goes to what the endpoint serves at once, as that wait tells it: a request
   sent with ``held`` in flight to ``S`` slots waits for ``held - S`` answers,
   finished ``S`` per mean answer ``T`` (its mean output tokens, in steps), so
   ``S ~ held * T / (wait + T)`` (the wait less the scatter allowance); at most one
   below what it held (Vegas's decrease), at most halved at once (one reading may be
   wrong), never below ``held - left``, once per round: an answer sent before the
   last decrease says nothing of the limit after it. Probes do not pass one below
   what it held again for
   ``ceiling_rounds`` rounds (a request queued in the server is one the client can
   no longer order). Any queued reading ends slow start.
2b. *Overdue.* A streamed request's first token that has not come is read too, without
   waiting for it (only a request the shell marks as streamed, ``Request.stream``, is
   expected to show one). It is due after the floor of its size class (or, before one
   is known, the slowest first token that had a slot, scaled to its prompt: prefill
   grows with it), plus ``strong`` times the streamed threshold in the recent step
   (before any answer, ``strong`` times that floor), plus the floors of this client's
   other requests whose first tokens the endpoint still owes (their prefill may come
   first). Past that, one sent
   with more in flight than any first token proved served (a first token proves its
   ``held`` less the requests that left before it) waits in the server's queue: the
   endpoint serves what it holds whose first tokens came. The limit goes there (never
   below what was proved, at most one below what it held, at most halved at once,
   once a round), and slow start ends. A late first token is no reading at a count
   proved served: a server whose capacity shrank is followed by rule 2. This sees a
   queue a whole answer before the first departure could, which is what a server
   smaller than the starting limit costs.
3. *Probe.* An answer that did not queue, sent while the limit was binding (as many
   in flight as the limit allows), adds to it, unless it was streamed, sent with
   more in flight than first tokens proved served, and one of ours left before its
   first token: it may have had the slot that left (a short wait for a slot is no
   proof of one more), so the limit rises above what was proved only on proof, a
   first token that no departure preceded. It adds one (slow start: the limit
   doubles each round) until the first queue or throttle, then ``1 / limit`` (one a
   round), up to the ceiling, so that capacity the server gains is found. In slow
   start a streamed answer's first token that no departure preceded adds one at once
   (it had a slot: the endpoint serves at least what it held), so slow start runs at
   the pace of first tokens, not of whole answers. In slow start an answer with
   nothing to read (one not streamed, before the fit has matured; the first of its
   size) counts as not queued, unless a request left before its first token.
4. *Throttled.* A 429 takes one off the limit and makes that the *ceiling* for
   ``throttle_s`` seconds (a provider whose latency is flat up to a concurrency cap
   it enforces with 429s is not probed into them again). The other 429s of that
   time change nothing: a rate limit's window is the rate budget's to pace
   (``BudgetConfig``, the ``retry-after``), and cutting concurrency for it only
   costs throughput.
5. *Failed.* A 5xx, a timeout or a lost connection takes a tenth off, once per round.
6. The limit stays within ``[minimum, maximum]``; it starts at ``initial`` (8: a
   small server is sent few to queue, and slow start reaches 64 in three rounds), or
   at ``streamed_initial`` (2) when the first request sent to it is streamed before
   anything was read there: first tokens prove a slot within a prefill, so slow start
   at their pace reaches 64 in five prefills, while an unstreamed answer proves one
   only when it ends.
7. *Shown.* What first tokens proved served (rule 2b's proof, ``held - left``), at
   most the limit, is the part of it the endpoint has *shown* (`sure`); the rest is
   a probe. A fleet sends a request into a probe only when no other endpoint has
   room it has shown (`semisched.core.fleet.fleet` rule 9), so a probe queues no
   request inside a server while another server has a slot for it. Before any first
   token proved a slot (an endpoint not streamed to), the whole limit counts as shown.
"""

from __future__ import annotations

import math

from semisched.core.fleet.limits import Answered, ConcurrencyLimit, LimitVerdict

__all__ = ["QueueDelayLimit"]

_log2 = math.log2


class QueueDelayLimit(ConcurrencyLimit):
    """A limit learned from the wait for a slot (module rules)."""

    name = "learned"
    __slots__ = (
        "_alone",
        "_ceiling",
        "_ceiling_at",
        "_decreased_at",
        "_dev",
        "_floors",
        "_proven",
        "_readings",
        "_rounds",
        "_slow_until",
        "_step",
        "_suspect_end",
        "_suspect_round",
        "_throttled_until",
        "_tokens",
        "ceiling_rounds",
        "confirm_rounds",
        "limit",
        "mature",
        "maximum",
        "minimum",
        "spread",
        "streamed_initial",
        "strong",
        "throttle_s",
        "token_slack",
        "tolerance",
    )

    def __init__(
        self,
        *,
        initial: float = 8.0,
        streamed_initial: float = 2.0,
        minimum: float = 1.0,
        maximum: float = 1024.0,
        tolerance: float = 4.0,
        token_slack: float = 1.0,
        ceiling_rounds: float = 100.0,
        mature: int = 32,
        spread: float = 5.0,
        throttle_s: float = 60.0,
        confirm_rounds: float = 2.0,
        strong: float = 3.0,
    ) -> None:
        if not 1.0 <= minimum <= initial <= maximum:
            raise ValueError(f"need 1 <= minimum <= initial <= maximum, got "
                             f"{minimum}, {initial}, {maximum}")  # fmt: skip
        self.limit = initial
        self.streamed_initial = streamed_initial
        self.minimum = minimum
        self.maximum = maximum
        self.tolerance = tolerance
        self.token_slack = token_slack
        self.mature = mature
        self.spread = spread
        self.throttle_s = throttle_s
        self.confirm_rounds = confirm_rounds
        self.strong = strong
        self._suspect_end = math.inf  # when the unconfirmed queued reading's wait ended
        self._suspect_round = -math.inf
        self._dev = tolerance  # mean wait of the answers read as unqueued (rule 1): a prior
        self._readings = 4  # the prior counts as four readings
        self._tokens = 0.0  # mean output tokens of its answers (rule 2)
        self._step = 0.0  # recent streamed answers' own step, seconds (rule 1)
        self._throttled_until = -math.inf  # a 429's ceiling holds until (rule 4)
        self.ceiling_rounds = ceiling_rounds
        #: (streamed?, prompt size class) -> floor seconds (rule 1)
        self._floors: dict[tuple[bool, int], float] = {}
        self._slow_until = maximum  # slow start while the limit is below it (rule 3)
        self._decreased_at = -math.inf
        self._ceiling = math.inf  # rule 4
        self._ceiling_at = 0.0  # rounds counted when it was set
        self._rounds = 0.0  # answers, each 1 / limit of a round
        self._proven = 0  # the most a first token proved it serves at once (held - left)
        self._alone = 0.0  # the slowest first token that had a slot, per prompt token + 128

    def __repr__(self) -> str:
        slow = " slow start" if self.limit < self._slow_until else ""
        return f"<QueueDelayLimit {self.limit:.1f}{slow}>"

    @property
    def cap(self) -> int:
        return int(self.limit)

    @property
    def sure(self) -> int:
        """Rule 7: what first tokens proved served (``held - left``), at most the cap; the
        cap itself before any did (an endpoint not streamed to shows no probe apart)."""
        cap, proven = int(self.limit), self._proven
        return proven if 0 < proven < cap else cap

    def answered(self, answer: Answered) -> LimitVerdict:
        limit = self.limit
        rounds = self._rounds = self._rounds + 1.0 / limit
        gain = 1.0 / (rounds * limit + 1.0)  # a plain mean of the first answers, then moving
        self._tokens += (gain if gain > 0.05 else 0.05) * (answer.tokens - self._tokens)
        reading = self._wait_steps(answer)
        if reading is None:  # nothing to read yet: slow start grows (it ends at a queue)
            if limit < self._slow_until and not answer.left:
                return self._grow(answer.held, answer.now, 0.0)
            return None
        waited, scatter, threshold, wait_end = reading
        streamed = answer.first_token_s is not None
        if streamed:  # what its unqueued first tokens scatter by (prompts of every length)
            threshold += self.spread * self._dev
        held = answer.held
        if (waited <= threshold or held <= 1  # alone, it waited for nothing of ours
                or answer.left == 0):  # fmt: skip
            # nothing of ours left before its first token: no slot of ours freed for it
            proven = held <= self._proven  # first tokens proved it had a slot (rule 7)
            if streamed and (held <= 1 or answer.left == 0 or proven):
                # it certainly had a slot: its wait is scatter (a plain mean of the
                # first twenty, then a moving one)
                readings = self._readings = self._readings + 1
                gain = 1.0 / readings
                self._dev += (gain if gain > 0.05 else 0.05) * (scatter - self._dev)
            if held < int(limit):  # not binding: nothing to probe (rule 3)
                return None
            if streamed and answer.left and not proven:
                return None  # above what first tokens proved, a probe needs a proof (rule 3)
            return self._grow(held, answer.now, waited)
        return self._queued(answer.sent_at, answer.now, held, waited, threshold,
                            wait_end, answer.left)  # fmt: skip

    def first_token(
        self, sent_at: float, now: float, held: int, prompt_tokens: float, left: int,
        left_by_s: float,
    ) -> LimitVerdict:
        """A streamed answer's first token: its wait read at once, against the recent
        answers' step (a queue is seen a whole answer sooner; rule 1)."""
        key = (True, int(8.0 * _log2(prompt_tokens + 128.0)))  # its size class
        floor = self._floors.get(key)
        if held - left > self._proven:  # it waited for at most ``left``: S >= held - left
            self._proven = held - left
        if left == 0:  # it had a slot: its time is a floor; S >= held
            rate = (now - sent_at) / (prompt_tokens + 128.0)
            if rate > self._alone:
                self._alone = rate
            if floor is None or now - sent_at < floor:
                self._floors[key] = now - sent_at
            if self.limit < self._slow_until:  # slow start at the pace of first tokens
                return self._grow(held, now, 0.0)
            return None
        if floor is None or self._step <= 0.0 or held <= 1:
            return None
        waited = min(now - sent_at - floor, left_by_s) / self._step
        threshold = self.tolerance + self.spread * self._dev
        if waited <= threshold:
            return None  # read again, with its own step, when it is answered
        return self._queued(sent_at, now, held, waited, threshold, now, left)

    def streamed(self, held: int) -> LimitVerdict:
        """Rule 6: a streamed request is sent before anything was read here: slow start
        begins at ``streamed_initial`` (first tokens show a slot within a prefill), or
        at what it holds with this one."""
        start = max(self.minimum, self.streamed_initial, held)
        if self._rounds or self._alone or self.limit <= start:
            return None
        old, self.limit = self.limit, start
        return "limit.start", (f"streamed answers show their slot at the first token: slow "
                               f"start from {self.limit:.0f}, not {old:.0f}")  # fmt: skip

    def first_token_due(self, prompt_tokens: float) -> tuple[float, float] | None:
        """Rule 2b: a first token is late past its size class's floor by ``strong`` times
        the streamed threshold, in the recent step."""
        if self._alone <= 0.0:
            return None  # no first token had a slot yet
        sized = prompt_tokens + 128.0
        floor = self._floors.get((True, int(8.0 * _log2(sized))))
        if floor is None:  # none of its size yet: the slowest that had a slot, to its size
            floor = self._alone * sized
        if self._step <= 0.0:  # no answer yet: no step to count an allowance in
            return floor, self.strong * floor
        return floor, self.strong * (self.tolerance + self.spread * self._dev) * self._step

    def overdue(
        self, sent_at: float, now: float, held: int, inflight: int, awaiting: int
    ) -> LimitVerdict:
        """Rule 2b: no first token past its due time. Sent with ``held`` in flight, more
        than a first token proved served, it waits in the server's queue: the endpoint
        serves what it holds whose first tokens came, at least what was proved."""
        if sent_at <= self._decreased_at or held <= self._proven:
            return None
        serving = inflight - awaiting  # its requests whose first tokens came: in slots
        knee = min(self.limit, held) - 1.0
        old = self.limit
        self._set(max(min(knee, max(serving, self._proven)), self.limit * 0.5), now)
        self._slow_until = self.limit
        self._ceiling, self._ceiling_at = max(self.limit, knee), self._rounds
        return "limit.overdue", (f"no first token {now - sent_at:.2f} s after its send "
                                 f"with {held} in flight, {awaiting - 1} more awaited and "
                                 f"{serving} decoding: {old:.1f} was more than it "
                                 "serves")  # fmt: skip

    def _queued(self, sent_at: float, now: float, held: int, waited: float, threshold: float,
                wait_end: float, left: int | None) -> LimitVerdict:  # fmt: skip
        """Rule 2: a wait above the threshold (its wait for a slot ended at ``wait_end``)."""
        self._slow_until = min(self._slow_until, self.limit)
        if sent_at <= self._decreased_at:
            return None
        fresh = self._rounds - self._suspect_round <= self.confirm_rounds
        if (waited <= self.strong * threshold and left is None
                and not (fresh and self._suspect_end < sent_at)):  # fmt: skip
            if not fresh or wait_end < self._suspect_end:  # the earliest unconfirmed one
                self._suspect_end, self._suspect_round = wait_end, self._rounds
            return None  # a little above, once: a request sent after its wait confirms it
        self._suspect_end = math.inf
        # What it serves at once: a request sent with ``held`` in flight on S slots waits
        # for held - S answers, at S per mean answer (its tokens, in steps): so
        # S ~ held * T / (wait + T). At most halved at once (one reading may be wrong).
        queued = waited - threshold + self.tolerance  # the part no scatter explains
        serves = held * self._tokens / (queued + self._tokens)
        if left is not None:  # it waited for at most ``left`` to leave: S >= held - left
            serves = max(serves, held - left)
        knee = min(self.limit, held) - 1.0  # it queued at what it held: stay below
        self._set(max(min(knee, serves), self.limit * 0.5), now)
        self._slow_until = self.limit
        self._ceiling, self._ceiling_at = max(self.limit, knee), self._rounds
        return "limit.queued", (f"waited {waited:.1f} decode steps for a slot (more than "
                                f"{threshold:.1f}), sent with {held} in flight")  # fmt: skip

    def _grow(self, held: int, now: float, waited: float) -> LimitVerdict:
        if held < self.cap:  # it was not binding
            return None
        if (self._rounds - self._ceiling_at > self.ceiling_rounds
                and now >= self._throttled_until):  # fmt: skip
            self._ceiling = math.inf
        top = min(self.maximum, self._ceiling)
        if self.limit >= top:
            return None
        slow = self.limit < self._slow_until
        self.limit = min(top, self.limit + (1.0 if slow else 1.0 / self.limit))
        return "limit.probe", (f"{held} in flight, no wait for a slot "
                               f"({waited:.1f} decode steps)")  # fmt: skip

    def throttled(self, sent_at: float, now: float) -> LimitVerdict:
        if sent_at <= self._decreased_at or now < self._throttled_until:
            return None  # the rest of a window's 429s: pacing them is the rate budget's
        old = self.limit
        self._throttled_until = now + self.throttle_s
        self._ceiling = max(self.minimum, old - 1.0)
        self._ceiling_at = self._rounds - self.ceiling_rounds  # it lifts by time alone
        self._slow_until = min(self._slow_until, self._ceiling)
        self._set(self._ceiling, now)
        return "limit.throttled", (f"a 429 at a limit of {old:.1f}: "
                                   f"{self._ceiling:.0f} at most")  # fmt: skip

    def failed(self, sent_at: float, now: float) -> LimitVerdict:
        if sent_at <= self._decreased_at:
            return None
        self._set(self.limit * 0.9, now)
        self._slow_until = min(self._slow_until, self.limit)
        return "limit.failed", "a failed attempt: a tenth off"

    def _wait_steps(self, answer: Answered) -> tuple[float, float, float, float] | None:
        """Rule 1: the answer's wait for a slot in decode steps, its time before decoding
        over its floor (the same, unbounded by a departure), the threshold above which
        the wait is a queue, and when it ended; ``None``: nothing to read."""
        sent_at, ttft, tokens = answer.sent_at, answer.first_token_s, answer.tokens
        if ttft is not None:
            latency = answer.now - sent_at
            if tokens >= 2 and latency > ttft:  # its own step, at its batch
                step = (latency - ttft) / (tokens - 1)
                recent = self._step * 0.98  # the recent slowest: a full batch's
                self._step = step if step > recent else recent
            elif self._step <= 0.0:
                return None
            step = self._step
            before, slack = ttft, 0.0
        else:
            step = answer.step_s
            if answer.answers < self.mature or step <= 0.0:
                return None  # a young fit's step says too little of one answer's wait
            # < 0: its batch ran faster than the fit's average step (no reading below 0)
            before = answer.now - sent_at - tokens * step
            if not before > 0.0:
                before = 0.0
            slack = tokens * self.token_slack
        # The prompt's size class: an eighth of an octave (its prefill takes time).
        key = (ttft is not None, int(8.0 * _log2(answer.prompt_tokens + 128.0)))
        floors = self._floors
        floor = floors.get(key)
        if floor is None:
            floors[key] = before
            if ttft is not None:  # the first of its size: its floor, no reading
                return None
            floor = before
        elif before < floor:
            floors[key] = floor = before
        else:
            floors[key] = floor + 0.01 * (before - floor)
        over = (before - floor) / step if before > floor else 0.0
        left = answer.left
        waited = over
        if left is not None:  # it waited for a slot until a departure at most
            by = answer.left_by_s / step
            if by < over:
                waited = by
        return waited, over, self.tolerance + slack, sent_at + before

    def _set(self, limit: float, now: float) -> None:
        self.limit = min(self.maximum, max(self.minimum, limit))
        self._decreased_at = now


#: ``RoutingConfig.concurrency`` names and their policies.
