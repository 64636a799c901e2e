"""The engine's decisions: what an event leads to, and the moves they make in the books.

`Decider` holds the procedures every event of the
`Engine` ends in (engine rules 2-7): run the timers
that are due (a deadline expires a request, a deferral returns to admission),
judge an arrival (the admission layer), fill the free send opportunities
(tenant, class, request, endpoint; `Decider.dispatch`), carry out a failed
attempt's retry decision, and report the wake. Each move it makes goes through
the book (`semisched.core.book`), the tenant layer and the fleet, which keep
the counts; the policies it asks see their views only. Pure: no clock, no I/O.
"""

from __future__ import annotations

from semisched.core.actions import Action, Defer, Expire, Fail, Reject, Retry, Send
from semisched.core.admission import AdmissionLayer
from semisched.core.book import DEADLINE, OVERDUE, Book
from semisched.core.buckets import Bucket
from semisched.core.explain import Decision, Explainer, Explanation
from semisched.core.fleet.endpoint import EndpointState
from semisched.core.fleet.fleet import Fleet, NoRoute
from semisched.core.lifecycle import FailureKind, RetryDecision
from semisched.core.ordering import LatencyEstimate, is_feasible
from semisched.core.queue import Entry, EntryState
from semisched.core.retrying import Retrying
from semisched.core.states import Event
from semisched.core.stats import BucketCounts, EngineTally
from semisched.core.tenants.lanes import TenantLane, TenantLedger
from semisched.core.tenants.tenancy import Tenancy
from semisched.core.views import Pressure

__all__ = ["Decider"]

_REJECT_D, _EXPIRE = Decision.REJECT, Decision.EXPIRE
_QUEUED, _DEFERRED = EntryState.QUEUED, EntryState.DEFERRED
_INFLIGHT = EntryState.INFLIGHT
_ENQUEUE, _WAKE, _EXPIRE_E = Event.ENQUEUE, Event.WAKE, Event.EXPIRE
_COMPLETE = Event.COMPLETE


class Decider:
    """The decisions every engine event ends in (module docstring)."""

    def __init__(
        self,
        book: Book,
        tenancy: Tenancy,
        fleet: Fleet,
        pressure: Pressure,
        admission: AdmissionLayer,
        explain: Explainer,
        retrying: Retrying,
        tally: EngineTally,
    ) -> None:
        self._book = book
        self._tenancy = tenancy
        self._ledger: TenantLedger = tenancy.ledger
        self._fleet = fleet
        self._pressure = pressure
        self._admission = admission
        self._explain = explain
        self._retrying = retrying
        self._counters = tally
        # Bound once: the feasibility test of every send reads it.
        self._estimate: LatencyEstimate = fleet.signals.estimate_latency
        #: Sending held (`hold`).
        self.held = False
        # Keyed by Bucket (a cheap hash); statistics() reports the bucket names.
        self.rejects_by_bucket: dict[Bucket, int] = {}
        self.defers_by_bucket: dict[Bucket, int] = {}

    def run_timers(self, now: float, actions: list[Action]) -> None:
        book = self._book
        while book.timers and book.timers[0][0] <= now:
            timer = book.due(now)
            if timer is None:
                return
            _, _, kind, entry = timer
            if kind == OVERDUE:  # a sent entry's first token is late (a learning limit)
                self.overdue(entry, now)
                continue
            deadline = entry.request.deadline
            if kind == DEADLINE or (deadline is not None and deadline <= now):
                if entry.state == _QUEUED:
                    self._book.dequeue(entry)
                else:
                    book.deferred -= 1
                book.terminal(entry, _EXPIRE_E)
                self.expired(entry)
                reason = "deadline passed before it could be sent"
                why = self._explain(entry.request, _EXPIRE, "deadline.waiting", reason)
                actions.append(Expire(entry.request, reason, why))
            else:
                book.deferred -= 1
                entry.wake_at = None
                self.admit(entry, now, actions)

    def admit(self, entry: Entry, now: float, actions: list[Action]) -> None:
        """Overload control for an arrival or a return from deferral (rule 6): the
        admission layer judges, the books follow."""
        event = _WAKE if entry.state == _DEFERRED else _ENQUEUE
        if entry.skip_admission:
            entry.skip_admission = False
            self._book.enqueue(entry, event)
            return
        admission = self._admission
        shed = admission.judge(entry, now) if admission.sheds else None
        if shed is None:
            self._counters.admitted += 1
            self._book.enqueue(entry, event)
            return
        actions.append(shed)
        bucket = entry.request.bucket
        if type(shed) is Defer:
            entry.defers += 1
            entry.lane.deferrals += 1
            self._counters.deferrals += 1
            self.defers_by_bucket[bucket] = self.defers_by_bucket.get(bucket, 0) + 1
            self._book.defer(entry, shed.until)
        else:
            self.reject(entry, bucket)

    def after_release(self, now: float, actions: list[Action]) -> list[Action]:
        """Run due timers, dispatch and report the wake."""
        timers = self._book.timers
        if timers and timers[0][0] <= now:  # one due (most events find none)
            self.run_timers(now, actions)
        self.dispatch(now, actions)
        wake = self._book.wake(now)  # finish(), inlined: every event ends here
        if wake is not None:
            actions.append(wake)
        return actions

    def dispatch(self, now: float, actions: list[Action]) -> None:
        """Fill free send opportunities: the tenant policy picks a tenant, its allocation
        a class, ordering a request, routing an endpoint."""
        book, fleet = self._book, self._fleet
        if not book.queued or self.held or not fleet.room or not book.has_capacity(0.0):
            return  # (no endpoint with room: nothing chosen, no allocation state moved)
        tenancy = self._tenancy
        for ready in tenancy.ready:
            ready.forget_heads()
        severity = self._pressure.refresh()
        blocked: list[TenantLane] = []  # lanes whose own budget cannot pay their pick now
        plain = tenancy.solo and not tenancy.capped  # one uncapped tenant: no lane to choose
        while True:  # checked above, and again after each send
            if plain and not blocked:
                if not tenancy.ready:
                    break
                lane = tenancy.ready[0]
            else:
                picked = tenancy.pick(blocked)
                if picked is None:
                    break
                lane = picked
            klass = lane.alloc.select(lane)
            if klass is None:
                break
            entry = lane.head(klass)
            if lane.budget is not None:  # the tenant's own rate cap
                paid = self._admission.pays(lane, entry, now, severity)
                if isinstance(paid, Reject):  # it never can
                    self._book.dequeue(entry)
                    actions.append(paid)
                    self.reject(entry, entry.request.bucket)
                    continue
                if paid > 0.0:  # not now: the lane sits out this dispatch
                    blocked.append(lane)
                    book.wake_send_at(now + paid)
                    continue
            if not book.has_capacity(entry.reserve):
                break
            endpoint = fleet.pick(entry, now)
            if not isinstance(endpoint, EndpointState):
                if isinstance(endpoint, NoRoute):  # no endpoint can ever take it
                    self._book.dequeue(entry)
                    refusal = endpoint.reason
                    why = self._explain(entry.request, _REJECT_D, "routing.no_endpoint", refusal)
                    actions.append(Reject(entry.request, refusal, severity, None, why))
                    self.reject(entry, entry.request.bucket)
                    continue
                if endpoint.at is not None:  # a WaitUntil
                    book.wake_send_at(endpoint.at)
                break
            if not is_feasible(entry, now, self._estimate):
                self._counters.infeasible_sends += 1
            self._send(entry, klass, endpoint, now, actions)
            if not book.queued or not fleet.room or not book.has_capacity(0.0):
                break

    def finish(self, now: float, actions: list[Action]) -> list[Action]:
        wake = self._book.wake(now)
        if wake is not None:
            actions.append(wake)
        return actions

    # -- moves in the books ---------------------------------------------------------

    def _send(
        self, entry: Entry, klass: str, endpoint: EndpointState, now: float,
        actions: list[Action],
    ) -> None:  # fmt: skip
        """``entry``, the head of its lane's ``klass``, is sent to ``endpoint`` at ``now``."""
        # Charge before dequeuing: a class emptied by this send then forfeits
        # its remaining deficit (on_idle) instead of carrying the charge.
        entry.lane.alloc.on_send(klass, entry.cost)
        book = self._book
        book.dequeue(entry)
        book.sent(entry, now)
        self._ledger.sent(entry, klass, now)
        self._counters.sent += 1
        due = self._fleet.on_send(endpoint, entry, now)
        if due is not None:  # its first token is awaited: checked for lateness then
            entry.overdue_at = due
            self._book.push_timer(due, OVERDUE, entry)
        actions.append(Send(entry.request, entry.attempts, entry.cost, endpoint.name))

    def overdue(self, entry: Entry, now: float) -> None:
        """``entry``'s first token was due by ``now`` (its learning limit reads a late one),
        or is due later now: checked again then."""
        again = self._fleet.limits.overdue(entry, now)
        entry.overdue_at = again
        if again is not None:
            self._book.push_timer(again, OVERDUE, entry)

    def take(self, request_id: str) -> Entry:
        """Take the in-flight ``request_id`` out of flight (the book's counts, its
        endpoint's); its state is left to the caller's move."""
        entry = self._book.take(request_id)
        self._fleet.release(entry, self._book.now)
        return entry

    def reject(self, entry: Entry, bucket: Bucket, event: int = Event.REJECT) -> None:
        self._book.terminal(entry, event)
        entry.lane.rejected += 1
        self._counters.rejected += 1
        self.rejects_by_bucket[bucket] = self.rejects_by_bucket.get(bucket, 0) + 1

    def expired(self, entry: Entry) -> None:
        self._counters.expired += 1
        entry.lane.expired += 1

    def rejects(self) -> BucketCounts:
        """Rejections so far, by bucket."""
        return BucketCounts(**{b.value: n for b, n in self.rejects_by_bucket.items()})

    def defers(self) -> BucketCounts:
        """Deferrals so far, by bucket."""
        return BucketCounts(**{b.value: n for b, n in self.defers_by_bucket.items()})

    # -- an arrival and the outcomes of a sent request -------------------------------------

    def arrived(self, entry: Entry, now: float) -> list[Action]:
        """A new request's ``entry`` arrives at ``now``: expired at once when its deadline
        has passed, else judged by admission; then the free opportunities are filled."""
        self._counters.submitted += 1
        actions: list[Action] = []
        request, book = entry.request, self._book
        timers = book.timers
        if timers and timers[0][0] <= now:  # one due (most arrivals find none)
            self.run_timers(now, actions)
        deadline = request.deadline
        if deadline is not None and deadline <= now:
            book.terminal(entry, _EXPIRE_E)
            self.expired(entry)
            reason = "deadline had passed when it was submitted"
            why = self._explain(request, _EXPIRE, "deadline.at_submit", reason)
            actions.append(Expire(request, reason, why))
        else:
            book.entries[request.id] = entry
            if deadline is not None:
                book.push_timer(deadline, DEADLINE, entry)
            self.admit(entry, now, actions)
        self.dispatch(now, actions)
        wake = book.wake(now)  # finish(), inlined: every arrival ends here
        if wake is not None:
            actions.append(wake)
        return actions

    def completed(
        self, request_id: str, now: float, tokens: int, charged_tokens: float | None,
        input_weight: float,
    ) -> list[Action]:  # fmt: skip
        """The provider answered ``request_id`` at ``now`` with ``tokens``: it leaves
        flight, its endpoint and its tenant count the answer, and its opportunity is
        filled."""
        book = self._book
        entry = book.take(request_id)  # take(), inlined: the hot path
        fleet = self._fleet
        fleet.release(entry, now)
        book.terminal(entry, _COMPLETE)
        fleet.on_completed(entry.endpoint, entry, now, tokens, charged_tokens)
        self._ledger.completed(entry, tokens, input_weight, charged_tokens, now)
        self._counters.completed += 1
        actions: list[Action] = []  # after_release(), inlined: the hot path
        timers = book.timers
        if timers and timers[0][0] <= now:
            self.run_timers(now, actions)
        self.dispatch(now, actions)
        wake = book.wake(now)
        if wake is not None:
            actions.append(wake)
        return actions

    def failed(
        self, request_id: str, now: float, kind: FailureKind, retry_after: float | None
    ) -> list[Action]:
        """``request_id``'s attempt failed by ``kind``: it leaves flight, the retry layer
        decides, and the decision is carried out (`after_failure`)."""
        entry = self.take(request_id)
        endpoint = entry.endpoint
        self._ledger.refund(entry, sent=False)  # nothing was served
        decision, elsewhere, pause = self._retrying.settle(entry, endpoint, now, kind, retry_after)
        actions: list[Action] = [] if pause is None else [pause]
        why = self._explain.failure(entry.request, decision, kind, endpoint.name, now, retry_after)
        actions.append(self.after_failure(entry, decision, kind, elsewhere, retry_after, why))
        return self.after_release(now, actions)

    def refused(self, request_id: str, now: float, until: float, fleet_wide: bool) -> list[Action]:
        """A shared budget refused ``request_id``'s send before it left: back to its queue,
        its endpoint (or the fleet) paused until ``until``."""
        book = self._book
        entry = book.entries.get(request_id)
        if entry is None or entry.state != _INFLIGHT:
            raise ValueError(f"request_id={request_id!r} is not in flight")
        fleet = self._fleet
        fleet.refund(entry)
        self._ledger.refund(entry, sent=True)  # it never left
        self.take(request_id)
        fleet.pause(None if fleet_wide else entry.endpoint, until)
        entry.attempts -= 1
        self._counters.refused += 1
        self._counters.sent -= 1  # it never left
        self._book.enqueue(entry, Event.REFUSED)
        deadline = entry.request.deadline
        if deadline is not None:  # its timer was dropped while in flight: re-arm it
            book.push_timer(deadline, DEADLINE, entry)
        return self.after_release(now, [])

    def declined(
        self, request_id: str, now: float, reason: str, retry_after: float | None
    ) -> list[Action]:
        """A spend cap refused ``request_id``'s send before it left: it leaves flight as
        if never sent, and is rejected (rule ``spend.cap``)."""
        entry = self._book.entries.get(request_id)
        if entry is None or entry.state != _INFLIGHT:
            raise ValueError(f"request_id={request_id!r} is not in flight")
        self._fleet.refund(entry)
        self._ledger.refund(entry, sent=True)  # it never left
        self.take(request_id)
        entry.attempts -= 1
        self._counters.sent -= 1
        self.reject(entry, entry.request.bucket, Event.DECLINED)
        name = entry.endpoint.name
        why = self._explain(entry.request, _REJECT_D, "spend.cap", reason,
                            retry_after=retry_after, endpoint=name)  # fmt: skip
        severity = why.severity
        return self.after_release(now, [Reject(entry.request, reason, severity, retry_after, why)])

    def expire(self, request_id: str, now: float) -> list[Action]:
        """``request_id``'s deadline passed in flight (a no-op unless it is in flight)."""
        book = self._book
        actions: list[Action] = []
        self.run_timers(now, actions)
        entry = book.entries.get(request_id)
        if entry is not None and entry.state == _INFLIGHT:
            self.take(request_id)
            book.terminal(entry, _EXPIRE_E)
            self.expired(entry)
            reason = "deadline passed in flight; the call was aborted"
            name = "" if entry.endpoint is None else entry.endpoint.name
            why = self._explain(entry.request, _EXPIRE, "deadline.in_flight", reason, endpoint=name)
            actions.append(Expire(entry.request, reason, why))
        return self.after_release(now, actions)

    def cancel(self, request_id: str, now: float) -> list[Action]:
        """The caller gave up on ``request_id`` (a no-op for unknown or finished ids)."""
        book = self._book
        actions: list[Action] = []
        # Deadlines already passed are reported first: they happened before this call.
        self.run_timers(now, actions)
        entry = book.entries.get(request_id)
        if entry is not None:
            if entry.state == _INFLIGHT:
                self.take(request_id)
            elif entry.state == _QUEUED:
                self._book.dequeue(entry)
            elif entry.state == _DEFERRED:
                book.deferred -= 1
            book.terminal(entry, Event.CANCEL)
            self._counters.cancelled += 1
        return self.after_release(now, actions)

    def after_failure(
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
        endpoint: EndpointState = entry.endpoint
        if decision.retry_at is not None:
            self._counters.retries += 1
            if elsewhere:
                self._counters.failovers += 1
                endpoint.failovers += 1
                entry.avoid = (*entry.avoid, endpoint)
            entry.skip_admission = True
            self._book.defer(entry, decision.retry_at, Event.RETRY)
            if request.deadline is not None:  # its timer was dropped while in flight: re-arm it
                self._book.push_timer(request.deadline, DEADLINE, entry)
            return Retry(request, decision.retry_at, kind, entry.attempts, endpoint.name,
                         elsewhere, why)  # fmt: skip
        if decision.expired:
            self._book.terminal(entry, _EXPIRE_E)
            self.expired(entry)
            return Expire(request, decision.reason, why)
        self._book.terminal(entry, Event.FAIL)
        self._counters.failed += 1
        return Fail(request, kind, decision.reason, entry.attempts, retry_after, why)
