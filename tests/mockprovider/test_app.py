"""The mock provider's HTTP app, driven by the real openai client (mockprovider.app).

In-process tests use ``httpx2.ASGITransport`` and compress time with a large ``time_scale``;
one test serves the app with uvicorn in a subprocess (``python -m mockprovider``).
"""

from __future__ import annotations

import json
import math
import os
import random
import re
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any

import anyio
import httpx2
import openai
import pytest
from openai import AsyncStream
from openai.types import Completion
from openai.types.chat import ChatCompletion, ChatCompletionChunk

from mockprovider import MockConfig, create_app, profile
from mockprovider.__main__ import build_parser, main

pytestmark = pytest.mark.anyio

MESSAGES: Any = [{"role": "user", "content": "Say something."}]
DEFAULT = profile("default")
REPO = Path(__file__).resolve().parents[2]  # `-m mockprovider` runs this checkout's package
DURATION = re.compile(r"^(\d+ms|(\d+h)?(\d+m)?\d+(\.\d+)?s)$")


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


class Mock:
    """An app plus the two clients that talk to it."""

    def __init__(self, http: httpx2.AsyncClient, client: openai.AsyncOpenAI) -> None:
        self.http = http
        self.client = client

    async def stats(self) -> dict[str, Any]:
        response = await self.http.get("/v1/mock/stats", headers={"authorization": "Bearer k"})
        assert response.status_code == 200
        result: dict[str, Any] = response.json()
        return result

    async def chat(self, output: int | None = None, **kwargs: Any) -> ChatCompletion:
        headers = {} if output is None else {"x-mock-output-tokens": str(output)}
        headers.update(kwargs.pop("extra_headers", {}))
        result: ChatCompletion = await self.client.chat.completions.create(
            model="m", messages=MESSAGES, extra_headers=headers, **kwargs
        )
        return result

    async def stream(self, output: int, **kwargs: Any) -> AsyncStream[ChatCompletionChunk]:
        result: AsyncStream[ChatCompletionChunk] = await self.client.chat.completions.create(
            model="m",
            messages=MESSAGES,
            extra_headers={"x-mock-output-tokens": str(output)},
            stream=True,
            **kwargs,
        )
        return result

    async def stream_all(self, output: int, **kwargs: Any) -> list[ChatCompletionChunk]:
        return [chunk async for chunk in await self.stream(output, **kwargs)]


@asynccontextmanager
async def serve(config: MockConfig, api_key: str = "k") -> AsyncIterator[Mock]:
    app = create_app(config)
    transport = httpx2.ASGITransport(app=app)
    async with httpx2.AsyncClient(transport=transport, base_url="http://mock") as http:
        client = openai.AsyncOpenAI(
            base_url="http://mock/v1", api_key=api_key, http_client=http, max_retries=0
        )
        yield Mock(http, client)


# -- shapes ---------------------------------------------------------------------------------


async def test_chat_completion_parses_with_hinted_usage() -> None:
    async with serve(MockConfig(time_scale=1000)) as mock:
        result = await mock.chat(7, extra_headers={"x-mock-input-tokens": "11"})
    assert isinstance(result, ChatCompletion)
    assert result.object == "chat.completion"
    assert result.model == "m"
    assert result.id.startswith("chatcmpl-")
    assert result.usage is not None
    assert (result.usage.prompt_tokens, result.usage.completion_tokens) == (11, 7)
    assert result.usage.total_tokens == 18
    (choice,) = result.choices
    assert choice.finish_reason == "stop"
    assert choice.message.role == "assistant"
    assert choice.message.content is not None
    assert len(choice.message.content.split()) == 7


async def test_output_length_rules_and_prompt_estimate() -> None:
    config = MockConfig(time_scale=1000, default_output_tokens=5)
    async with serve(config) as mock:
        default = await mock.chat()
        by_max = await mock.chat(max_tokens=9)
        capped = await mock.chat(50, max_completion_tokens=20)
        hinted_below_cap = await mock.chat(3, max_tokens=20)
        long_prompt = await mock.client.chat.completions.create(
            model="m", messages=[{"role": "user", "content": "x" * 41}]
        )
    cases = [(default, 5, "stop"), (by_max, 9, "stop"), (capped, 20, "length")]
    cases.append((hinted_below_cap, 3, "stop"))
    for result, tokens, finish in cases:
        assert result.usage is not None
        assert result.usage.completion_tokens == tokens
        assert result.choices[0].finish_reason == finish
    assert long_prompt.usage is not None
    assert long_prompt.usage.prompt_tokens == 11  # 41 bytes / 4, rounded up


async def test_legacy_completions_accept_string_and_list_prompts() -> None:
    async with serve(MockConfig(time_scale=1000)) as mock:
        one = await mock.client.completions.create(model="m", prompt="a" * 16, max_tokens=4)
        many = await mock.client.completions.create(model="m", prompt=["ab", "cd"], max_tokens=2)
        tokens = await mock.client.completions.create(model="m", prompt=[1, 2, 3], max_tokens=1)
    assert isinstance(one, Completion)
    assert one.object == "text_completion"
    assert one.choices[0].text == "lorem ipsum dolor sit"
    assert one.usage is not None
    assert (one.usage.prompt_tokens, one.usage.completion_tokens) == (4, 4)
    assert many.usage is not None
    assert many.usage.prompt_tokens == 1
    assert tokens.usage is not None
    assert tokens.usage.prompt_tokens == 3


async def test_models_list_and_retrieve() -> None:
    async with serve(MockConfig(model="mock-xl")) as mock:
        listed = await mock.client.models.list()
        model = await mock.client.models.retrieve("mock-xl")
        with pytest.raises(openai.NotFoundError):
            await mock.client.models.retrieve("other")
    assert [m.id for m in listed.data] == ["mock-xl"]
    assert model.owned_by == "mock"


# -- timing ---------------------------------------------------------------------------------


async def test_lone_request_takes_the_physics_time() -> None:
    scale = 20.0
    expected = 101 * DEFAULT.iteration_ms(1) / 1000  # 1 prefill + 100 decode iterations: 1.89 s
    async with serve(MockConfig(time_scale=scale)) as mock:
        await mock.chat(1)  # warm up the client (first-call model building)
        start = time.monotonic()
        await mock.chat(100)
        virtual = (time.monotonic() - start) * scale
    # The answer can never come before its virtual completion; the upper bound is generous.
    assert expected * 0.999 <= virtual <= expected * 3


async def test_concurrent_requests_complete_in_length_order() -> None:
    done: list[int] = []
    # Neighbouring lengths differ by >= 50 tokens: >= 1 virtual second, 50 ms of wall time,
    # far more than the client's own per-call overhead that staggers the submissions.
    async with serve(MockConfig(time_scale=20)) as mock:
        await mock.chat(1)  # warm up the client (first-call model building)

        async def one(tokens: int) -> None:
            await mock.chat(tokens)
            done.append(tokens)

        async with anyio.create_task_group() as tg:
            for tokens in (300, 60, 200, 10, 120):
                tg.start_soon(one, tokens)
        stats = await mock.stats()
    assert done == [10, 60, 120, 200, 300]
    assert stats["physics"]["completed"] == 6
    assert stats["counters"]["completed"] == 6


async def test_capacity_loss_shows_in_stats() -> None:
    async with serve(MockConfig(time_scale=100, capacity_loss=(1.0, 0.25))) as mock:
        before = await mock.stats()  # starts the virtual clock at 0
        await mock.chat(100)  # 1.89 virtual seconds: the loss at t=1 happens meanwhile
        after = await mock.stats()
    assert before["physics"]["slots"] == 32
    assert before["capacity_loss_applied_at"] is None
    assert after["physics"]["slots"] == 8
    assert after["capacity_loss_applied_at"] == 1.0


# -- streaming ------------------------------------------------------------------------------


@pytest.mark.parametrize("include_usage", [False, True])
async def test_streaming_chunks_reassemble(include_usage: bool) -> None:
    tokens = 10
    async with serve(MockConfig(time_scale=1000)) as mock:
        full = await mock.chat(tokens)
        extra: dict[str, Any] = {"stream_options": {"include_usage": True}} if include_usage else {}
        chunks = await mock.stream_all(tokens, **extra)
    assert all(isinstance(c, ChatCompletionChunk) for c in chunks)
    # First word with the role, 4 content chunks, the finish chunk, [the usage chunk].
    assert len(chunks) == 1 + 4 + 1 + int(include_usage)
    content = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert content == full.choices[0].message.content
    assert chunks[0].choices[0].delta.role == "assistant"
    finish = chunks[5]
    assert finish.choices[0].finish_reason == "stop"
    assert all(c.choices[0].finish_reason is None for c in chunks[:5])
    if include_usage:
        last = chunks[-1]
        assert last.choices == []
        assert last.usage is not None
        assert last.usage.model_dump() == full.usage.model_dump()  # type: ignore[union-attr]
        assert all(c.usage is None for c in chunks[:-1])
    else:
        assert all(c.usage is None for c in chunks)


async def test_streaming_legacy_completions_and_single_token() -> None:
    async with serve(MockConfig(time_scale=1000)) as mock:
        stream = await mock.client.completions.create(
            model="m", prompt="hi", max_tokens=1, stream=True
        )
        chunks = [chunk async for chunk in stream]
    assert [c.choices[0].text for c in chunks] == ["lorem", ""]
    assert [c.choices[0].finish_reason for c in chunks] == [None, "stop"]


async def test_stream_ends_with_done_on_the_wire() -> None:
    body = {"model": "m", "messages": MESSAGES, "stream": True, "max_tokens": 3}
    async with serve(MockConfig(time_scale=1000)) as mock:
        response = await mock.http.post("/v1/chat/completions", json=body)
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/event-stream")
    events = [e for e in response.text.split("\n\n") if e]
    assert events[-1] == "data: [DONE]"
    assert all(e.startswith("data: ") for e in events)


# -- request errors -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "param"),
    [
        (b"{not json", None),
        (b"[1, 2]", None),
        (b"[" * 100_000, None),
        (json.dumps({"messages": MESSAGES}).encode(), "model"),
        (json.dumps({"model": "m"}).encode(), "messages"),
        (json.dumps({"model": "m", "messages": "hi"}).encode(), "messages"),
        (json.dumps({"model": "m", "messages": []}).encode(), "messages"),
        (json.dumps({"model": "m", "messages": [1]}).encode(), "messages[0]"),
        (json.dumps({"model": "m", "messages": [{"content": "x"}]}).encode(), "messages[0].role"),
        (
            json.dumps({"model": "m", "messages": [{"role": "user", "content": 5}]}).encode(),
            "messages[0].content",
        ),
        (json.dumps({"model": 5, "messages": MESSAGES}).encode(), "model"),
        (
            json.dumps({"model": "m", "messages": MESSAGES, "max_tokens": "9"}).encode(),
            "max_tokens",
        ),
        (json.dumps({"model": "m", "messages": MESSAGES, "max_tokens": 0}).encode(), "max_tokens"),
        (json.dumps({"model": "m", "messages": MESSAGES, "stream": "yes"}).encode(), "stream"),
        (
            json.dumps({"model": "m", "messages": MESSAGES, "stream_options": {}}).encode(),
            "stream_options",
        ),
        (json.dumps({"model": "m", "messages": MESSAGES, "n": 2}).encode(), "n"),
    ],
)
async def test_bad_chat_requests_get_openai_400(body: bytes, param: str | None) -> None:
    async with serve(MockConfig(time_scale=1000)) as mock:
        response = await mock.http.post("/v1/chat/completions", content=body)
        stats = await mock.stats()
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["type"] == "invalid_request_error"
    assert error["param"] == param
    assert isinstance(error["message"], str)
    assert "code" in error
    assert stats["counters"]["bad_requests"] == 1
    assert stats["physics"]["submitted"] == 0


@pytest.mark.parametrize(
    ("body", "headers", "param"),
    [
        ({"model": "m"}, {}, "prompt"),
        ({"model": "m", "prompt": 5}, {}, "prompt"),
        ({"model": "m", "prompt": ["a", 1]}, {}, "prompt"),
        ({"model": "m", "prompt": "a"}, {"x-mock-output-tokens": "many"}, "x-mock-output-tokens"),
        ({"model": "m", "prompt": "a"}, {"x-mock-input-tokens": "-1"}, "x-mock-input-tokens"),
        ({"model": "m", "prompt": "a"}, {"x-mock-fault": "explode"}, "x-mock-fault"),
    ],
)
async def test_bad_completion_requests_get_openai_400(
    body: dict[str, Any], headers: dict[str, str], param: str
) -> None:
    async with serve(MockConfig(time_scale=1000)) as mock:
        response = await mock.http.post("/v1/completions", json=body, headers=headers)
    assert response.status_code == 400
    assert response.json()["error"]["param"] == param


async def test_openai_client_raises_bad_request_and_unknown_routes_are_openai_shaped() -> None:
    async with serve(MockConfig(time_scale=1000)) as mock:
        with pytest.raises(openai.BadRequestError) as info:
            await mock.client.chat.completions.create(model="m", messages="hi")  # type: ignore[arg-type]
        missing = await mock.http.get("/v1/nothing")
        wrong_method = await mock.http.get("/v1/chat/completions")
    assert info.value.status_code == 400
    assert missing.status_code == 404
    assert missing.json()["error"]["code"] == "not_found"
    assert wrong_method.status_code == 405
    assert "POST" in wrong_method.headers["allow"]


async def test_api_key_is_required_and_never_echoed() -> None:
    secret = "sk-very-secret"
    config = MockConfig(time_scale=1000, api_key=secret)
    assert secret not in repr(config)
    async with serve(config, api_key=secret) as good:
        assert (await good.chat(1)).usage is not None
    async with serve(config, api_key="wrong-key") as bad:
        with pytest.raises(openai.AuthenticationError) as info:
            await bad.chat(1)
        bare = await bad.http.post("/v1/chat/completions", json={"model": "m", "messages": []})
        models = await bad.http.get("/v1/models")
    assert info.value.status_code == 401
    assert info.value.code == "invalid_api_key"
    for response in (bare, models):
        assert response.status_code == 401
        assert response.json()["error"]["type"] == "invalid_request_error"
    for text in (str(info.value.body), bare.text):
        assert secret not in text
        assert "wrong-key" not in text


# -- rate limits and quota ------------------------------------------------------------------


async def test_rpm_limit_answers_429_with_openai_headers() -> None:
    async with serve(MockConfig(time_scale=1000, rpm=2, tpm=10_000)) as mock:
        raw = mock.client.chat.completions.with_raw_response
        first = await raw.create(model="m", messages=MESSAGES, max_tokens=1)
        second = await raw.create(model="m", messages=MESSAGES, max_tokens=1)
        with pytest.raises(openai.RateLimitError) as info:
            await mock.chat(1)
        stats = await mock.stats()
    assert first.parse().usage is not None
    assert first.headers["x-ratelimit-limit-requests"] == "2"
    assert first.headers["x-ratelimit-remaining-requests"] == "1"
    assert second.headers["x-ratelimit-remaining-requests"] == "0"
    assert first.headers["x-ratelimit-limit-tokens"] == "10000"
    assert int(second.headers["x-ratelimit-remaining-tokens"]) == 10_000 - 2 * (
        first.parse().usage.prompt_tokens + 1  # type: ignore[union-attr]
    )
    for headers in (first.headers, second.headers):
        assert DURATION.match(headers["x-ratelimit-reset-requests"])
        assert DURATION.match(headers["x-ratelimit-reset-tokens"])
    error = info.value
    assert error.status_code == 429
    assert error.code == "rate_limit_exceeded"
    assert error.type == "requests"
    assert error.param is None
    headers = error.response.headers
    # 60 virtual seconds at time_scale 1000 are at most 60 real milliseconds.
    assert headers["retry-after"] == "1"
    assert 1 <= int(headers["retry-after-ms"]) <= 60
    assert headers["x-ratelimit-remaining-requests"] == "0"
    assert re.fullmatch(r"\d+ms", headers["x-ratelimit-reset-requests"])
    assert stats["counters"]["rate_limited_requests"] == 1
    assert stats["physics"]["submitted"] == 2


async def test_tpm_limit_charges_prompt_plus_max_tokens() -> None:
    async with serve(MockConfig(time_scale=100, tpm=100)) as mock:
        hint = {"x-mock-input-tokens": "30"}
        raw = mock.client.chat.completions.with_raw_response
        ok = await raw.create(model="m", messages=MESSAGES, max_tokens=40, extra_headers=hint)
        with pytest.raises(openai.RateLimitError) as limited:
            await mock.chat(extra_headers=hint, max_tokens=40)
        with pytest.raises(openai.RateLimitError) as too_large:
            await mock.chat(extra_headers=hint, max_tokens=200)
    assert ok.headers["x-ratelimit-remaining-tokens"] == "30"
    assert "x-ratelimit-limit-requests" not in ok.headers
    assert limited.value.type == "tokens"
    assert limited.value.code == "rate_limit_exceeded"
    assert int(limited.value.response.headers["retry-after"]) >= 1
    assert too_large.value.type == "tokens"
    assert "Request too large" in too_large.value.message
    assert "retry-after" not in too_large.value.response.headers


async def test_quota_exhaustion_answers_insufficient_quota() -> None:
    async with serve(MockConfig(time_scale=1000, quota_tokens=50)) as mock:
        first = await mock.chat(30, extra_headers={"x-mock-input-tokens": "20"})
        with pytest.raises(openai.RateLimitError) as info:
            await mock.chat(1)
        stats = await mock.stats()
    assert first.usage is not None
    assert first.usage.total_tokens == 50
    error = info.value
    assert error.code == "insufficient_quota"
    assert error.type == "insufficient_quota"
    assert "You exceeded your current quota" in error.message
    assert "retry-after" not in error.response.headers
    assert stats["quota"] == {"limit": 50, "used": 50}
    assert stats["counters"]["insufficient_quota"] == 1


# -- faults ---------------------------------------------------------------------------------


async def test_error_rate_one_answers_500_and_503() -> None:
    async with serve(MockConfig(time_scale=1000, error_rate=1.0)) as mock:
        statuses = []
        for _ in range(2):
            with pytest.raises(openai.InternalServerError) as info:
                await mock.chat(1)
            statuses.append(info.value.status_code)
            assert info.value.type == "server_error"
        stats = await mock.stats()
    assert statuses == [500, 503]
    assert stats["counters"]["faults_error"] == 2
    assert stats["physics"]["submitted"] == 0


@pytest.mark.parametrize("stream", [False, True])
async def test_dropped_connection_is_an_api_connection_error(stream: bool) -> None:
    async with serve(MockConfig(time_scale=1000, drop_rate=1.0)) as mock:
        with pytest.raises(openai.APIConnectionError):
            # A long stream, so it cannot finish in the physics before the drop cancels it.
            await (mock.stream_all(20_000) if stream else mock.chat(50))
        stats = await mock.stats()
    assert stats["counters"]["faults_drop"] == 1
    assert stats["physics"]["active"] == 0
    assert stats["physics"]["queued"] == 0
    # A JSON drop happens after completion; a stream drops after its first chunk.
    assert stats["physics"]["cancelled"] == int(stream)


async def test_hang_holds_no_slot_and_ends_when_the_client_gives_up() -> None:
    async with serve(MockConfig(time_scale=1000, hang_rate=1.0)) as mock:
        with anyio.move_on_after(0.05) as scope:
            await mock.chat(1)
        stats = await mock.stats()
    assert scope.cancelled_caught
    assert stats["counters"]["faults_hang"] == 1
    assert stats["physics"]["submitted"] == 0
    assert (stats["physics"]["active"], stats["physics"]["queued"]) == (0, 0)


async def test_cancelled_calls_release_slots_and_queue_places() -> None:
    # One slot, three very long requests: one running, two queued, all given up by the client.
    config = MockConfig(physics=replace(DEFAULT, slots=1), time_scale=1.0)
    async with serve(config) as mock:
        with anyio.move_on_after(0.3):
            async with anyio.create_task_group() as tg:
                for _ in range(3):
                    tg.start_soon(mock.chat, 100_000)
        stats = await mock.stats()
        assert stats["physics"]["submitted"] == 3
        assert stats["physics"]["cancelled"] == 3
        assert (stats["physics"]["active"], stats["physics"]["queued"]) == (0, 0)
        assert stats["counters"]["client_cancelled"] == 3
        assert (await mock.chat(1)).usage is not None  # the clock still runs afterwards


async def test_waiters_take_over_the_clock_when_the_driver_is_cancelled() -> None:
    async with serve(MockConfig(time_scale=20)) as mock:
        await mock.chat(1)  # warm up the client
        finished: list[float] = []

        async def driver() -> None:  # first in: it drives the shared clock
            with anyio.move_on_after(0.02):
                await mock.chat(100_000)

        async def waiter() -> None:
            start = time.monotonic()
            await mock.chat(40)
            finished.append((time.monotonic() - start) * 20)

        with anyio.fail_after(10):  # a lost clock baton would stall the waiter
            async with anyio.create_task_group() as tg:
                tg.start_soon(driver)
                tg.start_soon(waiter)
        stats = await mock.stats()
    expected = 41 * DEFAULT.iteration_ms(2) / 1000  # two in the batch for most of it
    assert len(finished) == 1
    assert finished[0] <= expected * 3
    assert stats["physics"]["cancelled"] == 1


async def test_many_calls_with_random_cancellations_never_stall_or_leak() -> None:
    rng = random.Random(4)
    config = MockConfig(physics=replace(DEFAULT, slots=4), time_scale=50)
    finished: list[int] = []
    async with serve(config) as mock:

        async def one(i: int, tokens: int, give_up_s: float, stream: bool) -> None:
            with anyio.move_on_after(give_up_s):
                await (mock.stream_all(tokens) if stream else mock.chat(tokens))
                finished.append(i)

        with anyio.fail_after(30):  # a lost clock baton would stall here
            async with anyio.create_task_group() as tg:
                for i in range(40):
                    give_up = rng.choice([0.02, 0.1, math.inf, math.inf])
                    tg.start_soon(one, i, rng.randint(0, 200), give_up, rng.random() < 0.3)
        stats = await mock.stats()
        assert (await mock.chat(1)).usage is not None
    physics, counters = stats["physics"], stats["counters"]
    assert (physics["active"], physics["queued"]) == (0, 0)
    # A call given up within the client's own overhead may never reach the server.
    assert 30 <= physics["submitted"] <= 40
    assert physics["completed"] + physics["cancelled"] == physics["submitted"]
    assert counters["client_cancelled"] == physics["cancelled"]
    assert counters["completed"] >= len(finished)


async def test_physics_timeout_is_a_504_or_a_stream_error() -> None:
    physics = replace(DEFAULT, timeout_s=1.0, slots=1)
    async with serve(MockConfig(physics=physics, time_scale=100)) as mock:
        with pytest.raises(openai.InternalServerError) as info:
            await mock.chat(10_000)
        assert info.value.status_code == 504
        assert info.value.code == "timeout"
        stream = await mock.stream(10_000)  # the first token comes, then the timeout
        first = await stream.__anext__()
        with pytest.raises(openai.APIError, match="timed out"):
            await stream.__anext__()
        stats = await mock.stats()
    assert first.choices[0].delta.content == "lorem"
    assert stats["counters"]["timeouts"] == 2
    assert stats["physics"]["timed_out"] == 2


# -- configuration and command line ---------------------------------------------------------


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("time_scale", 0.0),
        ("time_scale", float("inf")),
        ("rpm", 0),
        ("tpm", 1.5),
        ("quota_tokens", -3),
        ("rate_window", "leaky"),
        ("api_key", ""),
        ("error_rate", 1.5),
        ("hang_rate", -0.1),
        ("drop_rate", True),
        ("capacity_loss", (1.0, 2.0)),
        ("capacity_loss", (-1.0, 0.5)),
        ("seed", 1.5),
        ("default_output_tokens", -1),
        ("model", ""),
        ("physics", "default"),
    ],
)
def test_config_validation_names_the_field(field: str, value: object) -> None:
    with pytest.raises(ValueError, match=field):
        MockConfig(**{field: value})  # type: ignore[arg-type]


def test_config_rejects_fault_rates_above_one_in_total() -> None:
    with pytest.raises(ValueError, match="must not exceed 1"):
        MockConfig(error_rate=0.5, hang_rate=0.5, drop_rate=0.1)


def test_cli_help_and_bad_values(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(["--help"])
    assert info.value.code == 0
    assert "--time-scale" in capsys.readouterr().out
    for argv, message in [
        (["--time-scale", "-2"], "must be a finite number > 0"),
        (["--error-rate", "2"], "must be a number in [0, 1]"),
        (["--capacity-loss", "soon"], "TIME:FRACTION"),
        (["--profile", "nope"], "invalid choice"),
        (["--api-key-env", "MOCKPROVIDER_TEST_UNSET_VARIABLE"], "unset"),
        (["--error-rate", "0.6", "--drop-rate", "0.6"], "must not exceed 1"),
    ]:
        with pytest.raises(SystemExit) as info:
            main(argv)
        assert info.value.code == 2
        assert message in capsys.readouterr().err
    args = build_parser().parse_args(["--capacity-loss", "30:0.5", "--rpm", "60"])
    assert args.capacity_loss == (30.0, 0.5)
    assert args.rpm == 60


# -- the real server ------------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _wait_until_accepting(port: int, process: subprocess.Popen[bytes], deadline_s: float) -> None:
    deadline = time.monotonic() + deadline_s
    while True:
        assert process.poll() is None, "the server exited during startup"
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)  # bounded connect retries while uvicorn starts


async def test_uvicorn_server_end_to_end() -> None:
    port = _free_port()
    env = {**os.environ, "MOCKPROVIDER_TEST_KEY": "sk-test"}
    command = [sys.executable, "-m", "mockprovider", "--port", str(port), "--time-scale", "100"]
    command += ["--api-key-env", "MOCKPROVIDER_TEST_KEY", "--log-level", "warning"]
    process = subprocess.Popen(
        command, cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    try:
        _wait_until_accepting(port, process, deadline_s=20.0)
        async with openai.AsyncOpenAI(
            base_url=f"http://127.0.0.1:{port}/v1", api_key="sk-test", max_retries=0
        ) as client:
            result = await client.chat.completions.create(
                model="m", messages=MESSAGES, extra_headers={"x-mock-output-tokens": "20"}
            )
            assert result.usage is not None
            assert result.usage.completion_tokens == 20
            stream = await client.chat.completions.create(
                model="m", messages=MESSAGES, max_tokens=6, stream=True
            )
            text = "".join([c.choices[0].delta.content or "" async for c in stream])
            assert text == "lorem ipsum dolor sit amet consectetur"
            # Over a real socket a dropped connection is an incomplete read.
            with pytest.raises(openai.APIConnectionError):
                await client.chat.completions.create(
                    model="m", messages=MESSAGES, extra_headers={"x-mock-fault": "drop"}
                )
    finally:
        process.terminate()
        try:
            _, stderr = process.communicate(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            _, stderr = process.communicate()
    log = stderr.decode(errors="replace")
    assert "sk-test" not in log
    assert "Traceback" not in log  # the deliberate drop is not logged as a crash
