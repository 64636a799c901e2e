"""Model priors that arrive while a batch job sends: the model never delays a send.

Loading the learned model takes seconds and it reads about a hundred prompts
a second on a laptop CPU. Planning every line with it before the first send
(what ``semisched batch`` did) left the provider idle meanwhile. A run now
starts at once with the ``max_tokens`` heuristic's priors, and
`StreamedPriors` loads the model and predicts the lines in a worker
thread, chunk by chunk, starting from the next line to send:

1. The sender takes a line's model prior when it is ready, else the
   heuristic's (`StreamedPriors.take`); a line is never held for it
   while fewer than ``lookahead`` requests are queued or in flight, so the
   provider has as much work in the first seconds as with the heuristic.
2. Beyond ``lookahead`` outstanding requests, the sender waits for the model
   (or a finished request) before adding more: the scheduler orders work it
   has, so lines submitted before their priors arrive could not be reordered.
3. If the model fails, the rest of the job goes with the heuristic's priors
   and the summary says so; nothing is lost.

What this module is not: it decides no order (the scheduler does) and reads
the input only through `plan_requests`.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import BinaryIO

import anyio

from semisched.batch.forecast import PRIOR_CHUNK, plan_requests
from semisched.batch.input import BatchLine
from semisched.batch.options import BatchOptions
from semisched.core.config import SchedulerConfig
from semisched.core.request import Prior, Request
from semisched.priors.default import choose_priors
from semisched.priors.sources import Heuristic, PriorsChoice, PriorSource

__all__ = ["StreamedPriors"]


class StreamedPriors:
    """The model's priors for ``lines``, predicted while the run sends (module docstring)."""

    def __init__(
        self, options: BatchOptions, lines: Sequence[BatchLine], *, lookahead: int
    ) -> None:
        self.options = options
        self.lines = list(lines)
        self.lookahead = lookahead
        self.choice: PriorsChoice | None = None
        self.error: str | None = None
        self.used = 0
        self._priors: dict[str, Prior] = {}
        self._next = 0  # index of the next line the sender takes
        self._done = False
        self._changed = anyio.Event()

    def __repr__(self) -> str:
        return f"<StreamedPriors ready={len(self._priors)} used={self.used} done={self._done}>"

    @property
    def done(self) -> bool:
        """Whether the model has stopped: every line predicted, or it failed or is absent."""
        return self._done

    def ready(self, line: BatchLine) -> bool:
        """Whether ``line``'s model prior has arrived."""
        return line.custom_id in self._priors

    def take(self, index: int, line: BatchLine, fallback: Prior) -> Prior:
        """The prior to send line ``index`` with: the model's if ready, else ``fallback``."""
        self._next = index + 1
        prior = self._priors.pop(line.custom_id, None)
        if prior is None:
            return fallback
        self.used += 1
        return prior

    def poke(self) -> None:
        """Something the sender waits for happened (a request finished)."""
        self._changed.set()

    async def changed(self) -> None:
        """Wait for the next chunk of priors, a finished request, or the model's end."""
        await self._changed.wait()
        self._changed = anyio.Event()

    def describe(self, sent: int) -> str:
        """How the run's priors came about, for its summary."""
        if self.choice is None:
            if self.error is not None:
                return f"heuristic (the model failed to load: {self.error})"
            return "heuristic (the model had not loaded when the run ended)"
        if self.choice.name != "learned":
            return str(self.choice)
        text = f"{self.choice}, for {self.used} of {sent} requests (the rest: heuristic"
        return text + (f"; the model failed: {self.error})" if self.error else ")")

    async def run(self, path: Path) -> None:
        """Load the model and predict, next lines first, until every line is done."""
        try:
            asked_by = f"--priors {self.options.priors}"
            source, self.choice = await anyio.to_thread.run_sync(
                lambda: choose_priors(self.options.priors, asked_by=asked_by),
                abandon_on_cancel=True,
            )
            if isinstance(source, Heuristic):
                return
            config = self.options.scheduler_config()
            with open(path, "rb", buffering=0) as handle:
                start = 0
                while True:
                    start = max(start, self._next)
                    if start >= len(self.lines):
                        return
                    chunk = self.lines[start : start + PRIOR_CHUNK]
                    planned = await anyio.to_thread.run_sync(
                        _plan, handle, chunk, self.options, source, config, abandon_on_cancel=True
                    )
                    for request in planned:
                        self._priors[request.id] = request.prior
                    start += len(chunk)
                    self._changed.set()
        except Exception as exc:  # the rest of the job goes with the heuristic's priors
            self.error = f"{type(exc).__name__}: {exc}"
        finally:
            self._done = True
            self._changed.set()


def _plan(
    handle: BinaryIO,
    chunk: list[BatchLine],
    options: BatchOptions,
    source: PriorSource,
    config: SchedulerConfig,
) -> list[Request]:
    return plan_requests(handle, chunk, default_model=options.model, priors=source, config=config)
