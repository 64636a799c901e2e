"""Provider-side rate limits, quota and fault injection for the mock provider.

What it is: the pure bookkeeping behind the mock's 429s and injected faults. Every function
that depends on time takes an explicit ``now`` in *virtual* seconds (the HTTP app passes its
scaled clock); nothing here reads a clock, sleeps or does I/O. The only randomness is the
seeded ``random.Random`` of ``FaultInjector``.

Rate limits follow OpenAI's visible contract: a per-minute window for requests and one for
tokens, where a request's token charge is its prompt tokens plus its ``max_tokens`` (or the
output estimate when it has none). A request is admitted only when it fits both windows, and
only an admitted request is charged. Two window kinds:

* ``"sliding"`` (default): the charges of the last ``window_s`` seconds count; a charge made at
  ``t`` stops counting at exactly ``t + window_s``.
* ``"fixed"``: windows ``[k * window_s, (k + 1) * window_s)`` aligned to virtual time 0; the
  whole budget returns at each boundary.

All durations returned here are in virtual seconds; ``rate_limit_headers`` divides by the
time scale, so the headers tell a client how long to wait in *real* (wall) time.
"""

from __future__ import annotations

import enum
import math
import random
from collections import deque
from dataclasses import dataclass
from typing import Literal

__all__ = [
    "Fault",
    "FaultInjector",
    "QuotaMeter",
    "RateDecision",
    "RateLimiter",
    "RateWindow",
    "WindowKind",
    "WindowState",
    "capacity_slots",
    "format_duration",
    "rate_limit_headers",
]

WindowKind = Literal["sliding", "fixed"]
LimitKind = Literal["requests", "tokens"]


def _check_time(now: float) -> None:
    if isinstance(now, bool) or not isinstance(now, int | float) or not math.isfinite(now):
        raise ValueError(f"now={now!r} must be a finite number")


def _check_amount(amount: int) -> None:
    if isinstance(amount, bool) or not isinstance(amount, int) or amount < 0:
        raise ValueError(f"amount={amount!r} must be an integer >= 0")


def format_duration(seconds: float) -> str:
    """Format a duration the way OpenAI's ``x-ratelimit-reset-*`` headers do (Go style).

    The value is rounded *up* to whole milliseconds (a positive wait never reads as ``0s``).
    Under one second: ``"59ms"``; otherwise hours, minutes and seconds with the millisecond
    fraction and without trailing zeros: ``"1s"``, ``"1.5s"``, ``"6m0s"``, ``"1h2m3.004s"``.

    Raises:
        ValueError: ``seconds`` is negative, NaN or infinite.
    """
    if not math.isfinite(seconds) or seconds < 0:
        raise ValueError(f"seconds={seconds!r} must be a finite number >= 0")
    # Round to a micro-millisecond first so binary noise (0.1 * 3) does not round up a whole ms.
    ms = math.ceil(round(seconds * 1000.0, 6))
    if ms == 0:
        return "0s"
    if ms < 1000:
        return f"{ms}ms"
    hours, rest = divmod(ms, 3_600_000)
    minutes, rest = divmod(rest, 60_000)
    whole, frac = divmod(rest, 1000)
    sec = f"{whole}.{frac:03d}".rstrip("0") if frac else str(whole)
    if hours:
        return f"{hours}h{minutes}m{sec}s"
    if minutes:
        return f"{minutes}m{sec}s"
    return f"{sec}s"


@dataclass(frozen=True, slots=True)
class WindowState:
    """What one window shows a client (the ``x-ratelimit-*`` trio).

    Attributes:
        limit: Budget per window.
        remaining: Budget left now (never negative).
        reset_s: Virtual seconds until the whole budget is back (0 when nothing is charged).
    """

    limit: int
    remaining: int
    reset_s: float


class RateWindow:
    """One per-window budget (requests or tokens), sliding or fixed.

    Args:
        limit: Budget per window (>= 1).
        window_s: Window length in virtual seconds (> 0).
        kind: ``"sliding"`` or ``"fixed"`` (see the module docstring).

    ``now`` must not go backwards between calls (``ValueError`` otherwise).
    """

    def __init__(self, limit: int, *, window_s: float = 60.0, kind: WindowKind = "sliding") -> None:
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
            raise ValueError(f"limit={limit!r} must be an integer >= 1")
        if not (isinstance(window_s, int | float) and math.isfinite(window_s) and window_s > 0):
            raise ValueError(f"window_s={window_s!r} must be a finite number > 0")
        if kind not in ("sliding", "fixed"):
            raise ValueError(f"kind={kind!r} must be 'sliding' or 'fixed'")
        self.limit = limit
        self.window_s = float(window_s)
        self.kind: WindowKind = kind
        self._now = -math.inf
        self._log: deque[tuple[float, int]] = deque()  # sliding: (time, amount)
        self._total = 0
        self._fixed_start = 0.0  # fixed: start of the window that `_total` belongs to

    def _expire(self, now: float) -> None:
        _check_time(now)
        if now < self._now:
            raise ValueError(f"now={now!r} is earlier than the last time seen ({self._now!r})")
        self._now = float(now)
        if self.kind == "sliding":
            log = self._log
            while log and log[0][0] + self.window_s <= now:
                self._total -= log.popleft()[1]
        else:
            start = math.floor(now / self.window_s) * self.window_s
            if start > self._fixed_start:
                self._fixed_start = start
                self._total = 0

    def state(self, now: float) -> WindowState:
        """The remaining budget and the time until it is whole again."""
        self._expire(now)
        if self._total == 0:
            reset = 0.0
        elif self.kind == "sliding":
            reset = self._log[-1][0] + self.window_s - now
        else:
            reset = self._fixed_start + self.window_s - now
        return WindowState(self.limit, max(0, self.limit - self._total), max(0.0, reset))

    def wait_s(self, now: float, amount: int) -> float | None:
        """Virtual seconds until ``amount`` fits: 0 if it fits now, ``None`` if it never can
        (``amount > limit``)."""
        _check_amount(amount)
        self._expire(now)
        if amount > self.limit:
            return None
        if self._total + amount <= self.limit:
            return 0.0
        if self.kind == "fixed":
            return self._fixed_start + self.window_s - now
        freed = 0
        for t, charged in self._log:
            freed += charged
            if self._total - freed + amount <= self.limit:
                return t + self.window_s - now
        raise AssertionError("unreachable: amount <= limit always fits an empty window")

    def charge(self, now: float, amount: int) -> None:
        """Record ``amount`` at ``now`` (the caller checked that it fits)."""
        _check_amount(amount)
        self._expire(now)
        if amount == 0:
            return
        self._total += amount
        if self.kind == "sliding":
            self._log.append((float(now), amount))


@dataclass(frozen=True, slots=True)
class RateDecision:
    """The outcome of ``RateLimiter.acquire``.

    Attributes:
        allowed: The request was admitted (and charged to both windows).
        kind: When refused, the window that refused it (``"requests"`` is checked first).
        retry_after_s: When refused, virtual seconds until the request fits *both* windows;
            ``None`` when it never can (token charge above the per-window limit).
        requests: The request window's state after the decision (``None`` when unlimited).
        tokens: The token window's state after the decision (``None`` when unlimited).
        charge: The token charge that was asked for.
    """

    allowed: bool
    kind: LimitKind | None
    retry_after_s: float | None
    requests: WindowState | None
    tokens: WindowState | None
    charge: int


class RateLimiter:
    """Requests-per-window and tokens-per-window limits checked together.

    Args:
        rpm: Requests per window, or ``None`` for no request limit.
        tpm: Tokens per window, or ``None`` for no token limit.
        window_s: Window length in virtual seconds (60: "per minute").
        kind: ``"sliding"`` or ``"fixed"``.
    """

    def __init__(
        self,
        *,
        rpm: int | None,
        tpm: int | None,
        window_s: float = 60.0,
        kind: WindowKind = "sliding",
    ) -> None:
        self.requests = None if rpm is None else RateWindow(rpm, window_s=window_s, kind=kind)
        self.tokens = None if tpm is None else RateWindow(tpm, window_s=window_s, kind=kind)

    def acquire(self, now: float, tokens: int) -> RateDecision:
        """Admit and charge one request of ``tokens`` token charge, or explain the refusal."""
        _check_amount(tokens)
        req_wait = 0.0 if self.requests is None else self.requests.wait_s(now, 1)
        tok_wait = 0.0 if self.tokens is None else self.tokens.wait_s(now, tokens)
        allowed = req_wait == 0.0 and tok_wait == 0.0
        kind: LimitKind | None = None
        retry: float | None = None
        if allowed:
            if self.requests is not None:
                self.requests.charge(now, 1)
            if self.tokens is not None:
                self.tokens.charge(now, tokens)
        else:
            kind = "requests" if req_wait != 0.0 else "tokens"
            retry = None if req_wait is None or tok_wait is None else max(req_wait, tok_wait)
        return RateDecision(
            allowed=allowed,
            kind=kind,
            retry_after_s=retry,
            requests=None if self.requests is None else self.requests.state(now),
            tokens=None if self.tokens is None else self.tokens.state(now),
            charge=tokens,
        )

    def states(self, now: float) -> tuple[WindowState | None, WindowState | None]:
        """Current (requests, tokens) window states without charging anything."""
        return (
            None if self.requests is None else self.requests.state(now),
            None if self.tokens is None else self.tokens.state(now),
        )


def rate_limit_headers(
    requests: WindowState | None,
    tokens: WindowState | None,
    *,
    time_scale: float = 1.0,
    retry_after_s: float | None = None,
) -> dict[str, str]:
    """OpenAI-format rate-limit headers, with durations converted to real (wall) time.

    ``x-ratelimit-{limit,remaining,reset}-{requests,tokens}`` for each configured window, and
    ``retry-after`` (whole seconds, rounded up, at least 1) plus ``retry-after-ms`` (whole
    milliseconds, rounded up, at least 1) when ``retry_after_s`` is given. Virtual seconds are
    divided by ``time_scale``: the values say how long a client must wait on its own clock.
    """
    headers: dict[str, str] = {}
    for name, state in (("requests", requests), ("tokens", tokens)):
        if state is not None:
            headers[f"x-ratelimit-limit-{name}"] = str(state.limit)
            headers[f"x-ratelimit-remaining-{name}"] = str(state.remaining)
            headers[f"x-ratelimit-reset-{name}"] = format_duration(state.reset_s / time_scale)
    if retry_after_s is not None:
        real = max(0.0, retry_after_s / time_scale)
        headers["retry-after"] = str(max(1, math.ceil(round(real, 9))))
        headers["retry-after-ms"] = str(max(1, math.ceil(round(real * 1000.0, 6))))
    return headers


class QuotaMeter:
    """A total token budget (billing quota); ``None`` means unlimited."""

    def __init__(self, limit: int | None) -> None:
        bad = isinstance(limit, bool) or not isinstance(limit, int) or limit < 1
        if limit is not None and bad:
            raise ValueError(f"limit={limit!r} must be an integer >= 1 or None")
        self.limit = limit
        self.used = 0

    @property
    def exhausted(self) -> bool:
        """True once the billed tokens reached the limit."""
        return self.limit is not None and self.used >= self.limit

    def bill(self, tokens: int) -> None:
        """Add billed tokens (prompt + completion of an answered request)."""
        _check_amount(tokens)
        self.used += tokens


class Fault(enum.Enum):
    """What happens to one admitted request."""

    NONE = "none"
    ERROR = "error"  # answered 500/503 at once
    HANG = "hang"  # never answered; waits for the client to give up
    DROP = "drop"  # connection dropped in the middle of the response


class FaultInjector:
    """Seeded fault draws: one ``random()`` per request, split by the cumulative rates.

    Args:
        error_rate, hang_rate, drop_rate: Fractions in [0, 1] whose sum is at most 1.
        seed: Seed of the private ``random.Random``.
    """

    def __init__(
        self,
        *,
        error_rate: float = 0.0,
        hang_rate: float = 0.0,
        drop_rate: float = 0.0,
        seed: int = 0,
    ) -> None:
        for name, rate in (
            ("error_rate", error_rate),
            ("hang_rate", hang_rate),
            ("drop_rate", drop_rate),
        ):
            if isinstance(rate, bool) or not isinstance(rate, int | float) or not 0 <= rate <= 1:
                raise ValueError(f"{name}={rate!r} must be a number in [0, 1]")
        if error_rate + hang_rate + drop_rate > 1 + 1e-12:
            raise ValueError("error_rate + hang_rate + drop_rate must not exceed 1")
        self._cuts = (error_rate, error_rate + hang_rate, error_rate + hang_rate + drop_rate)
        self._rng = random.Random(seed)
        self._errors = 0

    def draw(self) -> Fault:
        """The fault for the next request (always consumes exactly one random number)."""
        u = self._rng.random()
        if u < self._cuts[0]:
            return Fault.ERROR
        if u < self._cuts[1]:
            return Fault.HANG
        if u < self._cuts[2]:
            return Fault.DROP
        return Fault.NONE

    def error_status(self) -> int:
        """Status of the next injected error: 500, 503, 500, ... (alternating, deterministic)."""
        status = 500 if self._errors % 2 == 0 else 503
        self._errors += 1
        return status


def capacity_slots(slots: int, fraction: float) -> int:
    """Slots kept after a capacity loss: ``max(1, round(slots * fraction))``."""
    return max(1, round(slots * fraction))
