"""One batch of the mock's Batch API over virtual time: its settings, its drawn schedule and
its state at any instant (pure: the caller passes the virtual now; ``mockprovider.batches``
serves it).

Nothing runs in the background: a batch's status, counts and files are computed from the
clock whenever it is read, so a batch moves on exactly as the mock's virtual time does (a
3600 s turnaround at ``time_scale`` 100 takes 36 wall seconds).

The schedule. At creation the batch draws its turnaround ``T``, lognormal around
``turnaround_s`` (``T = turnaround_s * exp(turnaround_sigma * Z)``, ``Z`` standard normal,
so ``turnaround_s`` is the median; ``turnaround_sigma = 0`` makes it exact), then whether it
expires (probability ``expiry_rate``) and, for an expiring one, the fraction ``f`` of its
lines done by the window's end (uniform in [0, 1), so possibly none). Then:

* ``validating`` for ``0.05 T`` (at most the completion window); a file that failed
  validation is ``failed`` then, with its ``errors``;
* ``in_progress`` for ``0.9 T``: line ``i`` of ``n`` (file order) finishes at
  ``in_progress_at + (i + 1) / n * 0.9 T``, so the counts grow in proportion to the elapsed time;
* ``finalizing`` for ``0.05 T``, then ``completed`` at ``created_at + T``.

A batch expires when it is drawn to, or when its lines would not all be done within the
completion window (``window_s``, virtual seconds from creation; OpenAI's ``"24h"``). It stays
``in_progress`` until the window's end, then is ``expired``: the lines done by then are
answered, the others go to the error file with ``batch_expired``. An expiring batch's lines
run so that the fraction ``f`` of them is done at the window's end.

A cancel (allowed while ``validating`` or ``in_progress``) makes it ``cancelling`` for
``0.05 T``, then ``cancelled``: the lines done before the cancel are answered, the others go
to the error file with ``batch_cancelled``, so that every line of a batch that began is
answered once, in one file or the other (and counted in ``request_counts``: ``completed`` the
output file's, ``failed`` the error file's). A batch cancelled while ``validating`` ran no
line and has no file. Draws come from one seeded ``random.Random`` per app, in creation order.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from dataclasses import dataclass, fields
from typing import Any, Final

from mockprovider.batch_lines import BatchLine, LineError, answered_line, unrun_line
from mockprovider.wire import Job

__all__ = ["TERMINAL", "BatchSettings", "MockBatch", "Schedule"]

#: The statuses a batch never leaves.
TERMINAL: Final = frozenset({"completed", "failed", "expired", "cancelled"})
_STAMPS: Final = (
    *("created_at", "in_progress_at", "expires_at", "finalizing_at", "completed_at"),
    *("failed_at", "expired_at", "cancelling_at", "cancelled_at"),
)

_VALIDATING: Final = 0.05  # shares of the turnaround
_RUNNING: Final = 0.9
_WIND_DOWN: Final = 0.05  # finalizing, or cancelling


def _real(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


@dataclass(frozen=True, slots=True, kw_only=True)
class BatchSettings:
    """How the mock's Batch API behaves (``MockConfig.batch_*``; see the module docstring).

    Attributes:
        turnaround_s: Median virtual seconds from creation to ``completed`` (> 0).
        turnaround_sigma: Lognormal spread of the turnaround (>= 0; 0: always the median).
        failure_rate: Fraction of lines answered 500 in the error file, each drawn.
        expiry_rate: Fraction of batches that expire at the end of the completion window.
        window_s: The completion window (``"24h"``) in virtual seconds (> 0).
    """

    turnaround_s: float = 3600.0
    turnaround_sigma: float = 0.5
    failure_rate: float = 0.0
    expiry_rate: float = 0.0
    window_s: float = 86_400.0

    def __post_init__(self) -> None:
        for name in ("turnaround_s", "window_s"):
            value = getattr(self, name)
            if not _real(value) or value <= 0:
                raise ValueError(f"batch_{name}={value!r} must be a finite number > 0")
        if not _real(self.turnaround_sigma) or self.turnaround_sigma < 0:
            raise ValueError(
                f"batch_turnaround_sigma={self.turnaround_sigma!r} must be a finite number >= 0"
            )
        for name in ("failure_rate", "expiry_rate"):
            value = getattr(self, name)
            if not _real(value) or not 0 <= value <= 1:
                raise ValueError(f"batch_{name}={value!r} must be a number in [0, 1]")

    @classmethod
    def of(cls, config: object) -> BatchSettings:
        """The settings a ``MockConfig`` holds as its ``batch_*`` fields.

        Raises:
            ValueError: A ``batch_*`` field is invalid (the message names it).
        """
        return cls(**{f.name: getattr(config, f"batch_{f.name}") for f in fields(cls)})


@dataclass(frozen=True, slots=True, kw_only=True)
class Schedule:
    """When one batch does what, in virtual seconds (see the module docstring).

    Attributes:
        created: Creation.
        in_progress: End of validation.
        span: How long its lines take, from ``in_progress`` (``inf``: none ever finishes).
        finalizing: All lines done (``inf`` when that never happens).
        completed: ``finalizing`` plus the wind-down.
        expires: End of the completion window.
        expiring: It reaches ``expires`` before its lines are all done.
        wind_down: How long finalizing, or cancelling, lasts.
    """

    created: float
    in_progress: float
    span: float
    finalizing: float
    completed: float
    expires: float
    expiring: bool
    wind_down: float

    @classmethod
    def draw(cls, created: float, settings: BatchSettings, rng: random.Random) -> Schedule:
        """The schedule of a batch created at ``created`` (three draws from ``rng``)."""
        spread = math.exp(settings.turnaround_sigma * rng.gauss(0.0, 1.0))
        turnaround = settings.turnaround_s * spread
        drawn_expiry = rng.random() < settings.expiry_rate
        done_at_expiry = rng.random()
        validating = min(_VALIDATING * turnaround, settings.window_s)
        if drawn_expiry:
            left = settings.window_s - validating
            span = left / done_at_expiry if done_at_expiry > 0 else math.inf
        else:
            span = _RUNNING * turnaround
        in_progress = created + validating
        finalizing = in_progress + span
        expires = created + settings.window_s
        return cls(
            created=created,
            in_progress=in_progress,
            span=span,
            finalizing=finalizing,
            completed=finalizing + _WIND_DOWN * turnaround,
            expires=expires,
            expiring=drawn_expiry or finalizing > expires,
            wind_down=_WIND_DOWN * turnaround,
        )

    def finish(self, i: int, n: int) -> float:
        """When line ``i`` (0-based, file order) of ``n`` finishes."""
        return self.in_progress + (i + 1) / n * self.span

    def done_by(self, t: float, n: int) -> int:
        """How many of ``n`` lines have finished by ``t`` (the first ones, in file order)."""
        if n == 0 or t < self.in_progress or math.isinf(self.span):
            return 0
        k = min(n, int((t - self.in_progress) / self.span * n))
        while k < n and self.finish(k, n) <= t:
            k += 1
        while k > 0 and self.finish(k - 1, n) > t:
            k -= 1
        return k


class MockBatch:
    """One batch: what it was asked, its schedule, and its state at any virtual instant.

    Args:
        batch_id: ``batch_...``.
        request: ``endpoint``, ``input_file_id``, ``completion_window`` and ``metadata``.
        schedule: Its drawn schedule.
        lines: Its valid lines (none when the file failed validation).
        errors: Why its file failed validation (none when it passed).

    Attributes:
        cancel_at: When it was cancelled, or ``None``.
        output_file_id: Its output file, once written (at its end, when it has 200 lines).
        error_file_id: Its error file, once written (at its end, when it has other lines).
        written: Whether its files have been written (a batch that ended writes them once).
    """

    def __init__(
        self,
        batch_id: str,
        request: dict[str, Any],
        schedule: Schedule,
        lines: list[BatchLine],
        errors: list[LineError],
    ) -> None:
        self.id, self.request, self.schedule = batch_id, request, schedule
        self.lines, self.errors = lines, errors
        self.cancel_at: float | None = None
        self.output_file_id: str | None = None
        self.error_file_id: str | None = None
        self.written = False

    def __repr__(self) -> str:
        return f"<MockBatch {self.id} lines={len(self.lines)} errors={len(self.errors)}>"

    def status(self, now: float) -> str:
        """Its status at ``now``."""
        s = self.schedule
        if self.cancel_at is not None:
            return "cancelled" if now >= self.cancel_at + s.wind_down else "cancelling"
        if now < s.in_progress:
            return "validating"
        if self.errors:
            return "failed"
        if s.expiring:
            return "expired" if now >= s.expires else "in_progress"
        if now < s.finalizing:
            return "in_progress"
        return "finalizing" if now < s.completed else "completed"

    def cancel(self, now: float) -> None:
        """Cancel it at ``now`` (the caller checked that its status allows it)."""
        self.cancel_at = now

    def _stop(self) -> float:
        """When its lines stop running (a cancel, or the window's end for an expiring one)."""
        if self.cancel_at is not None:
            return self.cancel_at
        return self.schedule.expires if self.schedule.expiring else math.inf

    def began(self, now: float) -> bool:
        """Whether its file had validated by ``now`` (so it runs lines, or ran them)."""
        return not self.errors and self.schedule.in_progress <= min(now, self._stop())

    def ran(self, now: float) -> int:
        """How many of its lines have finished by ``now`` (the first ones, in file order)."""
        return self.schedule.done_by(min(now, self._stop()), len(self.lines))

    def request_counts(self, now: float) -> dict[str, int]:
        """``{"total", "completed", "failed"}`` at ``now`` (see the module docstring)."""
        if not self.began(now):
            return {"total": 0, "completed": 0, "failed": 0}
        ran = self.ran(now)
        completed = sum(line.ok for line in self.lines[:ran])
        failed = ran - completed
        if self.status(now) in ("expired", "cancelled"):
            failed += len(self.lines) - ran
        return {"total": len(self.lines), "completed": completed, "failed": failed}

    def usage(self, now: float) -> dict[str, Any]:
        """The tokens of the lines answered 200 by ``now``, as the Batch object's ``usage``."""
        jobs = [line.job for line in self.lines[: self.ran(now)] if line.ok and line.job]
        n, m = sum(j.input_tokens for j in jobs), sum(j.output_tokens for j in jobs)
        return {
            "input_tokens": n,
            "input_tokens_details": {"cached_tokens": sum(j.cached_tokens for j in jobs)},
            "output_tokens": m,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": n + m,
        }

    def stamps(self, now: float) -> dict[str, float | None]:
        """Each ``*_at`` field's virtual time, or ``None`` where not reached by ``now``."""
        s, stop = self.schedule, self._stop()
        out: dict[str, float | None] = dict.fromkeys(_STAMPS)
        out["created_at"], out["expires_at"] = s.created, s.expires

        def mark(name: str, t: float) -> None:
            if t <= now and t <= stop:
                out[name] = t

        if self.errors:
            mark("failed_at", s.in_progress)
        else:
            mark("in_progress_at", s.in_progress)
            if s.expiring:
                mark("expired_at", s.expires)
            else:
                mark("finalizing_at", s.finalizing)
                mark("completed_at", s.completed)
        if self.cancel_at is not None:
            out["cancelling_at"] = self.cancel_at
            if now >= self.cancel_at + s.wind_down:
                out["cancelled_at"] = self.cancel_at + s.wind_down
        return out

    def end(self) -> float:
        """When it reached (or will reach) its terminal status."""
        s = self.schedule
        if self.cancel_at is not None:
            return self.cancel_at + s.wind_down
        if self.errors:
            return s.in_progress
        return s.expires if s.expiring else s.completed

    def file_lines(
        self, now: float, new_id: Callable[[Job], str], unix: Callable[[float], int]
    ) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        """Its output and error file lines at ``now`` (after its end), in file order."""
        ran, n = self.ran(now), len(self.lines)
        output: list[dict[str, Any]] = []
        errors: list[dict[str, Any]] = []
        for i, line in enumerate(self.lines[:ran]):
            rid = "" if line.job is None else new_id(line.job)
            answered = answered_line(line, rid=rid, created=unix(self.schedule.finish(i, n)))
            (output if line.ok else errors).append(answered)
        if self.began(now):
            code = "batch_cancelled" if self.cancel_at is not None else "batch_expired"
            errors += [unrun_line(line, code) for line in self.lines[ran:]]
        return output, errors
