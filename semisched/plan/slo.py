"""Service-level objectives for the planner: a latency quantile per class.

An SLO is ``[CLASS:]METRIC_pNN<=SECONDS``: ``ttft_p99<=2`` (time to first
token, 99th percentile, at most 2 s, every class) or
``batch:e2e_p95<=60`` (end to end, 95th percentile, class ``batch`` only).
The usual two are P99 TTFT and P95 end-to-end; any percentile of either
metric is accepted. Latency is counted from the request's arrival at the
client: a wait for a free slot is part of it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from semisched.core.checks import check_choice, check_number, check_str

__all__ = ["METRICS", "Slo", "parse_slo"]

METRICS: tuple[str, ...] = ("ttft", "e2e")
_PATTERN = re.compile(
    r"^(?:(?P<klass>[^:=<\s]+):)?(?P<metric>ttft|e2e)_p(?P<pct>\d+(?:\.\d+)?)\s*(?:<=|=)\s*"
    r"(?P<seconds>[0-9.eE+-]+)\s*s?$"
)


@dataclass(frozen=True, slots=True)
class Slo:
    """A latency objective.

    Attributes:
        metric: ``"ttft"`` (arrival to first token) or ``"e2e"`` (arrival to the last token).
        quantile: In (0, 1): 0.99 for a P99.
        seconds: The most the quantile may be.
        klass: The class it applies to (``None``: every request).
    """

    metric: str
    quantile: float
    seconds: float
    klass: str | None = None

    def __post_init__(self) -> None:
        check_choice("metric", self.metric, METRICS)
        check_number(
            "quantile", self.quantile, minimum=0.0, maximum=1.0, strict_min=True, strict_max=True
        )
        check_number("seconds", self.seconds, minimum=0.0, strict_min=True)
        check_str("klass", self.klass, optional=True)

    def label(self) -> str:
        """``P99 TTFT <= 2 s`` (and ``for class batch``)."""
        pct = f"{100 * self.quantile:g}"
        text = f"P{pct} {'TTFT' if self.metric == 'ttft' else 'e2e'} <= {self.seconds:g} s"
        return text if self.klass is None else f"{text} for class {self.klass}"

    def key(self) -> str:
        """The compact form `parse_slo` reads back."""
        text = f"{self.metric}_p{100 * self.quantile:g}<={self.seconds:g}"
        return text if self.klass is None else f"{self.klass}:{text}"


def parse_slo(text: str) -> Slo:
    """Read ``[CLASS:]ttft_p99<=2`` and the like (module docstring).

    Raises:
        ValueError: The text is not an SLO, or its numbers are out of range.
    """
    match = _PATTERN.match(text.strip())
    if match is None:
        raise ValueError(
            f"slo={text!r} must look like 'ttft_p99<=2' or 'batch:e2e_p95<=60' "
            "([CLASS:]METRIC_pNN<=SECONDS, METRIC ttft or e2e)"
        )
    try:
        seconds = float(match["seconds"])
    except ValueError:
        raise ValueError(f"slo={text!r}: {match['seconds']!r} is not a number of seconds") from None
    pct = float(match["pct"])
    if not 0 < pct < 100:
        raise ValueError(f"slo={text!r}: the percentile must be in (0, 100)")
    return Slo(match["metric"], pct / 100.0, seconds, match["klass"])
