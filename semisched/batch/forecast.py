"""What a ``semisched batch`` run will take, known before it sends anything.

A run (and ``--dry-run``) builds, for every line it will send, the core
[`Request`][semisched.core.Request] the scheduler sees (`plan_requests`),
and from those the makespan floor under the job's budgets
(`batch_floor`, `semisched.core.makespan_floor`).
`BatchForecast` is that result with the prior source the run uses
(`PriorsChoice`); the dry run prints it, a real run hands it to its
``on_start`` callback and reports the floor in its summary.

Rules:

1. **The requests are the run's.** Each body is read again and prepared with
   `semisched.runtime.calls.prepare_call`, as ``submit`` does. The prior comes
   from the source planned with: the dry run's (the learned model in batches
   of `PRIOR_CHUNK`, or the ``max_tokens`` heuristic); a real run plans
   with the heuristic and gets the model's priors while it sends
   (`semisched.batch.streamed`), so the floor it announces is the
   heuristic's. The
   prompt estimate is a fresh [`TokenEstimator`][semisched.runtime.estimate.TokenEstimator]'s,
   which is what the scheduler's own estimator says before its first
   response.
2. **The ETA** (`eta_s`): see its docstring; never an extrapolation
   from a handful of early results, never below the floor's remainder.
3. **The priors advice** (`advise_heuristic`): with the learned model
   and a median prompt estimate under `TINY_PROMPT_TOKENS`, the run
   says the heuristic is the better choice.

Only `plan_requests` reads a file (the input, through
`load_body`); the rest is pure. Loading the
model is `semisched.priors.default`'s (the one module allowed to import
``predictors``).
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, BinaryIO

from semisched.batch.input import BatchLine, load_body
from semisched.core.config import SchedulerConfig
from semisched.core.floor import MakespanFloor, makespan_floor
from semisched.core.request import Prior, Request
from semisched.priors.sources import BatchPriorSource, PriorQuery, PriorsChoice, PriorSource
from semisched.runtime.callargs import CallArgs, PreparedCall
from semisched.runtime.calls import prepare_call
from semisched.runtime.estimate import TokenEstimator

__all__ = [
    "ETA_OBSERVED_AFTER_S",
    "ETA_OBSERVED_AFTER_SHARE",
    "PRIOR_CHUNK",
    "TINY_PROMPT_TOKENS",
    "BatchForecast",
    "PriorsChoice",
    "advise_heuristic",
    "batch_floor",
    "eta_s",
    "median_prompt_tokens",
    "plan_requests",
]

#: Prompts per call of a model source's ``prior_batch`` while planning.
PRIOR_CHUNK = 64

#: A median prompt estimate under this many tokens is "tiny": about five words
#: (32 bytes at the estimator's 4 bytes per token), too little text for the
#: length model to tell requests apart (its hardest cases are one-word prompts
#: such as "continue", ``predictors/RESULTS.md``), while ``max_tokens`` is the
#: caller's own bound. A chosen threshold, not a measured one; random-looking
#: prompts of ordinary size are not detected.
TINY_PROMPT_TOKENS = 8

#: The ETA follows the observed rate once this share of the requests is answered...
ETA_OBSERVED_AFTER_SHARE = 0.10
#: ...or once this many clock seconds have passed with at least one answer.
ETA_OBSERVED_AFTER_S = 30.0


@dataclass(frozen=True, slots=True, kw_only=True)
class BatchForecast:
    """What a run will send, with which priors, and the floor on its makespan.

    Attributes:
        to_send: Valid lines without a result (what the run sends).
        already_done: Valid lines the output already answers.
        invalid: Invalid lines (only with ``skip_invalid``).
        priors: The prior source.
        floor: The makespan floor of the lines to send (clock seconds).
        median_prompt_tokens: Median prompt estimate of the lines to send (0: none).
        rpm: The requests-per-window budget (``None``: none).
        tpm: The tokens-per-window budget (``None``: none).
        max_inflight: The concurrency cap.
        s_per_token: The per-token latency the serving bound assumes (seconds).
        window_s: The rate budget's window (seconds).
        time_scale: How much faster than real time the clock runs (``--time-scale``).
    """

    to_send: int
    already_done: int
    invalid: int
    priors: PriorsChoice
    floor: MakespanFloor
    median_prompt_tokens: float
    rpm: int | None
    tpm: int | None
    max_inflight: int | None
    s_per_token: float
    window_s: float = 60.0
    time_scale: float = 1.0

    @property
    def heuristic_advised(self) -> bool:
        """Whether the priors line advises ``--priors heuristic`` (module rule 3)."""
        return advise_heuristic(self.priors, self.median_prompt_tokens)

    def priors_line(self) -> str:
        """``priors: ...``: the source, its load time, and the advice when it applies."""
        line = f"priors: {self.priors}"
        if self.heuristic_advised:
            line += (
                f"; the prompts are tiny (median {self.median_prompt_tokens:.0f} tokens, "
                f"under {TINY_PROMPT_TOKENS}): the heuristic is the better choice "
                "(--priors heuristic)"
            )
        return line

    def floor_lines(self) -> list[str]:
        """The three bounds, which one binds, and what to expect (the dry run's report)."""
        f = self.floor
        window = f"{self.window_s:g} s"
        rate = (
            "no --rpm" if self.rpm is None else f"{f.requests} requests / {self.rpm} per {window}"
        )
        tokens = (
            "no --tpm"
            if self.tpm is None
            else f"{f.charged_tokens:.0f} tokens / {self.tpm} per {window} "
            "(prompt estimate + max_tokens, or p90)"
        )
        cap = "no cap" if self.max_inflight is None else f"{self.max_inflight} in flight"
        serving = f"predicted output (p50) at {self.s_per_token * 1000:g} ms/token, {cap}"
        return [
            f"makespan floor: {_duration(f.floor_s, self.time_scale)}, bound by {f.binding}",
            f"  requests {f.requests_s:8.1f} s  {rate}",
            f"  tokens   {f.tokens_s:8.1f} s  {tokens}",
            f"  serving  {f.serving_s:8.1f} s  {serving}",
            *self._expected(),
        ]

    def _expected(self) -> list[str]:
        """What the floor means for this run's makespan; no invented factor."""
        f = self.floor
        at = _duration(f.floor_s, self.time_scale)
        if f.binding == "serving":
            return [
                f"expected makespan: above the floor, {at}: the serving bound assumes",
                f"  {self.s_per_token * 1000:g} ms per output token and a provider that never "
                "queues; the run ends with its slowest answer",
            ]
        return [
            f"expected makespan: about the floor, {at}, give or take one window "
            f"({self.window_s:g} s):",
            "  sooner as the first window's budget is spent at once, later by the last answers",
        ]

    def lines(self) -> list[str]:
        """The dry run's report: what would be sent, the priors, the floor."""
        head = [
            "dry run: the input is valid; nothing was sent",
            f"to send: {self.to_send} requests ({self.already_done} already answered in the "
            f"output, {self.invalid} invalid lines)",
        ]
        if self.to_send == 0:
            return [*head, "nothing to send: a run would end at once"]
        return [*head, self.priors_line(), *self.floor_lines()]


def _duration(seconds: float, time_scale: float) -> str:
    """``655.0 s (10.9 min)``, with the wall time when the clock is compressed."""
    notes = []
    if seconds >= 120:
        notes.append(f"{seconds / 60:.1f} min")
    if time_scale != 1.0:
        notes.append(f"{seconds / time_scale:.1f} s of wall time at --time-scale {time_scale:g}")
    return f"{seconds:.1f} s" + (f" ({'; '.join(notes)})" if notes else "")


def advise_heuristic(priors: PriorsChoice, median_prompt_tokens: float) -> bool:
    """Whether the heuristic is the better choice: the learned model on tiny prompts
    (median prompt estimate under `TINY_PROMPT_TOKENS`)."""
    return priors.name == "learned" and 0 < median_prompt_tokens < TINY_PROMPT_TOKENS


def eta_s(
    *,
    to_send: int,
    done: int,
    elapsed_s: float,
    floor_s: float | None,
    binding: str | None = None,
    window_s: float = 60.0,
    unsent: int = 0,
    latency_s: float | None = None,
) -> float | None:
    """Clock seconds until the run ends, as the progress line shows it (``None``: unknown).

    Rules:

    1. Nothing left (``done >= to_send``): 0.
    2. The floor's remainder is ``max(0, floor_s - elapsed_s)`` (0 without a floor).
       When a rate binds (``binding``: requests or tokens) the first window's
       budget goes at once, so the last sends go a ``window_s`` before the
       steady-rate floor: the remainder runs to ``floor_s - window_s``, plus
       ``latency_s`` (the recent answers' mean).
    3. The observed rate is trusted once there is an answer and either
       `ETA_OBSERVED_AFTER_SHARE` of the requests is answered or
       `ETA_OBSERVED_AFTER_S` clock seconds have passed: then the ETA is
       ``left * elapsed_s / done``, never below the floor's remainder. A
       rate-bound run is paced by its budget, not its answers: its ETA is its
       remainder while it lasts; then the ``unsent`` requests go a window's
       worth (``to_send * window_s / floor_s``) at once, the rest at that rate,
       and the last answers ``latency_s`` later.
    4. Before that, the ETA is the floor's remainder; ``None`` (unknown) once
       it is 0: the first answers each took a whole call's latency while many
       more were in flight, so ``left * elapsed_s / done`` from them overstates
       the rest many times over (a serving-bound run of 300 short requests that
       took 56 s showed a first ETA of 1,962 s).
    """
    left = to_send - done
    if left <= 0:
        return 0.0
    # A floor within one window is all first-window budget: no rate paces that run.
    rate_bound = floor_s is not None and binding in ("requests", "tokens") and floor_s > window_s
    answer_s = latency_s or 0.0
    if floor_s is None:
        remainder = 0.0
    elif rate_bound:
        sends_left = max(0.0, floor_s - window_s - elapsed_s)
        remainder = sends_left + answer_s if sends_left > 0 else 0.0
    else:
        remainder = max(0.0, floor_s - elapsed_s)
    trusted = done > 0 and (
        done >= ETA_OBSERVED_AFTER_SHARE * to_send or elapsed_s >= ETA_OBSERVED_AFTER_S
    )
    if trusted and rate_bound and floor_s is not None:
        if remainder > 0:
            return remainder
        per_window = to_send * window_s / floor_s  # what the binding rate lets through
        waiting = min(max(0, unsent), left)
        return max(0.0, waiting - per_window) / per_window * window_s + answer_s
    if trusted:
        return max(remainder, left * elapsed_s / done)
    return remainder if remainder > 0 else None


def _prepared(body: dict[str, Any]) -> PreparedCall:
    """A validated body as ``submit`` prepares it (validation passed: no names to check)."""
    return prepare_call(CallArgs.of(body))


def _priors(source: PriorSource, queries: list[PriorQuery]) -> list[Prior]:
    if isinstance(source, BatchPriorSource):
        return list(source.prior_batch(queries))
    return [source.prior(query) for query in queries]


def plan_requests(
    handle: BinaryIO,
    lines: Sequence[BatchLine],
    *,
    default_model: str | None,
    priors: PriorSource,
    config: SchedulerConfig,
) -> list[Request]:
    """The core requests of ``lines``, as the scheduler will see them (module rule 1).

    Args:
        handle: The input file, open in binary mode.
        lines: The lines to send.
        default_model: The ``model`` of bodies that name none (``--model``).
        priors: The run's prior source.
        config: The run's scheduler config (each request's default class).

    Raises:
        BatchError: A line changed since it was validated.
    """
    estimator = TokenEstimator()
    planned: list[Request] = []
    for start in range(0, len(lines), PRIOR_CHUNK):
        chunk = lines[start : start + PRIOR_CHUNK]
        calls = [_prepared(load_body(handle, line, default_model)) for line in chunk]
        queries = [
            call.prior_query(line.custom_id) for line, call in zip(chunk, calls, strict=True)
        ]
        found = _priors(priors, queries)
        for line, call, planned_prior in zip(chunk, calls, found, strict=True):
            prior = call.prior or planned_prior  # an API that generates nothing has its own
            tokens = call.input_tokens(estimator)
            planned.append(
                Request(
                    id=line.custom_id,
                    klass=config.class_for(prior.routing_bucket, call.tenant),
                    prior=prior,
                    input_tokens=float(tokens),
                    max_output_tokens=call.output_cap,
                )
            )
    return planned


def batch_floor(requests: Sequence[Request], config: SchedulerConfig) -> MakespanFloor:
    """The makespan floor of ``requests`` under the run's budgets: ``rpm``/``tpm`` per
    window, ``max_inflight`` calls at once, the client's initial per-token latency."""
    budget = config.budget
    return makespan_floor(
        requests,
        rpm=budget.rpm if budget is not None else None,
        tpm=budget.tpm if budget is not None else None,
        window_s=budget.window_s if budget is not None else 60.0,
        max_inflight=config.max_inflight,
        s_per_token=config.signals.initial_s_per_token,
    )


def median_prompt_tokens(requests: Sequence[Request]) -> float:
    """Median prompt estimate of ``requests`` (0 for none)."""
    return statistics.median(r.input_tokens for r in requests) if requests else 0.0
