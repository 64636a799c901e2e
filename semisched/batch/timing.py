"""When each request of a ``semisched batch`` run was sent and answered, for its record.

Every success record of the output carries one key beyond the OpenAI Batch
API's ``id``, ``custom_id``, ``response`` and ``error``:

```text
"semisched": {"endpoint": "default", "sent_s": 12.5, "first_token_s": null,
              "done_s": 14.25, "run": "3f2a..."}
```

``sent_s`` is when the attempt that succeeded was sent, ``done_s`` when its
answer arrived, ``first_token_s`` when its first token did (``null``: batch
calls do not stream), all in seconds on the batch clock (the event loop's,
times ``--time-scale``) since the run started sending. ``run`` is a fresh id
per invocation: a resumed file holds several runs, whose clocks start again
at 0. With the response's ``usage`` (prompt and completion tokens) this is
what ``semisched plan fit`` fits an endpoint's speed from.

`BatchTiming` is a [`RequestObserver`][semisched.telemetry.observe.RequestObserver] of the
run's scheduler. The scheduler names requests ``req-N`` as they come; the
line a request belongs to is bound when it is submitted, from inside
`BatchTiming.track` (a context variable: ``submit`` tells the
observers in the caller's own task). This module decides nothing and writes
nothing: `semisched.batch.sending` puts `Tracked.record` in the
output record.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

from semisched.core.request import Request
from semisched.telemetry.observe import Finished, Outcome, RequestObserver

__all__ = ["RECORD_KEY", "BatchTiming", "Tracked"]

#: The output record's key that holds the request's timing.
RECORD_KEY = "semisched"


@dataclass(slots=True)
class Tracked:
    """One line's request as the observer saw it (times on the batch clock, absolute)."""

    custom_id: str
    owner: BatchTiming
    request_id: str | None = None
    endpoint: str = ""
    sent: float | None = None
    first_token: float | None = None
    done: float | None = None

    def record(self) -> dict[str, Any] | None:
        """The record's ``"semisched"`` value (module docstring); ``None`` if it never
        completed (no send or no answer seen)."""
        if self.sent is None or self.done is None:
            return None
        start = self.owner.started
        return {
            "endpoint": self.endpoint,
            "sent_s": self.sent - start,
            "first_token_s": None if self.first_token is None else self.first_token - start,
            "done_s": self.done - start,
            "run": self.owner.run,
        }


_TRACKED: ContextVar[Tracked | None] = ContextVar("semisched_batch_tracked", default=None)


class BatchTiming(RequestObserver):
    """Times each request of one run (module docstring).

    Args:
        started: The batch clock's time the run starts sending (its records' 0).
        run: The run's id (default: a fresh uuid).
    """

    def __init__(self, started: float, run: str | None = None) -> None:
        self.started = started
        self.run = uuid.uuid4().hex if run is None else run
        self._live: dict[str, Tracked] = {}

    def __repr__(self) -> str:
        return f"<BatchTiming run={self.run!r} live={len(self._live)}>"

    @contextmanager
    def track(self, custom_id: str) -> Iterator[Tracked]:
        """Bind the request submitted inside this block to ``custom_id``."""
        tracked = Tracked(custom_id, self)
        token = _TRACKED.set(tracked)
        try:
            yield tracked
        finally:
            _TRACKED.reset(token)
            if tracked.request_id is not None:
                self._live.pop(tracked.request_id, None)

    def submitted(self, request: Request, now: float) -> None:
        tracked = _TRACKED.get()
        if tracked is not None and tracked.owner is self and tracked.request_id is None:
            tracked.request_id = request.id
            self._live[request.id] = tracked

    def sent(self, request: Request, attempt: int, endpoint: str, now: float) -> None:
        tracked = self._live.get(request.id)
        if tracked is not None:  # a new attempt: the last one sent is the one that answers
            tracked.endpoint, tracked.sent, tracked.first_token = endpoint, now, None

    def first_token(self, request: Request, now: float) -> None:
        tracked = self._live.get(request.id)
        if tracked is not None:
            tracked.first_token = now

    def finished(self, request: Request, finished: Finished, now: float) -> None:
        tracked = self._live.pop(request.id, None)
        if tracked is not None and finished.outcome is Outcome.COMPLETED:
            tracked.done = now
