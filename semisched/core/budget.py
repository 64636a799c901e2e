"""Client-side rate budgets: requests and tokens per window, never exceeded.

Providers limit requests per minute (RPM) and tokens per minute (TPM) and
answer 429 beyond them. A client that keeps its own account of what it sent can
stay under the limit instead of discovering it: `RateBudget` is that
account, and the engine sends nothing the budget cannot pay for.

Accounting (a sliding window, like the providers' own limiters):

- every send charges one request and a token amount at the send time ``t``;
  the charge counts until ``t + window_s + margin_s``. The margin covers the
  network: the provider counts a request when it *arrives*, a little after
  the client sent it, so a window kept slightly longer than the provider's
  never admits what the provider would refuse unless two requests' transit
  times differ by more than the margin.
- the token charge is the prompt estimate plus ``max_tokens`` when the call
  sets it (what providers reserve on arrival), otherwise the prior's p90;
  `RateBudget.settle` replaces it with the provider's own count once the
  response's ``usage`` is known.
- `RateBudget.wait` says how long until a charge fits; ``None`` if it
  never can (a single request larger than the whole token limit).

Adaptation to what the provider says:

- ``x-ratelimit-limit-*`` lower than the configured limit (or any limit when
  none is configured) becomes the effective limit;
- ``x-ratelimit-remaining-*``: when the provider counts more than this client
  does (other traffic on the same key, a different token count), the
  difference is added as an *extra* charge that lapses at the provider's
  ``x-ratelimit-reset-*``. The headers describe the provider's window when
  the observed request arrived, so the comparison is with the client's count
  when that request was charged plus everything it sent since (a later send
  can overtake it in transit): only traffic that cannot be ours counts. The
  extra charge is a maximum over observations, not a sum, so concurrent
  responses do not double-count;
- a 429 pauses every send until the provider's retry time
  (`RateBudget.pause_until`).

Pure: the caller passes ``now``; no clock, no I/O.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, replace

from semisched.core.config import BudgetConfig
from semisched.core.request import Request

__all__ = ["BudgetConfig", "BudgetSnapshot", "ProviderLimits", "RateBudget", "rate_tokens"]


@dataclass(frozen=True, slots=True, kw_only=True)
class ProviderLimits:
    """What a provider's ``x-ratelimit-*`` headers said on one response.

    Parsed from the headers (`semisched.runtime.headers.parse_rate_limits`),
    reset times are wall seconds; the engine reads them in its own clock's seconds
    (`scaled`).
    """

    limit_requests: int | None = None
    remaining_requests: int | None = None
    reset_requests_s: float | None = None
    limit_tokens: int | None = None
    remaining_tokens: int | None = None
    reset_tokens_s: float | None = None

    @property
    def headroom(self) -> float | None:
        """Smallest remaining/limit fraction over requests and tokens, if known."""
        fractions = [
            rem / lim
            for rem, lim in (
                (self.remaining_requests, self.limit_requests),
                (self.remaining_tokens, self.limit_tokens),
            )
            if rem is not None and lim
        ]
        return min(fractions) if fractions else None

    def scaled(self, clock_per_wall_s: float) -> ProviderLimits:
        """The same limits with reset times in a clock running ``clock_per_wall_s``
        seconds per wall second (a compressed clock runs faster)."""
        if clock_per_wall_s == 1.0:
            return self
        requests, tokens = self.reset_requests_s, self.reset_tokens_s
        return replace(
            self,
            reset_requests_s=None if requests is None else requests * clock_per_wall_s,
            reset_tokens_s=None if tokens is None else tokens * clock_per_wall_s,
        )


@dataclass(frozen=True, slots=True)
class BudgetSnapshot:
    """The budget's state at one instant."""

    limit_requests: int | None
    limit_tokens: int | None
    used_requests: float
    used_tokens: float
    paused_until: float | None


class _Charge:
    __slots__ = (
        "at",
        "expires",
        "requests",
        "sent_requests",
        "sent_tokens",
        "tokens",
        "used_requests",
        "used_tokens",
    )

    def __init__(self, at: float, expires: float, tokens: float) -> None:
        self.at = at
        self.expires = expires
        self.requests = 1.0
        self.tokens = tokens
        self.used_requests = 0.0  # the client's count right after this charge
        self.used_tokens = 0.0
        self.sent_requests = 0.0  # running totals of everything charged, after this charge
        self.sent_tokens = 0.0


class _Axis:
    """One limited quantity (requests or tokens): charges, extra, effective limit."""

    __slots__ = ("configured", "extra", "extra_until", "limit")

    def __init__(self, configured: int | None) -> None:
        self.configured = configured
        self.limit: int | None = configured
        self.extra = 0.0
        self.extra_until = -math.inf

    def extra_at(self, now: float) -> float:
        return self.extra if now < self.extra_until else 0.0

    def adopt_limit(self, advertised: int | None) -> None:
        if advertised is None or advertised < 1:
            return
        self.limit = advertised if self.configured is None else min(self.configured, advertised)

    def observe(
        self,
        now: float,
        at: float,
        used_at_charge: float,
        advertised: int | None,
        remaining: int | None,
        reset_s: float | None,
        default_reset: float,
    ) -> None:
        """Provider count at ``at`` (when the observed request was charged) vs ours then."""
        if remaining is None:
            return
        limit = advertised if advertised is not None else self.limit
        if limit is None:
            return
        deficit = (limit - remaining) - used_at_charge
        until = at + (reset_s if reset_s is not None and reset_s > 0 else default_reset)
        if deficit <= 0 or until <= now:
            return
        current = self.extra_at(now)
        self.extra = max(deficit, current)
        self.extra_until = max(until, self.extra_until) if current else until


class RateBudget:
    """Sliding-window request and token budget (see the module docstring)."""

    def __init__(self, config: BudgetConfig) -> None:
        self.config = config
        self._hold = config.window_s + config.margin_s
        self._charges: deque[_Charge] = deque()  # expiry order: sends come in time order
        self._by_key: dict[str, _Charge] = {}
        self._requests = _Axis(config.rpm)
        self._tokens = _Axis(config.tpm)
        self._used_requests = 0.0
        self._used_tokens = 0.0
        self._sent_requests = 0.0  # running totals (never expire)
        self._sent_tokens = 0.0
        self._paused_until: float | None = None

    def __repr__(self) -> str:
        return (
            f"<RateBudget requests={self._used_requests:.0f}/{self._requests.limit} "
            f"tokens={self._used_tokens:.0f}/{self._tokens.limit} "
            f"paused_until={self._paused_until}>"
        )

    def _expire(self, now: float) -> None:
        charges = self._charges
        while charges and charges[0].expires <= now:
            charge = charges.popleft()
            self._used_requests -= charge.requests
            self._used_tokens -= charge.tokens
        if not charges:  # clamp float drift
            self._used_requests = 0.0
            self._used_tokens = 0.0
        if self._paused_until is not None and self._paused_until <= now:
            self._paused_until = None

    def limits(self) -> tuple[int | None, int | None]:
        """The effective (requests, tokens) per window: configured or adopted from headers."""
        return self._requests.limit, self._tokens.limit

    def wait(self, now: float, tokens: float) -> float | None:
        """Seconds until one request of ``tokens`` fits (0: now); ``None``: never."""
        self._expire(now)
        req_limit, tok_limit = self._requests.limit, self._tokens.limit
        if tok_limit is not None and tokens > tok_limit:
            return None
        wait = 0.0 if self._paused_until is None else self._paused_until - now
        if req_limit is not None:
            wait = max(wait, self._wait_axis(now, True, 1.0, req_limit, self._requests))
        if tok_limit is not None:
            wait = max(wait, self._wait_axis(now, False, tokens, tok_limit, self._tokens))
        return wait

    def _wait_axis(
        self, now: float, requests: bool, amount: float, limit: int, axis: _Axis
    ) -> float:
        """Seconds until ``amount`` fits under ``limit`` on one axis (requests or tokens)."""
        extra = axis.extra_at(now)
        used = (self._used_requests if requests else self._used_tokens) + extra
        if used + amount <= limit:
            return 0.0
        # Walk charges in expiry order, stopping at the first that frees enough;
        # the extra charge lapses at its own time.
        pending_extra = extra
        for charge in self._charges:
            if pending_extra and axis.extra_until <= charge.expires:
                used -= pending_extra
                pending_extra = 0.0
                if used + amount <= limit:
                    return max(0.0, axis.extra_until - now)
            used -= charge.requests if requests else charge.tokens
            if used + amount <= limit + 1e-9:
                return max(0.0, charge.expires - now)
        return max(0.0, axis.extra_until - now) if pending_extra else 0.0

    def charge(self, now: float, key: str, tokens: float) -> None:
        """Charge one request of ``tokens`` sent at ``now`` under ``key``."""
        self._expire(now)
        charge = _Charge(now, now + self._hold, tokens)
        self._charges.append(charge)
        self._used_requests += 1.0
        self._used_tokens += tokens
        self._sent_requests += 1.0
        self._sent_tokens += tokens
        charge.used_requests = self._used_requests + self._requests.extra_at(now)
        charge.used_tokens = self._used_tokens + self._tokens.extra_at(now)
        charge.sent_requests = self._sent_requests
        charge.sent_tokens = self._sent_tokens
        self._by_key[key] = charge
        if len(self._by_key) > 4 * len(self._charges) + 64:  # drop keys of lapsed charges
            live = {id(c) for c in self._charges}
            self._by_key = {k: c for k, c in self._by_key.items() if id(c) in live}

    def refund(self, key: str) -> None:
        """The charge under ``key`` was never spent (the send did not leave): take it back."""
        charge = self._by_key.pop(key, None)
        if charge is None or charge.requests == 0.0:
            return
        self._used_requests -= charge.requests
        self._used_tokens -= charge.tokens
        self._sent_requests -= charge.requests
        self._sent_tokens -= charge.tokens
        charge.requests = charge.tokens = 0.0  # it stays in the deque, counting nothing

    def settle(self, key: str, tokens: float, now: float) -> None:
        """Replace the token charge of ``key`` with the provider's count (if still counted)."""
        self._expire(now)
        charge = self._by_key.pop(key, None)
        if charge is None or charge.expires <= now or not math.isfinite(tokens) or tokens < 0:
            return
        self._used_tokens += tokens - charge.tokens
        self._sent_tokens += tokens - charge.tokens
        charge.tokens = tokens

    def observe(self, key: str, now: float, limits: ProviderLimits) -> None:
        """Adopt what the provider's headers said about the window ``key`` arrived in."""
        if not self.config.adapt:
            return
        self._expire(now)
        self._requests.adopt_limit(limits.limit_requests)
        self._tokens.adopt_limit(limits.limit_tokens)
        charge = self._by_key.get(key)
        if charge is None:
            return
        window = self.config.window_s
        # What the provider may count from us: our window when this request was
        # charged plus everything sent since (later sends can arrive first).
        self._requests.observe(
            now,
            charge.at,
            charge.used_requests + self._sent_requests - charge.sent_requests,
            limits.limit_requests,
            limits.remaining_requests,
            limits.reset_requests_s,
            window,
        )
        self._tokens.observe(
            now,
            charge.at,
            charge.used_tokens + self._sent_tokens - charge.sent_tokens,
            limits.limit_tokens,
            limits.remaining_tokens,
            limits.reset_tokens_s,
            window,
        )

    def pause_until(self, until: float) -> None:
        """Send nothing before ``until`` (the provider said 429, retry then)."""
        if math.isfinite(until) and (self._paused_until is None or until > self._paused_until):
            self._paused_until = until

    def snapshot(self, now: float) -> BudgetSnapshot:
        """Limits in force and what is counted against them."""
        self._expire(now)
        return BudgetSnapshot(
            limit_requests=self._requests.limit,
            limit_tokens=self._tokens.limit,
            used_requests=self._used_requests + self._requests.extra_at(now),
            used_tokens=self._used_tokens + self._tokens.extra_at(now),
            paused_until=self._paused_until,
        )


def rate_tokens(request: Request) -> float:
    """What a provider counts against its token limit on arrival: the prompt estimate
    plus ``max_tokens`` when the call sets it, else the prior's p90 (module docstring)."""
    out = request.max_output_tokens
    return math.ceil(request.input_tokens) + (
        out if out is not None else math.ceil(request.prior.p90)
    )
