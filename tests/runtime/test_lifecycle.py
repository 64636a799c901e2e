"""Failures and retries end to end: the core's retry policy executed by the runtime.

Real AsyncOpenAI client over the in-process mock provider, in virtual time
(``conftest.py``), so every retry time is exact: a ``retry-after`` is waited to
the microsecond, back-offs follow ``base_delay_s * 2**(n-1)``, and the same
seed gives the same jittered waits.
"""

from __future__ import annotations

import itertools
from typing import Any

import anyio
import openai
import pytest
from runtime_kit import Scripted, chat, mock_client

from semisched import (
    DeadlineExceeded,
    FailureKind,
    ProviderError,
    QuotaExceeded,
    RateLimited,
    RetryPolicy,
    RuntimeOptions,
    Scheduler,
)
from semisched.runtime.calls import scheduler_config

pytestmark = pytest.mark.anyio

#: Exact waits: no jitter.
EXACT = RetryPolicy(max_attempts=4, base_delay_s=0.5, jitter=0.0)


def gaps(times: list[float]) -> list[float]:
    """Waits between consecutive attempts."""
    return [b - a for a, b in itertools.pairwise(times)]


async def test_a_429_waits_exactly_the_retry_after_hint() -> None:
    # 2 requests per virtual minute: the third is refused with the time left in
    # the window and sent again exactly then (a hint within max_retry_after_s).
    config = scheduler_config("final_adrr_olc", retry=RetryPolicy(max_retry_after_s=60.0))
    async with mock_client(rpm=2, rate_window="fixed") as mock, Scheduler(
        mock.client, config=config
    ) as s:
        async with anyio.create_task_group() as tg:
            for _ in range(3):
                tg.start_soon(lambda: s.submit(**chat(max_tokens=5), deadline=600))
        stats = s.statistics()
    log = mock.recorder.log
    assert [e.status for e in log] == [200, 200, 429, 200]
    hint = int(log[2].headers["retry-after-ms"]) / 1000
    assert hint == pytest.approx(60.0)  # all three were sent at the window's first instant
    assert log[3].at - log[2].at == pytest.approx(hint, abs=1e-9)
    assert stats.counters.succeeded == 3
    assert stats.counters.throttled == 1
    assert stats.counters.retries == 1
    assert stats.engine.counters.retries == 1
    assert stats.engine.failures.rate_limited == 1
    assert stats.rate_limits is not None and stats.rate_limits.limit_requests == 2


async def test_server_errors_are_retried_with_back_off_then_succeed() -> None:
    script = [Scripted(503), Scripted(500)]
    async with (
        mock_client(script=script) as mock,
        Scheduler(mock.client, config=scheduler_config("final_adrr_olc", retry=EXACT)) as s,
    ):
        response = await s.submit(**chat(max_tokens=5), deadline=600)
        stats = s.statistics()
    assert isinstance(response, openai.types.chat.ChatCompletion)
    assert [e.status for e in mock.recorder.log] == [503, 500, 200]
    assert gaps(mock.recorder.attempts()) == pytest.approx([0.5, 1.0], abs=1e-9)
    assert stats.counters.retries == 2
    assert stats.counters.succeeded == 1
    assert stats.counters.provider_errors == 0
    assert stats.engine.failures.server_error == 2


async def test_a_retry_after_on_a_server_error_is_honoured() -> None:
    script = [Scripted(503, {"retry-after": "7"})]
    async with (
        mock_client(script=script) as mock,
        Scheduler(mock.client, config=scheduler_config("final_adrr_olc", retry=EXACT)) as s,
    ):
        await s.submit(**chat(max_tokens=5))
    assert gaps(mock.recorder.attempts()) == pytest.approx([7.0], abs=1e-9)


@pytest.mark.parametrize(
    ("status", "kind"), [(504, FailureKind.TIMEOUT), (408, FailureKind.TIMEOUT),
                         (409, FailureKind.SERVER_ERROR)]
)  # fmt: skip
async def test_timeouts_and_conflicts_are_retried(status: int, kind: FailureKind) -> None:
    async with mock_client(script=[Scripted(status)]) as mock:
        async with Scheduler(
            mock.client, config=scheduler_config("final_adrr_olc", retry=EXACT)
        ) as s:
            await s.submit(**chat(max_tokens=5))
            stats = s.statistics()
    assert [e.status for e in mock.recorder.log] == [status, 200]
    assert stats.engine.failures.of(kind) == 1


async def test_a_bad_request_is_not_retried() -> None:
    script = [Scripted(400, code="invalid_request_error")]
    async with (
        mock_client(script=script) as mock,
        Scheduler(mock.client, config=scheduler_config("final_adrr_olc", retry=EXACT)) as s,
    ):
        with pytest.raises(ProviderError) as info:
            await s.submit(**chat(max_tokens=5))
    error = info.value
    assert type(error) is ProviderError
    assert (error.kind, error.status_code, error.attempts) == (FailureKind.BAD_REQUEST, 400, 1)
    assert isinstance(error.__cause__, openai.BadRequestError)
    assert "not retried" in error.reason
    assert len(mock.recorder.log) == 1
    assert s.statistics().counters.provider_errors == 1


async def test_an_exhausted_quota_is_never_retried() -> None:
    retry = RetryPolicy(max_attempts=5, jitter=0.0)
    async with (
        mock_client(quota_tokens=10) as mock,
        Scheduler(mock.client, config=scheduler_config("final_adrr_olc", retry=retry)) as s,
    ):
        await s.submit(**chat(max_tokens=20))  # uses up the quota
        with pytest.raises(QuotaExceeded) as info:
            await s.submit(**chat(max_tokens=20), deadline=600)
        stats = s.statistics()
    error = info.value
    assert error.attempts == 1
    assert error.kind is FailureKind.QUOTA_EXHAUSTED
    assert error.status_code == 429
    assert error.retry_after is None
    assert isinstance(error.__cause__, openai.RateLimitError)
    assert stats.counters.quota_exceeded == 1
    assert stats.counters.retries == 0
    assert stats.counters.throttled == 0  # a quota 429 is not a rate limit
    assert mock.stats().counters.insufficient_quota == 1


async def test_retries_stop_at_max_attempts() -> None:
    retry = RetryPolicy(max_attempts=3, base_delay_s=0.5, jitter=0.0)
    async with (
        mock_client(error_rate=1.0) as mock,
        Scheduler(mock.client, config=scheduler_config("final_adrr_olc", retry=retry)) as s,
    ):
        with pytest.raises(ProviderError) as info:
            await s.submit(**chat(max_tokens=5), deadline=600)
        stats = s.statistics()
    error = info.value
    assert error.attempts == 3
    assert error.kind is FailureKind.SERVER_ERROR
    assert error.status_code in (500, 503)
    assert "gave up after 3 attempts" in error.reason
    assert isinstance(error.__cause__, openai.InternalServerError | openai.APIStatusError)
    assert gaps(mock.recorder.attempts()) == pytest.approx([0.5, 1.0], abs=1e-9)
    assert mock.stats().counters.faults_error == 3
    assert stats.counters.retries == 2
    assert stats.counters.provider_errors == 1


async def test_a_rate_limit_with_no_attempt_left_raises_rate_limited() -> None:
    retry = RetryPolicy(max_attempts=1)
    async with mock_client(rpm=1, rate_window="fixed") as mock:
        async with Scheduler(
            mock.client, config=scheduler_config("final_adrr_olc", retry=retry)
        ) as s:
            await s.submit(**chat(max_tokens=5))
            with pytest.raises(RateLimited) as info:
                await s.submit(**chat(max_tokens=5), deadline=600)
            refused_at = anyio.current_time()
            stats = s.statistics()
    error = info.value
    assert (error.status_code, error.attempts) == (429, 1)
    assert isinstance(error.__cause__, openai.RateLimitError)
    # The hint is in the scheduler's clock seconds: the rest of the minute.
    start = mock.recorder.log[0].at
    assert error.retry_after == pytest.approx(60.0 - (refused_at - start), abs=1e-3)
    assert stats.counters.rate_limited == 1
    assert stats.counters.throttled == 1


async def test_no_retry_is_scheduled_past_the_deadline() -> None:
    # The 429's hint (the rest of the minute) ends after the 5 s deadline: the
    # request expires at once, at the 429, instead of waiting for its deadline.
    async with mock_client(rpm=1, rate_window="fixed") as mock, Scheduler(mock.client) as s:
        await s.submit(**chat(max_tokens=5))
        with pytest.raises(DeadlineExceeded) as info:
            await s.submit(**chat(max_tokens=5), deadline=5)
        expired_at = anyio.current_time()
        stats = s.statistics()
    assert info.value.phase == "retry"
    assert isinstance(info.value.__cause__, openai.RateLimitError)
    assert [e.status for e in mock.recorder.log] == [200, 429]
    assert expired_at == mock.recorder.log[1].at
    assert stats.counters.deadline_exceeded == 1
    assert stats.counters.retries == 0


async def test_a_back_off_that_would_outlast_the_deadline_expires_then() -> None:
    retry = RetryPolicy(max_attempts=5, base_delay_s=10.0, max_delay_s=60.0, jitter=0.0)
    async with (
        mock_client(error_rate=1.0) as mock,
        Scheduler(mock.client, config=scheduler_config("final_adrr_olc", retry=retry)) as s,
    ):
        start = anyio.current_time()
        with pytest.raises(DeadlineExceeded) as info:
            await s.submit(**chat(max_tokens=5), deadline=15)
        expired_after = anyio.current_time() - start
    # Sent at 0, retried at 10; the next back-off (20 s) would end at 30 > 15.
    assert info.value.phase == "retry"
    assert gaps(mock.recorder.attempts()) == pytest.approx([10.0], abs=1e-9)
    assert expired_after == pytest.approx(10.0, abs=1e-9)


async def _backoffs(seed: int) -> list[float]:
    retry = RetryPolicy(max_attempts=4, base_delay_s=1.0, jitter=0.5)
    async with mock_client(error_rate=1.0) as mock:
        async with Scheduler(
            mock.client,
            config=scheduler_config("final_adrr_olc", retry=retry),
            options=RuntimeOptions(seed=seed),
        ) as s:
            with pytest.raises(ProviderError):
                await s.submit(**chat(max_tokens=5))
    return gaps(mock.recorder.attempts())


async def test_the_same_seed_gives_the_same_back_off_times() -> None:
    first, again, other = await _backoffs(7), await _backoffs(7), await _backoffs(8)
    assert again == pytest.approx(first, abs=1e-9)  # one virtual clock: not bit-identical
    assert other != pytest.approx(first, abs=1e-3)
    for waits in (first, other):
        for wait, nominal in zip(waits, [1.0, 2.0, 4.0], strict=True):
            assert 0.5 * nominal <= wait <= 1.5 * nominal


async def test_dropped_connections_are_retried_as_connection_failures() -> None:
    retry = RetryPolicy(max_attempts=2, jitter=0.0)
    drop: dict[str, Any] = {"extra_headers": {"x-mock-fault": "drop"}}
    async with (
        mock_client() as mock,
        Scheduler(mock.client, config=scheduler_config("final_adrr_olc", retry=retry)) as s,
    ):
        with pytest.raises(ProviderError) as info:
            await s.submit(**chat(max_tokens=5), **drop)
        stats = s.statistics()
    error = info.value
    assert (error.kind, error.status_code, error.attempts) == (FailureKind.CONNECTION, None, 2)
    assert isinstance(error.__cause__, openai.APIConnectionError)
    assert mock.stats().counters.faults_drop == 2
    assert stats.engine.failures.connection == 2
