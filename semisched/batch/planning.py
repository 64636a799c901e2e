"""A batch run's plan, read before anything is sent: its lines, its prior source, its priors.

`BatchPlan` is what the input and the output so far say is left to do;
`load_priors` loads the prior source the options ask for;
`planned` computes every request's prior (the learned model in a
worker thread, so the event loop keeps handling signals). `semisched.batch.run`
sends what is planned here.

What this module is not: it sends nothing and writes no file.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Final, TypeVar

import anyio

from semisched.batch.forecast import (
    BatchForecast,
    PriorsChoice,
    batch_floor,
    median_prompt_tokens,
    plan_requests,
)
from semisched.batch.input import BatchError, BatchLine, InvalidLine, open_input
from semisched.batch.options import BatchOptions
from semisched.batch.output import Answered
from semisched.core.request import Request
from semisched.priors.default import choose_priors
from semisched.priors.sources import Heuristic, PriorSource

__all__ = ["STREAMING", "BatchPlan", "load_priors", "off_loop", "plan_job", "planned"]

#: The priors line's reason while the model loads in the background.
STREAMING: Final = (
    "loading while the first requests go out with the max_tokens heuristic's priors"
)

_T = TypeVar("_T")


@dataclass(frozen=True, slots=True, kw_only=True)
class BatchPlan:
    """What a run will do, read before anything is sent.

    Attributes:
        lines: The valid input lines, in file order.
        invalid: The invalid input lines (only with ``skip_invalid``).
        answered: What the output already holds.
    """

    lines: tuple[BatchLine, ...]
    invalid: tuple[InvalidLine, ...]
    answered: Answered

    @property
    def todo(self) -> list[BatchLine]:
        """Valid lines without a result."""
        return [line for line in self.lines if line.custom_id not in self.answered.custom_ids]

    @property
    def new_invalid(self) -> list[InvalidLine]:
        """Invalid lines without their error record."""
        return [p for p in self.invalid if not self.answered.has_invalid_line(p.line)]


def load_priors(options: BatchOptions) -> tuple[PriorSource, PriorsChoice]:
    """The prior source ``options.priors`` asks for, and why
    (`semisched.priors.default.choose_priors`).

    Raises:
        BatchError: ``learned`` was asked for and cannot be loaded.
    """
    try:
        return choose_priors(options.priors, asked_by=f"--priors {options.priors}")
    except (ImportError, FileNotFoundError) as exc:
        raise BatchError(f"--priors learned: {exc}") from None


async def off_loop(work: Callable[[], _T], *, thread: bool) -> _T:
    """``work()``; in a worker thread when it may take seconds (the model), so the event
    loop keeps handling signals; a second Ctrl-C abandons it rather than waiting."""
    if not thread:
        return work()
    return await anyio.to_thread.run_sync(work, abandon_on_cancel=True)


async def planned(work: Callable[[], list[Request]], *, model: bool) -> list[Request]:
    """Plan the requests (`plan_requests`); a model's own
    failure stops the job before anything is sent, saying how to avoid it."""
    try:
        return await off_loop(work, thread=model)
    except BatchError:
        raise
    except Exception as exc:
        if not model:
            raise
        raise BatchError(
            f"the length model failed while planning ({exc!r}); --priors heuristic avoids it"
        ) from exc


async def plan_job(
    opts: BatchOptions, plan: BatchPlan, *, streamed: bool = False
) -> tuple[BatchForecast, list[Request]]:
    """Plan the lines to send: the forecast and each line's request (with its prior). A
    dry run loads the priors it names and plans with them (the model in a worker thread);
    a run that streams the model's priors (``streamed``) plans with the heuristic's."""
    todo = plan.todo
    source: PriorSource = Heuristic()
    choice = PriorsChoice(name="heuristic", reason="nothing to send")
    if streamed:
        choice = PriorsChoice(name="learned", reason=STREAMING)
    elif todo:
        load = partial(load_priors, opts)
        source, choice = await off_loop(load, thread=opts.priors != "heuristic")
    config = opts.scheduler_config()
    with open_input(opts.input) as handle:
        work = partial(
            plan_requests, handle, todo, default_model=opts.model, priors=source, config=config
        )
        requests = await planned(work, model=not isinstance(source, Heuristic))
    forecast = BatchForecast(
        to_send=len(todo),
        already_done=len(plan.lines) - len(todo),
        invalid=len(plan.invalid),
        priors=choice,
        floor=batch_floor(requests, config),
        median_prompt_tokens=median_prompt_tokens(requests),
        rpm=opts.rpm,
        tpm=opts.tpm,
        max_inflight=config.max_inflight,
        s_per_token=config.signals.initial_s_per_token,
        window_s=config.budget.window_s if config.budget is not None else 60.0,
        time_scale=opts.time_scale,
    )
    return forecast, requests
