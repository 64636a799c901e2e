"""How many requests one endpoint may hold at once: a fixed cap, or one learned online.

A concurrency-limit policy (`ConcurrencyLimit`) answers one question per
endpoint, `cap`, and hears what the client sees of it:
each answer (its latency, its output tokens, its first token's time when it was
streamed), each 429 and each failure. The fleet keeps the endpoint's room to its
cap; the scheduler's total in flight is the sum of its endpoints' caps (and
``SchedulerConfig.max_inflight``, when set, a ceiling over them). Pure: no clock
but the times it is given.

Two policies (``RoutingConfig.concurrency``; the table and the choice for each
endpoint are in `semisched.core.fleet.concurrency`); an endpoint with an
explicit ``max_concurrency`` always has a `FixedLimit` of that cap:

* ``fixed`` (`FixedLimit`, here): the cap is ``max_concurrency``; none without one.
* ``learned`` (`QueueDelayLimit`): the cap
  is learned from queueing delay.

This module is the interface: what a policy hears (`Answered`), what a
change of limit records (`LimitChange`), the base class.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import ClassVar, NamedTuple

__all__ = ["Answered", "ConcurrencyLimit", "FixedLimit", "LimitChange", "LimitVerdict"]


class Answered(NamedTuple):
    """One answer as a concurrency limit hears it (immutable; a named tuple, built
    once per answer on the hot path).

    Attributes:
        sent_at: When it was sent (engine seconds).
        now: When it was answered.
        tokens: Its output tokens.
        first_token_s: Seconds from its send to its first token, when it was streamed
            and the shell saw the token; ``None`` otherwise.
        held: Requests in flight at the endpoint when it was sent, itself included.
        step_s: The endpoint's fitted seconds per output token, this answer folded in.
        answers: The answers the endpoint's fit has seen.
        prompt_tokens: Its prompt's estimated tokens.
        left: Requests that left the endpoint between its send and its first token (a
            streamed answer); ``None`` otherwise.
        left_by_s: Seconds from its send to the last of those departures (0: none).
    """

    sent_at: float
    now: float
    tokens: int
    first_token_s: float | None
    held: int
    step_s: float
    answers: int = 0
    prompt_tokens: float = 0.0
    left: int | None = None
    left_by_s: float = 0.0


@dataclass(frozen=True, slots=True)
class LimitChange:
    """An explained change of one endpoint's concurrency limit.

    Attributes:
        endpoint: The endpoint's name.
        at: When (engine seconds).
        old: The cap before (``None``: none).
        new: The cap after.
        rule: Which rule fired: ``limit.start``, ``limit.probe``, ``limit.queued``,
            ``limit.overdue``, ``limit.throttled``
            or ``limit.failed`` (`semisched.core.fleet.limits`).
        reason: What the rule saw, in words (values only).
    """

    endpoint: str
    at: float
    old: int | None
    new: int | None
    rule: str
    reason: str


#: A rule that fired and what it saw, or ``None`` when none did.
LimitVerdict = tuple[str, str] | None


class ConcurrencyLimit(ABC):
    """How many requests one endpoint may hold (the policy interface)."""

    #: Its ``RoutingConfig.concurrency`` name.
    name: ClassVar[str]
    #: Whether its cap can move (else the fleet skips feeding it).
    learns: ClassVar[bool] = True

    @property
    @abstractmethod
    def cap(self) -> int | None:
        """The requests the endpoint may hold now, at least one (``None``: no limit)."""

    @property
    def sure(self) -> int | None:
        """The part of `cap` the endpoint has shown it serves at once (at most `cap`):
        the rest is a probe, which the fleet uses only when no other endpoint has room
        it has shown. Read whenever the cap moves or a first token comes."""
        return self.cap

    @property
    def settled(self) -> bool:
        """Whether `cap` is the endpoint's capacity as far as it knows (overload
        control reads in flight over it as load), rather than a probe still growing.
        Read when the cap or the fleet changes."""
        return True

    def answered(self, answer: Answered) -> LimitVerdict:
        """An answer arrived."""
        return None

    def first_token(
        self, sent_at: float, now: float, held: int, prompt_tokens: float, left: int,
        left_by_s: float,
    ) -> LimitVerdict:
        """A streamed answer's first token arrived (``held``: in flight at its send, itself
        included; ``prompt_tokens``: its prompt's estimate; ``left``: requests that left
        the endpoint between its send and now, the last ``left_by_s`` after its send)."""
        return None

    def streamed(self, held: int) -> LimitVerdict:
        """A streamed request is sent with ``held`` in flight, itself included, and
        `first_token_due` has no expectation yet (a limit may start lower where first
        tokens will tell it more; not below ``held``)."""
        return None

    def first_token_due(self, prompt_tokens: float) -> tuple[float, float] | None:
        """When a streamed answer's first token is late: the seconds it takes with nothing
        ahead of it (a prompt of ``prompt_tokens``) and the allowance beyond them, or
        ``None`` (no expectation: `overdue` is never asked)."""
        return None

    def overdue(
        self, sent_at: float, now: float, held: int, inflight: int, awaiting: int
    ) -> LimitVerdict:
        """A streamed request sent at ``sent_at`` with ``held`` in flight has no first
        token at ``now``, past its due time (`first_token_due`, plus what the other
        awaited first tokens take first). ``inflight``: in flight at the endpoint now;
        ``awaiting``: how many of them, itself included, await their first token."""
        return None

    def throttled(self, sent_at: float, now: float) -> LimitVerdict:
        """A 429 for a request sent at ``sent_at``."""
        return None

    def failed(self, sent_at: float, now: float) -> LimitVerdict:
        """A 5xx, a timeout or a lost connection for a request sent at ``sent_at``."""
        return None


class FixedLimit(ConcurrencyLimit):
    """A cap that never moves (``None``: no cap)."""

    name = "fixed"
    learns = False
    __slots__ = ("_cap",)

    def __init__(self, cap: int | None = None) -> None:
        self._cap = cap

    def __repr__(self) -> str:
        return f"<FixedLimit {self._cap}>"

    @property
    def cap(self) -> int | None:
        return self._cap
