"""Shared state on a real Redis (6.2 or 7): atomic Lua scripts, leases with a TTL, a namespace.

`RedisState` is the [`StateBackend`][semisched.state.base.StateBackend] that
several processes, on one machine or many, share through one Redis server.
Every decision is taken inside the server by one Lua script, so it is atomic
across processes and timed by the server's clock. The Python side only builds
key lists, remembers the leases it holds (to renew and return them), keeps
statistics, and maps every redis-py exception to
[`StateUnavailable`][semisched.state.base.StateUnavailable] in one place (``_mapped``).

Key layout (``ns``: the namespace, ``K``: a `Scope.key`; a *member* is
``"<worker>:<request id>"``):

1. ``ns:scope:K:charges``: sorted set, member -> charge time (server µs).
2. ``ns:scope:K:tokens``: hash, member -> its token charge in integer
   milli-tokens, plus the field ``total`` (no ``:``, so never a member): their
   running sum. Integers keep the sum exact; it moves only together with a
   member, in the same script, so it never drifts.
3. ``ns:scope:K:leases``: sorted set, member -> lease expiry (server µs).
4. ``ns:scope:K:pause``: string, the pause's end (server µs); expires with it.
5. ``ns:workers``: sorted set, worker id -> registration expiry (server µs).
6. ``ns:tenants:usage``: hash, tenant -> its decayed work tokens (a float) at
   the time in ``ns:tenants:at`` (hash, tenant -> server µs of its last update).
7. Writes re-arm key TTLs (a scope's keys: window + lease TTL; leases and
   registrations: the lease TTL; the tenant hashes: `USAGE_TTL_HALF_LIVES`
   half-lives, after which any sum is negligible) and never shorten one, so an
   abandoned namespace deletes itself. ``charges`` and ``tokens`` always share
   one expiry time. A namespace or worker id may not contain ``:``: namespaces
   never share a key.

The scripts keep these rules:

1. The time is the server's ``TIME`` in µs, read once per script; never the
   caller's clock. Each script first calls ``redis.replicate_commands()``
   (effects replication, needed on 6.2 for a write after ``TIME``; a no-op on 7).
2. A script purges a scope before reading it: charges at or before
   ``now - window`` leave the set, the hash and ``total`` together; leases whose
   expiry passed leave. A pause ends by the key's own expiry.
3. ``RESERVE`` checks every scope (pause, ``tokens > tpm`` as "never", ``rpm``,
   ``tpm``, ``max_concurrency``) before writing anything. When all can pay it
   charges one request and the tokens and takes one lease in each; otherwise it
   writes nothing and answers the longest wait, its scope and its reason. Either
   way it reports the live registrations and what each scope's window holds
   (`used`). A worker that is not registered
   (a restarted server, a registration that expired) is refused without a
   charge and told so: `RedisState.reserve` raises
   `StateForgotten` until `heartbeat`
   registers it again (which raises it once too, having done so), so an empty
   store is never taken for an idle one. Waits
   are exact: ``rpm``, until enough of the oldest charges leave the window;
   ``tpm``, walking the charges in time order until enough tokens have left;
   concurrency, the earliest lease expiry capped at 50 ms (a release usually
   comes first); a pause, its end.
4. A request reserved again (a retry) keeps its earlier charge under a renamed
   member: every send is charged, and ``SETTLE`` reaches the latest.
5. ``SETTLE`` replaces a live charge's tokens and moves ``total`` by the difference.
6. ``HEARTBEAT`` registers the worker and renews (``ZADD XX``) only leases still
   live: an expired lease is never resurrected. ``PAUSE`` never shortens a pause.
7. ``USAGE`` decays each tenant it adds to from its last update to now
   (``x * 2**(-dt / half_life)``), adds, stamps now, and answers every
   tenant's sum decayed to now in the same round trip; tenants decayed below
   `USAGE_FLOOR` are deleted. Only the server's
   clock is read, so processes whose clocks disagree still agree on the sums.
8. ``RECORD`` charges sends made without the store at ``now - age`` (server
   clock), without a lease; a member already charged keeps its charge, and a
   send older than the window is not charged.

What this module is not: the fallback when Redis is lost (a wrapper's job), and
not for Redis Cluster (one script touches the keys of several scopes).
"""

from __future__ import annotations

import contextlib
import math
import secrets
import time
from collections.abc import Iterator, Mapping, Sequence
from typing import Any
from urllib.parse import SplitResult, parse_qsl, unquote, urlsplit

import redis.asyncio
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.commands.core import AsyncScript
from redis.exceptions import RedisError

from semisched.state.address import check_namespace, check_state_url, redact
from semisched.state.base import (
    USAGE_FLOOR,
    Grant,
    Scope,
    StateForgotten,
    StateStats,
    StateUnavailable,
    check_usage,
)
from semisched.state.lua import SOURCES
from semisched.state.timing import RoundTrips

__all__ = ["RedisState"]

#: Connect and command timeout of a client this module builds, seconds.
TIMEOUT_S = 2.0
#: The tenant-usage keys live this many half-lives past their last write (2**-32 of a sum is left).
USAGE_TTL_HALF_LIVES = 32


class RedisState:
    """A `StateBackend` on a real Redis server (module docstring).

    Args:
        url: ``redis://[[user]:password@]host:port/db``, ``rediss://...`` (TLS) or
            ``unix:///path.sock?db=0``. Its password never appears in a repr or error.
        namespace: Prefix of every key: one per fleet. No ``:``.
        worker: This process's id in the namespace (default: random hex). No ``:``.
        lease_ttl_s: A lease or registration expires this long after its last
            renewal; `heartbeat` well inside it.
        client: A ready client to use instead of one built from ``url`` (then it is
            the caller's to close; ``url`` still names the server in errors).
    """

    def __init__(
        self,
        url: str,
        *,
        namespace: str = "semisched",
        worker: str | None = None,
        lease_ttl_s: float = 10.0,
        client: redis.asyncio.Redis | None = None,
    ) -> None:
        if not isinstance(url, str):
            raise ValueError(f"url={url!r} must start with redis://, rediss:// or unix://")
        check_state_url(url, "url")
        parts = urlsplit(url)
        worker = secrets.token_hex(8) if worker is None else worker
        check_namespace(namespace)
        check_namespace(worker, "worker")
        if not (math.isfinite(lease_ttl_s) and lease_ttl_s >= 0.001):
            raise ValueError(f"{lease_ttl_s=} must be a finite number >= 0.001")
        self.namespace = namespace
        self.worker = worker
        self.lease_ttl_s = float(lease_ttl_s)
        self._url = url
        self._shown = redact(url)
        secret = parts.password or dict(parse_qsl(parts.query)).get("password") or ""
        self._secrets = {secret, unquote(secret)} - {""}  # redis-py unquotes it
        self._where = _where(parts)
        self._client = client
        self._owns_client = client is None
        self._scripts: dict[str, AsyncScript] = {}
        self._leases: dict[str, set[str]] = {}  # request id -> lease keys held
        self._reservations = 0
        self._refusals = 0
        self._workers = 1
        self._round_trips = RoundTrips(4096)
        self._lease_us = max(1, round(self.lease_ttl_s * 1e6))
        self._workers_key = f"{namespace}:workers"
        self._usage_keys = [f"{namespace}:tenants:usage", f"{namespace}:tenants:at"]
        self._usage_syncs = 0

    def __repr__(self) -> str:
        return (
            f"RedisState(url={self._shown!r}, namespace={self.namespace!r}, "
            f"worker={self.worker!r}, open={bool(self._scripts)}, leases={self.leases_held}, "
            f"reservations={self._reservations}, refusals={self._refusals})"
        )

    @property
    def leases_held(self) -> int:
        """Leases this process holds (taken, not yet released)."""
        return sum(len(keys) for keys in self._leases.values())

    async def open(self) -> None:
        """Connect, load the scripts and register this worker.

        Raises:
            StateUnavailable: The server cannot be reached (within `TIMEOUT_S`).
        """
        if self._client is None:
            self._client = redis.asyncio.Redis.from_url(
                self._url,
                socket_connect_timeout=TIMEOUT_S,
                socket_timeout=TIMEOUT_S,
                retry=Retry(NoBackoff(), 1),  # one at once: a pooled connection the server dropped
            )
        client = self._client
        scripts = {name: client.register_script(source) for name, source in SOURCES.items()}
        try:
            with self._mapped("open"):
                await client.ping()
                async with client.pipeline(transaction=False) as pipe:
                    for script in scripts.values():
                        pipe.script_load(script.script)
                    await pipe.execute()
                self._scripts = scripts
                await self._renew()
        except StateUnavailable:
            self._scripts = {}
            if self._owns_client:
                self._client = None
                await client.aclose()
            raise

    async def close(self) -> None:
        """Return this worker's leases and registration, and disconnect (when ``url`` built it)."""
        client = self._client
        if client is None or not self._scripts:
            return
        held, self._leases, self._scripts = self._leases, {}, {}
        if self._owns_client:
            self._client = None
        try:
            with self._mapped("close"):
                async with client.pipeline(transaction=False) as pipe:
                    for request_id, keys in held.items():
                        for key in keys:
                            pipe.zrem(key, self._member(request_id))
                    pipe.zrem(self._workers_key, self.worker)
                    await pipe.execute()
        finally:
            if self._owns_client:
                with self._mapped("close"):
                    await client.aclose()

    async def reserve(self, request_id: str, tokens: float, scopes: Sequence[Scope]) -> Grant:
        """Check every scope and, when all can pay, charge and lease in each; atomically.

        Returns:
            ``Grant(ok=True)``, or a refusal naming the scope with the longest wait, the
            wait (``inf`` for ``"never"``) and the reason.
        """
        units = _milli(tokens)
        if not scopes:
            return Grant(ok=True)
        keys: list[str] = []
        args: list[str | int] = [self._member(request_id), units, self._lease_us, self.worker]
        for scope in _distinct(scopes):
            prefix = self._prefix(scope)
            keys += [f"{prefix}:charges", f"{prefix}:tokens", f"{prefix}:leases", f"{prefix}:pause"]
            args += [scope.rpm or 0, (scope.tpm or 0) * 1000, scope.max_concurrency or 0,
                     _window_us(scope)]  # fmt: skip
        script = self._script("reserve")
        started = time.perf_counter()
        with self._mapped("reserve"):
            reply = await script(keys=[*keys, self._workers_key], args=args)
        self._round_trips.add(time.perf_counter() - started)
        if int(reply[0]) == -1:
            raise StateForgotten(self._forgotten("reserve"))
        self._reservations += 1
        ok = int(reply[0]) == 1
        report = reply[1:] if ok else reply[4:]
        self._workers = max(1, int(report[0]))
        used = tuple((s.key, int(report[2 * i + 1]), int(report[2 * i + 2]) / 1000)
                     for i, s in enumerate(scopes))  # fmt: skip
        if ok:
            self._leases.setdefault(request_id, set()).update(keys[2::4])
            return Grant(ok=True, workers=self._workers, used=used)
        self._refusals += 1
        reason = _text(reply[3])
        wait_s = math.inf if reason == "never" else int(reply[1]) / 1e6
        return Grant(ok=False, wait_s=wait_s, scope=scopes[int(reply[2]) - 1].key, reason=reason,
                     workers=self._workers, used=used)  # fmt: skip

    async def record(self, scope: Scope, sends: Sequence[tuple[str, float, float]]) -> int:
        """Charge sends made without the store, each ``age`` seconds ago (rule 8)."""
        prefix = self._prefix(scope)
        args: list[str | int] = [_window_us(scope), self._lease_us]
        for request_id, age, tokens in sends:
            args += [self._member(request_id), max(0, round(age * 1e6)), _milli(tokens)]
        if not sends:
            return 0
        script = self._script("record")
        keys = [f"{prefix}:charges", f"{prefix}:tokens", f"{prefix}:leases"]
        with self._mapped("record"):
            return int(await script(keys=keys, args=args))

    async def settle(self, request_id: str, tokens: float, scopes: Sequence[Scope]) -> None:
        """Replace the request's token charge with ``tokens`` in each scope where it counts."""
        units = _milli(tokens)
        keys: list[str] = []
        args: list[str | int] = [self._member(request_id), units]
        for scope in _distinct(scopes):
            prefix = self._prefix(scope)
            keys += [f"{prefix}:charges", f"{prefix}:tokens", f"{prefix}:leases"]
            args.append(_window_us(scope))
        if keys:
            script = self._script("settle")
            with self._mapped("settle"):
                await script(keys=keys, args=args)

    async def release(self, request_id: str, scopes: Sequence[Scope]) -> None:
        """Return the request's leases in ``scopes`` (its charges stay for their window)."""
        client = self._connected()
        keys = {f"{self._prefix(scope)}:leases" for scope in scopes}
        held = self._leases.get(request_id)
        if held is not None:
            held -= keys
            if not held:
                del self._leases[request_id]
        if keys:
            with self._mapped("release"):
                async with client.pipeline(transaction=False) as pipe:
                    for key in sorted(keys):
                        pipe.zrem(key, self._member(request_id))
                    await pipe.execute()

    async def heartbeat(self) -> None:
        """Renew this worker's registration and every live lease it holds, in one round trip.

        Raises:
            StateForgotten: The server no longer knew this worker (restarted, or the
                registration expired); it does now.
        """
        self._connected()
        with self._mapped("heartbeat"):
            known = await self._renew()
        if not known:
            raise StateForgotten(self._forgotten("heartbeat"))

    async def pause(self, scope: Scope, seconds: float) -> None:
        """Refuse every reservation in ``scope`` for ``seconds`` (wall), for every worker."""
        if not (math.isfinite(seconds) and seconds >= 0):
            raise ValueError(f"{seconds=} must be a finite number >= 0")
        if seconds > 0:
            script = self._script("pause")
            with self._mapped("pause"):
                await script(keys=[f"{self._prefix(scope)}:pause"], args=[round(seconds * 1e6)])

    async def workers(self) -> int:
        """How many workers are registered in the namespace now (at least 1)."""
        script = self._script("workers")
        with self._mapped("workers"):
            self._workers = max(1, int(await script(keys=[self._workers_key])))
        return self._workers

    async def add_usage(self, tokens: Mapping[str, float], half_life_s: float) -> dict[str, float]:
        """Add each tenant's work tokens and read every tenant's decayed sum, in one round trip
        (rule 7; an empty ``tokens`` only reads)."""
        check_usage(tokens, half_life_s)
        half_us = max(1, round(half_life_s * 1e6))
        args: list[str | int | float] = [
            half_us, max(1, math.ceil(half_us * USAGE_TTL_HALF_LIVES / 1000)), repr(USAGE_FLOOR)
        ]  # fmt: skip
        for tenant, amount in tokens.items():
            args += [tenant, repr(float(amount))]
        script = self._script("usage")
        with self._mapped("usage"):
            reply = await script(keys=self._usage_keys, args=args)
        self._usage_syncs += 1
        return {_text(reply[i]): float(reply[i + 1]) for i in range(0, len(reply), 2)}

    def statistics(self) -> StateStats:
        """This process's view: counts, round-trip percentiles, workers at the last count."""
        p50, p99 = self._round_trips.percentiles()
        return StateStats(
            backend="redis",
            namespace=self.namespace,
            workers=self._workers,
            reservations=self._reservations,
            refusals=self._refusals,
            round_trip_p50_ms=p50,
            round_trip_p99_ms=p99,
            usage_syncs=self._usage_syncs,
        )

    async def _renew(self) -> bool:
        """Register and renew; whether the worker was registered already."""
        keys, args = [self._workers_key], [self.worker, str(self._lease_us)]
        for request_id, lease_keys in self._leases.items():
            for key in sorted(lease_keys):
                keys.append(key)
                args.append(self._member(request_id))
        return int(await self._scripts["heartbeat"](keys=keys, args=args)) == 1

    def _forgotten(self, action: str) -> str:
        return (f"Redis state at {self._where} forgot this worker ({action}): the server "
                "restarted, or its registration expired")  # fmt: skip

    def _member(self, request_id: str) -> str:
        if not isinstance(request_id, str) or not request_id:
            raise ValueError(f"{request_id=} must be a non-empty str")
        return f"{self.worker}:{request_id}"

    def _prefix(self, scope: Scope) -> str:
        return f"{self.namespace}:scope:{scope.key}"

    def connection(self) -> redis.asyncio.Redis:
        """The open client (for books kept beside the budgets, such as spend caps')."""
        return self._connected()

    def mapped(self, action: str) -> contextlib.AbstractContextManager[None]:
        """A context in which a Redis error becomes `StateUnavailable`, credentials cut."""
        return self._mapped(action)

    def _connected(self) -> redis.asyncio.Redis:
        if self._client is None or not self._scripts:
            raise RuntimeError(f"{self!r} is not open: await open() first")
        return self._client

    def _script(self, name: str) -> AsyncScript:
        self._connected()
        return self._scripts[name]

    @contextlib.contextmanager
    def _mapped(self, action: str) -> Iterator[None]:
        """The one place a redis-py (or socket) exception becomes `StateUnavailable`."""
        try:
            yield
        except (RedisError, OSError) as exc:
            detail = f"{type(exc).__name__}: {exc}"
            for secret in self._secrets:
                detail = detail.replace(secret, "***")
            message = f"Redis state at {self._where} unavailable ({action}): {detail}"
            raise StateUnavailable(message) from exc


def _milli(tokens: float) -> int:
    if (
        isinstance(tokens, bool)
        or not isinstance(tokens, int | float)
        or not (math.isfinite(tokens) and tokens >= 0)
    ):
        raise ValueError(f"{tokens=} must be a finite number >= 0")
    return round(tokens * 1000)


def _window_us(scope: Scope) -> int:
    return max(1, round(scope.window_s * 1e6))


def _distinct(scopes: Sequence[Scope]) -> Sequence[Scope]:
    if len({scope.key for scope in scopes}) != len(scopes):
        raise ValueError(f"scopes={[s.key for s in scopes]!r} must have distinct keys")
    return scopes


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _where(parts: SplitResult) -> str:
    """``host:port``, or a socket's path: where the server is, without credentials."""
    if parts.scheme == "unix":
        return str(parts.path)
    try:
        port = parts.port or 6379
    except ValueError:
        port = 6379
    return f"{parts.hostname or 'localhost'}:{port}"
