"""The request record and the prior it carries.

A :class:`Prior` is the client's belief about a request's output length
(p50/p90 tokens, seed 004 §3: "coarse token-length priors are assumed for each
request before submission"). A :class:`Request` is what the core queues: who
(id, class), how big we think it is (prior, estimated input tokens), and when
(arrival, optional absolute deadline). Both are immutable values; the engine
keeps every piece of mutable state itself.

Rules enforced here (misuse raises ``ValueError`` naming the field):

1. ``p50`` and ``p90`` are finite, ``0 <= p50 <= p90``.
2. ``input_tokens`` is a finite number ``>= 0``; ``arrival`` is finite.
3. ``deadline`` is ``None`` (no deadline) or a finite absolute time ``>= arrival``.
4. ``id`` and ``klass`` are non-empty strings.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from semisched.core.buckets import Bucket, bucket_for_tokens

__all__ = ["Prior", "Request"]


@dataclass(frozen=True, slots=True, kw_only=True)
class Prior:
    """A coarse belief about a request's output length, in tokens.

    Attributes:
        p50: Median predicted output tokens.
        p90: 90th-percentile predicted output tokens (``>= p50``).
        bucket: Routing bucket, when the source knows it independently of
            ``p50`` (class-only priors carry the true label with neutral
            p50/p90; no-information priors carry :attr:`Bucket.UNKNOWN`).
            ``None`` means "derive it from ``p50``".
    """

    p50: float
    p90: float
    bucket: Bucket | None = None

    def __post_init__(self) -> None:
        if not (math.isfinite(self.p50) and self.p50 >= 0):
            raise ValueError(f"p50={self.p50!r} must be a finite number >= 0")
        if not (math.isfinite(self.p90) and self.p90 >= self.p50):
            raise ValueError(f"p90={self.p90!r} must be finite and >= p50={self.p50!r}")
        if self.bucket is not None and not isinstance(self.bucket, Bucket):
            raise TypeError(f"bucket={self.bucket!r} must be a Bucket or None")

    @property
    def routing_bucket(self) -> Bucket:
        """The bucket the policies route and shed by."""
        return self.bucket if self.bucket is not None else bucket_for_tokens(self.p50)

    def scaled(self, factor: float) -> Prior:
        """Return this prior with p50 and p90 multiplied by ``factor`` (bucket kept)."""
        if not (math.isfinite(factor) and factor >= 0):
            raise ValueError(f"{factor=} must be a finite number >= 0")
        return Prior(p50=self.p50 * factor, p90=self.p90 * factor, bucket=self.bucket)


@dataclass(frozen=True, slots=True, kw_only=True)
class Request:
    """One request as the core sees it.

    Attributes:
        id: Caller-unique identifier.
        klass: Scheduling class name (must be configured in the engine).
        prior: Output-length prior.
        input_tokens: Estimated prompt tokens.
        arrival: Time the request was submitted (the caller's clock).
        deadline: Absolute time after which the answer is useless, or ``None``.
        max_output_tokens: The call's ``max_tokens``, if it sets one: what a
            provider reserves against its token limit (a rate budget charges it).
    """

    id: str
    klass: str
    prior: Prior
    input_tokens: float = 0.0
    arrival: float = 0.0
    deadline: float | None = None
    max_output_tokens: int | None = None
    bucket: Bucket = field(init=False)

    def __post_init__(self) -> None:
        if not isinstance(self.id, str) or not self.id:
            raise ValueError(f"id={self.id!r} must be a non-empty string")
        if not isinstance(self.klass, str) or not self.klass:
            raise ValueError(f"klass={self.klass!r} must be a non-empty string")
        if not isinstance(self.prior, Prior):
            raise TypeError(f"prior={self.prior!r} must be a Prior")
        if not (math.isfinite(self.input_tokens) and self.input_tokens >= 0):
            raise ValueError(f"input_tokens={self.input_tokens!r} must be a finite number >= 0")
        if not math.isfinite(self.arrival):
            raise ValueError(f"arrival={self.arrival!r} must be finite")
        if self.deadline is not None and not (
            math.isfinite(self.deadline) and self.deadline >= self.arrival
        ):
            raise ValueError(
                f"deadline={self.deadline!r} must be None or a finite time"
                f" >= arrival={self.arrival!r}"
            )
        if self.max_output_tokens is not None and (
            isinstance(self.max_output_tokens, bool)
            or not isinstance(self.max_output_tokens, int)
            or self.max_output_tokens < 0
        ):
            raise ValueError(
                f"max_output_tokens={self.max_output_tokens!r} must be None or an int >= 0"
            )
        object.__setattr__(self, "bucket", self.prior.routing_bucket)
