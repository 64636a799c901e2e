"""The fleet's concurrency limits: each endpoint's policy fed, its cap kept, its changes told.

Each endpoint holds a [`ConcurrencyLimit`][semisched.core.fleet.limits.ConcurrencyLimit] (built
by `make_limit`: its explicit ``max_concurrency``
wins over ``RoutingConfig.concurrency``). `Limits` hears the fleet's events
(an answer, its first token's time kept on its entry; a 429; a failure), passes them
to the endpoint's policy,
and when the policy's cap moves, sets the endpoint's cap (its room follows) and keeps
the change as an explained decision ([`LimitChange`][semisched.core.fleet.limits.LimitChange]):
the last one and a count per rule on the endpoint (its statistics), and the recent
ones in `Limits.changes` (``statistics().limit_changes``). It also keeps the fleet's
*capacity*, the sum of its active endpoints' caps (``None`` while one has none).

A limit is fed only where it can move and bind: when no endpoint's limit learns
(`ConcurrencyLimit.learns`), or the scheduler's ceiling (``max_inflight``) is one
request, so that no endpoint ever holds more than a cap's least (one), every event is
skipped and each limit stays where it started.

Pure: the fleet passes ``now``.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable

from semisched.core.fleet.endpoint import EndpointState
from semisched.core.fleet.limits import Answered, LimitChange, LimitVerdict
from semisched.core.queue import Entry

__all__ = ["Limits"]

#: How many recent changes `Limits.changes` keeps.
KEPT_CHANGES = 256


class Limits:
    """Every endpoint's concurrency limit, fed and applied (module rules)."""

    __slots__ = ("_ceiling", "_set_cap", "changes", "learning")

    def __init__(
        self, set_cap: Callable[[EndpointState, int | None], None], ceiling: int | None = None
    ) -> None:
        self._set_cap = set_cap
        self._ceiling = ceiling
        #: The most recent changes, oldest first.
        self.changes: deque[LimitChange] = deque(maxlen=KEPT_CHANGES)
        #: Whether any endpoint's limit can move and bind (else every event is skipped).
        self.learning = False

    def added(self, endpoints: Iterable[EndpointState]) -> None:
        """The fleet's membership changed: whether any limit is fed (module rule)."""
        self.learning = self._ceiling != 1 and any(e.limiter.learns for e in endpoints)

    def sent(self, endpoint: EndpointState, entry: Entry) -> float | None:
        """``entry`` was sent to ``endpoint`` (counted in its ``sent`` and ``inflight``): what
        its first token will be read against. A streamed one at a learning endpoint is
        counted as awaiting its first token; returns when that token is late (the
        caller checks then: `overdue`), or ``None``."""
        entry.first_token_s = entry.left_during = None
        entry.left_by_s = 0.0
        entry.left_before = endpoint.sent - endpoint.inflight  # departures so far
        now = entry.sent_at
        if not (entry.request.stream and self.learning) or now is None:
            return None
        limiter = endpoint.limiter
        due = limiter.first_token_due(entry.request.input_tokens)
        if due is None:  # nothing read yet
            self._apply(endpoint, now, limiter.streamed(entry.held))
        alone = 0.0 if due is None else due[0]
        entry.awaiting_s = alone
        endpoint.awaiting += 1
        endpoint.awaiting_s += alone
        # The first tokens awaited before it may come first (their prefill): a wait for them
        # is no queue.
        return None if due is None else now + endpoint.awaiting_s + due[1]

    @staticmethod
    def arrived(endpoint: EndpointState, entry: Entry) -> None:
        """``entry``'s first token came, or it left ``endpoint``: it awaits nothing there."""
        entry.overdue_at = None
        alone = entry.awaiting_s
        if alone is not None:
            entry.awaiting_s = None
            endpoint.awaiting -= 1
            left = endpoint.awaiting_s - alone
            endpoint.awaiting_s = left if endpoint.awaiting and left > 0.0 else 0.0

    def overdue(self, entry: Entry, now: float) -> float | None:
        """``entry``'s first-token check is due at ``now`` (`sent`): when its first token is
        late after all, its endpoint's limit reads it; else returns the later time it
        is due by now (what it waits behind changed)."""
        endpoint: EndpointState = entry.endpoint
        alone = entry.awaiting_s
        if alone is None or entry.sent_at is None or not self.learning:
            return None
        due = endpoint.limiter.first_token_due(entry.request.input_tokens)
        if due is None:
            return None
        others = endpoint.awaiting_s - alone
        at = entry.sent_at + due[0] + due[1] + (others if others > 0.0 else 0.0)
        if now < at:
            return at
        verdict = endpoint.limiter.overdue(entry.sent_at, now, entry.held, endpoint.inflight,
                                           endpoint.awaiting)  # fmt: skip
        self._apply(endpoint, now, verdict)
        return None

    def answered(self, endpoint: EndpointState, entry: Entry, now: float, tokens: int) -> None:
        """An answer from ``endpoint`` (its fit already holds it)."""
        if not self.learning:
            return
        assert entry.sent_at is not None
        fit = endpoint.fit
        answer = Answered(entry.sent_at, now, tokens, entry.first_token_s, entry.held,
                          fit.slope_s, endpoint.completed, entry.request.input_tokens,
                          entry.left_during, entry.left_by_s)  # fmt: skip
        self._apply(endpoint, now, endpoint.limiter.answered(answer))

    def first_token(self, endpoint: EndpointState, entry: Entry, now: float) -> None:
        """The first token of ``entry``'s answer from ``endpoint`` (streamed)."""
        if self.learning and entry.sent_at is not None:
            self.arrived(endpoint, entry)
            left = entry.left_during = endpoint.sent - endpoint.inflight - entry.left_before
            by = entry.left_by_s = max(0.0, endpoint.left_at - entry.sent_at) if left else 0.0
            prompt = entry.request.input_tokens
            limiter = endpoint.limiter
            verdict = limiter.first_token(entry.sent_at, now, entry.held, prompt, left, by)
            self._apply(endpoint, now, verdict)
            endpoint.sure = limiter.sure  # what it proved may have grown

    def throttled(self, endpoint: EndpointState, entry: Entry, now: float) -> None:
        """A 429 from ``endpoint`` for ``entry``."""
        if self.learning and entry.sent_at is not None:
            self._apply(endpoint, now, endpoint.limiter.throttled(entry.sent_at, now))

    def failed(self, endpoint: EndpointState, entry: Entry, now: float) -> None:
        """A 5xx, a timeout or a lost connection from ``endpoint`` for ``entry``."""
        if self.learning and entry.sent_at is not None:
            self._apply(endpoint, now, endpoint.limiter.failed(entry.sent_at, now))

    def _apply(self, endpoint: EndpointState, now: float, verdict: LimitVerdict) -> None:
        if verdict is None:
            return
        old, new = endpoint.cap, endpoint.limiter.cap
        if new == old:  # a fraction grew or nothing moved: the room and capacity stand
            return
        rule, reason = verdict
        change = LimitChange(endpoint.name, now, old, new, rule, reason)
        self.changes.append(change)
        endpoint.last_limit_change = change
        endpoint.limit_changes[rule] = endpoint.limit_changes.get(rule, 0) + 1
        self._set_cap(endpoint, new)


def capacity(endpoints: Iterable[EndpointState]) -> int | None:
    """The sum of the active endpoints' caps; ``None`` when one has none, or one's limit is
    still in slow start (not yet a capacity), or none is active."""
    total = 0
    for e in endpoints:
        if e.out_reason:
            continue
        if e.cap is None or not e.limiter.settled:
            return None
        total += e.cap
    return total or None
