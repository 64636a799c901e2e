"""The sans-I/O scheduling engine: events with an explicit ``now`` in, actions out.

Like h11 for HTTP, the engine holds no socket, no clock and no task: a shell
(the async runtime, the simulator) calls it and executes what it returns.

Events (methods)                  Actions (returned, in order)
================================  ======================================
``submit(request, now)``          `Send`, `Wake`;
``completed(id, now, ...)``       `Defer`, `Retry` (held
``failed(id, now, kind, ...)``    back until a time); `Pause`
                                  (an endpoint kept off until a time);
                                  `Reject`,
``cancel(id, now)``               `Expire`, `Fail`
``expire(id, now)``               (terminal outcomes)
``poll(now)``
================================  ======================================

The actions are defined in `semisched.core.actions`, the statistics in
`semisched.core.stats`, the retry rules in `semisched.core.lifecycle`.

The engine is the driver of parts it owns, each with one job: the flight book
(`semisched.core.book`: where each request is, the timers), the tenant
layer's lanes (`semisched.core.tenants.tenancy`), the fleet
(`semisched.core.fleet.fleet`), admission (`semisched.core.admission`),
the retry layer (`semisched.core.retrying`) and the views the policies read
(`semisched.core.views`), built and wired by `semisched.core.assembly`. It hands a
policy a view, never itself.

Rules:

1. ``now`` never goes backwards across calls; a call that tries raises ``ValueError``.
2. Every submitted request ends in exactly one terminal outcome, reported once:
   rejected (`Reject`), expired (`Expire`), failed
   (`Fail`), or, for a request the shell was told to `Send`,
   ``completed``, ``cancel`` or ``expire`` (aborted at its deadline) as the
   shell reports. A failed attempt that is
   retried (`Retry`) is not an outcome: the request is deferred until
   its retry time, then queued again without a second admission check.
   Statistics count each.
3. A request is in exactly one place: deferred, queued in its class, or in
   flight. Only queued requests are sent; only `Send` puts one in flight.
4. At most ``max_inflight`` requests are in flight; with
   ``max_inflight_tokens`` set, reserved tokens stay within it unless a
   single request alone exceeds it (it is then sent when nothing else flies).
   With a rate ``budget`` (`semisched.core.budget`) nothing is sent the
   budget cannot pay for: the chosen request waits (a `Wake` at the
   time it fits), and one that can never fit is rejected. After
   `Engine.hold` nothing is sent at all until `Engine.release`.
   Every `Send` names the endpoint that executes it: the fleet
   (`semisched.core.fleet.fleet`) says which endpoints can take the chosen
   request, by their health, concurrency and budgets, and the routing policy
   picks one; when none can now, the request waits, and when none ever can,
   it is rejected.
5. A queued or deferred request whose deadline passes is expired at the first
   call at or after the deadline, never sent. A deferral or retry that would
   end at or after the deadline is answered at once (reject, expire) instead.
   Retries follow ``config.retry`` (`semisched.core.lifecycle`); a retried
   attempt fails over at once to another endpoint when one can serve it.
6. The layers are consulted in a fixed order: overload control on arrival and
   on each return from deferral (judging the request by its tenant's standing);
   then, while a send opportunity is free, the tenant policy picks a tenant
   (`semisched.core.tenants.lanes`), its allocation a class, ordering its
   request, routing its endpoint.
7. `Wake` asks the shell to call `Engine.poll` at a time; it is
   emitted when the earliest pending timer moves earlier than the last one
   reported, or the last one reported has passed. A shell keeps one timer;
   polling early (a timer that was cancelled) is harmless.
"""

from __future__ import annotations

from collections.abc import Sequence
from statistics import NormalDist

from semisched.core.actions import Action, Defer, Expire, Fail, Pause, Reject, Retry, Send, Wake
from semisched.core.assembly import assemble, snapshot
from semisched.core.budget import ProviderLimits, rate_tokens
from semisched.core.checks import check_instance, check_number, check_str, token_count
from semisched.core.config import SchedulerConfig
from semisched.core.fleet.endpoint import EndpointSpec
from semisched.core.fleet.fleet import DEFAULT_ENDPOINT
from semisched.core.lifecycle import FailureKind, JitterSource
from semisched.core.queue import Entry, EntryState
from semisched.core.request import Request
from semisched.core.signals import SignalSnapshot
from semisched.core.stats import EngineStats

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


_INFLIGHT = EntryState.INFLIGHT


class Engine:
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
            config: Policies and budgets (default `SchedulerConfig`).
            jitter: Uniform ``[0, 1)`` draws for the retry back-off's jitter
                and the ``random`` routing policy, e.g.
                ``random.Random(seed).random``; the shell seeds it.
                ``None``: back-offs are exact (no jitter).
            endpoints: The fleet (default: one endpoint named ``"default"``).

        Raises:
            ValueError: Duplicate endpoint names, or an empty fleet.
        """
        cfg = config if config is not None else SchedulerConfig()
        self.config = cfg
        specs = endpoints if endpoints is not None else (DEFAULT_ENDPOINT,)
        self._parts = parts = assemble(cfg, specs, jitter)
        self._counters, self._book, self._fleet = parts.tally, parts.book, parts.fleet
        self._order, self._pressure, self._tenancy = parts.order, parts.pressure, parts.tenancy
        self._admission, self._decide = parts.admission, parts.decide
        # The fleet's aggregate: latency averages for ordering and queue pressure. The
        # tail signal comes from the endpoints' own Signals (Fleet.pressure).
        self._signals = parts.fleet.signals
        self._ledger = parts.tenancy.ledger
        self._lane_of = parts.tenancy.lane_of
        # The standard score of the quantile the ordering tests deadlines with.
        self._feasibility_z = NormalDist().inv_cdf(cfg.ordering.feasibility_quantile)
        self._class_names = tuple(c.name for c in cfg.classes)
        self._input_weight = cfg.input_token_weight

    def __repr__(self) -> str:
        book = self._book
        return (
            f"<Engine alloc={self._tenancy.alloc.name} order={self._order.name} "
            f"overload={self.config.overload.policy} queued={book.queued} "
            f"deferred={book.deferred} inflight={book.inflight} now={book.now:.3f}>"
        )

    # -- events ------------------------------------------------------------------

    def submit(self, request: Request, now: float) -> list[Action]:
        """A new request arrives.

        Raises:
            ValueError: Unknown class or tenant, duplicate live id, or time going backwards.
        """
        if request.klass not in self._class_names:
            raise ValueError(f"klass={request.klass!r} must be one of {list(self._class_names)}")
        book = self._book
        if request.id in book.entries:
            raise ValueError(f"id={request.id!r} is already pending")
        lane = self._lane_of.get(request.tenant)
        if lane is None:  # a tenant name not seen before (an undeclared one raises)
            lane = self._tenancy.lane(request.tenant)
        book.advance(now)
        prior, weighted = request.prior, self._input_weight * request.input_tokens
        # Its sequence number is given when it joins its queue (`Book.enqueue`).
        entry = Entry(request, prior.p50 + weighted, prior.p90 + weighted, 0)
        entry.lane = lane
        entry.charge = rate_tokens(request)
        entry.hopeful = prior.quantile(self._feasibility_z)
        return self._decide.arrived(entry, now)

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
        self._book.advance(now)
        return self._decide.completed(request_id, now, tokens, charged_tokens, self._input_weight)

    def failed(
        self,
        request_id: str,
        now: float,
        kind: FailureKind,
        retry_after: float | None = None,
    ) -> list[Action]:
        """A sent request's attempt failed; the retry policy decides what next.

        The request leaves flight. Then, by the rules of
        `semisched.core.lifecycle` and ``config.retry``, exactly one of:
        `Retry` (it rejoins its class queue at the retry time, skipping
        overload control, and is sent again by the usual layers; at once and
        to another endpoint when one can serve it: failover),
        `Expire` (a retry would not start before the deadline) or
        `Fail` (not retryable, or its attempts are spent).

        Args:
            request_id: The failed request.
            now: Current time.
            kind: How the attempt failed (the shell classifies).
            retry_after: The provider's ``retry-after`` in engine seconds. For
                `FailureKind.RATE_LIMITED` a rate budget also sends
                nothing else before it (the window is full for everyone).

        Raises:
            ValueError: If ``request_id`` is not in flight or ``retry_after`` is
                not a finite number >= 0.
            TypeError: If ``kind`` is not a `FailureKind`.
        """
        check_instance("kind", kind, FailureKind)
        check_number("retry_after", retry_after, minimum=0, optional=True)
        self._book.advance(now)
        return self._decide.failed(request_id, now, kind, retry_after)

    def refused(
        self, request_id: str, now: float, until: float, *, fleet_wide: bool = False
    ) -> list[Action]:
        """A shared budget (`semisched.state`) refused a `Send` before it left.

        The request goes back to its class queue at once (no admission check, no
        attempt counted, its local budget charges refunded) and nothing more goes to
        the endpoint it was sent to (``fleet_wide``: to any endpoint) before
        ``until``, the time the shared state named; then the usual layers send it
        again.

        Raises:
            ValueError: If ``request_id`` is not in flight or ``until`` is not a number.
        """
        check_number("until", until)
        self._book.advance(now)
        return self._decide.refused(request_id, now, until, fleet_wide)

    def declined(
        self, request_id: str, now: float, reason: str, retry_after: float | None = None
    ) -> list[Action]:
        """A spend cap refused a `Send` before it left: it leaves flight as if never
        sent (charges refunded, no attempt counted) and ends in a `Reject`, rule
        ``spend.cap``: ``reason`` names the cap, ``retry_after`` its reset (engine seconds).

        Raises:
            ValueError: If ``request_id`` is not in flight.
        """
        check_str("reason", reason)
        check_number("retry_after", retry_after, minimum=0, optional=True)
        self._book.advance(now)
        return self._decide.declined(request_id, now, reason, retry_after)

    def expire(self, request_id: str, now: float) -> list[Action]:
        """A sent request's deadline passed in flight and the shell aborted the call.

        Its terminal outcome is `Expire` (rule ``deadline.in_flight``), not a
        cancellation. A no-op for unknown ids, or ones not in flight.
        """
        self._book.advance(now)
        return self._decide.expire(request_id, now)

    def cancel(self, request_id: str, now: float) -> list[Action]:
        """The caller gave up on a request; a no-op for unknown or finished ids."""
        self._book.advance(now)
        return self._decide.cancel(request_id, now)

    def poll(self, now: float) -> list[Action]:
        """Run due timers (deferral returns, deadlines, rate budget) and dispatch."""
        book = self._book
        book.advance(now)
        if book.send_wake is not None and book.send_wake <= now:
            book.send_wake = None
        return self._decide.after_release(now, [])

    # -- control: what may be sent changes, no request decided --------------------------

    def add_endpoint(self, spec: EndpointSpec, now: float) -> list[Action]:
        """Add an endpoint to the fleet and dispatch (queued work may go there).

        Raises:
            ValueError: An endpoint of that name is already in the fleet.
        """
        self._book.advance(now)
        self._fleet.add(spec)
        return self._decide.after_release(now, [])

    def drain_endpoint(self, name: str, now: float) -> list[Action]:
        """Send nothing new to ``name``; its in-flight requests finish. Queued requests
        no remaining endpoint can serve are rejected as they come up.

        Raises:
            ValueError: No endpoint has that name.
        """
        self._book.advance(now)
        self._fleet.drain(name)
        return self._decide.after_release(now, [])

    def remove_endpoint(self, name: str, now: float) -> list[Action]:
        """Drain ``name`` and drop it from the fleet (`drain_endpoint`).

        Raises:
            ValueError: No endpoint has that name.
        """
        self._book.advance(now)
        self._fleet.remove(name)
        return self._decide.after_release(now, [])

    def hold(self, now: float) -> list[Action]:
        """Stop sending: queued requests stay queued (deadlines still expire them)."""
        self._book.advance(now)
        self._decide.held = True
        return self._decide.finish(now, [])

    def release(self, now: float) -> list[Action]:
        """Undo `hold` and dispatch."""
        self._book.advance(now)
        self._decide.held = False
        return self._decide.after_release(now, [])

    def observe_tenant_usage(self, tenant: str, fleet_usage: float, now: float) -> list[Action]:
        """Every process's decayed usage of ``tenant`` at ``now`` (work tokens, from a
        shared state): shares, debt and the tenant policy count it from now on, and
        what the new standing lets go is sent.

        Raises:
            ValueError: ``tenant`` is not declared, or ``fleet_usage`` is not a number >= 0.
        """
        check_number("fleet_usage", fleet_usage, minimum=0)
        self._book.advance(now)
        self._ledger.observe_shared(self._tenancy.lane(tenant), fleet_usage, now)
        return self._decide.after_release(now, [])

    # -- observations (no decision follows) ------------------------------------

    def observe_headroom(self, fraction: float, now: float, request_id: str | None = None) -> None:
        """The provider reported rate-limit headroom (smallest remaining/limit) on the
        answer to ``request_id`` (its endpoint's signal; ``None``: every endpoint's)."""
        self._book.advance(now)
        entry = None if request_id is None else self._book.entries.get(request_id)
        self._fleet.observe_headroom(fraction, None if entry is None else entry.endpoint)

    def first_token(self, request_id: str, now: float) -> None:
        """The first token of ``request_id``'s answer arrived (a learned limit reads it)."""
        self._book.advance(now)
        entry = self._book.entries.get(request_id)
        if entry is not None and entry.state == _INFLIGHT and entry.first_token_s is None:
            entry.first_token_s = now - entry.sent_at  # type: ignore[operator]
            if entry.endpoint is not None:
                self._fleet.limits.first_token(entry.endpoint, entry, now)

    def observe_limits(self, request_id: str, now: float, limits: ProviderLimits) -> None:
        """The provider's rate-limit headers on the response to ``request_id``.

        With a rate budget (the fleet's, or the endpoint's own), tighter
        advertised limits are adopted and traffic the provider counts beyond
        this client's own is reserved until its reset
        (`RateBudget.observe`); without one this is a no-op.
        """
        self._book.advance(now)
        entry = self._book.entries.get(request_id)
        endpoint = None if entry is None else entry.endpoint
        self._fleet.budgets.observe(endpoint, request_id, now, limits)

    def spent(self, tokens: float, now: float, endpoint: str | None = None) -> None:
        """A call the scheduler did not send spent ``tokens`` of the key (an unscheduled
        call's usage): the rate budgets (the fleet's, and ``endpoint``'s own) count
        them, so the budget stays true.

        Raises:
            ValueError: ``tokens`` is not a number >= 0, or no endpoint has that name.
        """
        check_number("tokens", tokens, minimum=0)
        self._book.advance(now)
        fleet = self._fleet
        fleet.budgets.spent(None if endpoint is None else fleet.get(endpoint), now, tokens)

    # -- queries ------------------------------------------------------------------

    @property
    def max_inflight(self) -> int | None:
        """The concurrency in force: the sum of the endpoints' caps when each has one
        (learned or set), at most ``config.max_inflight``; ``None``: no limit."""
        return self._pressure.max_inflight

    def next_wakeup(self) -> float | None:
        """Earliest pending timer, if any (may be stale; polling then is harmless)."""
        return self._book.next_wakeup()

    def estimate_latency(self, output_tokens: float) -> float:
        """Expected send-to-completion seconds for ``output_tokens`` (observed)."""
        return self._signals.estimate_latency(output_tokens)

    def signals(self) -> SignalSnapshot:
        """The current overload signals."""
        return self._pressure.snapshot()

    def shared_limits(
        self, endpoint: str | None
    ) -> tuple[int | None, int | None, int | None, float]:
        """What a shared state must hold across processes for ``endpoint`` (``None``: the
        fleet; `shared`).

        Raises:
            ValueError: No endpoint has that name."""
        fleet = self._fleet
        state = None if endpoint is None else fleet.get(endpoint)
        return fleet.budgets.shared(state, self.config.max_inflight)

    def statistics(self) -> EngineStats:
        """A frozen snapshot of queues, flight, signals and counters."""
        return snapshot(self._parts, self._class_names)

    def tenant_usage(self, tenant: str, now: float | None = None) -> float:
        """This process's own decayed usage of ``tenant`` at ``now`` (default: the last
        event's time), in work tokens: what a shared state adds up across processes.

        Raises:
            ValueError: ``tenant`` is not declared, or ``now`` goes backwards.
        """
        if now is not None:
            self._book.advance(now)
        return self._ledger.own(self._tenancy.lane(tenant), self._book.now)

    def __len__(self) -> int:
        """Requests not yet terminal (deferred, queued or in flight)."""
        return len(self._book.entries)

    def __contains__(self, request_id: object) -> bool:
        """Whether ``request_id`` is not yet terminal: the engine still awaits news of it."""
        return request_id in self._book.entries
