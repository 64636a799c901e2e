"""What each line of ``semisched batch`` cost, which tier answered it, and its deadline.

Every record of the output says which tier answered it and what it cost:

```text
"tier": "realtime" | "batch", "cost_usd": 0.000123
```

``cost_usd`` is the answer's ``usage`` at its endpoint's price
([`Price`][semisched.Price]: ``--price`` for one endpoint, each endpoint's ``price`` in a
fleet file): its prompt tokens, the cached ones at the cached price, and its output;
through the Batch API the price's ``batch_discount`` is taken off. It is ``null`` for an
error record and where the endpoint is not priced. `TierTally` adds the lines, the
spend and the deadlines met and missed by tier, for the summary: a line with a deadline
meets it when its record is written by then (an error record misses it).

Values and pure functions: nothing here reads a file or a clock.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from semisched.core.spend import Price, PriceTable
from semisched.runtime.apis import ApiUsage

if TYPE_CHECKING:
    from semisched.batch.options import BatchOptions

__all__ = ["Prices", "TierTally", "annotate"]


@dataclass(frozen=True, slots=True, kw_only=True)
class TierTally:
    """Lines, spend and deadlines by tier (this run's).

    Attributes:
        realtime_lines: Records written for lines sent real-time.
        batch_lines: Records written for lines answered through the Batch API.
        realtime_usd: What the real-time answers cost (US dollars).
        batch_usd: What the Batch API answers cost, discount taken off.
        priced: Whether any answer had a price.
        deadlines_met: Lines with a deadline recorded by then with an answer.
        deadlines_missed: Lines with a deadline recorded later, or with an error.
    """

    realtime_lines: int = 0
    batch_lines: int = 0
    realtime_usd: float = 0.0
    batch_usd: float = 0.0
    priced: bool = False
    deadlines_met: int = 0
    deadlines_missed: int = 0

    def plus(self, tier: str, cost: float | None, met: bool | None) -> TierTally:
        """These counts with one more record of ``tier`` costing ``cost`` (``None``: not
        priced, or an error), which ``met`` its deadline (``None``: it had none)."""
        batch = tier == "batch"
        usd = cost or 0.0
        return replace(
            self,
            realtime_lines=self.realtime_lines + (not batch),
            batch_lines=self.batch_lines + batch,
            realtime_usd=self.realtime_usd + (0.0 if batch else usd),
            batch_usd=self.batch_usd + (usd if batch else 0.0),
            priced=self.priced or cost is not None,
            deadlines_met=self.deadlines_met + (met is True),
            deadlines_missed=self.deadlines_missed + (met is False),
        )

    @property
    def spent_usd(self) -> float:
        """Both tiers' spend."""
        return self.realtime_usd + self.batch_usd

    def lines(self) -> list[str]:
        """The summary's lines: by tier when the Batch API answered any or a price is
        known, and the deadlines when any line had one."""
        out = []
        if self.batch_lines or self.priced:
            spend = ""
            if self.priced:
                spend = (f"; spent ${self.spent_usd:,.4f} (real-time ${self.realtime_usd:,.4f}, "
                         f"batch ${self.batch_usd:,.4f})")  # fmt: skip
            out.append(f"  tiers: {self.realtime_lines} real-time, {self.batch_lines} "
                       f"through the Batch API{spend}")  # fmt: skip
        if self.deadlines_met or self.deadlines_missed:
            out.append(
                f"  deadlines: {self.deadlines_met} met, {self.deadlines_missed} missed"
            )
        return out


class Prices:
    """The job's prices: ``price`` for one endpoint, or each endpoint's table in a fleet."""

    def __init__(self, options: BatchOptions) -> None:
        self._one: Price | None = options.price
        self._tables: dict[str, PriceTable | None] = {
            d.name: d.options.get("price") for d in options.endpoints
        }
        self._first = options.endpoints[0].name if options.endpoints else None

    def price(self, endpoint: str | None, model: str) -> Price | None:
        """The price of ``model`` at ``endpoint`` (``None``: the job's Batch API endpoint,
        a fleet's first)."""
        if not self._tables:
            return self._one
        table = self._tables.get(endpoint or self._first or "")
        return None if table is None else table.for_model(model)

    def cost(
        self, endpoint: str | None, model: str, usage: ApiUsage, *, batch: bool = False
    ) -> float | None:
        """What an answer with ``usage`` cost (``None``: not priced, or no usage)."""
        price = self.price(endpoint, model)
        if price is None or not usage.known:
            return None
        return price.cost(
            usage.prompt_tokens, usage.output_tokens, usage.cached_tokens, batch=batch
        )


def annotate(record: dict[str, Any], tier: str, cost: float | None) -> dict[str, Any]:
    """``record`` with its ``tier`` and ``cost_usd`` (module docstring)."""
    record["tier"] = tier
    record["cost_usd"] = cost
    return record


def model_of(body: Mapping[str, Any], default: str) -> str:
    """The model an answer's ``body`` names, else ``default``."""
    model = body.get("model")
    return model if isinstance(model, str) and model else default
