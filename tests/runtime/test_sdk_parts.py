"""The SDK's pure parts: header parsing, token estimation, failure mapping, clocks."""

from __future__ import annotations

import random

import anyio
import httpx2
import openai
import pytest
import trio.testing

from semisched.core import FailureKind
from semisched.core.actions import Fail
from semisched.core.request import Prior, Request
from semisched.errors import ProviderError, QuotaExceeded, RateLimited
from semisched.runtime.clock import AnyioClock, ScaledClock
from semisched.runtime.estimate import TokenEstimator, content_kind, prompt_bytes
from semisched.runtime.failures import ProviderFailure, classify_failure, failure_outcome
from semisched.runtime.headers import parse_duration, parse_rate_limits, retry_after_seconds


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("1s", 1.0), ("6m0s", 360.0), ("59ms", 0.059), ("1h2m3.5s", 3723.5), ("2", 2.0),
     ("0.5", 0.5), ("", None), ("soon", None), ("5x", None), ("-1", None)],
)  # fmt: skip
def test_openai_durations(text: str, seconds: float | None) -> None:
    assert parse_duration(text) == (pytest.approx(seconds) if seconds is not None else None)


@pytest.mark.parametrize(
    ("headers", "expected"),
    [
        ({"retry-after-ms": "1500", "retry-after": "9"}, 1.5),
        ({"retry-after": "9"}, 9.0),
        ({"x-ratelimit-reset-requests": "2s", "x-ratelimit-reset-tokens": "6m0s"}, 360.0),
        ({"retry-after-ms": "oops", "retry-after": "3"}, 3.0),
        ({}, None),
    ],
)
def test_retry_after_precedence(headers: dict[str, str], expected: float | None) -> None:
    assert retry_after_seconds(headers) == expected


def test_retry_after_as_an_http_date() -> None:
    headers = {"retry-after": "Wed, 21 Oct 2015 07:28:30 GMT"}
    assert retry_after_seconds(headers, now_epoch=1445412480.0) == pytest.approx(30.0)


def test_rate_limit_headroom() -> None:
    info = parse_rate_limits(
        {
            "x-ratelimit-limit-requests": "100",
            "x-ratelimit-remaining-requests": "40",
            "x-ratelimit-limit-tokens": "1000",
            "x-ratelimit-remaining-tokens": "100",
            "x-ratelimit-reset-tokens": "1s",
        }
    )
    assert info is not None
    assert info.headroom == pytest.approx(0.1)
    assert info.reset_tokens_s == 1.0
    assert parse_rate_limits({"content-type": "application/json"}) is None
    limits = info.scaled(clock_per_wall_s=10.0)  # a clock 10x faster than the wall
    assert limits.reset_tokens_s == 10.0
    assert limits.reset_requests_s is None
    assert (limits.limit_tokens, limits.remaining_tokens) == (1000, 100)


def test_rate_limit_headers_are_read_in_any_case() -> None:
    mixed = parse_rate_limits({"X-RateLimit-Limit-Tokens": "5000", "Content-Type": "json",
                               "x-ratelimit-remaining-TOKENS": "4000"})  # fmt: skip
    assert mixed is not None and (mixed.limit_tokens, mixed.remaining_tokens) == (5000, 4000)
    http = parse_rate_limits(httpx2.Headers({"X-Ratelimit-Limit-Requests": "60"}))
    assert http is not None and http.limit_requests == 60


@pytest.mark.parametrize(
    ("text", "kind"),
    [
        ("Tell me about the history of Rome.", "prose"),
        ("def f(x):\n    return {x: [1, 2]}", "code"),
        ("東京の天気はどうですか。明日は雨ですか。", "cjk"),
        ("", "prose"),
    ],
)
def test_content_kind(text: str, kind: str) -> None:
    assert content_kind(text) == kind


def test_estimator_calibrates_conservatively() -> None:
    est = TokenEstimator()
    assert est.estimate("m", "prose", 400) == 100  # c0 = 4 bytes per token
    rng = random.Random(0)
    for _ in range(200):
        est.observe("m", "prose", 300, round(300 / rng.uniform(2.8, 3.2)))
    ratio = est.ratio("m", "prose")
    assert 2.6 < ratio < 3.0  # mean ~3 minus one deviation: leans to over-estimating tokens
    assert est.estimate("m", "prose", 300) >= 100
    assert est.ratio("other-model", "prose") == 4.0  # categories are independent
    stats = est.statistics()
    category = stats.get("m", "prose")
    assert category is not None
    assert category.observations == 200
    assert category.ratio == ratio
    assert category.mean == pytest.approx(3.0, abs=0.1)
    assert stats.get("other-model", "prose") is None


def test_estimator_ignores_empty_observations_and_validates() -> None:
    est = TokenEstimator()
    est.observe("m", "prose", 0, 10)
    est.observe("m", "prose", 10, 0)
    assert est.statistics().categories == ()
    with pytest.raises(ValueError, match="beta="):
        TokenEstimator(beta=1.0)


def test_prompt_bytes_of_chat_and_completions() -> None:
    nbytes, kind = prompt_bytes(messages=[{"role": "user", "content": "héllo"}])
    assert (nbytes, kind) == (6, "prose")
    parts = [{"role": "user", "content": [{"type": "text", "text": "abc"}]}]
    assert prompt_bytes(messages=parts)[0] == 3
    assert prompt_bytes(prompt=["ab", "cd"])[0] == 5


def _status_error(status: int, body: dict[str, object], headers: dict[str, str]) -> Exception:
    request = httpx2.Request("POST", "http://x/v1/chat/completions")
    response = httpx2.Response(status, json={"error": body}, headers=headers, request=request)
    client = openai.OpenAI(api_key="k", base_url="http://x/v1")
    return client._make_status_error_from_response(response)


@pytest.mark.parametrize(
    ("status", "code", "headers", "kind", "retry_after"),
    [
        (429, "rate_limit_exceeded", {"retry-after-ms": "250"}, FailureKind.RATE_LIMITED, 0.25),
        (429, None, {"x-ratelimit-reset-requests": "2s"}, FailureKind.RATE_LIMITED, 2.0),
        (429, "insufficient_quota", {"retry-after": "5"}, FailureKind.QUOTA_EXHAUSTED, None),
        (500, None, {}, FailureKind.SERVER_ERROR, None),
        (503, None, {"retry-after": "2"}, FailureKind.SERVER_ERROR, 2.0),
        (502, None, {}, FailureKind.SERVER_ERROR, None),
        (409, None, {}, FailureKind.SERVER_ERROR, None),
        (408, None, {}, FailureKind.TIMEOUT, None),
        (504, None, {}, FailureKind.TIMEOUT, None),
        (400, "invalid_request_error", {}, FailureKind.BAD_REQUEST, None),
        (401, None, {}, FailureKind.AUTH, None),
        (404, None, {}, FailureKind.BAD_REQUEST, None),
    ],
)
def test_failures_are_classified_in_one_place(
    status: int,
    code: str | None,
    headers: dict[str, str],
    kind: FailureKind,
    retry_after: float | None,
) -> None:
    exc = _status_error(status, {"message": "m", "type": code, "code": code}, headers)
    failure = classify_failure(exc)
    assert failure.kind is kind
    assert failure.status_code == status
    assert failure.retry_after_wall_s == retry_after


def test_connection_errors_and_timeouts() -> None:
    request = httpx2.Request("POST", "http://x")
    assert classify_failure(openai.APIConnectionError(request=request)).kind is (
        FailureKind.CONNECTION
    )
    # APITimeoutError subclasses APIConnectionError: still a timeout.
    assert classify_failure(openai.APITimeoutError(request=request)).kind is FailureKind.TIMEOUT
    unknown = classify_failure(RuntimeError("boom"))
    assert (unknown.kind, unknown.status_code) == (FailureKind.UNKNOWN, None)
    assert "RuntimeError: boom" in unknown.message


def _request() -> Request:
    return Request(id="r1", klass="batch", prior=Prior(p50=10, p90=20), input_tokens=5, arrival=0)


@pytest.mark.parametrize(
    ("kind", "cls"),
    [
        (FailureKind.QUOTA_EXHAUSTED, QuotaExceeded),
        (FailureKind.RATE_LIMITED, RateLimited),
        (FailureKind.SERVER_ERROR, ProviderError),
        (FailureKind.CONNECTION, ProviderError),
    ],
)
def test_a_terminal_failure_maps_to_one_outcome(kind: FailureKind, cls: type) -> None:
    cause = RuntimeError("the client's own error")
    failure = ProviderFailure(kind, 429, 3.0, {}, "too many")
    fail = Fail(_request(), kind, "gave up after 4 attempts", 4, 6.0)
    error = failure_outcome(fail, failure, cause, request_id="r1")
    assert type(error) is cls
    assert error.__cause__ is cause
    assert (error.request_id, error.klass, error.attempts) == ("r1", "batch", 4)
    assert (error.kind, error.reason) == (kind, "gave up after 4 attempts")
    assert error.retry_after == 6.0  # the core's hint, in clock seconds
    assert error.status_code == 429
    assert "too many (gave up after 4 attempts)" in str(error)


def test_scaled_clock() -> None:
    clock = ScaledClock(50.0)
    assert clock.to_wall(10.0) == pytest.approx(0.2)
    a = clock.now()
    assert clock.now() >= a
    with pytest.raises(ValueError, match="scale="):
        ScaledClock(0.0)


@pytest.mark.parametrize("scale", [0.0, -1.0, float("nan"), float("inf"), True])
def test_anyio_clock_validates_its_scale(scale: float) -> None:
    with pytest.raises(ValueError, match="scale="):
        AnyioClock(scale)


@pytest.mark.parametrize("scale", [1.0, 4.0])
def test_anyio_clock_follows_the_loops_virtual_time(scale: float) -> None:
    clock = AnyioClock(scale)

    async def main() -> tuple[float, float]:
        start = clock.now()
        await clock.sleep(120.0)
        return start, clock.now()

    mock = trio.testing.MockClock(autojump_threshold=0)
    start, end = anyio.run(main, backend="trio", backend_options={"clock": mock})
    assert end - start == pytest.approx(120.0, abs=1e-9)  # exact: the loop's clock is virtual
    assert mock.current_time() == pytest.approx(120.0 / scale, abs=1e-9)
    assert clock.to_wall(120.0) == pytest.approx(120.0 / scale)
    assert repr(clock) == f"AnyioClock(scale={scale!r})"
