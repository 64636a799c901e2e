"""Reading OpenAI-style rate-limit headers (pure functions).

OpenAI answers with ``x-ratelimit-{limit,remaining,reset}-{requests,tokens}``
on every response and ``retry-after`` / ``retry-after-ms`` on 429s. Reset values
are durations like ``1s``, ``6m0s``, ``59ms`` or ``1h2m3.5s``. All durations
are wall seconds; [`scaled`][semisched.core.budget.ProviderLimits.scaled] converts
them to a clock's.

What this module is not: it reads no clock and no exception, and decides nothing.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from email.utils import parsedate_to_datetime

from semisched.core.budget import ProviderLimits

__all__ = ["parse_duration", "parse_rate_limits", "retry_after_seconds"]

_UNIT = re.compile(r"(\d+(?:\.\d+)?)(ms|h|m|s)")
_SECONDS = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 0.001}


def parse_duration(value: str) -> float | None:
    """``"6m0s"`` -> 360.0, ``"59ms"`` -> 0.059, ``"2"`` -> 2.0; ``None`` if unreadable."""
    text = value.strip().lower()
    if not text:
        return None
    try:
        seconds = float(text)
    except ValueError:
        pass
    else:
        return seconds if math.isfinite(seconds) and seconds >= 0 else None
    pos, total = 0, 0.0
    for match in _UNIT.finditer(text):
        if match.start() != pos:
            return None
        total += float(match.group(1)) * _SECONDS[match.group(2)]
        pos = match.end()
    return total if pos == len(text) and pos > 0 else None


def _get(headers: Mapping[str, str], name: str) -> str | None:
    value = headers.get(name)
    if value is None:
        value = headers.get(name.title())
    return value


def retry_after_seconds(
    headers: Mapping[str, str], *, now_epoch: float | None = None
) -> float | None:
    """The server's retry hint in seconds: ``retry-after-ms``, then ``retry-after``
    (seconds or an HTTP date, which needs ``now_epoch``), then the larger of the
    ``x-ratelimit-reset-*`` values. ``None`` when there is no usable hint."""
    ms = _get(headers, "retry-after-ms")
    if ms is not None:
        try:
            value = float(ms) / 1000.0
            if math.isfinite(value) and value >= 0:
                return value
        except ValueError:
            pass
    ra = _get(headers, "retry-after")
    if ra is not None:
        seconds = parse_duration(ra)
        if seconds is not None:
            return seconds
        if now_epoch is not None:
            try:
                return max(0.0, parsedate_to_datetime(ra).timestamp() - now_epoch)
            except (TypeError, ValueError):
                pass
    resets = [
        parse_duration(v)
        for name in ("x-ratelimit-reset-requests", "x-ratelimit-reset-tokens")
        if (v := _get(headers, name)) is not None
    ]
    known = [r for r in resets if r is not None]
    return max(known) if known else None




def _int(value: str | None) -> int | None:
    if value is None:
        return None
    try:
        return int(float(value))
    except ValueError:
        return None


def parse_rate_limits(headers: Mapping[str, str]) -> ProviderLimits | None:
    """Read the ``x-ratelimit-*`` headers (any case); ``None`` when none is present."""
    # One pass over the headers: most answers carry none of them, and a case-insensitive
    # lookup per name (an httpx ``Headers`` scans its list each time) costs more.
    found: dict[str, str] = {}
    for key, value in headers.items():
        if key[:12].lower() == "x-ratelimit-":
            found[key.lower()] = value
    if not found:
        return None
    reset_r = found.get("x-ratelimit-reset-requests")
    reset_t = found.get("x-ratelimit-reset-tokens")
    info = ProviderLimits(
        limit_requests=_int(found.get("x-ratelimit-limit-requests")),
        remaining_requests=_int(found.get("x-ratelimit-remaining-requests")),
        reset_requests_s=parse_duration(reset_r) if reset_r else None,
        limit_tokens=_int(found.get("x-ratelimit-limit-tokens")),
        remaining_tokens=_int(found.get("x-ratelimit-remaining-tokens")),
        reset_tokens_s=parse_duration(reset_t) if reset_t else None,
    )
    return None if info == ProviderLimits() else info
