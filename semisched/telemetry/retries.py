"""One INFO line per retry, rate-limited: what openai-python's own retries would have said.

The scheduler turns the wrapped client's retries off and retries itself, so
the line openai-python logs at INFO for each of its retries ("Retrying request
to /chat/completions in 0.5 seconds") is no longer written. `RetryLog`
writes its counterpart on the ``semisched.retries`` logger, at INFO:

```text
retrying req-17 in 2.0 s: rate_limited (429) at default, attempt 1 failed
```

A refused key (a failover of kind ``auth``) is also said once per endpoint at
WARNING, naming the endpoint (never its key): its circuit is open and its work
goes to the other endpoints (`semisched.core.fleet.endpoint` rule 5).

A 429 storm would write thousands of those, so each failure kind gets at most
one line per `EVERY_S` seconds of the scheduler's clock; the next line of
that kind says how many it left out (``(+37 more rate_limited retries since
the last line)``). The clock is the one the dispatcher gives the engine, so a
test in virtual time sees exactly which lines are written.

What this module is not: it decides no retry (the core does) and counts
nothing for statistics (``statistics().counters.retries`` does).
"""

from __future__ import annotations

import logging

from semisched.core.actions import Retry
from semisched.core.lifecycle import FailureKind

__all__ = ["EVERY_S", "RETRY_LOGGER", "RetryLog"]

#: The logger of the retry lines.
RETRY_LOGGER = logging.getLogger("semisched.retries")

#: At most one line per failure kind per this many clock seconds.
EVERY_S = 10.0

_STATUS = {FailureKind.RATE_LIMITED: " (429)"}


class RetryLog:
    """Writes the retry lines of one scheduler (module docstring).

    Args:
        every_s: At most one line per failure kind per this many clock seconds.
    """

    def __init__(self, every_s: float = EVERY_S) -> None:
        if not every_s >= 0:
            raise ValueError(f"{every_s=} must be >= 0")
        self.every_s = every_s
        self._last: dict[FailureKind, float] = {}
        self._left_out: dict[FailureKind, int] = {}
        self._refused: set[str] = set()  # endpoints whose refused key was said (WARNING)

    def __repr__(self) -> str:
        return f"<RetryLog every_s={self.every_s} left_out={sum(self._left_out.values())}>"

    def retry(self, action: Retry, now: float) -> None:
        """Log ``action`` (decided at ``now``, clock seconds) unless its kind had a line
        less than ``every_s`` ago; then count it for that kind's next line."""
        if action.kind is FailureKind.AUTH and action.endpoint not in self._refused:
            self._refused.add(action.endpoint)
            RETRY_LOGGER.warning("endpoint %r refused its API key (401/403): its circuit is "
                                 "open and its requests go to the other endpoints",
                                 action.endpoint)  # fmt: skip
        if not RETRY_LOGGER.isEnabledFor(logging.INFO):
            return
        kind = action.kind
        last = self._last.get(kind)
        if last is not None and now - last < self.every_s:
            self._left_out[kind] = self._left_out.get(kind, 0) + 1
            return
        self._last[kind] = now
        left_out = self._left_out.pop(kind, 0)
        more = f" (+{left_out} more {kind.value} retries since the last line)" if left_out else ""
        where = "another endpoint at once" if action.failover else f"{action.at - now:.1f} s"
        RETRY_LOGGER.info(
            "retrying %s in %s: %s%s at %s, attempt %d failed%s",
            action.request.id,
            where,
            kind.value,
            _STATUS.get(kind, ""),
            action.endpoint or "the endpoint",
            action.attempts,
            more,
        )
