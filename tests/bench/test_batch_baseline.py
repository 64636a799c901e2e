"""The cookbook fixed-rate baseline against the in-process mock provider, in virtual time
(trio's autojumping ``MockClock`` drives the mock and the baseline alike)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import anyio
import httpx2
import openai
import pytest

from bench.batch_baseline import run_fixed_rate, token_consumption
from mockprovider.app import MockConfig, create_app
from semisched.runtime.clock import AnyioClock

pytestmark = pytest.mark.anyio

CHAT = "/v1/chat/completions"
COMPLETIONS = "/v1/completions"


def words(text: str) -> int:
    """A stand-in tokenizer: one token per whitespace-separated word."""
    return len(text.split())


def chat_line(custom_id: str, max_tokens: int = 4) -> dict[str, Any]:
    body = {
        "model": "mock-1",
        "messages": [{"role": "user", "content": f"say {custom_id}"}],
        "max_tokens": max_tokens,
    }
    return {"custom_id": custom_id, "method": "POST", "url": CHAT, "body": body}


def completion_line(custom_id: str, max_tokens: int = 4) -> dict[str, Any]:
    body = {"model": "mock-1", "prompt": f"say {custom_id}", "max_tokens": max_tokens}
    return {"custom_id": custom_id, "method": "POST", "url": COMPLETIONS, "body": body}


class InFlight:
    """httpx2 event hooks counting HTTP calls in flight, and their peak.

    With ``hold_until``, answers are held until that many calls were in flight at
    once, so the peak does not depend on how the machine schedules the calls.
    """

    def __init__(self, hold_until: int = 0) -> None:
        self.now = 0
        self.peak = 0
        self.hold_until = hold_until
        self.reached = anyio.Event()
        if hold_until == 0:
            self.reached.set()

    async def on_request(self, request: httpx2.Request) -> None:
        self.now += 1
        self.peak = max(self.peak, self.now)
        if self.peak >= self.hold_until:
            self.reached.set()

    async def on_response(self, response: httpx2.Response) -> None:
        with anyio.fail_after(60):  # a bound, not a timing
            await self.reached.wait()
        self.now -= 1


@asynccontextmanager
async def provider(
    in_flight: InFlight | None = None, **config: Any
) -> AsyncIterator[tuple[openai.AsyncOpenAI, Any]]:
    """A fresh mock provider, an AsyncOpenAI client without retries, and the app (for stats)."""
    app = create_app(MockConfig(**config), clock=anyio.current_time)
    hooks: dict[str, list[Callable[..., Any]]] = {}
    if in_flight is not None:
        hooks = {"request": [in_flight.on_request], "response": [in_flight.on_response]}
    async with httpx2.AsyncClient(
        transport=httpx2.ASGITransport(app=app), base_url="http://mock", event_hooks=hooks
    ) as http:
        client = openai.AsyncOpenAI(
            base_url="http://mock/v1", api_key="k", http_client=http, max_retries=0
        )
        yield client, app


# Token consumption: the recipe's num_tokens_consumed_from_request, worked by hand.
@pytest.mark.parametrize(
    ("url", "body", "expected"),
    [
        # (4 + "system" 1 + "be brief" 2) + (4 + "user" 1 + "bob" 1 - 1 + "hi there you" 3) + 2
        # + n 2 * max_tokens 10
        (
            CHAT,
            {
                "messages": [
                    {"role": "system", "content": "be brief"},
                    {"role": "user", "name": "bob", "content": "hi there you"},
                ],
                "max_tokens": 10,
                "n": 2,
            },
            37,
        ),
        # (4 + 1 + 1) + 2 + the recipe's default of 15
        (CHAT, {"messages": [{"role": "user", "content": "hello"}]}, 23),
        # non-string values (content parts) count nothing
        (CHAT, {"messages": [{"role": "user", "content": [{"type": "text"}]}]}, 4 + 1 + 2 + 15),
        (CHAT, {"messages": [{"role": "user", "content": "x"}], "max_completion_tokens": 7}, 15),
        (COMPLETIONS, {"prompt": "a b c"}, 3 + 15),
        # a list prompt: every prompt's tokens + n * max_tokens once per prompt
        (COMPLETIONS, {"prompt": ["a b", "c"], "max_tokens": 5}, 3 + 2 * 5),
    ],
)
def test_token_consumption_matches_the_recipe(
    url: str, body: dict[str, Any], expected: int
) -> None:
    assert token_consumption(url, body, words) == expected


async def test_a_full_bucket_overshoots_a_sliding_window_then_recovers() -> None:
    # The recipe's known weakness: its bucket starts full, so with budget == the provider's
    # limit it sends a minute's worth at once and then keeps refilling into a window that is
    # still full; each 429 pauses sending 15 s until the first burst leaves the window.
    lines = [chat_line(f"r{i}") for i in range(30)]
    async with provider(rpm=20) as (client, app):
        result = await run_fixed_rate(
            lines,
            client=client,
            rpm=20,
            tpm=1e9,
            clock=AnyioClock(),
            count_tokens=words,
            # Up to ceil(60 / 15) paused rounds can be refused before the window frees.
            max_attempts=8,
        )
        stats = app.state.mock_stats()
    assert set(result.results) == {line["custom_id"] for line in lines}
    assert result.succeeded == 30 and result.failed == 0
    assert result.rate_limited > 0
    assert result.rate_limited == stats.counters.rate_limited_requests
    assert result.retries == result.rate_limited  # every 429 was retried, nothing else failed
    assert len(result.latencies_s) == 30
    assert all(line["response"]["status_code"] == 200 for line in result.results.values())
    # The last ten can only pass once the t=0 burst has left the provider's 60 s window.
    assert result.makespan_s >= 59.0


async def test_openais_rate_limit_exceeded_429_pauses_sending_for_15_s() -> None:
    # The correction the benchmark relies on: the recipe's newer test (code == '429') never
    # matches OpenAI's body, whose code is "rate_limit_exceeded"; any 429 must pause sending.
    clock = AnyioClock()
    sent: list[float] = []
    refused_at: list[float] = []

    class Times(InFlight):
        async def on_request(self, request: httpx2.Request) -> None:
            sent.append(clock.now())

        async def on_response(self, response: httpx2.Response) -> None:
            if response.status_code == 429:
                refused_at.append(clock.now())

    lines = [chat_line(f"q{i}") for i in range(12)]
    async with provider(Times(), rpm=5) as (client, app):
        result = await run_fixed_rate(
            lines,
            client=client,
            rpm=10,  # a full bucket of 10 against a provider window of 5
            tpm=1e9,
            clock=clock,
            count_tokens=words,
            max_attempts=1,
        )
        stats = app.state.mock_stats()
    refused = [line for line in result.results.values() if line["response"]["status_code"] == 429]
    assert refused and len(refused) == result.rate_limited == stats.counters.rate_limited
    assert {line["response"]["body"]["error"]["code"] for line in refused} == {
        "rate_limit_exceeded"
    }
    # No send within 15 s after a 429 (but for one racing its arrival by a few wall ms);
    # without the pause the refill would send one every 6 s.
    later = [(r, s) for r in refused_at for s in sent if s > r + 0.5]
    assert later
    assert all(s >= r + 15.0 for r, s in later)


async def test_a_budget_under_the_limit_is_paced_by_the_refill_without_429() -> None:
    lines = [chat_line(f"c{i}") for i in range(20)] + [completion_line(f"p{i}") for i in range(20)]
    async with provider(rpm=60) as (client, app):
        result = await run_fixed_rate(
            lines,
            client=client,
            rpm=30,
            tpm=1e9,
            clock=AnyioClock(),
            count_tokens=words,
        )
        stats = app.state.mock_stats()
    assert result.succeeded == 40 and result.failed == 0
    assert result.rate_limited == 0 and result.retries == 0
    assert stats.counters.requests == 40
    # 30 at once from the full bucket, then one every 2 s: the 40th goes out at t = 20 s.
    assert result.makespan_s >= 19.5
    body = result.results["p3"]["response"]["body"]
    assert body["object"] == "text_completion"
    assert result.results["c3"]["response"]["body"]["object"] == "chat.completion"
    assert result.results["c3"]["id"] == "batch_req_000003"
    assert result.results["c3"]["error"] is None


async def test_server_errors_are_retried_up_to_max_attempts_then_the_request_fails() -> None:
    lines = [chat_line(f"e{i}") for i in range(3)]
    async with provider(error_rate=1.0) as (client, app):
        result = await run_fixed_rate(
            lines,
            client=client,
            rpm=600,
            tpm=1e9,
            clock=AnyioClock(),
            count_tokens=words,
            max_attempts=3,
        )
        stats = app.state.mock_stats()
    assert result.succeeded == 0 and result.failed == 3
    assert result.retries == 3 * 2 and result.rate_limited == 0
    assert stats.counters.faults_error == 9
    assert result.latencies_s == ()
    for line in result.results.values():
        assert line["response"]["status_code"] in (500, 503)
        assert line["response"]["body"]["error"]["type"] == "server_error"


async def test_a_request_over_the_token_budget_fails_at_once_and_the_rest_go_on() -> None:
    lines = [chat_line("small", max_tokens=4), chat_line("huge", max_tokens=500)]
    async with provider() as (client, app):
        result = await run_fixed_rate(
            lines,
            client=client,
            rpm=600,
            tpm=100,
            clock=AnyioClock(),
            count_tokens=words,
        )
        stats = app.state.mock_stats()
    assert result.succeeded == 1 and result.failed == 1
    assert result.results["huge"]["response"] is None
    assert result.results["huge"]["error"]["code"] == "token_limit_exceeded"
    assert stats.counters.requests == 1


@pytest.mark.parametrize(("max_concurrency", "peak"), [(None, 12), (3, 3)])
async def test_max_concurrency_caps_calls_in_flight(max_concurrency: int | None, peak: int) -> None:
    lines = [chat_line(f"k{i}", max_tokens=1000) for i in range(12)]
    in_flight = InFlight(hold_until=peak)  # the cap is what keeps the peak at 3
    async with provider(in_flight) as (client, _):
        result = await run_fixed_rate(
            lines,
            client=client,
            rpm=600,
            tpm=1e9,
            clock=AnyioClock(),
            count_tokens=words,
            max_concurrency=max_concurrency,
        )
    assert result.succeeded == 12
    assert in_flight.peak == peak


@pytest.mark.parametrize(
    ("lines", "kwargs", "match"),
    [
        ([chat_line("a"), chat_line("a")], {}, "custom_id"),
        ([{**chat_line("a"), "url": "/v1/embeddings"}], {}, "url"),
        ([chat_line("a")], {"rpm": 0.5}, "rpm"),
        ([chat_line("a")], {"tpm": 0}, "tpm"),
        ([chat_line("a")], {"max_attempts": 0}, "max_attempts"),
        ([chat_line("a")], {"max_concurrency": 0}, "max_concurrency"),
    ],
)
async def test_misuse_is_refused_before_anything_is_sent(
    lines: list[dict[str, Any]], kwargs: dict[str, Any], match: str
) -> None:
    args: dict[str, Any] = {"rpm": 60, "tpm": 1e6, **kwargs}
    async with provider() as (client, app):
        with pytest.raises(ValueError, match=match):
            await run_fixed_rate(
                lines, client=client, clock=AnyioClock(), count_tokens=words, **args
            )
        assert app.state.mock_stats().counters.requests == 0
