"""The lifecycle table: every legal move, illegal moves raise, DONE is final."""

from __future__ import annotations

import pytest

from semisched.core.errors import SemischedError
from semisched.core.queue import Entry, EntryState
from semisched.core.request import Prior, Request
from semisched.core.states import EVENT_NAMES, TRANSITIONS, Event, IllegalTransition, advance

Q, D, F, X = EntryState.QUEUED, EntryState.DEFERRED, EntryState.INFLIGHT, EntryState.DONE
STATES = (Q, D, F, X)
EVENTS = tuple(range(len(EVENT_NAMES)))

LEGAL = {
    (Q, Event.ENQUEUE): Q,
    (D, Event.WAKE): Q,
    (Q, Event.DEFER): D,
    (D, Event.DEFER): D,
    (Q, Event.SEND): F,
    (F, Event.RETRY): D,
    (F, Event.REFUSED): Q,
    (F, Event.COMPLETE): X,
    (F, Event.FAIL): X,
    (Q, Event.EXPIRE): X,
    (D, Event.EXPIRE): X,
    (F, Event.EXPIRE): X,
    (Q, Event.REJECT): X,
    (D, Event.REJECT): X,
    (Q, Event.CANCEL): X,
    (D, Event.CANCEL): X,
    (F, Event.CANCEL): X,
    (F, Event.DECLINED): X,  # a spend cap refused the send: rejected from flight
}


def _entry(state: str) -> Entry:
    request = Request(id="r1", klass="interactive", prior=Prior(p50=10.0, p90=20.0))
    entry = Entry(request, 10.0, 20.0, 1)
    entry.state = state
    return entry


def test_table_is_exactly_the_legal_moves() -> None:
    assert dict(TRANSITIONS) == LEGAL


@pytest.mark.parametrize(("move", "target"), sorted(LEGAL.items()))
def test_every_legal_move(move: tuple[str, int], target: str) -> None:
    state, event = move
    entry = _entry(state)
    advance(entry, event)
    assert entry.state == target


ILLEGAL = [(s, e) for s in STATES for e in EVENTS if (s, e) not in LEGAL]


@pytest.mark.parametrize(("state", "event"), ILLEGAL)
def test_illegal_moves_raise_and_leave_the_state(state: str, event: int) -> None:
    entry = _entry(state)
    with pytest.raises(IllegalTransition) as caught:
        advance(entry, event)
    assert entry.state == state
    assert caught.value.request_id == "r1"
    assert EVENT_NAMES[event] in str(caught.value)


@pytest.mark.parametrize("event", EVENTS)
def test_done_is_final(event: int) -> None:
    entry = _entry(X)
    with pytest.raises(IllegalTransition):
        advance(entry, event)


def test_illegal_transition_is_a_semisched_error() -> None:
    assert issubclass(IllegalTransition, SemischedError)
    assert issubclass(SemischedError, Exception)
