"""The ``semisched batch`` arguments of tiers and prices: ``--tier``, ``--batch-*``, ``--price``.

`add_tier_args` adds them to the ``batch`` parser; `tier_options` turns them
into `BatchOptions` fields; `parse_price` reads ``--price``
(``input=0.15,output=0.60[,cached_input=0.075][,batch_discount=0.5]``, US dollars per
million tokens, as a fleet file's ``price`` table).

What this module is not: it decides no tier (`semisched.batch.tier`).
"""

from __future__ import annotations

import argparse
from typing import Any

from semisched.batch.tier import TIERS
from semisched.core.spend import Price

__all__ = ["add_tier_args", "parse_price", "tier_options"]


def parse_price(text: str) -> Price:
    """``--price``'s value (``-`` may stand for ``_`` in keys).

    Raises:
        ValueError: A malformed pair, an unknown key or a bad value, naming it.
    """
    values: dict[str, float] = {}
    for pair in text.split(","):
        key, sep, value = pair.partition("=")
        key = key.strip().replace("-", "_")
        if not sep or not key:
            raise ValueError(f"--price {text!r}: each item must be KEY=VALUE")
        try:
            values[key] = float(value)
        except ValueError:
            raise ValueError(f"--price {text!r}: {key}={value!r} is not a number") from None
    try:
        return Price.of(values)
    except (ValueError, TypeError) as exc:
        raise ValueError(f"--price {text!r}: {exc}") from None


def _price_arg(text: str) -> Price:
    try:
        return parse_price(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def add_tier_args(batch: argparse.ArgumentParser) -> None:
    """Who answers each line (real-time or the Batch API), and what answers cost."""
    batch.add_argument(
        "--tier",
        default="realtime",
        choices=TIERS,
        help="who answers each line: realtime (the default) sends every line through the "
        "scheduler; batch uploads every line to the provider's Batch API (/v1/files, "
        "/v1/batches) at its discount; auto sends a line through the Batch API when its "
        "deadline (body.metadata.deadline_s or --deadline, seconds from the job's start) "
        "leaves more slack than the batch turnaround estimate, or when it has none, and the "
        "rest real-time. The batches are journaled in OUTPUT.batches.jsonl, so a rerun "
        "never pays twice for a line",
    )
    batch.add_argument(
        "--batch-turnaround",
        type=float,
        default=3600.0,
        metavar="SECONDS",
        help="the typical Batch API turnaround before any batch of the job is seen (3600); "
        "the job moves it towards the slowest it sees",
    )
    batch.add_argument(
        "--batch-safety",
        type=float,
        default=1.5,
        metavar="FACTOR",
        help="--tier auto plans with this many times the typical turnaround (1.5)",
    )
    batch.add_argument(
        "--batch-poll",
        type=float,
        default=60.0,
        metavar="SECONDS",
        help="seconds between looks at the batches in progress (60)",
    )
    batch.add_argument(
        "--price",
        type=_price_arg,
        metavar="input=X,output=Y",
        help="the endpoint's price in US dollars per million tokens (also ,cached_input=Z "
        ",batch_discount=F, 0.5 by default): each record's cost_usd and the summary's spend; "
        "a fleet file's endpoints name their own price",
    )


def tier_options(args: argparse.Namespace) -> dict[str, Any]:
    """The `BatchOptions` fields of these arguments."""
    return {
        "tier": args.tier,
        "batch_turnaround_s": args.batch_turnaround,
        "batch_safety": args.batch_safety,
        "batch_poll_s": args.batch_poll,
        "price": args.price,
    }
