"""The sans-I/O scheduling engine: events with an explicit ``now`` in, actions out.

Like h11 for HTTP, the engine holds no socket, no clock and no task: a shell
(the async runtime, the simulator) calls it and executes what it returns.

Events (methods)                  Actions (returned, in order)
================================  ======================================
``submit(request, now)``          :class:`Send`, :class:`Wake`;
``completed(id, now, ...)``       :class:`Defer`, :class:`Retry` (held
``failed(id, now, kind, ...)``    back until a time); :class:`Pause`
                                  (an endpoint kept off until a time);
                                  :class:`Reject`,
``cancel(id, now)``               :class:`Expire`, :class:`Fail`
``expire(id, now)``               (terminal outcomes)
``poll(now)``
================================  ======================================

The actions are defined in :mod:`semisched.core.actions`, the statistics in
:mod:`semisched.core.stats`, the retry rules in :mod:`semisched.core.lifecycle`.

Rules:

1. ``now`` never goes backwards across calls; a call that tries raises ``ValueError``.
2. Every submitted request ends in exactly one terminal outcome, reported once:
   rejected (:class:`Reject`), expired (:class:`Expire`), failed
   (:class:`Fail`), or, for a request the shell was told to :class:`Send`,
   ``completed``, ``cancel`` or ``expire`` (aborted at its deadline) as the
   shell reports. A failed attempt that is
   retried (:class:`Retry`) is not an outcome: the request is deferred until
   its retry time, then queued again without a second admission check.
   Statistics count each.
3. A request is in exactly one place: deferred, queued in its class, or in
   flight. Only queued requests are sent; only :class:`Send` puts one in flight.
4. At most ``max_inflight`` requests are in flight; with
   ``max_inflight_tokens`` set, reserved tokens stay within it unless a
   single request alone exceeds it (it is then sent when nothing else flies).
   With a rate ``budget`` (:mod:`semisched.core.budget`) nothing is sent the
   budget cannot pay for: the chosen request waits (a :class:`Wake` at the
   time it fits), and one that can never fit is rejected. After
   :meth:`Engine.hold` nothing is sent at all until :meth:`Engine.release`.
   Every :class:`Send` names the endpoint that executes it: the fleet
   (:mod:`semisched.core.fleet.fleet`) says which endpoints can take the chosen
   request, by their health, concurrency and budgets, and the routing policy
   picks one; when none can now, the request waits, and when none ever can,
   it is rejected.
5. A queued or deferred request whose deadline passes is expired at the first
   call at or after the deadline, never sent. A deferral or retry that would
   end at or after the deadline is answered at once (reject, expire) instead.
   Retries follow ``config.retry`` (:mod:`semisched.core.lifecycle`); a retried
   attempt fails over at once to another endpoint when one can serve it.
6. The layers are consulted in a fixed order: overload control on arrival and
   on each return from deferral (judging the request by its tenant's standing);
   then, while a send opportunity is free, the tenant policy picks a tenant
   (:mod:`semisched.core.tenants.lanes`), its allocation a class, ordering its
   request, routing its endpoint.
7. :class:`Wake` asks the shell to call :meth:`Engine.poll` at a time; it is
   emitted when the earliest pending timer moves earlier than the last one
   reported, or the last one reported has passed. A shell keeps one timer;
   polling early (a timer that was cancelled) is harmless.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence

from semisched.core.actions import Action, Defer, Expire, Fail, Pause, Reject, Retry, Send, Wake
from semisched.core.book import DEADLINE
from semisched.core.budget import rate_tokens
from semisched.core.checks import check_instance, check_number, token_count
from semisched.core.config import SchedulerConfig
from semisched.core.control import EngineControl
from semisched.core.explain import Decision, Explanation
from semisched.core.fleet.endpoint import EndpointSpec, EndpointState
from semisched.core.fleet.fleet import NoRoute
from semisched.core.lifecycle import FailureKind, JitterSource, RetryDecision, decide_retry
from semisched.core.ordering import is_feasible
from semisched.core.queue import Entry, EntryState
from semisched.core.request import Request
from semisched.core.states import Event
from semisched.core.stats import EngineStats
from semisched.core.tenants.lanes import TenantLane

__all__ = [
    "Action",
    "Defer",
    "Engine",
    "EngineStats",
    "Expire",
    "Fail",
    "Pause",
    "Reject",
    "Retry",
    "Send",
    "Wake",
]


_REJECT_D, _EXPIRE = Decision.REJECT, Decision.EXPIRE
_QUEUED, _DEFERRED = EntryState.QUEUED, EntryState.DEFERRED
_INFLIGHT = EntryState.INFLIGHT
_ENQUEUE, _WAKE, _COMPLETE, _EXPIRE_E = Event.ENQUEUE, Event.WAKE, Event.COMPLETE, Event.EXPIRE


class Engine(EngineControl):
    """Three-layer client-side scheduler core (see module rules)."""

    def __init__(
        self,
        config: SchedulerConfig | None = None,
        *,
        jitter: JitterSource | None = None,
        endpoints: Sequence[EndpointSpec] | None = None,
    ) -> None:
        """Build an engine.

        Args:
            config: Policies and budgets (default :class:`SchedulerConfig`).
            jitter: Uniform ``[0, 1)`` draws for the retry back-off's jitter
                and the ``random`` routing policy, e.g.
                ``random.Random(seed).random``; the shell seeds it.
                ``None``: back-offs are exact (no jitter).
            endpoints: The fleet (default: one endpoint named ``"default"``).

        Raises:
            ValueError: Duplicate endpoint names, or an empty fleet.
        """
        super().__init__(config, jitter, endpoints)

    # -- events ------------------------------------------------------------------

    def submit(self, request: Request, now: float) -> list[Action]:
        """A new request arrives.

        Raises:
            ValueError: Unknown class or tenant, duplicate live id, or time going backwards.
        """
        if request.klass not in self._class_names:
            raise ValueError(f"klass={request.klass!r} must be one of {list(self._class_names)}")
        if request.id in self._entries:
            raise ValueError(f"id={request.id!r} is already pending")
        lane = self._lane(request.tenant)
        self._advance(now)
        prior, weighted = request.prior, self._input_weight * request.input_tokens
        cost = prior.p50 + weighted
        reserve = prior.p90 + weighted
        entry = Entry(request, cost, reserve, self._next_seq())
        entry.lane = lane
        entry.charge = rate_tokens(request)
        entry.hopeful = request.prior.quantile(self._feasibility_z)
        self._counters.submitted += 1
        actions: list[Action] = []
        self._run_timers(now, actions)
        if request.deadline is not None and request.deadline <= now:
            self._terminal(entry, _EXPIRE_E)
            self._expired(entry)
            reason = "deadline had passed when it was submitted"
            why = self._explain(request, _EXPIRE, "deadline.at_submit", reason)
            actions.append(Expire(request, reason, why))
            self._dispatch(now, actions)
            return self._finish(now, actions)
        self._entries[request.id] = entry
        if request.deadline is not None:
            self._push_timer(request.deadline, DEADLINE, entry)
        self._admit(entry, now, actions)
        self._dispatch(now, actions)
        return self._finish(now, actions)

    def completed(
        self,
        request_id: str,
        now: float,
        *,
        output_tokens: int,
        charged_tokens: float | None = None,
    ) -> list[Action]:
        """The provider answered a sent request; frees its send opportunity.

        Args:
            request_id: The request.
            now: Current time.
            output_tokens: Tokens the response generated.
            charged_tokens: The provider's own count of what this call costs
                against its token limit (prompt ``usage`` plus ``max_tokens``
                or the generated tokens); settles the rate budget's estimate.

        Raises:
            ValueError: If ``request_id`` is not in flight.
        """
        tokens = output_tokens if type(output_tokens) is int else token_count(output_tokens)
        if tokens < 0:
            raise ValueError(f"output_tokens={output_tokens!r} must be an int >= 0")
        self._advance(now)
        entry = self._take_inflight(request_id)
        self._terminal(entry, _COMPLETE)
        assert entry.sent_at is not None and entry.endpoint is not None
        self._fleet.on_completed(entry.endpoint, entry, now, tokens, charged_tokens)
        self._ledger.completed(entry, tokens, self._input_weight, charged_tokens, now)
        self._counters.completed += 1
        return self._after_release(now, [])

    def failed(
        self,
        request_id: str,
        now: float,
        kind: FailureKind,
        retry_after: float | None = None,
    ) -> list[Action]:
        """A sent request's attempt failed; the retry policy decides what next.

        The request leaves flight. Then, by the rules of
        :mod:`semisched.core.lifecycle` and ``config.retry``, exactly one of:
        :class:`Retry` (it rejoins its class queue at the retry time, skipping
        overload control, and is sent again by the usual layers; at once and
        to another endpoint when one can serve it: failover),
        :class:`Expire` (a retry would not start before the deadline) or
        :class:`Fail` (not retryable, or its attempts are spent).

        Args:
            request_id: The failed request.
            now: Current time.
            kind: How the attempt failed (the shell classifies).
            retry_after: The provider's ``retry-after`` in engine seconds. For
                :attr:`FailureKind.RATE_LIMITED` a rate budget also sends
                nothing else before it (the window is full for everyone).

        Raises:
            ValueError: If ``request_id`` is not in flight or ``retry_after`` is
                not a finite number >= 0.
            TypeError: If ``kind`` is not a :class:`FailureKind`.
        """
        check_instance("kind", kind, FailureKind)
        check_number("retry_after", retry_after, minimum=0, optional=True)
        self._advance(now)
        entry = self._take_inflight(request_id)
        endpoint = entry.endpoint
        assert endpoint is not None
        actions: list[Action] = []
        decision, elsewhere = self._settle_failure(entry, endpoint, now, kind, retry_after, actions)
        why = self._explain.failure(entry.request, decision, kind, endpoint.name, now, retry_after)
        actions.append(self._after_failure(entry, decision, kind, elsewhere, retry_after, why))
        return self._after_release(now, actions)

    def _settle_failure(
        self,
        entry: Entry,
        endpoint: EndpointState,
        now: float,
        kind: FailureKind,
        retry_after: float | None,
        actions: list[Action],
    ) -> tuple[RetryDecision, bool]:
        """Count a failed attempt against its endpoint and the signals, decide its retry,
        and keep the endpoint off as the failure says (:class:`Pause`)."""
        self._ledger.refund(entry, sent=False)  # nothing was served
        fleet = self._fleet
        opened = fleet.on_failed(endpoint, entry, now, kind)
        self._failures[kind] = self._failures.get(kind, 0) + 1
        if kind is FailureKind.RATE_LIMITED:
            self._counters.throttled += 1
        elsewhere = self.config.routing.failover and fleet.alternative(entry, endpoint, now)
        decision = decide_retry(
            self.config.retry,
            kind,
            now=now,
            attempts=entry.attempts,
            deadline=entry.request.deadline,
            retry_after=retry_after,
            draw=self._jitter,
            elsewhere=elsewhere,
        )
        if kind is FailureKind.RATE_LIMITED:  # its window is full: wait for the hint
            if retry_after is not None:
                until: float | None = now + retry_after
            else:  # no hint: the back-off's time, unless the retry goes elsewhere at once
                until = None if elsewhere else decision.retry_at
            until = fleet.throttle(endpoint, until, now)  # capped: then a probe
            if retry_after is not None and until is not None:
                actions.append(Pause(endpoint.name, until, "rate_limited"))
        elif opened is not None:
            actions.append(Pause(endpoint.name, opened, "circuit_open"))
        return decision, elsewhere

    def _after_failure(
        self,
        entry: Entry,
        decision: RetryDecision,
        kind: FailureKind,
        elsewhere: bool,
        retry_after: float | None,
        why: Explanation,
    ) -> Action:
        """The retry policy's ``decision`` on ``entry``'s failed attempt, carried out:
        a retry (deferred, deadline re-armed), an expiry or a failure."""
        request = entry.request
        endpoint = entry.endpoint
        assert endpoint is not None
        if decision.retry_at is not None:
            self._counters.retries += 1
            if elsewhere:
                self._counters.failovers += 1
                endpoint.failovers += 1
                entry.avoid = (*entry.avoid, endpoint)
            entry.skip_admission = True
            self._defer(entry, decision.retry_at, Event.RETRY)
            if request.deadline is not None:  # its timer was dropped while in flight: re-arm it
                self._push_timer(request.deadline, DEADLINE, entry)
            return Retry(request, decision.retry_at, kind, entry.attempts, endpoint.name,
                         elsewhere, why)  # fmt: skip
        if decision.expired:
            self._terminal(entry, _EXPIRE_E)
            self._expired(entry)
            return Expire(request, decision.reason, why)
        self._terminal(entry, Event.FAIL)
        self._counters.failed += 1
        return Fail(request, kind, decision.reason, entry.attempts, retry_after, why)

    def refused(
        self, request_id: str, now: float, until: float, *, fleet_wide: bool = False
    ) -> list[Action]:
        """A shared budget (:mod:`semisched.state`) refused a :class:`Send` before it left.

        The request goes back to its class queue at once (no admission check, no
        attempt counted, its local budget charges refunded) and nothing more goes to
        the endpoint it was sent to (``fleet_wide``: to any endpoint) before
        ``until``, the time the shared state named; then the usual layers send it
        again.

        Raises:
            ValueError: If ``request_id`` is not in flight or ``until`` is not a number.
        """
        check_number("until", until)
        self._advance(now)
        entry = self._entries.get(request_id)
        if entry is None or entry.state != _INFLIGHT:
            raise ValueError(f"request_id={request_id!r} is not in flight")
        fleet = self._fleet
        fleet.refund(entry)
        self._ledger.refund(entry, sent=True)  # it never left
        self._take_inflight(request_id)
        fleet.pause(None if fleet_wide else entry.endpoint, until)
        entry.attempts -= 1
        self._counters.refused += 1
        self._counters.sent -= 1  # it never left
        self._enqueue(entry, Event.REFUSED)
        deadline = entry.request.deadline
        if deadline is not None:  # its timer was dropped while in flight: re-arm it
            self._push_timer(deadline, DEADLINE, entry)
        return self._after_release(now, [])

    def expire(self, request_id: str, now: float) -> list[Action]:
        """A sent request's deadline passed in flight and the shell aborted the call.

        Its terminal outcome is :class:`Expire` (rule ``deadline.in_flight``), not a
        cancellation. A no-op for unknown ids, or ones not in flight.
        """
        self._advance(now)
        actions: list[Action] = []
        self._run_timers(now, actions)
        entry = self._entries.get(request_id)
        if entry is not None and entry.state == _INFLIGHT:
            self._take_inflight(request_id)
            self._terminal(entry, _EXPIRE_E)
            self._expired(entry)
            reason = "deadline passed in flight; the call was aborted"
            name = "" if entry.endpoint is None else entry.endpoint.name
            why = self._explain(entry.request, _EXPIRE, "deadline.in_flight", reason, endpoint=name)
            actions.append(Expire(entry.request, reason, why))
        return self._after_release(now, actions)

    def cancel(self, request_id: str, now: float) -> list[Action]:
        """The caller gave up on a request; a no-op for unknown or finished ids."""
        self._advance(now)
        actions: list[Action] = []
        # Deadlines already passed are reported first: they happened before this call.
        self._run_timers(now, actions)
        entry = self._entries.get(request_id)
        if entry is not None:
            if entry.state == _INFLIGHT:
                self._take_inflight(request_id)
            elif entry.state == _QUEUED:
                self._dequeue(entry)
            elif entry.state == _DEFERRED:
                self._deferred -= 1
            self._terminal(entry, Event.CANCEL)
            self._counters.cancelled += 1
        return self._after_release(now, actions)

    def poll(self, now: float) -> list[Action]:
        """Run due timers (deferral returns, deadlines, rate budget) and dispatch."""
        self._advance(now)
        if self._send_wake is not None and self._send_wake <= now:
            self._send_wake = None
        actions: list[Action] = []
        self._run_timers(now, actions)
        self._dispatch(now, actions)
        return self._finish(now, actions)

    def _run_timers(self, now: float, actions: list[Action]) -> None:
        timers = self._timers
        while timers and timers[0][0] <= now:
            timer = heapq.heappop(timers)
            if not self._timer_live(timer):
                continue
            _, _, kind, entry = timer
            deadline = entry.request.deadline
            if kind == DEADLINE or (deadline is not None and deadline <= now):
                if entry.state == _QUEUED:
                    self._dequeue(entry)
                else:
                    self._deferred -= 1
                self._terminal(entry, _EXPIRE_E)
                self._expired(entry)
                reason = "deadline passed before it could be sent"
                why = self._explain(entry.request, _EXPIRE, "deadline.waiting", reason)
                actions.append(Expire(entry.request, reason, why))
            else:
                self._deferred -= 1
                entry.wake_at = None
                self._admit(entry, now, actions)

    def _admit(self, entry: Entry, now: float, actions: list[Action]) -> None:
        """Overload control for an arrival or a return from deferral (rule 6): the
        admission layer judges, the books follow."""
        event = _WAKE if entry.state == _DEFERRED else _ENQUEUE
        if entry.skip_admission:
            entry.skip_admission = False
            self._enqueue(entry, event)
            return
        shed = self._admission.judge(entry, now)
        if shed is None:
            self._counters.admitted += 1
            self._enqueue(entry, event)
            return
        actions.append(shed)
        bucket = entry.request.bucket
        if type(shed) is Defer:
            entry.defers += 1
            assert entry.lane is not None
            entry.lane.deferrals += 1
            self._counters.deferrals += 1
            self._defers_by_bucket[bucket] = self._defers_by_bucket.get(bucket, 0) + 1
            self._defer(entry, shed.until)
        else:
            self._reject(entry, bucket)

    def _after_release(self, now: float, actions: list[Action]) -> list[Action]:
        self._run_timers(now, actions)
        self._dispatch(now, actions)
        return self._finish(now, actions)

    def _dispatch(self, now: float, actions: list[Action]) -> None:
        """Fill free send opportunities: the tenant policy picks a tenant, its allocation
        a class, ordering a request, routing an endpoint."""
        if not self._queued or self._held or not self._fleet.room or not self._has_capacity(0.0):
            return  # (no endpoint with room: nothing chosen, no allocation state moved)
        for ready in self._ready:
            ready.forget_heads()
        self._severity = self._current_severity()
        fleet = self._fleet
        blocked: list[TenantLane] = []  # lanes whose own budget cannot pay their pick now
        plain = self._solo and not self._capped  # one uncapped tenant: no lane to choose
        while True:  # checked above, and again after each send
            if plain and not blocked:
                if not self._ready:
                    break
                lane = self._ready[0]
            else:
                picked = self._pick_lane(blocked)
                if picked is None:
                    break
                lane = picked
            klass = lane.alloc.select(lane)
            if klass is None:
                break
            entry = lane.head(klass)
            if lane.budget is not None and not self._lane_pays(lane, entry, now, blocked, actions):
                continue
            if not self._has_capacity(entry.reserve):
                break
            endpoint = fleet.pick(entry, now)
            if not isinstance(endpoint, EndpointState):
                if isinstance(endpoint, NoRoute):  # no endpoint can ever take it
                    self._dequeue(entry)
                    refusal = endpoint.reason
                    why = self._explain(entry.request, _REJECT_D, "routing.no_endpoint", refusal)
                    actions.append(Reject(entry.request, refusal, self._severity, None, why))
                    self._reject(entry, entry.request.bucket)
                    continue
                wake = endpoint.at  # a WaitUntil
                if wake is not None and (self._send_wake is None or wake < self._send_wake):
                    self._send_wake = wake
                break
            if not is_feasible(entry, now, self._estimate):
                self._counters.infeasible_sends += 1
            self._mark_sent(entry, klass, now)
            fleet.on_send(endpoint, entry, now)
            actions.append(Send(entry.request, entry.attempts, entry.cost, endpoint.name))
            if not self._queued or not fleet.room or not self._has_capacity(0.0):
                break
