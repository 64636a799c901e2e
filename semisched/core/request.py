"""The request record and the prior it carries.

A `Prior` is the client's belief about a request's output length
(p50/p90 tokens, Scheduling the Unschedulable §3: "coarse token-length priors are assumed for each
request before submission"). A `Request` is what the core queues: who
(id, class), how big we think it is (prior, estimated input tokens), and when
(arrival, optional absolute deadline). Both are immutable values; the engine
keeps every piece of mutable state itself.

Rules enforced here (through `semisched.core.checks`: misuse raises
``ValueError`` naming the field, an object of the wrong class ``TypeError``):

1. ``p50`` and ``p90`` are finite numbers (not bools), ``0 <= p50 <= p90``.
2. ``input_tokens`` is a finite number ``>= 0``; ``arrival`` is finite.
3. ``deadline`` is ``None`` (no deadline) or a finite absolute time ``>= arrival``.
4. ``id`` and ``klass`` are non-empty strings; ``max_output_tokens`` is
   ``None`` or an int ``>= 0``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from semisched.core.buckets import BUCKET_BOUNDS, Bucket, bucket_for_tokens
from semisched.core.checks import check_instance, check_int, check_number, check_str

__all__ = ["SHORT_PROBABILITY", "Z90", "Prior", "Request"]

#: The standard normal's 90th percentile: a prior's p90 is ``p50 * exp(Z90 * sigma)``.
Z90 = 1.2815515655446004

#: A prior routes ``short`` when it gives a short answer at least this probability
#: (`Prior.short_probability`). 0.5 is the paper's rule (``p50 <= 64``); lower
#: routes more uncertain requests to the interactive lane, where a short answer
#: misrouted to the batch lane would wait behind long ones. 0.1 measured best for
#: the learned model on the ShareGPT trace (a measured run); priors with
#: little spread (coarse, oracle, the heuristic's capped ones) route as before.
SHORT_PROBABILITY = 0.1

_SHORT_MAX = float(BUCKET_BOUNDS[Bucket.SHORT][1] or 0)


@dataclass(frozen=True, slots=True, kw_only=True)
class Prior:
    """A coarse belief about a request's output length, in tokens.

    Attributes:
        p50: Median predicted output tokens.
        p90: 90th-percentile predicted output tokens (``>= p50``).
        bucket: Routing bucket, when the source knows it independently of
            ``p50`` (class-only priors carry the true label with neutral
            p50/p90; no-information priors carry `Bucket.UNKNOWN`).
            ``None`` means "derive it from ``p50``".
    """

    p50: float
    p90: float
    bucket: Bucket | None = None
    #: The spread of a log-normal fit to p50/p90: ``log(p90 / p50) / Z90`` (derived once:
    #: routing, overload control and ordering all read it).
    sigma: float = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        check_number("p50", self.p50, minimum=0)
        check_number("p90", self.p90, minimum=0)
        if self.p90 < self.p50:
            raise ValueError(f"p90={self.p90!r} must be >= p50={self.p50!r}")
        check_instance("bucket", self.bucket, Bucket, optional=True)
        p50, p90 = self.p50, self.p90
        sigma = math.log(p90 / p50) / Z90 if p50 > 0.0 and p90 > p50 else 0.0
        object.__setattr__(self, "sigma", sigma)  # frozen: set once, here

    @property
    def short_probability(self) -> float:
        """P(output <= 64 tokens) under a log-normal fit to p50/p90 (a step without spread)."""
        sigma = self.sigma
        if sigma == 0.0 or self.p50 <= 0.0:
            return 1.0 if self.p50 <= _SHORT_MAX else 0.0
        z = math.log(_SHORT_MAX / self.p50) / sigma
        return 0.5 * math.erfc(-z / math.sqrt(2.0))

    def quantile(self, z: float) -> float:
        """The log-normal fit's quantile at standard score ``z`` (``0``: p50; ``Z90``: p90)."""
        return self.p50 * math.exp(z * self.sigma) if z else self.p50

    @property
    def routing_bucket(self) -> Bucket:
        """The bucket the policies route and shed by: `route` at `SHORT_PROBABILITY`."""
        return self.route(SHORT_PROBABILITY)

    def route(self, short_probability: float) -> Bucket:
        """The given bucket, else ``short`` when `short_probability` reaches
        ``short_probability`` (0.5: the paper's ``p50 <= 64``), else p50's bucket."""
        if self.bucket is not None:
            return self.bucket
        bucket = bucket_for_tokens(self.p50)
        if bucket is not Bucket.SHORT and self.short_probability >= short_probability:
            return Bucket.SHORT
        return bucket

    def scaled(self, factor: float) -> Prior:
        """Return this prior with p50 and p90 multiplied by ``factor`` (bucket kept)."""
        check_number("factor", factor, minimum=0)
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
        model: The logical model it asks for; routing sends it only to
            endpoints that serve it (``""``: any endpoint).
        tenant: The tenant it is sent for (``""``: the configured default
            tenant; `semisched.core.tenants.config`).
        compressed_tokens: Estimated prompt tokens after compress-and-route's
            compression, when the caller prepared a compressed prompt (``None``:
            none; [`RoutingConfig`][semisched.core.config.RoutingConfig] ``compress_band``).
            An endpoint whose context holds the compressed request but not the
            original may take it; the caller then sends the compressed prompt.
        stream: The call streams its answer, so the shell reports its first token
            (`Engine.first_token`); a learned concurrency limit then also reads a first
            token that is late.
    """

    id: str
    klass: str
    prior: Prior
    input_tokens: float = 0.0
    arrival: float = 0.0
    deadline: float | None = None
    max_output_tokens: int | None = None
    model: str = ""
    tenant: str = ""
    compressed_tokens: float | None = None
    stream: bool = False
    bucket: Bucket = field(init=False)

    def __post_init__(self) -> None:
        check_str("id", self.id)
        check_str("klass", self.klass)
        check_instance("prior", self.prior, Prior)
        check_number("input_tokens", self.input_tokens, minimum=0)
        check_number("arrival", self.arrival)
        check_number("deadline", self.deadline, optional=True)
        if self.deadline is not None and self.deadline < self.arrival:
            raise ValueError(f"deadline={self.deadline!r} must be >= arrival={self.arrival!r}")
        check_int("max_output_tokens", self.max_output_tokens, minimum=0, optional=True)
        if not isinstance(self.model, str):
            raise ValueError(f"model={self.model!r} must be a str")
        if not isinstance(self.tenant, str):
            raise ValueError(f"tenant={self.tenant!r} must be a str")
        if self.compressed_tokens is not None:
            check_number("compressed_tokens", self.compressed_tokens, minimum=0,
                         maximum=self.input_tokens)  # fmt: skip
        if type(self.stream) is not bool:
            raise ValueError(f"stream={self.stream!r} must be a bool")
        object.__setattr__(self, "bucket", self.prior.routing_bucket)
