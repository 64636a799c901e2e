"""Prior sources for the information ladder (Scheduling the Unschedulable §4.4 and §4.10).

==============  ==========================================================
source          what the client believes
==============  ==========================================================
no-information  neutral p50/p90, routing bucket ``unknown``
class-only      neutral p50/p90, routing bucket = the true bucket label
coarse          the true bucket's representative p50 and upper-bound p90
oracle          p50 = p90 = the exact output length
noisy           another source's p50/p90 times a factor uniform in
                ``[1-L, 1+L]``, deterministic per (seed, request id);
                the routing bucket is kept (Scheduling the Unschedulable §4.10: routing
                buckets and physics unchanged)
==============  ==========================================================

Neutral values: p50 250, p90 550 tokens, close to the ShareGPT V3 p50/p90
measured here (253/547, see DESIGN.md) — a client that knows nothing about a
request can still know the population.

Coarse values per bucket: p50 is the bucket's geometric middle, p90 its upper
bound (xlong, unbounded, uses 2x/4x its lower bound): short 32/64,
medium 128/256, long 512/1024, xlong 2048/4096.
"""

from __future__ import annotations

import hashlib
import math
import struct
from dataclasses import dataclass

from semisched.core.buckets import Bucket
from semisched.core.request import Prior
from semisched.priors.sources import NEUTRAL_P50, NEUTRAL_P90, Heuristic, PriorQuery

__all__ = [
    "COARSE_PRIORS",
    "INFORMATION_LEVELS",
    "NEUTRAL_P50",
    "NEUTRAL_P90",
    "ClassOnly",
    "Coarse",
    "Heuristic",
    "NoInformation",
    "Noisy",
    "Oracle",
    "information_source",
]


COARSE_PRIORS: dict[Bucket, tuple[float, float]] = {
    Bucket.SHORT: (32.0, 64.0),
    Bucket.MEDIUM: (128.0, 256.0),
    Bucket.LONG: (512.0, 1024.0),
    Bucket.XLONG: (2048.0, 4096.0),
}


@dataclass(frozen=True, slots=True)
class NoInformation:
    """Neutral p50/p90 and an unknown routing bucket."""

    p50: float = NEUTRAL_P50
    p90: float = NEUTRAL_P90
    name: str = "no-information"

    def prior(self, query: PriorQuery) -> Prior:
        return Prior(p50=self.p50, p90=self.p90, bucket=Bucket.UNKNOWN)


@dataclass(frozen=True, slots=True)
class ClassOnly:
    """The true bucket label with neutral p50/p90."""

    p50: float = NEUTRAL_P50
    p90: float = NEUTRAL_P90
    name: str = "class-only"

    def prior(self, query: PriorQuery) -> Prior:
        return Prior(p50=self.p50, p90=self.p90, bucket=query.true_bucket)


@dataclass(frozen=True, slots=True)
class Coarse:
    """Bucket-bound p50/p90 from the true bucket."""

    name: str = "coarse"

    def prior(self, query: PriorQuery) -> Prior:
        bucket = query.true_bucket
        p50, p90 = COARSE_PRIORS[bucket]
        return Prior(p50=p50, p90=p90, bucket=bucket)


@dataclass(frozen=True, slots=True)
class Oracle:
    """The exact output length."""

    name: str = "oracle"

    def prior(self, query: PriorQuery) -> Prior:
        bucket = query.true_bucket  # raises a clear ValueError without a true length
        tokens = float(query.true_output_tokens or 0)
        return Prior(p50=tokens, p90=tokens, bucket=bucket)


def unit_uniform(seed: int, key: str) -> float:
    """A deterministic uniform draw in [0, 1) from ``(seed, key)``."""
    digest = hashlib.blake2b(f"{seed}\x00{key}".encode(), digest_size=8).digest()
    (value,) = struct.unpack("<Q", digest)
    return float(value) / 2.0**64


@dataclass(frozen=True, slots=True)
class Noisy:
    """Multiplicative noise on another source's p50/p90 (Scheduling the Unschedulable §4.10).

    Attributes:
        base: The source whose prior is perturbed.
        level: ``L`` in ``[0, 1)``: the factor is uniform in ``[1-L, 1+L]``.
        seed: Noise seed; the same (seed, request id) gives the same factor.
    """

    base: Coarse | Oracle | ClassOnly | NoInformation
    level: float
    seed: int = 0

    def __post_init__(self) -> None:
        if not (math.isfinite(self.level) and 0.0 <= self.level < 1.0):
            raise ValueError(f"level={self.level!r} must be in [0, 1)")

    @property
    def name(self) -> str:
        return f"{self.base.name}+noise{self.level:g}"

    def prior(self, query: PriorQuery) -> Prior:
        base = self.base.prior(query)
        if self.level == 0.0:
            return base
        factor = 1.0 + self.level * (2.0 * unit_uniform(self.seed, query.request_id) - 1.0)
        return base.scaled(factor)


#: The paper's information rungs by name.
INFORMATION_LEVELS: tuple[str, ...] = ("no-information", "class-only", "coarse", "oracle")


def information_source(
    name: str, *, noise: float = 0.0, seed: int = 0
) -> NoInformation | ClassOnly | Coarse | Oracle | Noisy:
    """Build a prior source by rung name, optionally with multiplicative noise.

    Raises:
        ValueError: For an unknown name or a bad noise level.
    """
    sources: dict[str, NoInformation | ClassOnly | Coarse | Oracle] = {
        "no-information": NoInformation(),
        "class-only": ClassOnly(),
        "coarse": Coarse(),
        "oracle": Oracle(),
    }
    try:
        source = sources[name]
    except KeyError:
        raise ValueError(f"name={name!r} must be one of {list(sources)}") from None
    return Noisy(source, noise, seed) if noise else source
