"""The demand-driven physics driver: ``mockprovider.physics`` run against a clock, for handlers.

What it is: the shell that lets many concurrent HTTP handlers wait on one pure
``ProviderPhysics``. It owns the scaled clock, delivers each physics event to the handler whose
request it belongs to, and applies a configured capacity loss. It decides nothing: service
times, batching and timeouts are the physics'; admission and faults are ``mockprovider.gate``'s.
It is not an HTTP thing either (``mockprovider.app`` is).

The clock. ``clock()`` returns wall seconds (``time.monotonic`` by default); virtual time is
``(clock() - origin) * time_scale`` where ``origin`` is the clock at the driver's first use (so
the driver can be built outside an event loop), and it never goes backwards. Several drivers
may share one `ClockOrigin` (the endpoints of a fleet, ``mockprovider.fleet``): then
virtual time starts at the first use of *any* of them, and they all read the same virtual time.
All waiting goes through anyio (``anyio.move_on_after`` and events), never ``time.sleep``: with
``clock=anyio.current_time`` under trio's ``MockClock(autojump_threshold=0)`` the whole mock
runs in virtual time, and a test sleeps minutes in microseconds. The clock must advance with
anyio's sleeps (``time.monotonic`` does under asyncio and trio; so does ``anyio.current_time``).

No background task. Handlers waiting for a physics event share the clock: the first waiter to
find no *driver* becomes the driver; it computes ``physics.next_event_time()``, sleeps until then
(in wall time: the virtual wait divided by ``time_scale``) or until a state change (submit,
cancel, an event delivered to it) sets the ``changed`` event, then calls
``physics.advance(now)`` and hands each event to its request's waiter. Every other waiter
sleeps on its own event. When the driver's own event arrives (or it is cancelled) it steps down
and wakes one sleeper, which takes over. So ASGI lifespan is not needed, and the app works
unchanged under ``httpx2.ASGITransport`` (which does not run lifespan). A handler releases its
flight in a ``finally`` (``PhysicsDriver.release``), so a cancelled request or a client that
went away never leaks a slot. One driver belongs to one event loop.

Capacity loss ``(t, f)``: when the virtual clock first passes ``t`` the physics keeps
``max(1, round(slots * f))`` slots (applied at ``t``, or at the physics' last time if later).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import Final

import anyio
import anyio.lowlevel

from mockprovider.faults import capacity_slots
from mockprovider.physics import EventKind, PhysicsParams, ProviderEvent, ProviderPhysics

__all__ = ["ClockOrigin", "Flight", "PhysicsDriver"]

_WAKE_EPS_S: Final = 1e-6  # wall seconds: an event this close is treated as due


class ClockOrigin:
    """The wall time at which virtual time is 0, fixed by the first reading.

    One per app by default; the apps of a fleet share one, so that every endpoint's virtual
    clock (and so its outage windows and capacity loss) counts from the fleet's first request.

    Attributes:
        wall: The origin in the clock's wall seconds, or ``None`` before the first reading.
    """

    __slots__ = ("wall",)

    def __init__(self) -> None:
        self.wall: float | None = None

    def __repr__(self) -> str:
        return f"<ClockOrigin wall={self.wall!r}>"

    def elapsed(self, wall: float) -> float:
        """Wall seconds from the origin to ``wall`` (the first call fixes the origin)."""
        if self.wall is None:
            self.wall = wall
        return wall - self.wall


class Flight:
    """One request inside the physics, as seen by its handler.

    Attributes:
        request_id: The physics' id of the request (``r0``, ``r1``, ...).
        events: Delivered events not yet taken by ``PhysicsDriver.next_event``.
        terminal: A terminal event (COMPLETED or TIMED_OUT) has been delivered.
        wake: Set to wake the handler while it sleeps; ``None`` when it does not.
    """

    __slots__ = ("events", "request_id", "terminal", "wake")

    def __init__(self, request_id: str) -> None:
        self.request_id = request_id
        self.events: deque[ProviderEvent] = deque()
        self.terminal = False
        self.wake: anyio.Event | None = None

    def __repr__(self) -> str:
        return f"<Flight {self.request_id} pending={len(self.events)} terminal={self.terminal}>"


class PhysicsDriver:
    """Physics + scaled clock + event delivery (see the module docstring).

    Args:
        params: The provider constants.
        time_scale: Virtual seconds per wall second (> 0).
        clock: Wall seconds, monotonic (default ``time.monotonic``, chosen by the caller).
        capacity_loss: ``(t, f)``: at virtual time ``t`` keep fraction ``f`` of the slots.
        origin: Where virtual time 0 lies; shared by the drivers of a fleet (default: a
            fresh one, fixed at this driver's first use).

    Attributes:
        physics: The pure provider model being driven.
        capacity_applied_at: Virtual time at which the capacity loss was applied, or ``None``.
    """

    def __init__(
        self,
        params: PhysicsParams,
        *,
        time_scale: float,
        clock: Callable[[], float],
        capacity_loss: tuple[float, float] | None = None,
        origin: ClockOrigin | None = None,
    ) -> None:
        self.physics = ProviderPhysics(params)
        self._clock = clock
        self._scale = float(time_scale)
        self._origin = ClockOrigin() if origin is None else origin
        self._flights: dict[str, Flight] = {}
        self._driver: Flight | None = None
        self._sleepers: dict[str, Flight] = {}
        self._changed: anyio.Event | None = None
        self._seq = 0
        self._capacity: tuple[float, int] | None = None
        if capacity_loss is not None:
            t, f = capacity_loss
            self._capacity = (float(t), capacity_slots(params.slots, f))
        self.capacity_applied_at: float | None = None

    def __repr__(self) -> str:
        return (
            f"<PhysicsDriver now={self.physics.now:.6g} flights={len(self._flights)} "
            f"driving={self._driver is not None} sleepers={len(self._sleepers)}>"
        )

    @property
    def started(self) -> bool:
        """Whether virtual time has begun (the clock origin is fixed)."""
        return self._origin.wall is not None

    def now(self) -> float:
        """Virtual now: ``(clock() - origin) * time_scale``, never decreasing."""
        return max(self._origin.elapsed(self._clock()) * self._scale, self.physics.now)

    def tick(self, now: float | None = None) -> float:
        """Bring the physics to ``now`` (default: the clock) and deliver due events."""
        if now is None:
            now = self.now()
        if self._capacity is not None and now >= self._capacity[0]:
            at = max(self._capacity[0], self.physics.now)
            self._deliver(self.physics.advance(at))
            self.physics.set_slots(at, self._capacity[1])
            self._capacity = None
            self.capacity_applied_at = at
            self._poke()
        self._deliver(self.physics.advance(now))
        return now

    def submit(self, input_tokens: int, output_tokens: int) -> Flight:
        """Submit a request to the physics now; the caller must ``release`` the flight."""
        now = self.tick()
        flight = Flight(f"r{self._seq}")
        self._seq += 1
        self.physics.submit(now, flight.request_id, input_tokens, output_tokens)
        self._flights[flight.request_id] = flight
        self._poke()
        return flight

    def release(self, flight: Flight) -> bool:
        """Forget ``flight``; cancel it in the physics unless it ended. True if cancelled."""
        if flight.terminal:
            self._flights.pop(flight.request_id, None)
            return False
        now = self.tick()
        self._flights.pop(flight.request_id, None)
        if flight.terminal:
            return False
        cancelled = self.physics.cancel(now, flight.request_id)
        self._poke()
        return cancelled

    async def next_event(self, flight: Flight) -> ProviderEvent:
        """The flight's next event, waiting (and driving the clock if needed) for it.

        Baton invariant: while any flight sleeps, there is a driver or a woken flight that
        has not run yet. Every exit from here (event, cancellation) with no driver wakes one
        sleeper, which either takes over or, if it has its event, passes the baton on.
        """
        try:
            while not flight.events:
                if self._driver is None:
                    self._driver = flight
                    try:
                        await self._drive(flight)
                    finally:
                        self._driver = None
                else:
                    flight.wake = anyio.Event()
                    self._sleepers[flight.request_id] = flight
                    try:
                        await flight.wake.wait()
                    finally:
                        self._sleepers.pop(flight.request_id, None)
                        flight.wake = None
            return flight.events.popleft()
        finally:
            if self._driver is None:
                self._hand_over()

    async def terminal_event(self, flight: Flight) -> ProviderEvent:
        """The flight's COMPLETED or TIMED_OUT event (skipping FIRST_TOKEN)."""
        while True:
            event = await self.next_event(flight)
            if event.kind is not EventKind.FIRST_TOKEN:
                return event

    async def _drive(self, flight: Flight) -> None:
        scale = self._scale
        while True:
            now = self.tick()
            if flight.events:
                return
            nxt = self.physics.next_event_time()
            if self._capacity is not None:
                nxt = self._capacity[0] if nxt is None else min(nxt, self._capacity[0])
            changed = self._changed = anyio.Event()
            if nxt is None:  # cannot happen while the flight is live; wait for any change
                await changed.wait()
                continue
            delay = (nxt - now) / scale
            if delay <= _WAKE_EPS_S:
                self.tick(max(now, nxt))
                await anyio.lowlevel.checkpoint()  # huge time scales: still let others run
                continue
            with anyio.move_on_after(delay):
                await changed.wait()

    def _deliver(self, events: list[ProviderEvent]) -> None:
        for event in events:
            flight = self._flights.get(event.request_id)
            if flight is None:
                continue
            flight.events.append(event)
            if event.kind is not EventKind.FIRST_TOKEN:
                flight.terminal = True
            if flight.wake is not None:
                self._sleepers.pop(flight.request_id, None)
                flight.wake.set()
            if flight is self._driver:
                self._poke()

    def _poke(self) -> None:
        if self._changed is not None:
            self._changed.set()

    def _hand_over(self) -> None:
        """Wake the longest sleeper (it leaves the sleepers at once: never woken twice)."""
        if self._sleepers:
            heir = self._sleepers.pop(next(iter(self._sleepers)))
            if heir.wake is not None:
                heir.wake.set()
