"""The ``semisched batch`` progress display: a live bar on a terminal, plain lines elsewhere.

`progress_display` picks one for a stream; both take the run's
`BatchProgress` after each result (``start`` once, then ``update``), and
again every ``every_s`` seconds whatever the run waits on (the command's
timer: ``due_in`` says when the next line is due), and ``close`` at the end.
The bar needs ``rich``; without it, or off a terminal, a line every ``every_s``
seconds of the event loop's clock (the wall's, or a test's virtual one).

What this module is not: it runs nothing and reads no arguments (`semisched.batch.cli`).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, TextIO, TypeAlias

import anyio

from semisched.batch.summary import BatchProgress

__all__ = ["Display", "PlainProgress", "RichProgress", "progress_display", "status_line"]


class PlainProgress:
    """A progress line at most every ``every_s`` seconds (for logs and pipes).

    Args:
        stream: Where the lines go.
        every_s: Seconds between lines (0: one per result).
        now: The clock (default: the event loop's).
    """

    def __init__(
        self, stream: TextIO, every_s: float, now: Callable[[], float] = anyio.current_time
    ) -> None:
        self.stream = stream
        self.every_s = every_s
        self._now = now
        self._last = -math.inf

    def start(self, progress: BatchProgress) -> None:
        print(status_line(progress), file=self.stream, flush=True)
        self._last = self._now()

    def update(self, progress: BatchProgress) -> None:
        now = self._now()
        if now - self._last >= self.every_s:
            self._last = now
            print(status_line(progress), file=self.stream, flush=True)

    def due_in(self) -> float:
        """Seconds until the next line is due (0: now)."""
        return max(0.0, self._last + self.every_s - self._now())

    def close(self) -> None:
        pass


class RichProgress:
    """A live progress bar on a terminal."""

    def __init__(self, stream: TextIO) -> None:
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

        self._progress = Progress(
            TextColumn("[bold]batch"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[status]}"),
            console=Console(file=stream),
            transient=False,
        )
        self._task: Any = None

    def start(self, progress: BatchProgress) -> None:
        self._progress.start()
        self._task = self._progress.add_task(
            "batch",
            total=progress.to_send,
            completed=progress.finished,
            status=status_line(progress, short=True),
        )

    def update(self, progress: BatchProgress) -> None:
        self._progress.update(
            self._task, completed=progress.finished, status=status_line(progress, short=True)
        )

    def due_in(self) -> float:
        """The bar redraws itself; its status (the ETA) is refreshed once a second."""
        return 1.0

    def close(self) -> None:
        self._progress.stop()


def status_line(progress: BatchProgress, *, short: bool = False) -> str:
    """One progress line (``short``: without the done/total count a bar shows itself)."""
    elapsed = progress.elapsed_s
    done = progress.finished
    limited = progress.rate_limited
    per_min = limited / elapsed * 60 if elapsed > 0 else 0.0
    eta_s = progress.eta_s
    eta = "?" if eta_s is None else f"{eta_s:.0f}s"
    core = (
        f"failed {progress.failed.total} | {progress.tokens_per_s:.0f} tok/s | "
        f"429s {limited} ({per_min:.1f}/min)"
    )
    if short:
        return f"{core} | ETA {eta}"
    return f"{done}/{progress.to_send} done | {core} | {elapsed:.0f}s in | ETA {eta}"


#: What `progress_display` returns.
Display: TypeAlias = PlainProgress | RichProgress


def progress_display(stream: TextIO, every_s: float) -> Display:
    """A progress bar on a terminal, else plain lines every ``every_s`` seconds."""
    try:
        return RichProgress(stream) if stream.isatty() else PlainProgress(stream, every_s)
    except ImportError:
        return PlainProgress(stream, every_s)
