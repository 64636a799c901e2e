"""ClassQueue: cost bands, lazy O(1) removal, re-enqueue and the deadline heap."""

from __future__ import annotations

import pytest

from semisched.core import Prior, Request
from semisched.core.queue import ClassQueue, Entry


def entry(name: str, seq: int, cost: float = 100.0, deadline: float | None = None) -> Entry:
    request = Request(id=name, klass="batch", prior=Prior(p50=cost, p90=cost), deadline=deadline)
    return Entry(request=request, cost=cost, reserve=cost, seq=seq)


def ids(entries: object) -> list[str]:
    return [e.request.id for e in entries]  # type: ignore[attr-defined]


def test_removal_is_lazy_but_invisible() -> None:
    q = ClassQueue("batch", band_ratio=1.5)
    a, b, c = entry("a", 1), entry("b", 2, cost=120), entry("c", 3, cost=5000)
    for e in (a, b, c):
        q.add(e)
    assert (len(q), q.tokens) == (3, 5220)
    q.remove(a)
    assert not a.queued
    assert (len(q), q.tokens) == (2, 5120)
    assert q.oldest() is b
    assert "a" not in ids(q.heads())
    q.remove(b)
    assert q.oldest() is c
    q.remove(c)
    assert (len(q), q.tokens, bool(q)) == (0, 0.0, False)
    assert q.oldest() is None
    assert list(q.heads()) == []


def test_heads_are_the_longest_queued_entry_of_each_cost_band() -> None:
    q = ClassQueue("batch", band_ratio=2.0)
    small_old, big, small_new = entry("s1", 1, 10), entry("big", 2, 5000), entry("s2", 3, 11)
    for e in (small_old, big, small_new):
        q.add(e)
    assert sorted(ids(q.heads())) == ["big", "s1"]


def test_reenqueued_entry_is_counted_once() -> None:
    q = ClassQueue("batch", band_ratio=1.5)
    a, b = entry("a", 1, deadline=10.0), entry("b", 2, deadline=20.0)
    q.add(a)
    q.add(b)
    q.remove(a)
    a.seq = 3  # the engine renews seq on every enqueue
    q.add(a)
    assert len(q) == 2
    assert ids(q.heads()) == ["b"]  # same band: b is now the longest-queued
    assert q.oldest() is b
    assert ids(q.earliest_deadlines(5)) == ["a", "b"]
    q.remove(b)
    assert q.oldest() is a
    assert ids(q.heads()) == ["a"]
    assert ids(q.earliest_deadlines(5)) == ["a"]


def test_add_twice_or_remove_absent_is_misuse() -> None:
    q = ClassQueue("batch", band_ratio=1.5)
    a = entry("a", 1)
    with pytest.raises(ValueError, match="not queued"):
        q.remove(a)
    q.add(a)
    with pytest.raises(ValueError, match="already queued"):
        q.add(a)


@pytest.mark.parametrize(
    ("k", "expected"),
    [
        (0, []),
        (1, ["d1"]),
        (2, ["d1", "d2"]),
        (3, ["d1", "d2", "d3"]),
        (10, ["d1", "d2", "d3", "d5a", "d5b"]),
    ],
)
def test_earliest_deadlines_in_order_and_stable(k: int, expected: list[str]) -> None:
    q = ClassQueue("batch", band_ratio=1.5)
    deadlines = {"d5a": 5.0, "none": None, "d3": 3.0, "gone": 0.5, "d1": 1.0, "d5b": 5.0, "d2": 2}
    entries = {}
    for seq, (name, deadline) in enumerate(deadlines.items(), start=1):
        entries[name] = entry(name, seq, deadline=deadline)
        q.add(entries[name])
    q.remove(entries["gone"])
    assert ids(q.earliest_deadlines(k)) == expected
    # The call restores the heap: asking again (or for everything) sees the same entries.
    assert ids(q.earliest_deadlines(k)) == expected
    assert ids(q.earliest_deadlines(10)) == ["d1", "d2", "d3", "d5a", "d5b"]
    assert len(q) == 6
    q.remove(entries["d1"])
    assert ids(q.earliest_deadlines(2)) == ["d2", "d3"]
