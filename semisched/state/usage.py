"""Tenants' usage across processes: what the runtime adds to a shared state and feeds back.

With a shared state (`semisched.state.base`), every process's usage of a
tenant counts in every process's shares, debt and tenant choice
(`semisched.core.tenants.lanes`, rule 4). `SharedUsage` is the runtime's
half of that: the dispatcher tells it what each completion served, it pushes
those work tokens through the `SharedBudget` to
[`add_usage`][semisched.state.base.StateBackend.add_usage], and it tells the engine
every tenant's fleet-wide usage from the answer.

Rules:

1. It exists only with a shared state and at least two declared tenants (one
   tenant's share is all of it: nothing to decide); otherwise the hot path does
   nothing more than before.
2. A completion adds its *work tokens*, counted as the engine counts them
   (output tokens plus ``input_token_weight`` times the request's prompt
   estimate), to this worker's unsent sum for its tenant: a dict update, no I/O.
3. Unsent sums go out in one round trip: at once when the first arrives after a
   quiet spell, then at most once every ``flush_s`` (wall), however many
   completions came meanwhile. With nothing to send, the fleet's sums are read
   every ``refresh_s``, so a worker that serves nothing still learns the fleet's
   usage. Opening the shared state reads them before the first send; closing it
   sends the last completions.
4. The engine is told, for each tenant it declares (others are ignored), the
   other processes' usage plus its own: ``fleet - pushed + own``, where
   ``pushed`` is what this worker has sent (decayed here with the same
   half-life) and ``own`` is the engine's own usage (in flight included). So the
   engine's *shared* usage is exactly the other processes' part, whatever this
   worker has not sent yet.
5. The store lost (`semisched.state.guard`, rule 3): no round trips; the
   unsent sums keep decaying and go out when the worker rejoins; the engine
   keeps its own usage, and the others' part it last saw decays away.
   ``pushed`` is never more than the fleet's sum (a store restarted empty
   heals itself).

Times are the event loop's (`anyio.current_time`, wall seconds under the
default clocks) and the half-life is ``config.tenants.half_life_s`` converted
to wall seconds by the scheduler's clock, as the backend decays in wall time.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Protocol

import anyio

from semisched.core.actions import Action
from semisched.core.request import Request
from semisched.core.tenants.config import TenantConfig
from semisched.core.tenants.lanes import work_tokens
from semisched.state.base import USAGE_FLOOR
from semisched.state.timing import Decaying

if TYPE_CHECKING:
    from semisched.state.guard import SharedBudget

__all__ = ["FLUSH_S", "REFRESH_S", "SharedUsage", "UsageView"]


class UsageView(Protocol):
    """What shared usage reads of the core and tells it (the
    `Engine` is one)."""

    def tenant_usage(self, tenant: str, now: float | None = None) -> float:
        """This process's own decayed usage of ``tenant`` (work tokens)."""
        ...

    def observe_tenant_usage(self, tenant: str, fleet_usage: float, now: float) -> list[Action]:
        """Every process's decayed usage of ``tenant``; the actions it lets go."""
        ...


#: At most one push every this many wall seconds (rule 3).
FLUSH_S = 0.25
#: With nothing to push, read the fleet's usage every this many wall seconds (rule 3).
REFRESH_S = 1.0


class SharedUsage:
    """One scheduler's tenant usage, shared through a `SharedBudget` (module rules).

    Args:
        guard: The shared state (its backend, its fallback and its clock).
        usage: The core: its own usage of each tenant, told the fleet's.
        tenants: The declared tenants.
        input_token_weight: What a prompt token weighs in work tokens.
        now: The engine's time source (the dispatcher's, which never goes back).
        flush_s: Rule 3's push interval (wall seconds).
        refresh_s: Rule 3's read interval when idle (wall seconds).
    """

    def __init__(
        self,
        guard: SharedBudget,
        usage: UsageView,
        tenants: TenantConfig,
        input_token_weight: float,
        now: Callable[[], float],
        execute: Callable[[list[Action]], None],
        *,
        flush_s: float = FLUSH_S,
        refresh_s: float = REFRESH_S,
    ) -> None:
        self._guard = guard
        self._core = usage
        self._now = now
        self._execute = execute
        self._names = tenants.names
        self._tenant_for = tenants.tenant_for
        self._input_weight = input_token_weight
        self.half_life_s = guard.clock.to_wall(tenants.half_life_s)  # wall seconds
        self.flush_s = flush_s
        self.refresh_s = refresh_s
        self._unsent = Decaying(self.half_life_s)
        self._pushed = Decaying(self.half_life_s)
        self._dirty = anyio.Event()
        self._lock = anyio.Lock()

    def __repr__(self) -> str:
        return f"<SharedUsage tenants={list(self._names)} unsent={bool(self._unsent)}>"

    def served(self, request: Request, output_tokens: int) -> None:
        """A completion of ``request`` generated ``output_tokens`` (rule 2)."""
        work = work_tokens(request, output_tokens, self._input_weight)
        if work > 0.0:
            self._unsent.add(self._tenant_for(request.tenant), work, anyio.current_time())
            self._dirty.set()

    async def run(self) -> None:
        """Push and read (rule 3), forever (the dispatcher's task group runs it)."""
        while True:
            with anyio.move_on_after(self.refresh_s):
                await self._dirty.wait()
            # Shielded: cancelled mid-round-trip, the sums taken out would be lost
            # (or, put back, counted twice); closing waits for this one round trip.
            with anyio.CancelScope(shield=True):
                await self.sync()
            await anyio.sleep(self.flush_s)

    async def sync(self) -> None:
        """One round trip: push the unsent sums, tell the engine the fleet's (rules 3-5)."""
        async with self._lock:
            self._dirty = anyio.Event()
            sent_at = anyio.current_time()
            tokens = self._unsent.pop_all(sent_at)
            fleet = await self._guard.add_usage(tokens, self.half_life_s)
            if fleet is None:  # lost (rule 5): they go out when the worker rejoins
                for tenant, amount in tokens.items():
                    self._unsent.add(tenant, amount, sent_at)
                return
            at = anyio.current_time()  # the server added them within the round trip
            for tenant, amount in tokens.items():
                self._pushed.add(tenant, amount, at)
            self._observe(fleet, at)

    def _observe(self, fleet: Mapping[str, float], at: float) -> None:
        core, pushed = self._core, self._pushed
        now = self._now()
        for tenant in self._names:
            total = fleet.get(tenant, 0.0)
            pushed.cap(tenant, total, at)
            others = max(0.0, total - pushed.value(tenant, at))
            self._execute(
                core.observe_tenant_usage(tenant, others + core.tenant_usage(tenant, now), now)
            )
        pushed.prune(at, USAGE_FLOOR)
