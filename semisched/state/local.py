"""The in-process shared state: the same rules as Redis's, for schedulers in one process.

`LocalState` implements [`StateBackend`][semisched.state.base.StateBackend] with
plain Python structures and a clock the caller may replace. Several
[`Scheduler`][semisched.Scheduler] objects in one process can share one instance;
the runtime also falls back to one (with a conservative share of each limit)
when the Redis state is lost mid-run.

Rules (the same as `semisched.state.redis`):

1. A reservation is all or nothing across its scopes: every scope can pay (its
   requests and tokens in the window, its live leases, no pause) or nothing is
   charged, and the refusal names the scope with the longest wait.
2. Charges leave the window ``window_s`` after they were made; a settled charge
   keeps its time and takes the provider's token count.
3. A lease lives ``lease_ttl_s`` past its last renewal (`heartbeat`) or
   until it is released; a request reserved again (a retry) keeps its one lease
   and does not count it against the cap.
4. Every reservation is its own charge: a retry's earlier charge keeps
   counting until its window passes, and `settle` reaches the latest.
5. Tenant usage (`add_usage`) is one decaying sum per tenant, on the
   same clock: every caller's work tokens add up, and all of it halves every
   ``half_life_s``.
6. ``weight`` (a fallback's rule, `semisched.state.guard`): every
   reservation counts as ``weight`` requests of ``weight`` times its tokens;
   charges counted with `seed` or `record` count as given.

Not thread-safe: one event loop.
"""

from __future__ import annotations

import time
import uuid
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from semisched.state.base import USAGE_FLOOR, Grant, Scope, StateStats, check_usage
from semisched.state.timing import Decaying, RoundTrips

if TYPE_CHECKING:
    from semisched.state.spend import LocalSpend

__all__ = ["LocalState"]

#: The refusal hint for a full concurrency scope: a release usually comes first.
CONCURRENCY_HINT_S = 0.05


@dataclass
class _Scope:
    charges: deque[tuple[float, str, int]] = field(default_factory=deque)  # (time, id, weight)
    tokens: dict[str, float] = field(default_factory=dict)  # charge id -> tokens
    scale: dict[str, int] = field(default_factory=dict)  # charge id -> weight, when not 1
    latest: dict[str, str] = field(default_factory=dict)  # member -> its latest charge id
    count: int = 0  # requests charged (the weights' sum)
    total: float = 0.0
    leases: dict[str, float] = field(default_factory=dict)
    paused_until: float = float("-inf")

    def expire(self, now: float, window_s: float) -> None:
        charges = self.charges
        # ``at + window_s <= now``: the very expression wait() subtracts from, so a charge
        # still counted always has a positive wait (``at <= now - window_s`` rounds
        # differently, and a refusal with no wait was retried at once, forever).
        while charges and charges[0][0] + window_s <= now:
            _, charge, weight = charges.popleft()
            self._forget(charge, weight)
        if not charges:
            self.total = 0.0  # clamp float drift
        self.leases = {m: t for m, t in self.leases.items() if t > now}

    def _forget(self, charge: str, weight: int) -> None:
        self.count -= weight
        self.total -= self.tokens.pop(charge, 0.0)
        self.scale.pop(charge, None)
        member = charge.rpartition("#")[0]
        if self.latest.get(member) == charge:
            del self.latest[member]

    def cancel(self, member: str) -> None:
        """Take back ``member``'s latest charge."""
        charge = self.latest.get(member)
        for i, (_, found, weight) in enumerate(self.charges):
            if found == charge:
                del self.charges[i]
                self._forget(found, weight)
                return

    def wait(
        self, now: float, scope: Scope, tokens: float, member: str, weight: int = 1
    ) -> tuple[float, str]:
        """Seconds until one request of ``tokens`` fits, counted ``weight`` times, and why
        (``0``: now)."""
        if self.paused_until > now:
            return self.paused_until - now, "paused"
        tokens *= weight
        if scope.tpm is not None and tokens > scope.tpm:
            return float("inf"), "never"
        wait, reason = 0.0, ""
        if scope.rpm is not None and weight > scope.rpm:
            return scope.window_s, "rpm"  # never at this weight: try again in a window
        if scope.rpm is not None and self.count + weight > scope.rpm:
            held = self.count
            for at, _, w in self.charges:
                held -= w
                if held + weight <= scope.rpm:
                    wait, reason = at + scope.window_s - now, "rpm"
                    break
        if scope.tpm is not None and self.total + tokens > scope.tpm:
            left = self.total
            for at, charge, _ in self.charges:
                left -= self.tokens.get(charge, 0.0)
                if left + tokens <= scope.tpm:
                    if at + scope.window_s - now > wait:
                        wait, reason = at + scope.window_s - now, "tpm"
                    break
        held = len(self.leases) - (member in self.leases)  # its own lease does not count
        if scope.max_concurrency is not None and held >= scope.max_concurrency:
            hint = min(CONCURRENCY_HINT_S, min(self.leases.values()) - now)
            if hint > wait or not reason:
                wait, reason = max(wait, hint), "concurrency"
        return wait, reason


class LocalState:
    """An in-process [`StateBackend`][semisched.state.base.StateBackend] (module rules).

    Args:
        namespace: Reported in statistics (one process: nothing to separate).
        lease_ttl_s: How long a lease lives past its last renewal.
        clock: Seconds, monotonic (default `time.monotonic`).
        weight: Rule 6: what one reservation counts (1: itself).
    """

    def __init__(
        self,
        *,
        namespace: str = "local",
        lease_ttl_s: float = 10.0,
        clock: Callable[[], float] = time.monotonic,
        weight: int = 1,
    ) -> None:
        if isinstance(weight, bool) or not isinstance(weight, int) or weight < 1:
            raise ValueError(f"{weight=} must be an int >= 1")
        self.weight = weight
        self.namespace = namespace
        self.worker = uuid.uuid4().hex[:12]
        self.lease_ttl_s = lease_ttl_s
        self._clock = clock
        self._scopes: dict[str, _Scope] = {}
        self._mine: dict[str, tuple[str, ...]] = {}  # member -> scope keys it leases in
        self._reservations = 0
        self._refusals = 0
        self._charges = 0  # charge ids
        self._trips = RoundTrips()
        self._usage: Decaying | None = None  # tenant -> work tokens (rule 5)
        self._usage_syncs = 0

    @property
    def spend_books(self) -> LocalSpend:
        """Spend caps' books of the schedulers sharing this state (`semisched.state.spend`)."""
        books = self.__dict__.get("_spend_books")
        if books is None:
            from semisched.state.spend import LocalSpend

            books = self.__dict__["_spend_books"] = LocalSpend()
        return books

    def __repr__(self) -> str:
        return f"<LocalState {self.namespace!r} scopes={sorted(self._scopes)}>"

    def _scope(self, key: str) -> _Scope:
        found = self._scopes.get(key)
        if found is None:
            found = self._scopes[key] = _Scope()
        return found

    def _member(self, request_id: str) -> str:
        return f"{self.worker}:{request_id}"

    async def open(self) -> None:
        """Nothing to connect to."""

    async def close(self) -> None:
        """Release this worker's leases."""
        for member, keys in list(self._mine.items()):
            for key in keys:
                self._scope(key).leases.pop(member, None)
        self._mine.clear()

    async def reserve(self, request_id: str, tokens: float, scopes: Sequence[Scope]) -> Grant:
        """Rule 1."""
        start = time.perf_counter()
        now = self._clock()
        member = self._member(request_id)
        worst = Grant(ok=True)
        for scope in scopes:
            state = self._scope(scope.key)
            state.expire(now, scope.window_s)
            wait, reason = state.wait(now, scope, tokens, member, self.weight)
            if reason and (worst.ok or wait > worst.wait_s):
                worst = Grant(ok=False, wait_s=wait, scope=scope.key, reason=reason)
        self._reservations += 1
        if worst.ok:
            self._charge(member, tokens, scopes, now, self.weight, self.weight)
            for scope in scopes:
                self._scope(scope.key).leases[member] = now + self.lease_ttl_s
            self._mine[member] = tuple(s.key for s in scopes)
        else:
            self._refusals += 1
        self._trips.add(time.perf_counter() - start)
        used = tuple((s.key, self._scope(s.key).count, self._scope(s.key).total) for s in scopes)
        return replace(worst, used=used)

    def seed(
        self, request_id: str, tokens: float, scopes: Sequence[Scope], at: float, count: int = 1
    ) -> None:
        """Count ``count`` requests of ``tokens`` in all, made at ``at`` (this clock)
        elsewhere, without a lease: a worker that lost its shared state starts its local
        window with what it knew of the shared one. Seeds come in time order, before any
        reservation."""
        self._charge(self._member(request_id), tokens, scopes, at, count, 1)

    def cancel(self, request_id: str, scopes: Sequence[Scope]) -> None:
        """Take back the request's latest charge and its lease (it was never sent)."""
        member = self._member(request_id)
        for scope in scopes:
            state = self._scope(scope.key)
            state.cancel(member)
            state.leases.pop(member, None)
        self._mine.pop(member, None)

    async def record(self, scope: Scope, sends: Sequence[tuple[str, float, float]]) -> int:
        """`StateBackend.record`: charges made elsewhere, ``age`` seconds ago."""
        now, state, recorded = self._clock(), self._scope(scope.key), 0
        state.expire(now, scope.window_s)
        for request_id, age, tokens in sends:
            member = self._member(request_id)
            if age < scope.window_s and member not in state.latest:
                self._charge(member, tokens, [scope], now - age, 1, 1)
                recorded += 1
        state.charges = deque(sorted(state.charges))  # in time order again
        return recorded

    def _charge(
        self,
        member: str,
        tokens: float,
        scopes: Sequence[Scope],
        at: float,
        count: int,
        scale: int,
    ) -> None:
        """Count ``count`` requests and ``scale`` times ``tokens`` made at ``at`` by
        ``member`` in every scope (a settlement is scaled alike)."""
        self._charges += 1
        charge = f"{member}#{self._charges}"
        for scope in scopes:
            state = self._scope(scope.key)
            state.charges.append((at, charge, count))
            state.tokens[charge] = tokens * scale
            if scale != 1:
                state.scale[charge] = scale
            state.latest[member] = charge
            state.count += count
            state.total += tokens * scale

    async def settle(self, request_id: str, tokens: float, scopes: Sequence[Scope]) -> None:
        """Rules 2 and 4."""
        member = self._member(request_id)
        for scope in scopes:
            state = self._scope(scope.key)
            charge = state.latest.get(member, "")
            old = state.tokens.get(charge)
            if old is not None:
                new = tokens * state.scale.get(charge, 1)
                state.tokens[charge] = new
                state.total += new - old

    async def release(self, request_id: str, scopes: Sequence[Scope]) -> None:
        """Rule 3: the lease goes; the charges stay."""
        member = self._member(request_id)
        for scope in scopes:
            self._scope(scope.key).leases.pop(member, None)
        self._mine.pop(member, None)

    async def heartbeat(self) -> None:
        """Rule 3: this worker's leases live another ``lease_ttl_s``."""
        until = self._clock() + self.lease_ttl_s
        for member, keys in self._mine.items():
            for key in keys:
                leases = self._scope(key).leases
                if member in leases:
                    leases[member] = until

    async def pause(self, scope: Scope, seconds: float) -> None:
        """Refuse every reservation in ``scope`` for ``seconds``."""
        state = self._scope(scope.key)
        state.paused_until = max(state.paused_until, self._clock() + seconds)

    async def workers(self) -> int:
        """One process."""
        return 1

    async def add_usage(self, tokens: Mapping[str, float], half_life_s: float) -> dict[str, float]:
        """Rule 5: add each tenant's work tokens now; every tenant's decayed sum now."""
        check_usage(tokens, half_life_s)
        now = self._clock()
        usage = self._usage
        if usage is None or usage.half_life_s != half_life_s:
            # A new half-life (one per namespace in practice) carries the sums over.
            carried = {} if usage is None else usage.values(now)
            usage = self._usage = Decaying(half_life_s)
            for tenant, value in carried.items():
                usage.add(tenant, value, now)
        for tenant, amount in tokens.items():
            usage.add(tenant, amount, now)
        usage.prune(now, USAGE_FLOOR)
        self._usage_syncs += 1
        return usage.values(now)

    def statistics(self) -> StateStats:
        """Counts and round trips of this process."""
        p50, p99 = self._trips.percentiles()
        return StateStats(
            backend="local",
            namespace=self.namespace,
            workers=1,
            reservations=self._reservations,
            refusals=self._refusals,
            round_trip_p50_ms=p50,
            round_trip_p99_ms=p99,
            usage_syncs=self._usage_syncs,
        )
