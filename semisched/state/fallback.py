"""What one worker knows of the shared window, and the rules it keeps while the store is lost.

`Memory` is the `SharedBudget`'s record, on
the wall clock (``time.monotonic`` by default): this worker's own sends of the
last window (with the scopes they were charged in), the workers it saw in the
namespace, and each scope's window as the last reservation reported it
(`used`). From it come the two things the
guard's rules 3 and 4 need:

- `Memory.fallback`: a `LocalState` in which
  every fallback send counts ``N`` times (``weight``) and each limited scope
  ``K`` appears twice. ``K`` holds the fleet's window as last reported: the
  others' charges (reported minus this worker's own up to the report), held a
  whole window from the loss (a report may be a refusal's wait old, and the
  others' charges it counted may since have been replaced by later ones), and
  this worker's own sends at their times, against the whole limit. ``K/share``
  holds this worker's own sends ``N`` times each against ``N`` times its share
  (``limit // N``, at least 1) and the concurrency share. Each worker's fallback
  sends in a window then stay within ``(limit - what the window held) / N`` and
  within its share, whatever the others sent before.
- `Memory.unrecorded`: the sends to charge in the shared window on
  rejoining, per scope, each with its age. A send admitted by the store goes
  under its request id (the store keeps an existing charge as it is: after a
  pause nothing changes, after a restart it comes back); a fallback send under
  an id of its own, so it is charged once however often it is recorded.

What this module is not: the guard (it talks to no backend and reads no loop clock).
"""

from __future__ import annotations

import itertools
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from semisched.state.base import Grant, Scope
from semisched.state.local import LocalState

__all__ = ["SHARE", "Memory", "share"]

#: The suffix of the fallback's share scope (``K/share``, module docstring).
SHARE = "/share"


def share(limit: int | None, workers: int) -> int | None:
    """A worker's share of ``limit`` (at least 1), ``None`` when unlimited."""
    return None if limit is None else max(1, limit // workers)


@dataclass(frozen=True, slots=True)
class _Sent:
    at: float
    request_id: str
    tokens: float
    scopes: tuple[Scope, ...]
    record_id: str  # the member it is recorded under on rejoining


@dataclass(frozen=True, slots=True)
class _Report:
    at: float
    scope: Scope
    requests: int
    tokens: float


class Memory:
    """This worker's sends, the workers it saw, and the last report of each window.

    Args:
        wall: Seconds, monotonic (the fallback's clock too).
    """

    def __init__(self, wall: Callable[[], float] = time.monotonic) -> None:
        self.wall = wall
        self.window_s = 0.0  # the longest window seen
        self.fallback_sends = 0
        self._sent: deque[_Sent] = deque()
        self._seen: deque[tuple[float, int]] = deque()
        self._reports: dict[str, _Report] = {}
        self._ids = itertools.count(1)

    def __repr__(self) -> str:
        return f"<Memory sends={len(self._sent)} workers={self.workers} window_s={self.window_s}>"

    @property
    def workers(self) -> int:
        """The most workers seen in the namespace within the last window (at least 1)."""
        self._forget(self.wall())
        return max((n for _, n in self._seen), default=1)

    def count(self, workers: int) -> None:
        """The namespace has ``workers`` registered now (0: not known)."""
        if workers > 0:
            self._seen.append((self.wall(), workers))

    def observe(self, grant: Grant, scopes: Sequence[Scope]) -> None:
        """A reservation's answer: the workers and each scope's window it reports."""
        now = self.wall()
        self.count(grant.workers)
        by_key = {s.key: s for s in scopes}
        for key, requests, tokens in grant.used:
            if key in by_key:
                self._reports[key] = _Report(now, by_key[key], requests, tokens)

    def sent(self, request_id: str, tokens: float, scopes: Sequence[Scope], fallback: bool) -> None:
        """This worker sent ``request_id`` charged in ``scopes`` (by the fallback or not)."""
        now = self.wall()
        record_id = request_id
        if fallback:
            self.fallback_sends += 1
            record_id = f"{request_id}#fallback{next(self._ids)}"
        self.window_s = max(self.window_s, *(s.window_s for s in scopes))
        self._sent.append(_Sent(now, request_id, tokens, tuple(scopes), record_id))
        self._forget(now)

    def _forget(self, now: float) -> None:
        edge = now - self.window_s
        while self._sent and self._sent[0].at <= edge:
            self._sent.popleft()
        while len(self._seen) > 1 and self._seen[0][0] <= edge:
            self._seen.popleft()

    def scopes(self, scopes: Sequence[Scope], workers: int) -> tuple[Scope, ...]:
        """The fallback's scopes for a call spending from ``scopes`` (module docstring)."""
        found: list[Scope] = []
        for s in scopes:
            found.append(Scope(key=s.key, rpm=s.rpm, tpm=s.tpm, window_s=s.window_s))
            rpm, tpm = share(s.rpm, workers), share(s.tpm, workers)
            found.append(Scope(key=s.key + SHARE, window_s=s.window_s,
                               rpm=None if rpm is None else rpm * workers,
                               tpm=None if tpm is None else tpm * workers,
                               max_concurrency=share(s.max_concurrency, workers)))  # fmt: skip
        return tuple(found)

    def fallback(self, namespace: str) -> LocalState:
        """A fallback state starting from what this worker knows (module docstring)."""
        now, n = self.wall(), self.workers
        self._forget(now)
        local = LocalState(namespace=namespace, clock=self.wall, weight=n)
        seeds = [seed for sent in self._sent for seed in _own(sent, n)]
        for key, report in self._reports.items():
            if report.at + report.scope.window_s <= now:
                continue
            own = [x for x in self._sent if x.at <= report.at and key in _keys(x.scopes)]
            requests = report.requests - len(own)
            tokens = max(0.0, report.tokens - sum(x.tokens for x in own))
            if requests > 0:  # held a whole window from now (module docstring)
                seeds.append((now, "others", tokens, _plain(report.scope), requests))
        for at, request_id, tokens, scope, count in sorted(seeds, key=lambda x: x[0]):
            local.seed(request_id, tokens, [scope], at, count)
        return local

    def late(self, local: LocalState) -> None:
        """Count in ``local`` (a fallback) this worker's latest send: one the store admitted
        while another call of this worker found it lost."""
        for at, request_id, tokens, scope, count in _own(self._sent[-1], local.weight):
            local.seed(request_id, tokens, [scope], at, count)

    def unrecorded(self) -> list[tuple[Scope, list[tuple[str, float, float]]]]:
        """Every send of the last window, per scope: ``(record id, age, tokens)``."""
        now = self.wall()
        self._forget(now)
        found: dict[str, tuple[Scope, list[tuple[str, float, float]]]] = {}
        for sent in self._sent:
            for s in sent.scopes:
                found.setdefault(s.key, (s, []))[1].append((sent.record_id, now - sent.at,
                                                            sent.tokens))  # fmt: skip
        return list(found.values())


def _own(sent: _Sent, n: int) -> list[tuple[float, str, float, Scope, int]]:
    """The seeds of one own send: ``(at, id, tokens in all, scope, requests)``."""
    seeds = []
    for s in sent.scopes:
        seeds.append((sent.at, sent.request_id, sent.tokens, _plain(s), 1))
        seeds.append((sent.at, sent.request_id, sent.tokens * n, _shared(s), n))
    return seeds


def _plain(scope: Scope) -> Scope:
    return Scope(key=scope.key, window_s=scope.window_s)


def _shared(scope: Scope) -> Scope:
    return Scope(key=scope.key + SHARE, window_s=scope.window_s)


def _keys(scopes: Sequence[Scope]) -> set[str]:
    return {s.key for s in scopes}
