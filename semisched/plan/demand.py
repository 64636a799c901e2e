"""The workload's per-request numbers the planner's sweep reuses, and the demand of any part.

`Requests` holds a workload's requests sorted by routed tokens (prompt +
reserved output, `Workload.route_tokens`), with each one's compression floor or
seeded draw: a boundary's short pool is then a prefix and the long pool's
``(γB, ∞)`` a suffix. A `Part` is some requests' count, iteration sums and
per-class histograms, from prefix sums and contiguous slices, or recomputed for
requests whose prompt is compressed; `Requests.demand` turns the union of parts
into the `PoolDemand` a pool is sized from (`semisched.plan.pools`).
`semisched.plan.planner` is the sweep that uses them.

Pure numpy; no clock, no I/O.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from semisched.plan.pools import Histogram, PoolDemand, bin_index, bin_values
from semisched.plan.profile import UnitProfile
from semisched.plan.workload import IntArray, Workload

__all__ = ["Part", "Requests"]


class Requests:
    """The workload's per-request numbers the sweep reuses, sorted by routed tokens.

    Sorted, a boundary's short pool is a prefix and ``(γB, ∞)`` a suffix: their
    sums come from prefix sums and their histograms from contiguous slices.
    """

    def __init__(self, workload: Workload, profile: UnitProfile, p_c: float, seed: int) -> None:
        order = np.argsort(workload.route_tokens, kind="stable")
        self.chunk = profile.prefill_chunk
        self.prompt = workload.prompt_tokens[order]
        self.output = workload.output_tokens[order]
        self.reserve = workload.reserve_tokens[order]
        self.route = workload.route_tokens[order]
        self.classes = workload.classes[order]
        self.names = workload.class_names
        self.n = len(workload)
        self.floor = None if workload.floor_tokens is None else workload.floor_tokens[order]
        self.draw = (np.random.default_rng(seed).random(self.n) < p_c)[order]
        self.ttft_bins, self.e2e_bins, iters = self.iterations(self.prompt, self.output)
        self.bins = int(max(self.ttft_bins.max(), self.e2e_bins.max())) + 64
        self.values = bin_values(self.bins)
        self.keyed_ttft = self.classes * self.bins + self.ttft_bins
        self.keyed_e2e = self.classes * self.bins + self.e2e_bins
        as_float = iters.astype(np.float64)
        self.sum1 = np.concatenate([[0.0], np.cumsum(as_float)])
        self.sum2 = np.concatenate([[0.0], np.cumsum(as_float * as_float)])

    def index(self, tokens: float) -> int:
        """How many requests route at most ``tokens``."""
        return int(np.searchsorted(self.route, tokens, side="right"))

    def iterations(self, prompt: IntArray, output: IntArray) -> tuple[IntArray, IntArray, IntArray]:
        prefill = -(-prompt // self.chunk)
        e2e = np.maximum(1, prefill + output)
        ttft = np.maximum(1, prefill + (output >= 1))
        return bin_index(ttft), bin_index(e2e), e2e

    def counts(self, keyed: IntArray) -> npt.NDArray[np.float64]:
        size = len(self.names) * self.bins
        return np.bincount(keyed, minlength=size).astype(np.float64)

    def part(self, start: int, stop: int, picked: IntArray | None = None, budget: int = 0) -> Part:
        """Requests ``start:stop`` (or, with ``picked``, those indices compressed to ``budget``)."""
        if picked is None:
            return Part(
                stop - start,
                float(self.sum1[stop] - self.sum1[start]),
                float(self.sum2[stop] - self.sum2[start]),
                self.counts(self.keyed_ttft[start:stop]),
                self.counts(self.keyed_e2e[start:stop]),
            )
        prompt = self.prompt[picked]
        if budget:
            prompt = np.minimum(prompt, budget - self.reserve[picked])
        ttft, e2e, iters = self.iterations(prompt, self.output[picked])
        classes = self.classes[picked] * self.bins
        as_float = iters.astype(np.float64)
        return Part(
            len(picked),
            float(as_float.sum()),
            float(as_float @ as_float),
            self.counts(classes + ttft),
            self.counts(classes + e2e),
        )

    def demand(self, rate: float, parts: Sequence[Part]) -> PoolDemand:
        """The demand of the union of ``parts``."""
        count = sum(p.count for p in parts)
        mean = sum(p.sum1 for p in parts) / count
        scv = max(0.0, sum(p.sum2 for p in parts) / count - mean * mean) / (mean * mean)
        ttft = np.sum([p.ttft for p in parts], axis=0).reshape(len(self.names), self.bins)
        e2e = np.sum([p.e2e for p in parts], axis=0).reshape(len(self.names), self.bins)
        return PoolDemand(
            rate=rate * count / self.n,
            mean_iterations=mean,
            scv=scv,
            ttft={name: Histogram(self.values, ttft[i]) for i, name in enumerate(self.names)},
            e2e={name: Histogram(self.values, e2e[i]) for i, name in enumerate(self.names)},
        )


@dataclass(frozen=True, slots=True)
class Part:
    """Some requests' count, iteration sums and keyed histograms (class-major)."""

    count: int
    sum1: float
    sum2: float
    ttft: npt.NDArray[np.float64]
    e2e: npt.NDArray[np.float64]
