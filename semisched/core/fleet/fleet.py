"""The fleet: which endpoints can take a request now, and the bookkeeping of each send.

The engine's allocation and ordering layers choose *which* request is sent
next; the fleet says *where it can go* and asks the routing policy
(`semisched.core.fleet.routing`) to choose among those places. It owns the
per-endpoint state (`semisched.core.fleet.endpoint`), the fleet-wide rate
budget (``SchedulerConfig.budget``: one key shared by every endpoint) and
each endpoint's own budget.

Rules (enforced by `Fleet.pick`, which asks
`semisched.core.fleet.picking.Picker.pick`):

1. A request can go to an endpoint that serves its model, whose
   ``context_tokens`` hold its estimated total, that is not drained, removed
   or out of quota, whose circuit lets a send through, that is below its
   ``max_concurrency``, and whose own budget (and the fleet's) can pay now.
2. A request retried after a failure avoids every endpoint that failed it,
   and every request avoids an endpoint that answered 429 until its retry
   time, while another endpoint (one it has not failed at, not throttled)
   could serve it, even if that one must be waited for.
   An endpoint (or the whole fleet) whose shared budget refused a send is
   paused until the time the shared state named (`Fleet.pause`).
3. `Fleet.pick` returns the endpoint; with none now, `WaitUntil`
   (a budget refills, a circuit half-opens; `BUSY`: something in flight
   must finish first); with none that could *ever* serve it, `NoRoute`
   (why), and the engine rejects it.
4. A single candidate needs no policy; two or more go to the routing policy.
5. Overload control sees the fleet, not one endpoint: the load and tail
   signals are those of the least loaded endpoint that can still be used
   (`Fleet.pressure`), so the scheduler
   defers or rejects only when every eligible endpoint is loaded.
6. The last endpoint whose circuit is closed never opens it for failures or
   a refused key: with nowhere else to send, failures are paced by the retry
   policy's back-off, not by a cool-off (a lone endpoint has no breaker; a
   fleet-wide outage does not black-hole every request), and a refused key
   reaches the caller at once (a batch job stops on it).
7. A 429 keeps its endpoint off (and pauses the budget that governs it) until
   its ``retry-after``, at most ``RetryPolicy.max_retry_after_s``: a longer hint
   opens the circuit for the cap only, and then one request goes as a probe
   (`semisched.core.fleet.endpoint` rule 6).
8. A refused key (`FailureKind.AUTH`) opens the endpoint's circuit for
   ``RoutingConfig.auth_cooloff_s`` (endpoint rule 5), so its work goes to the
   others; the failed attempt fails over to one (lifecycle rule 5).
9. Of two or more candidates, the routing policy is offered those below the part of
   their limit they have shown they serve (`EndpointState.sure`), when there are
   any: a learned limit's probe above it (`semisched.core.fleet.queue_delay` rule 7)
   takes a request only when no endpoint has room it has shown, so a probe never
   queues a request inside one server while another has a slot for it. A fixed
   limit is shown whole.

Rules 6-8 on failures and 429s are carried out by `Health`
(`semisched.core.fleet.health`), which the fleet owns (`Fleet.health`).

Pure: no clock, no I/O; the engine passes ``now``.
"""

from __future__ import annotations

from bisect import insort
from collections.abc import Sequence
from operator import attrgetter

from semisched.core.config import SchedulerConfig
from semisched.core.fleet import cost_routing  # noqa: F401  (registers the cost policy)
from semisched.core.fleet.budgets import Budgets
from semisched.core.fleet.concurrency import make_limit
from semisched.core.fleet.endpoint import RATE_LIMITED, Circuit, EndpointSpec, EndpointState
from semisched.core.fleet.health import Health
from semisched.core.fleet.limiting import Limits, capacity
from semisched.core.fleet.picking import BUSY, NoRoute, Picker, WaitUntil
from semisched.core.fleet.routing import RoutingPolicy, make_routing
from semisched.core.lifecycle import JitterSource
from semisched.core.queue import Entry
from semisched.core.signals import Signals
from semisched.core.stats import EndpointStats, EngineTally

__all__ = ["BUSY", "DEFAULT_ENDPOINT", "Fleet", "NoRoute", "WaitUntil"]


_CLOSED = Circuit.CLOSED
_fleet_order = attrgetter("index")

#: The one endpoint of a scheduler built around a single client.
DEFAULT_ENDPOINT = EndpointSpec(name="default")


def _golden_draw() -> JitterSource:
    """A deterministic low-discrepancy ``[0, 1)`` sequence, for when no source is given."""
    state = [0.0]

    def draw() -> float:
        state[0] = (state[0] + 0.6180339887498949) % 1.0
        return state[0]

    return draw


class Fleet:
    """The endpoints, their budgets and health, and the routing policy (module rules)."""

    def __init__(
        self,
        config: SchedulerConfig,
        endpoints: Sequence[EndpointSpec],
        tally: EngineTally,
        draw: JitterSource | None = None,
    ) -> None:
        self._cfg = config
        self._routing = config.routing
        self._tally = tally
        self.policy: RoutingPolicy = make_routing(
            config.routing, draw if draw is not None else _golden_draw()
        )
        self._endpoints: list[EndpointState] = []
        #: The key's rate budget and the endpoints' own (charged on each send).
        self.budgets = Budgets(config.budget, self._endpoints)
        #: The fleet-wide budget (one key shared by every endpoint), if any.
        self.budget = self.budgets.key
        self._by_name: dict[str, EndpointState] = {}
        self._eligible: dict[str, tuple[EndpointState, ...]] = {}
        self._next_index = 0
        self.solo: EndpointState | None = None  # pick's fast path (_changed)
        self._single: EndpointState | None = None  # pressure's: the one endpoint, if so
        #: The one endpoint, when its signals are the fleet's own (it was alone from the
        #: start): overload control then reads the fleet's signals alone, and no
        #: fleet pressure (`pressure`) while its circuit is closed.
        self.alone: EndpointState | None = None
        #: The endpoints with free room (uncapped, or fewer in flight than their cap), in
        #: fleet order: what pick reads first (kept on every send and answer).
        self.room: list[EndpointState] = []
        self.count = 0  # endpoints in the fleet (removed ones excluded)
        #: Every endpoint's concurrency limit, fed and applied.
        self.limits = Limits(self.set_cap, config.max_inflight)
        #: The sum of the active endpoints' caps (``None`` while one has none).
        self.capacity: int | None = None
        #: The concurrency in force: `capacity`, at most the scheduler's ``max_inflight``
        #: (``None``: no limit); kept with the capacity, read on every decision.
        self.in_force: int | None = config.max_inflight
        self._picker = Picker(self, tally)
        # The aggregate of every endpoint's answers: latency averages for ordering and
        # queue pressure. A fleet of one shares it with its endpoint (one update per
        # answer), until a second endpoint joins.
        self.signals = Signals(config.signals, track_tail=len(endpoints) == 1)
        self._sharer: EndpointState | None = None
        #: Failed attempts and 429s: their endpoint's signals, circuit, quota and limit.
        self.health = Health(config, self._endpoints, self.signals, self.limits, self.budgets,
                             self._changed)  # fmt: skip
        if not endpoints:
            raise ValueError("endpoints=[] must name at least one endpoint")
        for spec in endpoints:
            self.add(spec)
        self.paused_until = float("-inf")  # the fleet's shared budget refused
        #: The fixed part of a request's slot time, in output tokens: the mean over the
        #: endpoints that have answered of their fit's intercept over its slope
        #: (``AllocationConfig.request_tokens`` when that is None).
        self.request_tokens = 0.0

    def __repr__(self) -> str:
        return f"<Fleet {self.policy.name} {[e.name for e in self._endpoints]}>"

    # -- membership ---------------------------------------------------------------------

    @property
    def endpoints(self) -> tuple[EndpointState, ...]:
        """The endpoints in fleet order (removed ones excluded)."""
        return tuple(self._endpoints)

    def get(self, name: str) -> EndpointState:
        """The endpoint called ``name``.

        Raises:
            ValueError: No endpoint has that name.
        """
        endpoint = self._by_name.get(name)
        if endpoint is None:
            raise ValueError(f"endpoint={name!r} must be one of {sorted(self._by_name)}")
        return endpoint

    def add(self, spec: EndpointSpec) -> EndpointState:
        """Add an endpoint.

        Raises:
            TypeError: ``spec`` is not an `EndpointSpec`.
            ValueError: An endpoint of that name is already in the fleet.
        """
        if not isinstance(spec, EndpointSpec):
            raise TypeError(f"endpoint={spec!r} must be an EndpointSpec")
        if spec.name in self._by_name:
            raise ValueError(f"endpoint name {spec.name!r} is already in the fleet")
        state = EndpointState(spec, self._next_index, self._cfg.signals, self._routing.speed_decay)
        state.limiter = make_limit(self._routing.concurrency, spec.max_concurrency)
        state.cap = state.limiter.cap
        state.sure = state.limiter.sure
        if self._sharer is not None:  # a second endpoint: the first takes its own signals
            self._sharer.signals = self.signals.split()
            self._sharer = None
        elif not self._next_index and self.signals.tracks_tail:
            state.signals = self.signals
            self._sharer = state
        self._next_index += 1
        self._endpoints.append(state)
        self._by_name[spec.name] = state
        self._changed()
        return state

    def drain(self, name: str) -> None:
        """Send nothing new to ``name``; what is in flight there finishes."""
        self.get(name).out_reason = "drained"
        self._changed()

    def remove(self, name: str) -> None:
        """Drain ``name`` and forget it (answers of what it has in flight still count)."""
        endpoint = self.get(name)
        endpoint.out_reason = "removed"
        endpoint.removed = True
        self._endpoints.remove(endpoint)
        del self._by_name[name]
        self._changed()

    def _changed(self) -> None:
        """Membership or availability changed: drop the cached eligible sets and find
        whether `pick` may take its fast path (one endpoint, no fleet budget, no
        budget or context limit of its own, any model served)."""
        self._eligible.clear()
        self.room = [e for e in self._endpoints if e.cap is None or e.inflight < e.cap]
        self.count = len(self._endpoints)
        self._recount()
        self.limits.added(self._endpoints)
        live = [e for e in self._endpoints if not e.out_reason]
        only = live[0] if len(live) == 1 and len(self._endpoints) == 1 else None
        plain = (
            only is not None
            and self.budget is None
            and only.budget is None
            and only.spec.context_tokens is None
            and only.spec.models is None
        )
        self.solo = only if plain else None
        self._single = only
        self.alone = only if only is not None and only is self._sharer else None

    def eligible(self, model: str) -> tuple[EndpointState, ...]:
        """Endpoints that serve ``model`` and take new work (cached until the fleet changes)."""
        found = self._eligible.get(model)
        if found is None:
            found = tuple(e for e in self._endpoints if not e.out_reason and e.spec.serves(model))
            self._eligible[model] = found
        return found

    # -- where a request can go ------------------------------------------------------------

    def pick(self, entry: Entry, now: float) -> EndpointState | NoRoute | WaitUntil:
        """Where ``entry`` can be sent now (rules 1-4; `Picker.pick`)."""
        solo = self.solo
        if (  # one plain endpoint (no budget, no context limit, any model) with room
            solo is not None
            and not entry.avoid
            and solo.circuit is _CLOSED
            and solo.paused_until <= now
            and self.paused_until <= now
            and (solo.cap is None or solo.inflight < solo.cap)
        ):
            return solo
        return self._picker.pick(entry, now)

    def alternative(self, entry: Entry, failed: EndpointState, now: float) -> bool:
        """Whether an endpoint other than ``failed`` could serve ``entry`` (failover;
        `Picker.alternative`)."""
        return self._picker.alternative(entry, failed, now)

    # -- bookkeeping --------------------------------------------------------------------

    def on_send(self, endpoint: EndpointState, entry: Entry, now: float) -> float | None:
        """``entry`` is sent to ``endpoint`` at ``now``; returns when its first token is
        late, for a learning limit to check (`Limits.sent`), or ``None``."""
        entry.endpoint = endpoint
        endpoint.inflight += 1
        entry.held = endpoint.inflight
        if endpoint.inflight == endpoint.cap and endpoint in self.room:  # now full
            self.room.remove(endpoint)
        endpoint.inflight_cost += entry.cost
        endpoint.sent_at_sum += now
        endpoint.sent += 1
        if endpoint.circuit is Circuit.HALF_OPEN:
            endpoint.probing = True
        if endpoint.budget is not None or self.budget is not None:
            self.budgets.charge(endpoint, now, entry.request.id, entry.charge)
        limits = self.limits
        # A limit that is not fed reads nothing of this send (an entry sent meanwhile goes
        # to an endpoint whose limit does not learn, or nothing is ever fed: `Limits`).
        return limits.sent(endpoint, entry) if limits.learning else None

    def release(self, entry: Entry, now: float) -> EndpointState:
        """``entry`` leaves flight (answered, failed or cancelled); returns where it was."""
        endpoint: EndpointState = entry.endpoint
        assert endpoint is not None and entry.sent_at is not None
        endpoint.left_at = now
        if entry.awaiting_s is not None:  # it left before its first token
            Limits.arrived(endpoint, entry)
        endpoint.probing = False  # a probe that ends without a verdict (cancelled) frees the next
        endpoint.inflight -= 1
        cap, room = endpoint.cap, self.room
        freed = cap is not None and endpoint.inflight == cap - 1 and not endpoint.removed
        if freed and endpoint not in room:
            insort(room, endpoint, key=_fleet_order)  # room again
        if endpoint.inflight:
            endpoint.inflight_cost -= entry.cost
            endpoint.sent_at_sum -= entry.sent_at
        else:  # clamp float drift
            endpoint.inflight_cost = endpoint.sent_at_sum = 0.0
        return endpoint

    def set_cap(self, endpoint: EndpointState, cap: int | None) -> None:
        """``endpoint`` may now hold ``cap`` requests (its room, the part of it shown and the
        capacity follow)."""
        endpoint.cap = cap
        endpoint.sure = endpoint.limiter.sure
        room = self.room
        has_room = (cap is None or endpoint.inflight < cap) and not endpoint.removed
        if has_room and endpoint not in room:
            insort(room, endpoint, key=_fleet_order)
        elif not has_room and endpoint in room:
            room.remove(endpoint)
        self._recount()

    def _recount(self) -> None:
        """The caps or the endpoints changed: the capacity and the concurrency in force."""
        total = self.capacity = capacity(self._endpoints)
        ceiling = self._cfg.max_inflight
        self.in_force = ceiling if total is None or (ceiling is not None and ceiling <= total) \
            else total

    def on_completed(
        self,
        endpoint: EndpointState,
        entry: Entry,
        now: float,
        tokens: int,
        charged_tokens: float | None,
    ) -> None:
        """An answer from ``endpoint``: health, speed, budgets."""
        assert entry.sent_at is not None
        latency = now - entry.sent_at
        endpoint.completed += 1
        if endpoint.consecutive_failures or endpoint.probing or endpoint.circuit is not _CLOSED:
            endpoint.on_success()
        signals = endpoint.signals
        signals.record_completion(latency, tokens)
        if signals is not self.signals:
            self.signals.record_completion(latency, tokens)
        endpoint.fit.observe(tokens, latency)
        if self.limits.learning:
            self.limits.answered(endpoint, entry, now, tokens)
        if endpoint is self._single:  # the one endpoint: its own floor is the mean
            self.request_tokens = endpoint.fit.intercept_s / endpoint.fit.slope_s
        else:
            floors = [e.fit.intercept_s / e.fit.slope_s for e in self._endpoints if e.completed]
            if floors:  # else it was the last answer of a removed endpoint
                self.request_tokens = sum(floors) / len(floors)
        if charged_tokens is not None:
            self.budgets.settle(endpoint, entry.request.id, charged_tokens, now)

    def observe_headroom(self, fraction: float, endpoint: EndpointState | None) -> None:
        """The provider's rate-limit headroom (smallest remaining/limit), reported on an
        answer from ``endpoint`` (its signal; ``None``: every endpoint's)."""
        self.signals.record_headroom(fraction)
        for each in self._endpoints if endpoint is None else (endpoint,):
            if each.signals is not self.signals:
                each.signals.record_headroom(fraction)

    def pause(self, endpoint: EndpointState | None, until: float) -> None:
        """A shared budget refused a send: nothing goes to ``endpoint`` (``None``: the
        whole fleet) before ``until``."""
        if endpoint is None:
            self.paused_until = max(self.paused_until, until)
        else:
            endpoint.paused_until = max(endpoint.paused_until, until)

    def refund(self, entry: Entry) -> None:
        """``entry``'s send never left: it is not counted sent, its local budget charges are
        taken back."""
        endpoint = entry.endpoint
        if endpoint is not None:
            endpoint.sent -= 1
        self.budgets.refund(endpoint, entry.request.id)

    # -- what overload control sees ----------------------------------------

    def pressure(self, now: float) -> tuple[float, float]:
        """Rule 5: ``(tail, load)`` of the least stressed and the least loaded usable
        endpoint (tail signal; in flight / ``max_concurrency``, 0 uncapped); ``(1, 1)``
        when none is usable. One pass: overload control asks on every decision."""
        single = self._single
        if single is not None and single.circuit is _CLOSED:  # the loop below, for one
            tail = single.signals.tail_signal()
            cap = single.cap
            if cap is None or not single.limiter.settled:  # no capacity known yet
                return (tail if tail < 1.0 else 1.0), 0.0
            load = single.inflight / cap
            return (tail if tail < 1.0 else 1.0), (load if load < 1.0 else 1.0)
        tail = load = 1.0
        for endpoint in self._endpoints:
            if endpoint.out_reason or (  # a 429's pause (rule 7) is short: still usable
                endpoint.circuit is Circuit.OPEN
                and now < endpoint.open_until
                and endpoint.circuit_reason != RATE_LIMITED
            ):
                continue
            signal = endpoint.signals.tail_signal()
            if signal < tail:
                tail = signal
            cap = endpoint.cap
            if cap is None or not endpoint.limiter.settled:  # no capacity known yet
                load = 0.0
            elif load > 0.0:
                share = endpoint.inflight / cap
                if share < load:
                    load = share
        return tail, load

    def statistics(self, now: float) -> tuple[EndpointStats, ...]:
        """Per-endpoint snapshots, in fleet order."""
        return tuple(e.statistics(now) for e in self._endpoints)
