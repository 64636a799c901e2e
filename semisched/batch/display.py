"""The ``semisched batch`` progress display: a live bar on a terminal, plain lines elsewhere.

:func:`progress_display` picks one for a stream; both take the run's
:class:`~semisched.batch.summary.BatchProgress` after each result
(``start`` once, then ``update``) and ``close`` at the end. The bar needs
``rich``; without it, or off a terminal, a line every ``every_s`` wall seconds.

What this module is not: it runs nothing and reads no arguments (:mod:`semisched.batch.cli`).
"""

from __future__ import annotations

import math
import time
from typing import Any, TextIO, TypeAlias

from semisched.batch.summary import BatchProgress

__all__ = ["Display", "PlainProgress", "RichProgress", "progress_display", "status_line"]


class PlainProgress:
    """A progress line every ``every_s`` wall seconds (for logs and pipes)."""

    def __init__(self, stream: TextIO, every_s: float) -> None:
        self.stream = stream
        self.every_s = every_s
        self._last = -math.inf

    def start(self, progress: BatchProgress) -> None:
        print(status_line(progress), file=self.stream, flush=True)
        self._last = time.monotonic()

    def update(self, progress: BatchProgress) -> None:
        now = time.monotonic()
        if now - self._last >= self.every_s:
            self._last = now
            print(status_line(progress), file=self.stream, flush=True)

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
    return f"{done}/{progress.to_send} done | {core} | ETA {eta}"


#: What :func:`progress_display` returns.
Display: TypeAlias = PlainProgress | RichProgress


def progress_display(stream: TextIO, every_s: float) -> Display:
    """A progress bar on a terminal, else plain lines every ``every_s`` seconds."""
    try:
        return RichProgress(stream) if stream.isatty() else PlainProgress(stream, every_s)
    except ImportError:
        return PlainProgress(stream, every_s)
