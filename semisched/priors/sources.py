"""The prior interface of the SDK, and its default source.

A prior source turns a `PriorQuery` into a [`Prior`][semisched.core.Prior]
(p50/p90 output tokens and a routing bucket). Sources never see the
scheduler; the scheduler never calls a model: the runtime and the simulator
ask a source and put the answer on the request.

`Heuristic` is what the SDK uses when nothing better is configured.
Model-backed sources (the learned length predictor, the information-ladder
sources of the benchmarks) live in the ``predictors`` package, which
implements these protocols; ``semisched`` never imports ``predictors``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from semisched.core.buckets import Bucket, bucket_for_tokens
from semisched.core.request import Prior

__all__ = [
    "NEUTRAL_P50",
    "NEUTRAL_P90",
    "BatchPriorSource",
    "Heuristic",
    "Prior",
    "PriorQuery",
    "PriorSource",
    "PriorsChoice",
]

#: Neutral p50/p90 output tokens: close to the ShareGPT V3 p50/p90 measured
#: here (253/547, see DESIGN.md). A client that knows nothing about a request
#: can still know the population.
NEUTRAL_P50 = 250.0
NEUTRAL_P90 = 550.0


@dataclass(frozen=True, slots=True, kw_only=True)
class PriorQuery:
    """Everything a prior source may look at for one request.

    Attributes:
        request_id: Stable id (noisy sources derive their noise from it).
        messages: Chat messages, when the caller has them.
        prompt: Plain prompt text, when the caller has it.
        max_tokens: The caller's output cap, if any.
        true_output_tokens: The realised length. Only simulators and
            benchmarks know it; class-only and oracle sources need it.
        previous_output_tokens: Length of the previous assistant answer in the
            same conversation, when the caller knows it (its
            ``usage.completion_tokens``); the learned predictor uses it.
    """

    request_id: str
    messages: tuple[dict[str, Any], ...] | None = None
    prompt: str | None = None
    max_tokens: int | None = None
    true_output_tokens: int | None = None
    previous_output_tokens: int | None = None

    @property
    def true_bucket(self) -> Bucket:
        """The bucket of the realised length.

        Raises:
            ValueError: If the query carries no true length.
        """
        if self.true_output_tokens is None:
            raise ValueError(
                f"request_id={self.request_id!r}: this prior source needs true_output_tokens"
            )
        return bucket_for_tokens(self.true_output_tokens)


@runtime_checkable
class PriorSource(Protocol):
    """Produces a prior for a request."""

    @property
    def name(self) -> str:
        """Short name used in reports (``coarse``, ``oracle``, ...)."""
        ...

    def prior(self, query: PriorQuery) -> Prior:
        """Return the prior for ``query``."""
        ...


@runtime_checkable
class BatchPriorSource(PriorSource, Protocol):
    """A model-backed source: blocking, better called on many queries at once.

    The async runtime never calls it on the event loop: it micro-batches
    queries and runs `prior_batch` in a worker thread with a bounded wait,
    falling back to a cheap prior on timeout or error.
    """

    def prior_batch(self, queries: list[PriorQuery]) -> list[Prior]:
        """Return one prior per query, in order."""
        ...


@dataclass(frozen=True, slots=True, kw_only=True)
class PriorsChoice:
    """Which output-length priors a run uses, and why.

    Attributes:
        name: The source's name: ``"learned"``, ``"heuristic"``, or a
            caller's own source's.
        reason: Why, in a few words (``"MiniLM length model"``,
            ``"--priors heuristic"``, ``"the ml extra is not installed"``).
        load_s: Wall seconds loading the model took (``None``: nothing loaded).
    """

    name: str
    reason: str
    load_s: float | None = None

    def __str__(self) -> str:
        if self.load_s is None:
            return f"{self.name} ({self.reason})"
        return f"{self.name} ({self.reason}, loaded in {self.load_s:.1f} s)"


@dataclass(frozen=True, slots=True)
class Heuristic:
    """What a client knows without a model: the caller's ``max_tokens`` cap.

    - No cap: the size is unknown. Neutral p50/p90 and routing bucket
      ``unknown`` (overload control sheds it at one uniform level).
    - A cap at or below the neutral p90 bounds the request from above: the
      population truncated at the cap, ``p50 = min(neutral p50, cap)`` and
      ``p90 = cap``. A request capped at 32 tokens is short whatever it says;
      one capped at 200 is at most medium.
    - A larger cap is read as the request's own p90 (whoever allows 2,000
      tokens expects answers of that order): ``p90 = cap`` and p50 at the
      neutral p50/p90 ratio, ``p50 = cap * p50 / p90``. The routing bucket
      follows from that p50, so a 2,000-token cap routes as ``long`` and
      overload control can defer or shed it. (Clipping the neutral p50 to the
      cap would call it ``medium``, which the ladder never sheds.)

    The two readings meet at ``cap = p90``, so the prior grows with the cap.
    This is the SDK's default without the ``ml`` extra, and the fallback when a
    learned source is slow.
    """

    p50: float = NEUTRAL_P50
    p90: float = NEUTRAL_P90
    name: str = "heuristic"

    def prior(self, query: PriorQuery) -> Prior:
        cap = query.max_tokens
        if cap is None or cap <= 0:
            return Prior(p50=self.p50, p90=self.p90, bucket=Bucket.UNKNOWN)
        if cap <= self.p90:
            return Prior(p50=min(self.p50, float(cap)), p90=float(cap))
        return Prior(p50=cap * self.p50 / self.p90, p90=float(cap))
