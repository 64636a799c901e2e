"""Pure rate-limit windows, quota, fault draws and OpenAI durations (mockprovider.faults)."""

from __future__ import annotations

import math
from typing import Any

import pytest

from mockprovider.faults import (
    Fault,
    FaultInjector,
    QuotaMeter,
    RateLimiter,
    RateWindow,
    WindowState,
    capacity_slots,
    format_duration,
    rate_limit_headers,
)

# -- duration format ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (0.0, "0s"),
        (0.0000001, "1ms"),  # a positive wait never reads as 0s
        (0.001, "1ms"),
        (0.059, "59ms"),
        (0.1 * 3, "300ms"),  # binary noise (0.30000000000000004) does not round up
        (0.9994, "1s"),
        (1.0, "1s"),
        (1.5, "1.5s"),
        (2.25, "2.25s"),
        (59.988, "59.988s"),
        (60.0, "1m0s"),
        (90.5, "1m30.5s"),
        (360.0, "6m0s"),
        (3600.0, "1h0m0s"),
        (3723.004, "1h2m3.004s"),
        (90000.0, "25h0m0s"),
    ],
)
def test_format_duration_matches_openai_headers(seconds: float, text: str) -> None:
    assert format_duration(seconds) == text


@pytest.mark.parametrize("bad", [-0.001, math.inf, math.nan])
def test_format_duration_rejects_bad_values(bad: float) -> None:
    with pytest.raises(ValueError, match="seconds"):
        format_duration(bad)


# -- one window -----------------------------------------------------------------------------

# Each step: (now, amount to try, expected wait_s, charge it if it fits, expected state after).
Step = tuple[float, int, float | None, WindowState]

SLIDING_STEPS: list[Step] = [
    (0.0, 3, 0.0, WindowState(5, 2, 60.0)),
    (10.0, 2, 0.0, WindowState(5, 0, 60.0)),  # reset: until the newest charge expires
    (20.0, 1, 40.0, WindowState(5, 0, 50.0)),  # oldest charge (3 at t=0) frees room at 60
    (59.5, 3, 0.5, WindowState(5, 0, 10.5)),
    (60.0, 3, 0.0, WindowState(5, 0, 60.0)),  # at exactly t+60 the t=0 charge has left
    (61.0, 6, None, WindowState(5, 0, 59.0)),  # larger than the limit: never fits
    (70.0, 2, 0.0, WindowState(5, 0, 60.0)),  # the t=10 charge (2) left at 70
]

FIXED_STEPS: list[Step] = [
    (0.0, 3, 0.0, WindowState(5, 2, 60.0)),
    (10.0, 2, 0.0, WindowState(5, 0, 50.0)),
    (20.0, 1, 40.0, WindowState(5, 0, 40.0)),  # the whole budget returns at the boundary
    (59.5, 5, 0.5, WindowState(5, 0, 0.5)),
    (60.0, 5, 0.0, WindowState(5, 0, 60.0)),  # new window
    (130.0, 1, 0.0, WindowState(5, 4, 50.0)),  # two boundaries later, aligned to t=0
]


@pytest.mark.parametrize(
    ("kind", "steps"),
    [("sliding", SLIDING_STEPS), ("fixed", FIXED_STEPS)],
    ids=["sliding", "fixed"],
)
def test_window_waits_and_states(kind: str, steps: list[Step]) -> None:
    window = RateWindow(5, window_s=60.0, kind=kind)  # type: ignore[arg-type]
    for now, amount, wait, state in steps:
        got = window.wait_s(now, amount)
        assert got == wait, (now, amount)
        if got == 0.0:
            window.charge(now, amount)
        assert window.state(now) == state, now


def test_empty_window_is_whole_and_resets_at_zero() -> None:
    assert RateWindow(7).state(123.0) == WindowState(7, 7, 0.0)


def test_window_rejects_time_going_backwards_and_negative_amounts() -> None:
    window = RateWindow(5)
    window.charge(10.0, 1)
    with pytest.raises(ValueError, match="earlier"):
        window.state(9.0)
    with pytest.raises(ValueError, match="amount"):
        window.wait_s(10.0, -1)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"limit": 0}, "limit"),
        ({"limit": True}, "limit"),
        ({"limit": 5, "window_s": 0.0}, "window_s"),
        ({"limit": 5, "kind": "leaky"}, "kind"),
    ],
)
def test_window_validation(kwargs: dict[str, object], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        RateWindow(**kwargs)  # type: ignore[arg-type]


# -- both windows ---------------------------------------------------------------------------


def test_limiter_charges_both_windows_only_when_both_fit() -> None:
    limiter = RateLimiter(rpm=3, tpm=100, window_s=60.0)
    first = limiter.acquire(0.0, 60)
    assert first.allowed
    assert first.kind is None
    assert first.retry_after_s is None
    assert first.requests == WindowState(3, 2, 60.0)
    assert first.tokens == WindowState(100, 40, 60.0)
    refused = limiter.acquire(5.0, 50)  # the request fits, the tokens do not
    assert not refused.allowed
    assert refused.kind == "tokens"
    assert refused.retry_after_s == 55.0
    assert refused.requests == WindowState(3, 2, 55.0)  # nothing was charged
    assert refused.tokens == WindowState(100, 40, 55.0)
    assert limiter.acquire(6.0, 40).allowed
    assert limiter.acquire(7.0, 0).allowed
    by_requests = limiter.acquire(8.0, 10)  # both windows are full: requests is named first
    assert by_requests.kind == "requests"
    assert by_requests.retry_after_s == 52.0  # the later of the two waits (both at t=60)


def test_limiter_retry_after_is_the_later_of_the_two_waits() -> None:
    limiter = RateLimiter(rpm=1, tpm=100)
    assert limiter.acquire(0.0, 10).allowed
    assert limiter.acquire(30.0, 90).allowed is False
    limiter2 = RateLimiter(rpm=2, tpm=100)
    assert limiter2.acquire(0.0, 10).allowed
    assert limiter2.acquire(20.0, 80).allowed
    decision = limiter2.acquire(30.0, 50)  # requests wait until 60, tokens until 80
    assert decision.kind == "requests"
    assert decision.retry_after_s == 50.0


def test_limiter_refuses_a_charge_above_the_token_limit_forever() -> None:
    decision = RateLimiter(rpm=None, tpm=100).acquire(0.0, 101)
    assert not decision.allowed
    assert decision.kind == "tokens"
    assert decision.retry_after_s is None
    assert decision.requests is None


def test_unlimited_limiter_always_admits() -> None:
    limiter = RateLimiter(rpm=None, tpm=None)
    assert all(limiter.acquire(float(i), 10**9).allowed for i in range(100))
    assert limiter.states(100.0) == (None, None)


# -- headers --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("time_scale", "retry_after_s", "retry_after", "retry_after_ms", "reset"),
    [
        (1.0, 42.5, "43", "42500", "42.5s"),
        (1.0, 360.0, "360", "360000", "6m0s"),
        (1000.0, 42.5, "1", "43", "43ms"),  # real seconds = virtual / time_scale, rounded up
        (100.0, 0.0001, "1", "1", "1ms"),  # never 0: a 429 always asks for some wait
    ],
)
def test_rate_limit_headers_are_in_real_time(
    time_scale: float, retry_after_s: float, retry_after: str, retry_after_ms: str, reset: str
) -> None:
    requests = WindowState(10, 0, retry_after_s)
    tokens = WindowState(1000, 250, retry_after_s)
    headers = rate_limit_headers(
        requests, tokens, time_scale=time_scale, retry_after_s=retry_after_s
    )
    assert headers == {
        "x-ratelimit-limit-requests": "10",
        "x-ratelimit-remaining-requests": "0",
        "x-ratelimit-reset-requests": reset,
        "x-ratelimit-limit-tokens": "1000",
        "x-ratelimit-remaining-tokens": "250",
        "x-ratelimit-reset-tokens": reset,
        "retry-after": retry_after,
        "retry-after-ms": retry_after_ms,
    }


def test_rate_limit_headers_only_name_configured_windows() -> None:
    assert rate_limit_headers(None, None) == {}
    only_tokens = rate_limit_headers(None, WindowState(5, 5, 0.0))
    assert sorted(only_tokens) == [
        "x-ratelimit-limit-tokens",
        "x-ratelimit-remaining-tokens",
        "x-ratelimit-reset-tokens",
    ]
    assert only_tokens["x-ratelimit-reset-tokens"] == "0s"


# -- quota, faults, capacity ----------------------------------------------------------------


def test_quota_meter() -> None:
    unlimited = QuotaMeter(None)
    unlimited.bill(10**12)
    assert not unlimited.exhausted
    quota = QuotaMeter(50)
    quota.bill(49)
    assert not quota.exhausted
    quota.bill(1)
    assert quota.exhausted
    for bad in (0, -1, 1.5, True):
        with pytest.raises(ValueError, match="limit"):
            QuotaMeter(bad)


def test_fault_draws_are_seeded_and_split_by_rate() -> None:
    def draws(seed: int) -> list[Fault]:
        injector = FaultInjector(error_rate=0.2, hang_rate=0.1, drop_rate=0.3, seed=seed)
        return [injector.draw() for _ in range(4000)]

    first = draws(7)
    assert first == draws(7)
    assert first != draws(8)
    share = {fault: first.count(fault) / len(first) for fault in Fault}
    assert share[Fault.ERROR] == pytest.approx(0.2, abs=0.03)
    assert share[Fault.HANG] == pytest.approx(0.1, abs=0.03)
    assert share[Fault.DROP] == pytest.approx(0.3, abs=0.03)
    assert share[Fault.NONE] == pytest.approx(0.4, abs=0.03)


@pytest.mark.parametrize(
    ("rates", "fault"),
    [
        ({}, Fault.NONE),
        ({"error_rate": 1.0}, Fault.ERROR),
        ({"hang_rate": 1.0}, Fault.HANG),
        ({"drop_rate": 1.0}, Fault.DROP),
    ],
)
def test_certain_faults(rates: dict[str, Any], fault: Fault) -> None:
    injector = FaultInjector(**rates)
    assert {injector.draw() for _ in range(50)} == {fault}


def test_injected_errors_alternate_500_503() -> None:
    injector = FaultInjector(error_rate=1.0)
    assert [injector.error_status() for _ in range(4)] == [500, 503, 500, 503]


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"error_rate": -0.1}, "error_rate"),
        ({"hang_rate": 1.5}, "hang_rate"),
        ({"drop_rate": True}, "drop_rate"),
        ({"error_rate": 0.5, "hang_rate": 0.3, "drop_rate": 0.3}, "must not exceed 1"),
    ],
)
def test_fault_injector_validation(kwargs: dict[str, Any], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        FaultInjector(**kwargs)


@pytest.mark.parametrize(
    ("slots", "fraction", "kept"),
    [(32, 0.5, 16), (32, 0.25, 8), (32, 0.0, 1), (32, 1.0, 32), (3, 0.5, 2), (1, 0.1, 1)],
)
def test_capacity_slots(slots: int, fraction: float, kept: int) -> None:
    assert capacity_slots(slots, fraction) == kept
