"""The batch benchmark's workloads: Batch API input lines, deterministic per seed.

- `workload`: held-out ShareGPT prompts (the test split, never trained
  on), each with ``max_tokens`` 1024 and the real response's length hinted to
  the mock (``metadata.mock_output_tokens``).
- `mixed_workload`: issue 11's mixed-length batch, where both the
  request and the token budget bind (see `MIXED_BUCKETS`).

What this module is not: it runs nothing; `bench.batch_bench` does.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final

import numpy as np

__all__ = ["MIXED_BUCKETS", "MixBucket", "mixed_workload", "workload"]


def workload(requests: int, *, seed: int = 0) -> list[dict[str, Any]]:
    """Batch API input lines from held-out ShareGPT pairs (deterministic sample)."""
    from predictors.data import load_pairs, split_by_conversation

    test = list(split_by_conversation(load_pairs(), seed=0).test)
    rng = np.random.default_rng(seed)
    chosen = rng.choice(len(test), size=min(requests, len(test)), replace=False)
    lines = []
    for k, index in enumerate(sorted(int(i) for i in chosen)):
        pair = test[index]
        body = {
            "model": "mock-1",
            "messages": [{"role": "user", "content": pair.prompt[:4000]}],
            "max_tokens": 1024,
            "metadata": {"mock_output_tokens": str(min(pair.response_tokens, 1024))},
        }
        lines.append(
            {"custom_id": f"sg-{k}", "method": "POST", "url": "/v1/chat/completions", "body": body}
        )
    return lines


# -- the mixed-length workload (issue 11) -------------------------------------------------


@dataclass(frozen=True, slots=True)
class MixBucket:
    """One size class of `mixed_workload`.

    Attributes:
        name: The Scheduling the Unschedulable bucket (`semisched.core.buckets`).
        share: Fraction of the requests (exact up to rounding, largest remainder).
        low: Smallest true output length, tokens.
        high: Largest true output length, tokens; also every body's ``max_tokens``.
    """

    name: str
    share: float
    low: int
    high: int


#: The batch benchmark's mix on Scheduling the Unschedulable's buckets; xlong capped at
#: 2,000 tokens. The true length is uniform in [low, high]; ``max_tokens`` is the bucket's
#: upper bound (a user who knows the kind of task caps it at that kind's longest answer), so
#: the charge overstates the answer.
MIXED_BUCKETS: Final = (
    MixBucket("short", 0.50, 8, 64),
    MixBucket("medium", 0.25, 65, 256),
    MixBucket("long", 0.15, 257, 1024),
    MixBucket("xlong", 0.10, 1025, 2000),
)
#: Prompt length in words: log-normal (median, sigma), clipped to [min, max]. Chat prompts
#: are mostly a few sentences with a tail of pasted context; the median is tuned so that
#: 400 requests at 40k TPM have issue 11's ~348 s token floor (mean charge ~580 tokens).
PROMPT_MEDIAN_WORDS: Final = 70.0
PROMPT_SIGMA: Final = 0.7
PROMPT_WORDS: Final = (20, 400)
#: Everyday English prose: ~4 bytes per token holds, and ``content_kind`` says ``prose``.
_PROSE: Final = """
    the of and to in is that for it as with was on be by this are from or have an they which
    one you were all we when there can more if about time would these other into has
    some could them than first been people only its also new most after work used should
    between each many before must through back where much years your way well down because
    water under however another around small large place while number part found again
    system still every world public general point house result often during several always
    problem service against information example process country program question
    without understand important available following different company
    research government development experience possible particular business children
    students interest history reason report market figure common support letter short
    simple answer explain describe summary notes review detail plan change value level"""
_WORDS: Final = tuple(_PROSE.split())


def _apportion(n: int, shares: Sequence[float]) -> list[int]:
    """``n`` split by ``shares`` into integers summing to ``n`` (largest remainder)."""
    exact = [n * share / sum(shares) for share in shares]
    counts = [math.floor(x) for x in exact]
    by_remainder = sorted(range(len(shares)), key=lambda i: (counts[i] - exact[i], i))
    for i in by_remainder[: n - sum(counts)]:
        counts[i] += 1
    return counts


def mixed_workload(requests: int, *, seed: int = 0) -> list[dict[str, Any]]:
    """Issue 11's mixed-length batch: chat lines with ``max_tokens`` and true lengths hinted.

    Deterministic in ``(requests, seed)``. The buckets' counts are their shares of
    ``requests`` exactly (largest remainder), in shuffled order; each body sets
    ``max_tokens`` to its bucket's upper bound and hints a true length drawn uniformly in
    the bucket (``metadata.mock_output_tokens``); prompts are `PROMPT_WORDS` words
    of prose (see the constants above).
    """
    if requests < 1:
        raise ValueError(f"{requests=} must be >= 1")
    rng = np.random.default_rng(seed)
    counts = _apportion(requests, [b.share for b in MIXED_BUCKETS])
    kinds = [b for b, count in zip(MIXED_BUCKETS, counts, strict=True) for _ in range(count)]
    order = rng.permutation(requests)
    low, high = PROMPT_WORDS
    lines = []
    for k, index in enumerate(order):
        bucket = kinds[int(index)]
        true_tokens = int(rng.integers(bucket.low, bucket.high + 1))
        words = int(np.clip(round(rng.lognormal(math.log(PROMPT_MEDIAN_WORDS), PROMPT_SIGMA)),
                            low, high))  # fmt: skip
        text = " ".join(_WORDS[int(i)] for i in rng.integers(0, len(_WORDS), size=words))
        body = {
            "model": "mock-1",
            "messages": [{"role": "user", "content": text.capitalize() + "?"}],
            "max_tokens": bucket.high,
            "metadata": {"mock_output_tokens": str(true_tokens)},
        }
        lines.append(
            {"custom_id": f"mx-{k}", "method": "POST", "url": "/v1/chat/completions", "body": body}
        )
    return lines


# -- the floor ----------------------------------------------------------------------------
