"""Spend as a resource: what a token costs, and how much may be spent when.

Two values, both pure data:

- `Price`: US dollars per million input, cached input and output tokens at
  one endpoint (for one model, or every model it serves), and the discount its
  Batch API gives. `Price.cost` turns a request's usage into dollars;
  cached input tokens (a provider's prompt cache) are billed at ``cached_input``.
- `SpendCap`: at most ``usd`` per calendar ``hour``, ``day`` or ``month``
  (UTC), for one tenant or for the whole key. The runtime reserves each request's
  cost against every cap it falls under before sending it, settles the reservation
  on the real usage and releases it on failure (`semisched.runtime.spending`);
  the core never sees the caps.

An endpoint's prices are a `PriceTable` (``EndpointSpec.price``): one price
for every model, or one per model with an optional ``"*"`` for the rest. What the
core does with them: the ``cost`` routing policy sends a request to the cheapest
endpoint that can meet its deadline (`semisched.core.fleet.cost_routing`).

Pure: no clock, no I/O. Calendar periods are computed from a wall time the caller
passes (`SpendCap.period`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Final

from semisched.core.checks import check_choice, check_fraction, check_number, check_str

__all__ = ["PERIODS", "Price", "PriceTable", "SpendCap", "price_table", "usd"]

#: The periods a cap can count over: calendar hours, days and months in UTC.
PERIODS: Final = ("hour", "day", "month")

_MILLION: Final = 1_000_000.0


def usd(amount: float) -> str:
    """``amount`` US dollars for a reader: in cents when that is exact or from a dollar up
    (``$1,234.50``, ``$0.10``), else four significant digits (``$0.0005``, ``$0.01234``)."""
    if abs(amount) >= 1 or round(amount, 2) == amount:
        return f"${amount:,.2f}"
    return f"${amount:.4g}"


@dataclass(frozen=True, slots=True, kw_only=True)
class Price:
    """What one endpoint bills, in US dollars per million tokens.

    Attributes:
        input: Per million prompt (input) tokens.
        output: Per million output tokens (reasoning tokens included, as providers
            bill them).
        cached_input: Per million prompt tokens the provider read from its prompt
            cache (``None``: the same as ``input``).
        batch_discount: The fraction its Batch API takes off every price (0.5: half
            price; 0: no Batch API discount).
    """

    input: float
    output: float
    cached_input: float | None = None
    batch_discount: float = 0.5

    def __post_init__(self) -> None:
        check_number("input", self.input, minimum=0)
        check_number("output", self.output, minimum=0)
        check_number("cached_input", self.cached_input, minimum=0, optional=True)
        check_fraction("batch_discount", self.batch_discount)

    @classmethod
    def of(cls, value: Price | Mapping[str, object]) -> Price:
        """A price from itself or a table (a fleet or gateway file's ``price``).

        Raises:
            ValueError: A table with a missing, unknown or bad field, naming it.
        """
        if isinstance(value, Price):
            return value
        if not isinstance(value, Mapping):
            raise ValueError(
                f"price={value!r} must be a table of input, output, cached_input, batch_discount"
            )
        known = ("input", "output", "cached_input", "batch_discount")
        unknown = sorted(set(value) - set(known))
        if unknown:
            raise ValueError(f"price has unknown field(s) {unknown} (known: {list(known)})")
        for name in ("input", "output"):
            if name not in value:
                raise ValueError(f"price needs {name} (US dollars per million tokens)")
        return cls(**value)  # type: ignore[arg-type]

    def cost(
        self,
        prompt_tokens: float,
        output_tokens: float,
        cached_tokens: float = 0.0,
        *,
        batch: bool = False,
    ) -> float:
        """US dollars for one request: ``cached_tokens`` of its ``prompt_tokens`` at the
        cached price, the rest at ``input``, and its output; ``batch``: through the
        Batch API (the discount taken off)."""
        cached = min(max(cached_tokens, 0.0), prompt_tokens)
        cached_price = self.input if self.cached_input is None else self.cached_input
        usd = (
            (prompt_tokens - cached) * self.input
            + cached * cached_price
            + output_tokens * self.output
        ) / _MILLION
        return usd * (1.0 - self.batch_discount) if batch else usd


@dataclass(frozen=True, slots=True)
class PriceTable:
    """An endpoint's prices: by model, with ``"*"`` for any other (module docstring).

    Attributes:
        prices: ``(model, price)`` pairs; the model ``"*"`` prices every model not named.
    """

    prices: tuple[tuple[str, Price], ...]
    _by_model: dict[str, Price] = field(init=False, repr=False, compare=False, hash=False)

    def __post_init__(self) -> None:
        by_model: dict[str, Price] = {}
        for model, price in self.prices:
            check_str("price model", model)
            if not isinstance(price, Price):
                raise ValueError(f"price[{model!r}]={price!r} must be a semisched.Price")
            by_model[model] = price
        object.__setattr__(self, "_by_model", by_model)

    def for_model(self, model: str) -> Price | None:
        """The price of ``model`` here (``None``: not priced)."""
        by_model = self._by_model
        price = by_model.get(model)
        return by_model.get("*") if price is None else price


def price_table(value: object) -> PriceTable | None:
    """An endpoint's ``price`` option as a `PriceTable`: ``None``, a
    `Price` (every model), a table of one price's fields, a table of model ->
    price (``"*"``: the others), or a `PriceTable`.

    Raises:
        ValueError: Anything else, naming the field at fault.
    """
    if value is None or isinstance(value, PriceTable):
        return value
    if isinstance(value, Price):
        return PriceTable((("*", value),))
    if isinstance(value, Mapping):
        if value and all(isinstance(v, Price | Mapping) for v in value.values()):
            return PriceTable(tuple((str(m), Price.of(p)) for m, p in value.items()))
        return PriceTable((("*", Price.of(value)),))
    raise ValueError(
        f"price={value!r} must be a semisched.Price, a table of its fields, or a table of "
        "model -> price"
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class SpendCap:
    """At most ``usd`` per calendar ``per`` (UTC), for ``tenant`` or the whole key.

    Attributes:
        usd: US dollars the period may spend (reserved cost included).
        per: ``"hour"``, ``"day"`` or ``"month"``: a calendar period in UTC; it resets
            at the top of the hour, at midnight, or on the first of the month.
        tenant: The tenant it caps (``None``: every request through this key).
    """

    usd: float
    per: str = "day"
    tenant: str | None = None

    def __post_init__(self) -> None:
        check_number("usd", self.usd, minimum=0, strict_min=True)
        check_choice("per", self.per, PERIODS)
        check_str("tenant", self.tenant, optional=True)

    @property
    def key(self) -> str:
        """Its name in a shared store and in messages: ``"key:day"``, ``"tenant=a:hour"``."""
        who = "key" if self.tenant is None else f"tenant={self.tenant}"
        return f"{who}:{self.per}"

    def covers(self, tenant: str) -> bool:
        """Whether a request of ``tenant`` spends from this cap."""
        return self.tenant is None or self.tenant == tenant

    def describe(self) -> str:
        """``"$5.00 per day for tenant acme"``: the cap in a user's words."""
        who = "this key" if self.tenant is None else f"tenant {self.tenant}"
        return f"{usd(self.usd)} per {self.per} for {who}"

    def period(self, wall_s: float) -> tuple[float, float]:
        """The UTC calendar period holding ``wall_s`` (Unix seconds): ``(start, end)``."""
        if not math.isfinite(wall_s):
            raise ValueError(f"wall_s={wall_s!r} must be a finite number")
        if self.per == "hour":
            start = math.floor(wall_s / 3600.0) * 3600.0
            return start, start + 3600.0
        if self.per == "day":
            start = math.floor(wall_s / 86400.0) * 86400.0
            return start, start + 86400.0
        return month_period(wall_s)


def month_period(wall_s: float) -> tuple[float, float]:
    """The UTC calendar month holding ``wall_s``: ``(start, end)`` in Unix seconds."""
    days = math.floor(wall_s / 86400.0)
    year, month = _civil(days)
    start = _days(year, month)
    year, month = (year + 1, 1) if month == 12 else (year, month + 1)
    return start * 86400.0, _days(year, month) * 86400.0


def _civil(days: int) -> tuple[int, int]:
    """Year and month of the day ``days`` after 1970-01-01 (Howard Hinnant's algorithm;
    the shared store's script computes the same)."""
    z = days + 719468
    era = (z if z >= 0 else z - 146096) // 146097
    doe = z - era * 146097
    yoe = (doe - doe // 1460 + doe // 36524 - doe // 146096) // 365
    doy = doe - (365 * yoe + yoe // 4 - yoe // 100)
    mp = (5 * doy + 2) // 153
    month = mp + 3 if mp < 10 else mp - 9
    return yoe + era * 400 + (month <= 2), month


def _days(year: int, month: int) -> int:
    """Days from 1970-01-01 to the first of ``month`` of ``year`` (the same algorithm's
    inverse)."""
    year -= month <= 2
    era = (year if year >= 0 else year - 399) // 400
    yoe = year - era * 400
    doy = (153 * (month + (-3 if month > 2 else 9)) + 2) // 5
    doe = yoe * 365 + yoe // 4 - yoe // 100 + doy
    return era * 146097 + doe - 719468
