"""semisched over the oldest and the newest supported ``openai``, faked at the HTTP level.

Each test runs the real ``openai.AsyncOpenAI`` client (httpx on openai 1.x/2.x,
httpx2 on 3.x; see ``conftest.py``) and asserts only what a caller sees: return
values, outcome exceptions, and the requests the provider received.
"""

from __future__ import annotations

import openai
import pytest

from semisched import ProviderError, QuotaExceeded, RateLimited, RetryPolicy, Scheduler
from semisched.runtime.calls import scheduler_config

from .conftest import FakeProvider, Reply, chat_completion, chat_stream, error, text_completion

pytestmark = pytest.mark.anyio

MESSAGES = [{"role": "user", "content": "hello"}]

#: Fast, bounded retries for the tests that exhaust them.
RETRY = RetryPolicy(max_attempts=3, base_delay_s=0.001, jitter=0.0)


async def test_a_completion_returns_the_providers_own_response(provider: FakeProvider) -> None:
    provider.script(chat_completion("hi there"))
    async with Scheduler(provider.client) as scheduler:
        response = await scheduler.submit(
            model="fake-1", messages=MESSAGES, max_tokens=5, klass="interactive", deadline=30
        )
    assert isinstance(response, openai.types.chat.ChatCompletion)
    assert response.choices[0].message.content == "hi there"
    assert response.usage is not None and response.usage.completion_tokens == 2
    (seen,) = provider.seen
    assert (seen.method, seen.path) == ("POST", "/v1/chat/completions")
    assert seen.body["max_tokens"] == 5
    assert not {"klass", "deadline", "prior"} & set(seen.body)


async def test_the_drop_in_client_and_the_completions_endpoint(provider: FakeProvider) -> None:
    provider.script(chat_completion("a b c"), text_completion("once upon a time"))
    async with Scheduler(provider.client) as scheduler:
        chat = await scheduler.client.chat.completions.create(
            model="fake-1", messages=MESSAGES, max_tokens=5
        )
        text = await scheduler.client.completions.create(
            model="fake-1", prompt="tell me", max_tokens=5
        )
    assert isinstance(chat, openai.types.chat.ChatCompletion)
    assert isinstance(text, openai.types.Completion)
    assert text.choices[0].text == "once upon a time"
    assert [s.path for s in provider.seen] == ["/v1/chat/completions", "/v1/completions"]


async def test_a_429_with_retry_after_ms_is_retried_then_succeeds(provider: FakeProvider) -> None:
    provider.script(
        error(429, "rate_limit_exceeded", "requests", retry_after_ms="1"),
        chat_completion("second time lucky"),
    )
    async with Scheduler(provider.client) as scheduler:
        response = await scheduler.submit(model="fake-1", messages=MESSAGES, max_tokens=5)
    assert response.choices[0].message.content == "second time lucky"
    first, second = provider.seen  # one retry by semisched, none by openai itself
    assert second.at - first.at >= 0.001
    assert second.body == first.body


async def test_a_429_insufficient_quota_is_not_retried(provider: FakeProvider) -> None:
    provider.script(
        error(429, "insufficient_quota", "insufficient_quota", retry_after_ms="1"),
        chat_completion("never sent"),
    )
    async with Scheduler(provider.client) as scheduler:
        with pytest.raises(QuotaExceeded) as info:
            await scheduler.submit(model="fake-1", messages=MESSAGES, max_tokens=5, deadline=60)
    assert info.value.status_code == 429
    assert info.value.attempts == 1
    assert isinstance(info.value.__cause__, openai.RateLimitError)
    assert len(provider.seen) == 1
    assert len(provider.replies) == 1  # the success was never asked for


async def test_a_500_is_retried_until_the_attempts_run_out(provider: FakeProvider) -> None:
    provider.script(*[error(500, None, "server_error")] * 3, chat_completion("too late"))
    async with Scheduler(
        provider.client, config=scheduler_config("final_adrr_olc", retry=RETRY)
    ) as scheduler:
        with pytest.raises(ProviderError) as info:
            await scheduler.submit(model="fake-1", messages=MESSAGES, max_tokens=5)
    assert not isinstance(info.value, RateLimited | QuotaExceeded)
    assert info.value.status_code == 500
    assert info.value.attempts == 3
    assert isinstance(info.value.__cause__, openai.InternalServerError)
    assert info.value.__cause__.status_code == 500
    assert len(provider.seen) == 3


async def test_a_dropped_connection_is_retried(provider: FakeProvider) -> None:
    provider.script(Reply(drop=True), chat_completion("reconnected"))
    async with Scheduler(
        provider.client, config=scheduler_config("final_adrr_olc", retry=RETRY)
    ) as scheduler:
        response = await scheduler.submit(model="fake-1", messages=MESSAGES, max_tokens=5)
    assert response.choices[0].message.content == "reconnected"
    assert len(provider.seen) == 2


async def test_a_connection_closed_unanswered_is_sent_again_and_is_no_failure(
    provider: FakeProvider,
) -> None:
    provider.script(Reply(closed=True), chat_completion("resent"))
    async with Scheduler(
        provider.client, config=scheduler_config("final_adrr_olc", retry=RETRY)
    ) as scheduler:
        response = await scheduler.submit(model="fake-1", messages=MESSAGES, max_tokens=5)
        stats = scheduler.statistics()
    assert response.choices[0].message.content == "resent"
    assert len(provider.seen) == 2
    assert stats.counters.resent == 1 and stats.counters.retries == 0


async def test_a_stream_hides_the_usage_chunk_semisched_added(provider: FakeProvider) -> None:
    provider.script(chat_stream(["one ", "two ", "three"], with_usage=True))
    async with Scheduler(provider.client) as scheduler:
        stream = await scheduler.submit(
            model="fake-1", messages=MESSAGES, max_tokens=5, stream=True
        )
        chunks = [chunk async for chunk in stream]
    assert all(isinstance(c, openai.types.chat.ChatCompletionChunk) for c in chunks)
    assert all(c.choices for c in chunks)  # the usage-only chunk is hidden...
    assert "".join(c.choices[0].delta.content or "" for c in chunks) == "one two three"
    assert stream.usage is not None and stream.usage.completion_tokens == 3  # ...but read
    (seen,) = provider.seen
    assert seen.body["stream"] is True
    assert seen.body["stream_options"] == {"include_usage": True}


async def test_a_stream_keeps_the_usage_chunk_the_caller_asked_for(
    provider: FakeProvider,
) -> None:
    provider.script(chat_stream(["a ", "b"], with_usage=True))
    async with Scheduler(provider.client) as scheduler:
        stream = await scheduler.submit(
            model="fake-1",
            messages=MESSAGES,
            max_tokens=5,
            stream=True,
            stream_options={"include_usage": True},
        )
        chunks = [chunk async for chunk in stream]
    assert len(chunks) == 3
    assert not chunks[-1].choices
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens == 2


async def test_rate_limit_headers_are_read(provider: FakeProvider) -> None:
    # A 429 whose only hint is x-ratelimit-reset-*: the retry waits for it.
    exhausted = {
        "x_ratelimit_limit_requests": "60",
        "x_ratelimit_remaining_requests": "0",
        "x_ratelimit_reset_requests": "20ms",
    }
    provider.script(
        error(429, "rate_limit_exceeded", "requests", **exhausted),
        chat_completion(
            "ok",
            x_ratelimit_limit_requests="60",
            x_ratelimit_remaining_requests="58",
            x_ratelimit_reset_requests="1s",
            x_ratelimit_limit_tokens="90000",
            x_ratelimit_remaining_tokens="89000",
            x_ratelimit_reset_tokens="6m0s",
        ),
    )
    async with Scheduler(provider.client) as scheduler:
        await scheduler.submit(model="fake-1", messages=MESSAGES, max_tokens=5)
        limits = scheduler.statistics().rate_limits
    first, second = provider.seen
    assert second.at - first.at >= 0.019  # 20 ms, less the clock's rounding
    # The successful response's headers are what the scheduler reports.
    assert limits is not None
    assert (limits.limit_requests, limits.remaining_requests) == (60, 58)
    assert (limits.limit_tokens, limits.remaining_tokens) == (90000, 89000)
    assert limits.reset_tokens_s == 360.0
