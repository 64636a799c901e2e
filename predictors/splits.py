"""ShareGPT pairs split by conversation, and their length statistics.

What this module is for: the deterministic train/validation/test split of
`Pair` s (every chunk of one conversation lands in the same
part) and the dataset summary the predictor's report quotes (length percentiles and
the scheduler's token buckets). What it is not: no reading, counting or caching
(`predictors.data`).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np

from semisched.core.buckets import SIZED_BUCKETS, bucket_for_tokens

if TYPE_CHECKING:  # data re-exports this module's names: no import back at run time
    from predictors.data import Pair

__all__ = ["PERCENTILES", "Split", "conversation_root", "dataset_stats", "split_by_conversation"]

#: The response-length percentiles `dataset_stats` reports.
PERCENTILES: tuple[int, ...] = (5, 25, 50, 75, 90, 95, 99)
_CHUNK_SUFFIX = re.compile(r"_\d+$")


class Split(NamedTuple):
    """Pairs split by conversation; each list keeps the input order."""

    train: list[Pair]
    validation: list[Pair]
    test: list[Pair]


def conversation_root(conversation_id: str) -> str:
    """The original conversation a ShareGPT chunk id belongs to: ``"QWJhYvA_3"`` → ``"QWJhYvA"``.

    ShareGPT V3 "split" cuts long conversations into chunks with ids ``<id>_0``, ``<id>_1``,
    …; the packaged file's 17,671 records come from 9,460 original conversations. Ids without
    a ``_<digits>`` suffix are their own root.
    """
    return _CHUNK_SUFFIX.sub("", conversation_id)


def split_by_conversation(
    pairs: Iterable[Pair],
    seed: int = 0,
    fractions: tuple[float, float, float] = (0.8, 0.1, 0.1),
    *,
    group: Callable[[str], str] = conversation_root,
) -> Split:
    """Split pairs into train/validation/test so that no conversation straddles two parts.

    Each pair goes where ``blake2b(f"{seed}:{group(conversation_id)}")``, read as a number
    in [0, 1), falls among the cumulative ``fractions``: deterministic, independent of the
    order and number of pairs, and stable when data is added. By default the group is
    `conversation_root`, so the chunks of one original ShareGPT conversation also stay
    together (no chunk-to-chunk leakage); pass ``group=lambda cid: cid`` to split by record.
    Fractions hold for conversations in expectation; pair shares vary with conversation size.
    """
    if len(fractions) != 3 or any(not f >= 0 for f in fractions):
        raise ValueError(f"{fractions=} must be three non-negative numbers")
    total = sum(fractions)
    if abs(total - 1.0) > 1e-9:
        raise ValueError(f"{fractions=} must sum to 1")
    train_end = fractions[0]
    validation_end = fractions[0] + fractions[1]
    split = Split([], [], [])
    where: dict[str, list[Pair]] = {}
    for pair in pairs:
        key = group(pair.conversation_id)
        part = where.get(key)
        if part is None:
            digest = hashlib.blake2b(f"{seed}:{key}".encode(), digest_size=8).digest()
            u = int.from_bytes(digest, "big") / 2.0**64
            if u < train_end:
                part = split.train
            elif u < validation_end:
                part = split.validation
            else:
                part = split.test
            where[key] = part
        part.append(pair)
    return split


def dataset_stats(pairs: Sequence[Pair]) -> dict[str, Any]:
    """Summary of a pair set.

    Returns a dict: ``pairs``; ``conversations`` (distinct record ids); ``response_tokens``
    (``mean``, ``max`` and ``p5`` … ``p99`` of `PERCENTILES`, numpy's default linear
    interpolation); ``bucket_counts`` and ``bucket_shares`` keyed by bucket name (``short``,
    ``medium``, ``long``, ``xlong``, via `semisched.core.buckets.bucket_for_tokens`);
    ``previous_response_share`` (the share of pairs that follow an assistant answer).

    Raises:
        ValueError: If ``pairs`` is empty.
    """
    if not pairs:
        raise ValueError("dataset_stats needs at least one pair")
    lengths = np.fromiter((p.response_tokens for p in pairs), np.int64, len(pairs))
    values, counts = np.unique(lengths, return_counts=True)
    bucket_counts = {str(b): 0 for b in SIZED_BUCKETS}
    for value, count in zip(values.tolist(), counts.tolist(), strict=True):
        bucket_counts[str(bucket_for_tokens(value))] += count
    n = len(pairs)
    quantiles = np.percentile(lengths, PERCENTILES)
    return {
        "pairs": n,
        "conversations": len({p.conversation_id for p in pairs}),
        "response_tokens": {
            "mean": float(lengths.mean()),
            **{f"p{q}": float(v) for q, v in zip(PERCENTILES, quantiles, strict=True)},
            "max": int(lengths.max()),
        },
        "bucket_counts": bucket_counts,
        "bucket_shares": {name: count / n for name, count in bucket_counts.items()},
        "previous_response_share": sum(p.previous_response_tokens is not None for p in pairs) / n,
    }
