"""The prior interface: what a length predictor hands the scheduler.

``Prior`` is defined in :mod:`semisched.core.request` (the core must not import
this package) and re-exported here. A :class:`PriorSource` turns a
:class:`PriorQuery` into a :class:`Prior`. Sources never see the scheduler;
the scheduler never calls a model: the runtime and the simulator ask a source
and put the answer on the request.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from semisched.core.buckets import Bucket, bucket_for_tokens
from semisched.core.request import Prior

__all__ = ["BatchPriorSource", "Prior", "PriorQuery", "PriorSource"]


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
    queries and runs :meth:`prior_batch` in a worker thread with a bounded wait,
    falling back to a cheap prior on timeout or error.
    """

    def prior_batch(self, queries: list[PriorQuery]) -> list[Prior]:
        """Return one prior per query, in order."""
        ...
