"""A request's lifecycle as one table: ``(state, event) -> state``.

The engine's entries move only through `advance`; a move the table does
not hold raises `IllegalTransition`, which is a bug in the engine, never
the caller's misuse. The table is data, like h11's: a reader sees every legal
move here and nowhere else.

States (`EntryState`): ``QUEUED`` (a new entry
starts there, before it joins its class queue), ``DEFERRED``, ``INFLIGHT`` and
``DONE`` (final: no event leaves it).

Events (`Event`, int constants: the lookup is on the engine's hot path):

=========  ==========================  ==============================================
Event      From                        To
=========  ==========================  ==============================================
ENQUEUE    QUEUED (new)                QUEUED: admitted, joins its class queue
WAKE       DEFERRED                    QUEUED: back from a deferral or a retry's wait
DEFER      QUEUED (new), DEFERRED      DEFERRED: overload control defers it (again)
SEND       QUEUED                      INFLIGHT
RETRY      INFLIGHT                    DEFERRED: a failed attempt waits to go again
REFUSED    INFLIGHT                    QUEUED: a shared budget refused the send
COMPLETE   INFLIGHT                    DONE
FAIL       INFLIGHT                    DONE
EXPIRE     QUEUED, DEFERRED, INFLIGHT  DONE
REJECT     QUEUED, DEFERRED            DONE
CANCEL     QUEUED, DEFERRED, INFLIGHT  DONE
DECLINED   INFLIGHT                    DONE: a spend cap refused the send (rejected)
=========  ==========================  ==============================================

Pure: no clock, no I/O.
"""

from __future__ import annotations

from types import MappingProxyType
from typing import TYPE_CHECKING

from semisched.core.errors import SemischedError
from semisched.core.queue import EntryState

if TYPE_CHECKING:
    from semisched.core.queue import Entry

__all__ = [
    "EVENT_NAMES", "MOVES", "TRANSITIONS", "Event", "IllegalTransition", "advance", "illegal",
]  # fmt: skip


class Event:
    """The events that move an entry (int constants; see the module's table)."""

    ENQUEUE = 0
    WAKE = 1
    DEFER = 2
    SEND = 3
    RETRY = 4
    REFUSED = 5
    COMPLETE = 6
    FAIL = 7
    EXPIRE = 8
    REJECT = 9
    CANCEL = 10
    DECLINED = 11


#: Each event's name, by its number (messages and tests).
EVENT_NAMES: tuple[str, ...] = (
    "ENQUEUE", "WAKE", "DEFER", "SEND", "RETRY", "REFUSED", "COMPLETE", "FAIL", "EXPIRE",
    "REJECT", "CANCEL", "DECLINED",
)  # fmt: skip

_Q, _D, _I, _X = EntryState.QUEUED, EntryState.DEFERRED, EntryState.INFLIGHT, EntryState.DONE

_TABLE: dict[tuple[str, int], str] = {
    (_Q, Event.ENQUEUE): _Q,
    (_D, Event.WAKE): _Q,
    (_Q, Event.DEFER): _D,
    (_D, Event.DEFER): _D,
    (_Q, Event.SEND): _I,
    (_I, Event.RETRY): _D,
    (_I, Event.REFUSED): _Q,
    (_I, Event.COMPLETE): _X,
    (_I, Event.FAIL): _X,
    (_Q, Event.EXPIRE): _X,
    (_D, Event.EXPIRE): _X,
    (_I, Event.EXPIRE): _X,
    (_Q, Event.REJECT): _X,
    (_D, Event.REJECT): _X,
    (_Q, Event.CANCEL): _X,
    (_D, Event.CANCEL): _X,
    (_I, Event.CANCEL): _X,
    (_I, Event.DECLINED): _X,
}

#: The whole table, read-only: ``(state, event) -> state``.
TRANSITIONS = MappingProxyType(_TABLE)

#: The same table by event: ``MOVES[event][state] -> state`` (no key tuple per move; the
#: book's hot moves read it inline, `illegal` when it holds no move). Read-only.
MOVES: tuple[dict[str, str], ...] = tuple(
    {state: after for (state, on), after in _TABLE.items() if on == event}
    for event in range(len(EVENT_NAMES))
)


class IllegalTransition(SemischedError):
    """An entry was asked to make a move the table does not hold (a bug in the engine).

    Attributes:
        request_id: The entry's request.
        state: The state it was in.
        event: The event's number (`EVENT_NAMES` names it).
    """

    def __init__(self, request_id: str, state: str, event: int) -> None:
        name = EVENT_NAMES[event] if 0 <= event < len(EVENT_NAMES) else str(event)
        super().__init__(f"request {request_id!r}: no move from {state} on {name}")
        self.request_id = request_id
        self.state = state
        self.event = event


def advance(entry: Entry, event: int) -> None:
    """Move ``entry`` by ``event`` (the table).

    Raises:
        IllegalTransition: The table holds no such move.
    """
    try:
        entry.state = MOVES[event][entry.state]
    except (IndexError, KeyError):
        raise illegal(entry, event) from None


def illegal(entry: Entry, event: int) -> IllegalTransition:
    """The error of a move by ``event`` that the table does not hold from ``entry``'s state."""
    return IllegalTransition(entry.request.id, entry.state, event)
