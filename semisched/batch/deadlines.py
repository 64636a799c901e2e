"""Deadlines in ``semisched batch``: each line's ``metadata.deadline_s`` and ``--deadline``.

A line may say by when its answer is due, in seconds from the job's start, in its body's
``metadata`` (OpenAI's metadata values are strings, so ``"600"`` as well as ``600``):

```python
{"custom_id": "r1", "method": "POST", "url": "/v1/chat/completions",
 "body": {"model": "gpt-4o-mini", "messages": [...], "metadata": {"deadline_s": "600"}}}
```

Rules:

1. ``metadata.deadline_s`` is the scheduler's, never the provider's: `take_deadline`
   removes it from the body before it is validated, sent or uploaded (like
   ``metadata.tenant``), and drops ``metadata`` when nothing else is left in it.
2. A line's deadline is the earlier of its own and the job's ``--deadline`` (both counted
   from the job's start): `Deadlines.of`. Real-time, it is the scheduler's deadline
   (an answer later than it is useless: the line expires, ``deadline_exceeded``); through
   the Batch API it decides the tier (`semisched.batch.tier`) and when a batch is
   cancelled.
3. The job's start is this run's start for a real-time job; with ``--tier batch`` or
   ``auto`` it is the first run's, kept in the journal (`semisched.batch.journal`),
   so a resumed job keeps its deadlines.

What this module is not: it reads no file and decides no tier.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

__all__ = ["DEADLINE_KEY", "Deadlines", "read_deadline", "take_deadline", "take_metadata"]

#: The key of a body's ``metadata`` that holds the line's deadline (seconds from the start).
DEADLINE_KEY: Final = "deadline_s"


def take_metadata(body: dict[str, Any], key: str) -> tuple[bool, Any]:
    """Remove ``metadata[key]`` from ``body``: ``(found, value)``. ``body``'s own
    ``metadata`` is not changed: a copy without the key replaces it, or none when nothing
    else was in it."""
    metadata = body.get("metadata")
    if not isinstance(metadata, Mapping) or key not in metadata:
        return False, None
    rest = {k: v for k, v in metadata.items() if k != key}
    if rest:
        body["metadata"] = rest
    else:
        del body["metadata"]
    return True, metadata[key]


def _seconds(value: object) -> float:
    """A deadline's value as seconds > 0 (a number, or a string of one)."""
    seconds = math.nan
    if isinstance(value, int | float) and not isinstance(value, bool):
        seconds = float(value)
    elif isinstance(value, str):
        with contextlib.suppress(ValueError):
            seconds = float(value)
    if not math.isfinite(seconds) or seconds <= 0:
        raise ValueError(
            f"'body.metadata.{DEADLINE_KEY}' {value!r} must be a number of seconds > 0 "
            "(from the job's start)"
        )
    return seconds


def take_deadline(body: dict[str, Any]) -> float | None:
    """Remove ``metadata.deadline_s`` from ``body`` (rule 1) and return it in seconds
    (``None``: the body names none).

    Raises:
        ValueError: It is not a number of seconds > 0.
    """
    found, value = take_metadata(body, DEADLINE_KEY)
    return _seconds(value) if found else None


def read_deadline(body: object) -> float | None:
    """The deadline ``body`` names, without changing it (``None``: none, or not valid)."""
    if not isinstance(body, Mapping):
        return None
    try:
        return take_deadline(dict(body))
    except ValueError:
        return None


@dataclass(frozen=True, slots=True)
class Deadlines:
    """The job's deadlines on the batch clock (rule 2).

    Attributes:
        start: The job's start, on the batch clock.
        job_s: ``--deadline``: seconds from the start (``None``: none).
    """

    start: float
    job_s: float | None = None

    def of(self, line_s: float | None) -> float | None:
        """The absolute deadline of a line whose own is ``line_s`` (``None``: none)."""
        own = [s for s in (line_s, self.job_s) if s is not None]
        return self.start + min(own) if own else None
