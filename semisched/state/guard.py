"""The runtime's side of a shared state: reserve before a send, and what to do when it is lost.

`SharedBudget` stands between the dispatcher and a
[`StateBackend`][semisched.state.base.StateBackend]. Before the runtime executes a
``Send`` it reserves the call in every shared scope the call spends from: the
fleet's (``config.budget`` and ``max_inflight``) and its endpoint's (``rpm``,
``tpm``, ``max_concurrency``), with the limits the engine holds now (configured,
or adopted from the provider's headers). A refusal goes back to the core as
``Engine.refused``: the call returns to its queue and the refusing scope pauses
until the time the backend named.

Rules:

1. A call reserves in its endpoint's scope (where pauses and open circuits are
   shared) and in the fleet's when the fleet is limited.
2. Windows and waits cross the boundary in wall seconds (the backend's clock is
   wall time; the engine's may be compressed): ``Clock.to_wall`` converts.
3. Losing the backend mid-run never loses a request. The first failure logs one
   warning on the ``semisched`` logger and switches to an in-process
   `LocalState` (the *fallback*) that holds every
   send of this worker to two rules at once, per limited scope, with ``N`` the
   largest worker count this worker saw in the namespace within the last window
   (every reservation reports the count, and so does every heartbeat: workers
   that reserve agree on it, and a worker that left keeps its place for the
   window its sends still count in):

   a. *The share*: its own sends of the last window plus its fallback sends fit
      ``limit // N`` (at least 1) of the window.
   b. *The fleet's window*: the others' part of the window as the last
      reservation reported it (`used`), held
      a whole window from the loss, plus its own sends of the last window, plus
      ``N`` times each fallback send, fit the whole limit. Every worker doing the same, the
      fallback sends of all of them together fit what the window had free.

   Concurrency is shared by rule a alone (``max_concurrency // N``; calls in
   flight are not leased there). While it is lost, the heartbeat's task tries the
   backend again every ``rejoin_s`` (wall), off every call's way: no call waits on
   a lost backend, and a frozen one finds this worker's try queued when it wakes.
4. Rejoining: the worker first records its sends of the last window in the
   shared window, each at its own time (its fallback sends, and those of its
   earlier reservations that the store no longer holds, as after a restart), then
   registers again, logs one info line, and only then reserves there again. The
   sooner the better: a worker whose calls never failed (a store frozen for less
   than its timeouts) goes on reserving in the shared window as soon as the store
   answers, and must find the fallback sends there. For ``rejoin_s`` plus a
   heartbeat interval after that, a reservation must fit the fallback's rules as
   well (the other workers may still be sending on theirs, not yet recorded).
   Leases it took there before the loss and released meanwhile are returned
   there first too (its heartbeats would otherwise renew them for ever).
5. A refusal that says ``never`` (one call's tokens exceed a scope's whole
   ``tpm``) is passed on as a pause of one window: the core's own budget, with
   the same limits, rejects such a call before it is sent.
6. A refused worker waits the backend's time (at least `MIN_REFUSAL_WAIT_S`)
   plus up to a fifth more, drawn at random (``seed``): workers refused together
   do not all come back at the same instant to be refused again.
7. Tenants' usage (`semisched.state.usage`, when `SharedBudget.track_usage`
   made one) is read on `open`, before the first send, and
   the last completions' usage is pushed on `close`. While the
   backend is lost (rule 3) tenant sharing stops (`SharedBudget.add_usage`
   answers ``None`` without a round trip) and resumes when the worker rejoins;
   the loss is the one counted in ``fallbacks``.

What this module is not: it decides nothing about scheduling (the core does)
and holds no connection (the backend does).
"""

from __future__ import annotations

import contextlib
import logging
import math
import random
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Protocol

import anyio

from semisched.core.actions import Action
from semisched.core.tenants.config import TenantConfig
from semisched.extras import needs
from semisched.runtime.clock import Clock
from semisched.state.base import (
    Grant,
    Scope,
    StateBackend,
    StateForgotten,
    StateStats,
    StateUnavailable,
)
from semisched.state.fallback import SHARE, Memory
from semisched.state.local import LocalState
from semisched.state.usage import SharedUsage, UsageView

__all__ = ["MIN_REFUSAL_WAIT_S", "SharedBudget", "backend_for"]


class LimitsView(Protocol):
    """What a shared budget reads of the core: the limits each scope carries (the
    `Engine` is one)."""

    def shared_limits(
        self, endpoint: str | None
    ) -> tuple[int | None, int | None, int | None, float]:
        """``endpoint``'s (requests, tokens) per window, concurrency cap and window
        (``None``: the fleet's)."""
        ...


#: A refusal is tried again after at least this many wall seconds: a backend that
#: answers "refused, wait 0" (a window edge) must not be asked again at the same
#: instant, in a loop that never lets time pass.
MIN_REFUSAL_WAIT_S = 0.001

logger = logging.getLogger("semisched")

FLEET = "fleet"


class SharedBudget:
    """Reservations against a shared state for one scheduler (module rules).

    Args:
        backend: The shared state.
        limits: What the scopes carry: each endpoint's and the fleet's limits (the core).
        clock: The scheduler's clock (windows and waits are converted to wall time).
        rejoin_s: After a loss, how often (wall seconds) the heartbeat's task tries the
            backend again (> 0).
        seed: Seed of rule 6's jitter (``None``: from the OS).
        wall: The wall clock of this worker's sends and of the fallback (monotonic seconds).
    """

    def __init__(
        self,
        backend: StateBackend,
        limits: LimitsView,
        clock: Clock,
        *,
        rejoin_s: float = 0.5,
        seed: int | None = None,
        wall: Callable[[], float] = time.monotonic,
    ) -> None:
        if not (math.isfinite(rejoin_s) and rejoin_s > 0):
            raise ValueError(f"{rejoin_s=} must be a finite number > 0")
        self.backend = backend
        self._jitter = random.Random(seed).random
        self.memory = Memory(wall)  # this worker's sends, the workers, the last reports
        self._limits = limits
        self.clock = clock
        self.rejoin_s = rejoin_s
        self._local: LocalState | None = None  # the fallback (rule 3), kept on probation (4)
        self._lost = False
        self._unreleased: list[tuple[str, str]] = []  # released while lost: (id, endpoint)
        self._probation_until = 0.0  # loop time
        self._fallbacks = 0
        self.usage: SharedUsage | None = None  # track_usage() (rule 7)

    def __repr__(self) -> str:
        mode = "fallback (local share)" if self._lost else "shared"
        return f"<SharedBudget {self.backend!r} {mode} workers={self.memory.workers}>"

    @property
    def lost(self) -> bool:
        """Whether the worker runs on its fallback (rule 3)."""
        return self._lost

    async def open(self) -> None:
        """Connect the backend (``StateUnavailable`` when it cannot be reached)."""
        await self.backend.open()
        self.memory.count(await self.backend.workers())
        if self.usage is not None:
            await self.usage.sync()  # the fleet's tenant usage, before the first send

    async def close(self) -> None:
        """Push the last tenant usage and deregister (quietly when the backend is gone)."""
        if self.usage is not None and not self._lost:
            await self.usage.sync()
        with contextlib.suppress(StateUnavailable):
            await self.backend.close()

    def track_usage(
        self,
        usage: UsageView,
        tenants: TenantConfig,
        input_token_weight: float,
        now: Callable[[], float],
        execute: Callable[[list[Action]], None],
    ) -> SharedUsage | None:
        """Share the ``tenants``' usage through the backend (rule 7): the core's own
        ``usage`` (work tokens at ``input_token_weight``), the engine's time source
        ``now`` and the shell's ``execute`` for the actions the fleet's usage lets go;
        ``None`` (nothing to share) when one tenant is declared."""
        if len(tenants.tenants) < 2:
            return None
        self.usage = SharedUsage(self, usage, tenants, input_token_weight, now, execute)
        return self.usage

    # -- the scopes --------------------------------------------------------------------

    def scopes(self, endpoint: str) -> tuple[Scope, ...]:
        """The limited scopes a call to ``endpoint`` spends from (rule 1)."""
        found: list[Scope] = []
        for key, name in ((FLEET, None), (f"endpoint:{endpoint}", endpoint)):
            try:
                requests, tokens, concurrency, window = self._limits.shared_limits(name)
            except ValueError:  # the endpoint was removed meanwhile: its key alone, so
                found.append(Scope(key=key))  # that what it leased there still goes back
                continue
            scope = Scope(key=key, rpm=requests, tpm=tokens, max_concurrency=concurrency,
                          window_s=self.clock.to_wall(window))  # fmt: skip
            if scope.limited or name is not None:
                found.append(scope)
        return tuple(found)

    def _local_scopes(self, scopes: Sequence[Scope]) -> tuple[Scope, ...]:
        assert self._local is not None
        return self.memory.scopes(scopes, self._local.weight)

    # -- the calls ---------------------------------------------------------------------

    async def reserve(self, request_id: str, endpoint: str, tokens: float) -> tuple[Grant, bool]:
        """Reserve one call; returns the grant and whether the refusing scope is the fleet's.

        Never raises `StateUnavailable` (rule 3).
        """
        scopes = self.scopes(endpoint)
        if not scopes:
            return Grant(ok=True), False
        if not self._lost and anyio.current_time() >= self._probation_until:
            self._local = None  # every other worker has rejoined by now (rule 4)
        grant: Grant | None = None
        if self._local is not None:  # lost, or on probation: the fallback's rules first
            grant = await self._local_reserve(request_id, tokens, scopes)
            if self._lost or not grant.ok:
                return self._fallen_back(grant, request_id, tokens, scopes)
        try:
            shared = await self.backend.reserve(request_id, tokens, scopes)
        except StateUnavailable as exc:
            self._lose(exc)
            if grant is None:  # the fallback decides from now on (rule 3)
                grant = await self._local_reserve(request_id, tokens, scopes)
            return self._fallen_back(grant, request_id, tokens, scopes)
        self.memory.observe(shared, scopes)
        if grant is not None and not shared.ok and self._local is not None:
            self._local.cancel(request_id, self._local_scopes(scopes))  # not sent after all
        if shared.ok:
            self.memory.sent(request_id, tokens, scopes, fallback=False)
            if self._lost and grant is None and self._local is not None:
                self.memory.late(self._local)  # lost meanwhile: the fallback counts it too
        return shared, _key(shared) == FLEET

    async def _local_reserve(
        self, request_id: str, tokens: float, scopes: Sequence[Scope]
    ) -> Grant:
        assert self._local is not None
        return await self._local.reserve(request_id, tokens, self._local_scopes(scopes))

    def _fallen_back(
        self, grant: Grant, request_id: str, tokens: float, scopes: Sequence[Scope]
    ) -> tuple[Grant, bool]:
        if grant.ok:
            self.memory.sent(request_id, tokens, scopes, fallback=True)
        return grant, _key(grant) == FLEET

    def refusal_until(self, grant: Grant, now: float) -> float:
        """The engine time a refused scope may be tried again (rule 2, rule 5)."""
        per_wall = 1.0 / self.clock.to_wall(1.0)  # wall -> engine seconds
        wait = max(grant.wait_s, MIN_REFUSAL_WAIT_S) * per_wall  # never "again at once"
        if grant.reason == "never" or not math.isfinite(wait):
            wait = self._limits.shared_limits(None)[3]
        return now + wait * (1.0 + 0.2 * self._jitter())

    async def settle(self, request_id: str, endpoint: str, tokens: float) -> None:
        """The provider's token count for a call (quiet on a lost backend)."""
        await self._quietly("settle", request_id, endpoint, tokens)

    async def release(self, request_id: str, endpoint: str) -> None:
        """The call is over: its leases go back."""
        await self._quietly("release", request_id, endpoint)

    async def pause(self, endpoint: str, seconds: float) -> None:
        """A 429 said wait ``seconds`` (engine), or the endpoint's circuit opened for
        that long: everyone waits on this endpoint's scope."""
        wall = self.clock.to_wall(seconds)
        for scope in self.scopes(endpoint):
            if scope.key == FLEET:
                continue
            if self._local is not None:
                for local in self._local_scopes([scope]):
                    await self._local.pause(local, wall)
            if self._lost:
                continue
            try:
                await self.backend.pause(scope, wall)
            except StateUnavailable as exc:
                self._lose(exc)

    async def add_usage(
        self, tokens: Mapping[str, float], half_life_s: float
    ) -> dict[str, float] | None:
        """`StateBackend.add_usage`, or ``None`` while the backend is lost (rule 7)."""
        if self._lost:
            return None
        try:
            return await self.backend.add_usage(tokens, half_life_s)
        except StateUnavailable as exc:
            self._lose(exc)
            return None

    async def run_heartbeat(self, lease_ttl_s: float) -> None:
        """Renew this worker's leases and registration every third of the TTL and, while
        the backend is lost, try it again every ``rejoin_s`` (rules 3 and 4; forever)."""
        interval = lease_ttl_s / 3.0
        beat = anyio.current_time() + interval
        while True:
            if self._lost:
                await anyio.sleep(self.rejoin_s)
                await self._try_rejoin()
                beat = anyio.current_time() + interval  # rejoining registered it again
                continue
            # Until the next beat, but awake every rejoin_s: a call may have lost the store.
            await anyio.sleep(max(0.0, min(self.rejoin_s, beat - anyio.current_time())))
            if self._lost or anyio.current_time() < beat:
                continue
            beat = anyio.current_time() + interval
            try:
                await self.backend.heartbeat()
                self.memory.count(await self.backend.workers())
            except StateUnavailable as exc:
                self._lose(exc)

    def statistics(self) -> StateStats:
        """The backend's statistics, with this worker's fallbacks."""
        stats = self.backend.statistics()
        backend = stats.backend
        if self._lost:
            backend += " (fallback: local share)"
        return StateStats(
            backend=backend,
            namespace=stats.namespace,
            workers=self.memory.workers,
            reservations=stats.reservations,
            refusals=stats.refusals,
            round_trip_p50_ms=stats.round_trip_p50_ms,
            round_trip_p99_ms=stats.round_trip_p99_ms,
            fallbacks=self._fallbacks,
            usage_syncs=stats.usage_syncs,
        )

    # -- losing and rejoining (rules 3 and 4) ----------------------------------------------

    async def _quietly(self, method: str, request_id: str, endpoint: str, *args: float) -> None:
        scopes = self.scopes(endpoint)
        if not scopes:
            return
        if self._local is not None:
            await getattr(self._local, method)(request_id, *args, self._local_scopes(scopes))
        if self._lost:
            if method == "release":  # its lease there goes back on rejoining (rule 4)
                self._unreleased.append((request_id, endpoint))
            return
        try:
            await getattr(self.backend, method)(request_id, *args, scopes)
        except StateUnavailable as exc:
            self._lose(exc)

    def _lose(self, exc: StateUnavailable) -> None:
        if not self._lost:
            if self._local is None:  # on probation, the fallback still counts (rule 4)
                self._local = self.memory.fallback(self.backend.namespace)
            self._lost = True
            self._fallbacks += 1
            logger.warning(
                "semisched: shared state lost (%s); running on this worker's share of each "
                "limit (1/%d) until it is back", exc, self._local.weight,
            )  # fmt: skip

    async def _try_rejoin(self) -> None:
        """One try (the heartbeat's task alone makes them, ``rejoin_s`` apart: rule 3):
        the sends recorded first, so that the store counts them before anything else of
        this worker's."""
        try:
            recorded = await self._catch_up(-1)
            with contextlib.suppress(StateForgotten):  # registered again: what rejoining is
                await self.backend.heartbeat()
            self.memory.count(await self.backend.workers())
            await self._catch_up(recorded)  # what the fallback sent during these round trips
        except StateUnavailable:
            return  # still lost: the next try is rejoin_s away
        self._lost = False
        self._probation_until = anyio.current_time() + self.rejoin_s + self.backend.lease_ttl_s / 3
        logger.info("semisched: shared state is back; rejoined namespace %r",
                    self.backend.namespace)  # fmt: skip

    async def _catch_up(self, recorded: int) -> int:
        """Rule 4: the last window's sends recorded, the leases released meanwhile
        returned (a live worker's heartbeat would renew them forever); again for
        whatever happened during these round trips. ``recorded``: the fallback sends
        already recorded (-1: none); returns that count."""
        while recorded != self.memory.fallback_sends or self._unreleased:
            recorded = self.memory.fallback_sends
            for scope, sends in self.memory.unrecorded():
                await self.backend.record(scope, sends)
            while self._unreleased:
                request_id, endpoint = self._unreleased[-1]
                await self.backend.release(request_id, self.scopes(endpoint))
                self._unreleased.pop()
        return recorded


def _key(grant: Grant) -> str:
    """The refusing scope's key, a fallback's share scope named as the scope it shares."""
    return grant.scope.removesuffix(SHARE)


def backend_for(state: StateBackend | str | None, namespace: str) -> StateBackend | None:
    """``Scheduler(state=...)`` as a backend: a URL names a Redis server (``redis`` extra).

    Raises:
        TypeError: ``state`` is neither a URL, a backend nor ``None``.
        MissingDependency: A URL without the ``redis`` package (an ``ImportError``).
    """
    if state is None or isinstance(state, StateBackend):
        return state
    if not isinstance(state, str):
        raise TypeError(f"state={state!r} must be a Redis URL, a StateBackend or None")
    with needs("state='redis://...'"):
        from semisched.state.redis import RedisState
    return RedisState(state, namespace=namespace)
