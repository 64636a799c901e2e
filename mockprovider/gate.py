"""The provider's door: outages, quota, rate windows and fault draws, decided in one place.

Every request that reaches a hosted API passes the same checks before any GPU
sees it: is the endpoint up at all, is the account's quota spent, does it fit
the RPM/TPM windows, and (in this mock) does the seeded fault injector pick it
for an error, a hang or a dropped connection. `ProviderGate` makes
those decisions for both shells of the mock provider: the HTTP app
(``mockprovider.app``, real time compressed) and the simulator
(``semisched.sim.simulator``, virtual time). So the 429s, 503s and faults a benchmark
measures in virtual time are the ones the HTTP mock serves live.

Outage windows (``GateConfig.outages``): during ``[start, end)`` the endpoint is
down and *new requests are refused* (``GateVerdict.UNAVAILABLE``, a 503 over
HTTP) before any other check; requests admitted earlier finish normally (the
gate never sees them again). A refused request charges no rate window and
draws no fault, so the fault draws of the requests outside the windows are the
same as without the outages.

Pure: the caller passes ``now`` (virtual seconds); the only randomness is the
fault injector's seeded stream. Nothing here formats HTTP; the app turns a
`GateDecision` into a response (``mockprovider.faults.rate_limit_headers``).
"""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass

from mockprovider.faults import (
    Fault,
    FaultInjector,
    QuotaMeter,
    RateDecision,
    RateLimiter,
    WindowKind,
)

__all__ = ["GateConfig", "GateDecision", "GateVerdict", "ProviderGate"]


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_real(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


@dataclass(frozen=True, slots=True, kw_only=True)
class GateConfig:
    """What the provider enforces before serving.

    Attributes:
        rpm: Requests per window, or ``None``.
        tpm: Tokens per window, or ``None``; a request's charge is its prompt
            tokens plus its ``max_tokens`` (or its output length without one).
        window_s: Window length in virtual seconds (60: "per minute").
        rate_window: ``"sliding"`` or ``"fixed"`` windows.
        quota_tokens: Billed tokens after which every request is refused
            (429 ``insufficient_quota``); ``None``: no quota.
        error_rate: Fraction of admitted requests answered 500/503 at once.
        hang_rate: Fraction of admitted requests never answered.
        drop_rate: Fraction of admitted requests whose connection drops.
        seed: Seed of the fault draws.
        outages: Windows ``(start, end)`` of virtual seconds, ``0 <= start < end``,
            during which the endpoint is down: every new request is refused at the door
            (``GateVerdict.UNAVAILABLE``), ``start`` included, ``end`` excluded. Windows
            may overlap (their union counts) and come in any order.
    """

    rpm: int | None = None
    tpm: int | None = None
    window_s: float = 60.0
    rate_window: WindowKind = "sliding"
    quota_tokens: int | None = None
    error_rate: float = 0.0
    hang_rate: float = 0.0
    drop_rate: float = 0.0
    seed: int = 0
    outages: tuple[tuple[float, float], ...] = ()

    def __post_init__(self) -> None:
        for name in ("rpm", "tpm", "quota_tokens"):
            value = getattr(self, name)
            if value is not None and (not _is_int(value) or value < 1):
                raise ValueError(f"{name}={value!r} must be an integer >= 1 or None")
        w = self.window_s
        if isinstance(w, bool) or not isinstance(w, int | float) or not math.isfinite(w) or w <= 0:
            raise ValueError(f"window_s={w!r} must be a finite number > 0")
        if self.rate_window not in ("sliding", "fixed"):
            raise ValueError(f"rate_window={self.rate_window!r} must be 'sliding' or 'fixed'")
        rates = ("error_rate", "hang_rate", "drop_rate")
        for name in rates:
            value = getattr(self, name)
            ok = not isinstance(value, bool) and isinstance(value, int | float)
            if not ok or not 0 <= value <= 1:
                raise ValueError(f"{name}={value!r} must be a number in [0, 1]")
        if sum(getattr(self, name) for name in rates) > 1 + 1e-12:
            raise ValueError("error_rate + hang_rate + drop_rate must not exceed 1")
        if not _is_int(self.seed):
            raise ValueError(f"seed={self.seed!r} must be an integer")
        _check_outages(self.outages)

    def in_outage(self, t: float) -> bool:
        """Whether virtual time ``t`` falls in an outage window (``start <= t < end``)."""
        return any(start <= t < end for start, end in self.outages)


def _check_outages(outages: object) -> None:
    if not isinstance(outages, tuple):
        raise ValueError(f"outages={outages!r} must be a tuple of (start, end) pairs")
    for window in outages:
        if not (
            isinstance(window, tuple)
            and len(window) == 2
            and all(_is_real(v) and math.isfinite(v) for v in window)
            and 0 <= window[0] < window[1]
        ):
            raise ValueError(
                f"outages={outages!r}: window {window!r} must be a (start, end) pair of "
                "finite virtual seconds with 0 <= start < end"
            )


class GateVerdict(enum.Enum):
    """What the provider does with a request at its door."""

    ADMITTED = "admitted"
    """Served (subject to ``GateDecision.fault``)."""
    QUOTA_EXHAUSTED = "quota_exhausted"
    """429 ``insufficient_quota``; no retry-after."""
    RATE_LIMITED = "rate_limited"
    """429 ``rate_limit_exceeded`` with a retry-after."""
    TOO_LARGE = "too_large"
    """429: the token charge exceeds the whole token window; it never fits."""
    UNAVAILABLE = "unavailable"
    """503: the endpoint is down (an outage window); nothing charged, no fault drawn."""


@dataclass(frozen=True, slots=True)
class GateDecision:
    """The gate's answer for one request.

    Attributes:
        verdict: Admitted or which refusal.
        fault: For an admitted request, the injected fault (``Fault.NONE`` mostly).
        rate: The rate windows' decision and state (for the ``x-ratelimit-*``
            headers), or ``None`` when an outage or the quota refused before the windows.
        retry_after_s: Virtual seconds until a rate-limited request fits.
    """

    verdict: GateVerdict
    fault: Fault
    rate: RateDecision | None
    retry_after_s: float | None


class ProviderGate:
    """Outage, quota, rate windows, then the fault draw (the order a provider checks)."""

    def __init__(self, config: GateConfig) -> None:
        self.config = config
        self._outages = bool(config.outages)
        self.limiter = RateLimiter(
            rpm=config.rpm, tpm=config.tpm, window_s=config.window_s, kind=config.rate_window
        )
        self.quota = QuotaMeter(config.quota_tokens)
        self.faults = FaultInjector(
            error_rate=config.error_rate,
            hang_rate=config.hang_rate,
            drop_rate=config.drop_rate,
            seed=config.seed,
        )

    def __repr__(self) -> str:
        return (
            f"<ProviderGate rpm={self.config.rpm} tpm={self.config.tpm} "
            f"quota_used={self.quota.used}/{self.quota.limit}>"
        )

    def admit(self, now: float, charge: int, *, forced: Fault | None = None) -> GateDecision:
        """Decide one request of token ``charge`` arriving at ``now``.

        An admitted request is charged to the rate windows and consumes one
        fault draw (even when ``forced`` overrides the drawn fault, so forcing
        a fault on one request does not shift the others' draws). During an
        outage window the answer is ``UNAVAILABLE`` at once: no window is
        charged and no fault drawn.
        """
        if self._outages and self.config.in_outage(now):
            return GateDecision(GateVerdict.UNAVAILABLE, Fault.NONE, None, None)
        if self.quota.exhausted:
            return GateDecision(GateVerdict.QUOTA_EXHAUSTED, Fault.NONE, None, None)
        rate = self.limiter.acquire(now, charge)
        if not rate.allowed:
            if rate.retry_after_s is None:
                return GateDecision(GateVerdict.TOO_LARGE, Fault.NONE, rate, None)
            return GateDecision(GateVerdict.RATE_LIMITED, Fault.NONE, rate, rate.retry_after_s)
        drawn = self.faults.draw()
        fault = drawn if forced is None else forced
        return GateDecision(GateVerdict.ADMITTED, fault, rate, None)

    def bill(self, tokens: int) -> None:
        """Bill an answered request's prompt plus completion tokens to the quota."""
        self.quota.bill(tokens)

    def error_status(self) -> int:
        """HTTP status of the next injected error (500, 503 alternately)."""
        return self.faults.error_status()
