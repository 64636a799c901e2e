"""The SDK's pure parts: header parsing, token estimation, failure mapping, retry policy."""

from __future__ import annotations

import random

import httpx2
import openai
import pytest

from semisched.clock import ScaledClock
from semisched.estimate import TokenEstimator, content_kind, prompt_bytes
from semisched.headers import parse_duration, parse_rate_limits, retry_after_seconds
from semisched.runtime import RetryPolicy, classify_failure


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


def test_estimator_ignores_empty_observations_and_validates() -> None:
    est = TokenEstimator()
    est.observe("m", "prose", 0, 10)
    est.observe("m", "prose", 10, 0)
    assert est.snapshot() == {}
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
        (429, "rate_limit_exceeded", {"retry-after-ms": "250"}, "rate_limited", 0.25),
        (429, "insufficient_quota", {"retry-after": "5"}, "quota", None),
        (500, None, {}, "transient", None),
        (503, None, {"retry-after": "2"}, "transient", 2.0),
        (408, None, {}, "transient", None),
        (400, "invalid_request_error", {}, "fatal", None),
        (401, None, {}, "fatal", None),
    ],
)
def test_failures_are_classified_in_one_place(
    status: int, code: str | None, headers: dict[str, str], kind: str, retry_after: float | None
) -> None:
    exc = _status_error(status, {"message": "m", "type": code, "code": code}, headers)
    failure = classify_failure(exc)
    assert failure.kind == kind
    assert failure.status_code == status
    assert failure.retry_after_wall_s == retry_after
    assert failure.retryable == (kind in ("rate_limited", "transient"))


def test_connection_errors_and_timeouts_are_transient() -> None:
    request = httpx2.Request("POST", "http://x")
    assert classify_failure(openai.APIConnectionError(request=request)).kind == "transient"
    assert classify_failure(openai.APITimeoutError(request=request)).kind == "transient"
    assert classify_failure(RuntimeError("boom")).kind == "fatal"


def test_backoff_doubles_with_bounded_jitter() -> None:
    policy = RetryPolicy(base_delay_s=1.0, max_delay_s=5.0, jitter=0.2)
    rng = random.Random(3)
    for attempt, nominal in [(1, 1.0), (2, 2.0), (3, 4.0), (4, 5.0), (9, 5.0)]:
        delay = policy.backoff(attempt, rng)
        assert nominal * 0.8 <= delay <= nominal * 1.2


@pytest.mark.parametrize("kwargs", [{"max_attempts": 0}, {"base_delay_s": -1.0}, {"jitter": 1.0}])
def test_retry_policy_validation(kwargs: dict[str, float]) -> None:
    with pytest.raises(ValueError, match=next(iter(kwargs))):
        RetryPolicy(**kwargs)  # type: ignore[arg-type]


def test_scaled_clock() -> None:
    clock = ScaledClock(50.0)
    assert clock.to_wall(10.0) == pytest.approx(0.2)
    a = clock.now()
    assert clock.now() >= a
    with pytest.raises(ValueError, match="scale="):
        ScaledClock(0.0)
