"""The retry layer: a failed attempt counted, its retry decided, its endpoint kept off.

`Retrying` is what the engine asks when a sent request's attempt fails: it
counts the failure against the endpoint (its health, its concurrency limit, its
quota) and by kind, asks `decide_retry` under
``config.retry`` whether and when the request goes again (at once and elsewhere
when another endpoint can serve it: failover), and says whether the endpoint
is kept off (`Pause`: a 429's ``retry-after``, an
opened circuit). The engine then moves the request (its retry, expiry or
failure). Pure: no clock, no I/O.
"""

from __future__ import annotations

from semisched.core.actions import Pause
from semisched.core.config import SchedulerConfig
from semisched.core.fleet.endpoint import EndpointState
from semisched.core.fleet.fleet import Fleet
from semisched.core.lifecycle import FailureKind, JitterSource, RetryDecision, decide_retry
from semisched.core.queue import Entry
from semisched.core.stats import EngineTally, FailureCounts

__all__ = ["Retrying"]

_RATE_LIMITED = FailureKind.RATE_LIMITED


class Retrying:
    """Failed attempts: counted, their retries decided (module docstring)."""

    __slots__ = ("_counts", "_failover", "_fleet", "_jitter", "_policy", "_tally")

    def __init__(
        self, config: SchedulerConfig, fleet: Fleet, tally: EngineTally, jitter: JitterSource | None
    ) -> None:
        self._policy = config.retry
        self._failover = config.routing.failover
        self._fleet = fleet
        self._tally = tally
        self._jitter = jitter
        self._counts: dict[FailureKind, int] = {}

    def settle(
        self,
        entry: Entry,
        endpoint: EndpointState,
        now: float,
        kind: FailureKind,
        retry_after: float | None,
    ) -> tuple[RetryDecision, bool, Pause | None]:
        """``entry``'s attempt at ``endpoint`` failed by ``kind``: the retry decision,
        whether the retry goes elsewhere at once, and the pause of ``endpoint``."""
        fleet = self._fleet
        opened = fleet.health.failed(endpoint, entry, now, kind)
        self._counts[kind] = self._counts.get(kind, 0) + 1
        if kind is _RATE_LIMITED:
            self._tally.throttled += 1
        elsewhere = self._failover and fleet.alternative(entry, endpoint, now)
        decision = decide_retry(
            self._policy,
            kind,
            now=now,
            attempts=entry.attempts,
            deadline=entry.request.deadline,
            retry_after=retry_after,
            draw=self._jitter,
            elsewhere=elsewhere,
        )
        pause = None
        if kind is _RATE_LIMITED:  # its window is full: wait for the hint
            if retry_after is not None:
                until: float | None = now + retry_after
            else:  # no hint: the back-off's time, unless the retry goes elsewhere at once
                until = None if elsewhere else decision.retry_at
            until = fleet.health.throttle(endpoint, until, now)  # capped: then a probe
            if retry_after is not None and until is not None:
                pause = Pause(endpoint.name, until, "rate_limited")
        elif opened is not None:
            pause = Pause(endpoint.name, opened, "circuit_open")
        return decision, elsewhere, pause

    def counts(self) -> FailureCounts:
        """Failed attempts so far, by kind."""
        return FailureCounts(**{k.value: n for k, n in self._counts.items()})
