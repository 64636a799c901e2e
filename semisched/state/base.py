"""Shared state: what several scheduler processes must agree on, behind one small protocol.

Eight API replicas, or four batch workers sharing one organisation's key, each
run their own [`Scheduler`][semisched.Scheduler]. Alone, each would spend the whole
RPM/TPM budget; together they would storm the provider with 429s. A
`StateBackend` is where they meet: before a send goes out, the runtime
*reserves* it against every shared scope it spends from (the fleet's budget,
its endpoint's), atomically; a refusal comes back with the time to try again,
and reaches the core as a pause of that scope (``Engine.refused``). The core
itself stays pure: it never talks to a backend.

What a reservation holds, per scope (`Scope`):

- a request charge and a token charge in a sliding window of ``window_s``
  (wall seconds), kept until the window has passed; `StateBackend.settle`
  replaces the token charge with the provider's count once ``usage`` is known;
- a concurrency *lease* while the call is in flight, released by
  `StateBackend.release`. A lease expires by itself ``lease_ttl_s`` after
  its last renewal, so a killed process's leases come back without it; a live
  process renews its leases and its registration (`StateBackend.heartbeat`)
  well inside the TTL.

A scope can also be *paused* for everyone (`StateBackend.pause`): a 429's
``retry-after``, or an endpoint's open circuit, seen by one process, holds all
of them.

Tenants' usage is the other shared record (`StateBackend.add_usage`):
per namespace, one sum per tenant of the *work tokens* every process served it
(output tokens plus ``input_token_weight`` times prompt tokens: the core's
unit, `semisched.core.tenants.lanes`), halving every ``half_life_s`` (wall
seconds) in place: ``x`` added at ``t`` counts ``x * 2**(-(now - t) / half_life_s)``
at ``now``. Each process adds what it served and reads back every tenant's
fleet-wide sum; the part beyond its own reaches its engine
(``Engine.observe_tenant_usage``), so shares, debt (derived: usage minus
entitlement times everyone's usage, never stored) and the tenant policy's
choice are fleet-wide. `semisched.state.usage` does this for the runtime,
batching completions into at most one round trip per flush interval. Every
process of a namespace must use the same half-life (the caller's decays the sums).

When the store is lost (`StateUnavailable` mid-run, or
`StateForgotten`: it restarted empty), budgets fall back to this
worker's share of each limit, starting from the window the last reservation
reported (`semisched.state.guard`, `semisched.state.fallback`), and a
rejoining worker records in the store what it sent meanwhile
(`StateBackend.record`); tenant sharing simply stops: the engine keeps counting its own
usage, the other processes' usage it last observed decays away with the
half-life, and what this worker serves meanwhile is pushed (decayed) when the
store is back. The loss is counted once, in `StateStats.fallbacks`.

A backend keys a request as ``"<worker id>:<request id>"`` (its own
``worker``), so request ids of different processes never collide. Times are
the backend's own clock (Redis: the server's ``TIME``), never the callers', so
processes on different machines agree.

Backends: `semisched.state.local.LocalState` (in-process, the default's
equivalent; tests and one-process use) and
`semisched.state.redis.RedisState` (atomic Lua scripts on a real Redis).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

from semisched.core.errors import SemischedError

__all__ = [
    "USAGE_FLOOR",
    "Grant",
    "Scope",
    "StateBackend",
    "StateForgotten",
    "StateStats",
    "StateUnavailable",
    "check_usage",
]

#: A tenant whose decayed usage falls under this many work tokens is forgotten.
USAGE_FLOOR = 1e-6


class StateUnavailable(SemischedError):
    """The shared state cannot be reached (at start: the scheduler does not start)."""


class StateForgotten(StateUnavailable):
    """The shared state answered but no longer knew this worker (a restarted, empty
    store, or a registration that expired): what it holds is not the whole window."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Scope:
    """One budget several processes spend from.

    Attributes:
        key: Its name inside the namespace, e.g. ``"fleet"`` or ``"endpoint:east"``.
        rpm: Requests per window, or ``None`` (not limited).
        tpm: Tokens per window, or ``None``.
        max_concurrency: Leases (calls in flight) at once, or ``None``.
        window_s: Window length in wall seconds (60: "per minute"; shorter under a
            compressed clock).
    """

    key: str
    rpm: int | None = None
    tpm: int | None = None
    max_concurrency: int | None = None
    window_s: float = 60.0

    def __post_init__(self) -> None:
        if not isinstance(self.key, str) or not self.key:
            raise ValueError(f"key={self.key!r} must be a non-empty str")
        for name in ("rpm", "tpm", "max_concurrency"):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int)
                                      or value < 1):  # fmt: skip
                raise ValueError(f"{name}={value!r} must be None or an int >= 1")
        if not (math.isfinite(self.window_s) and self.window_s > 0):
            raise ValueError(f"window_s={self.window_s!r} must be a finite number > 0")

    @property
    def limited(self) -> bool:
        """Whether anything in it is limited."""
        return self.rpm is not None or self.tpm is not None or self.max_concurrency is not None


@dataclass(frozen=True, slots=True)
class Grant:
    """The answer to a reservation.

    Attributes:
        ok: Reserved in every scope (charged and leased).
        wait_s: When refused, wall seconds until it may fit (0 when ``ok``; for a
            full concurrency scope, a short retry hint of at most 50 ms: a release
            frees it; ``inf`` for ``never``).
        scope: When refused, the key of the scope that refused (the longest wait).
        reason: When refused, ``"rpm"``, ``"tpm"``, ``"concurrency"``, ``"paused"``
            or ``"never"`` (the tokens exceed the scope's whole ``tpm``).
        workers: Workers registered in the namespace at that instant (0: not reported).
        used: What each scope's window held after it (``(key, requests, tokens)``; empty:
            not reported). A fallback starts from the last report (`semisched.state.guard`).
    """

    ok: bool
    wait_s: float = 0.0
    scope: str = ""
    reason: str = ""
    workers: int = field(default=0, compare=False)
    used: tuple[tuple[str, int, float], ...] = field(default=(), compare=False)


@dataclass(frozen=True, slots=True, kw_only=True)
class StateStats:
    """A backend at one instant.

    Attributes:
        backend: ``"local"``, ``"redis"``, or ``"redis (fallback: local share)"``.
        namespace: The key namespace.
        workers: Processes registered in the namespace when last asked (1 for local).
        reservations: Reservations asked by this process.
        refusals: Of those, refused.
        round_trip_p50_ms: Median wall time of a reservation, this process.
        round_trip_p99_ms: Its 99th percentile.
        fallbacks: Times this process lost the shared state and fell back.
        usage_syncs: Tenant-usage round trips of this process
            (`StateBackend.add_usage`).
    """

    backend: str
    namespace: str
    workers: int
    reservations: int
    refusals: int
    round_trip_p50_ms: float
    round_trip_p99_ms: float
    fallbacks: int = 0
    usage_syncs: int = 0

    def __str__(self) -> str:
        """One readable line: ``redis 'app': 3 workers, 120 reservations (2 refused),
        round trip p50 0.21 ms / p99 0.80 ms``."""
        line = (
            f"{self.backend} {self.namespace!r}: {self.workers} "
            f"worker{'s' if self.workers != 1 else ''}, {self.reservations} reservations "
            f"({self.refusals} refused), round trip p50 {self.round_trip_p50_ms:.2f} ms / "
            f"p99 {self.round_trip_p99_ms:.2f} ms"
        )
        counts = ((self.fallbacks, "fallbacks"), (self.usage_syncs, "usage syncs"))
        extra = [f"{n} {name}" for n, name in counts if n]
        return line + (f"; {', '.join(extra)}" if extra else "")


@runtime_checkable
class StateBackend(Protocol):
    """What the runtime needs of a shared state (module docstring). Async; every
    method may raise `StateUnavailable` when the store cannot be reached."""

    namespace: str
    worker: str
    lease_ttl_s: float

    async def open(self) -> None:
        """Connect and register this worker; `StateUnavailable` if unreachable."""

    async def close(self) -> None:
        """Release this worker's leases and registration, and disconnect."""

    async def reserve(self, request_id: str, tokens: float, scopes: Sequence[Scope]) -> Grant:
        """Atomically check every scope and, when all can pay, charge one request and
        ``tokens`` and take one lease in each; else charge nothing."""

    async def settle(self, request_id: str, tokens: float, scopes: Sequence[Scope]) -> None:
        """Replace the request's token charge with ``tokens`` where it still counts."""

    async def release(self, request_id: str, scopes: Sequence[Scope]) -> None:
        """Return the request's leases (its charges stay until their window passes)."""

    async def heartbeat(self) -> None:
        """Renew this worker's registration and every lease it holds (``lease_ttl_s``);
        `StateForgotten` after registering a worker the store did not know."""

    async def record(self, scope: Scope, sends: Sequence[tuple[str, float, float]]) -> int:
        """Charge sends this worker made without the store (``(request id, age in seconds,
        tokens)``) in ``scope``'s window, each at its time, without a lease; a request
        already charged there is left as it is. Returns how many were charged."""

    async def pause(self, scope: Scope, seconds: float) -> None:
        """Refuse every reservation in ``scope`` for ``seconds`` (wall), for everyone."""

    async def workers(self) -> int:
        """How many workers are registered in the namespace (at least 1)."""

    async def add_usage(self, tokens: Mapping[str, float], half_life_s: float) -> dict[str, float]:
        """Add ``tokens`` (tenant -> work tokens this process served; may be empty: only
        read) to each tenant's sum, decaying every sum with ``half_life_s`` (wall
        seconds) on the backend's clock, atomically; return every tenant's fleet-wide
        decayed sum now (tenants decayed to almost nothing are forgotten)."""

    def statistics(self) -> StateStats:
        """This process's view of the backend."""


def check_usage(tokens: Mapping[str, float], half_life_s: float) -> None:
    """Validate `StateBackend.add_usage`'s arguments.

    Raises:
        ValueError: A tenant that is not a non-empty str, an amount that is not a
            finite number >= 0, or a half-life that is not a finite number > 0.
    """
    if (
        isinstance(half_life_s, bool)
        or not isinstance(half_life_s, int | float)
        or not (math.isfinite(half_life_s) and half_life_s > 0)
    ):
        raise ValueError(f"{half_life_s=} must be a finite number > 0")
    for tenant, amount in tokens.items():
        if not isinstance(tenant, str) or not tenant:
            raise ValueError(f"tenant={tenant!r} must be a non-empty str")
        if (
            isinstance(amount, bool)
            or not isinstance(amount, int | float)
            or not (math.isfinite(amount) and amount >= 0)
        ):
            raise ValueError(f"tokens[{tenant!r}]={amount!r} must be a finite number >= 0")
