"""Upstream faults through the SDK, in virtual time: a stalled stream ends at its deadline
(or an idle timeout), a long ``retry-after`` is capped and probed, a refused key takes its
endpoint out and its work goes to the others."""

from __future__ import annotations

import logging
from types import SimpleNamespace
from typing import Any

import anyio
import pytest
from runtime_kit import Scripted, chat, mock_client

from semisched import DeadlineExceeded, Endpoint, FailureKind, ProviderError, Scheduler
from semisched.runtime.calls import scheduler_config
from semisched.runtime.streams import IDLE_TIMEOUT_S

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.filterwarnings("ignore:Async generator 'openai._streaming.:ResourceWarning"),
    pytest.mark.filterwarnings(
        "ignore:Async generator 'httpx2._models.Response.aiter_bytes':ResourceWarning"
    ),
]


class _Stalled:
    """A provider stream that sends one content chunk, then nothing, ever."""

    def __init__(self) -> None:
        self.sent = 0
        self.closed = False

    def __aiter__(self) -> _Stalled:
        return self

    async def __anext__(self) -> Any:
        if not self.sent:
            self.sent += 1
            delta = SimpleNamespace(content="hi")
            return SimpleNamespace(choices=[SimpleNamespace(delta=delta)], usage=None)
        await anyio.sleep_forever()

    async def close(self) -> None:
        self.closed = True


class _StallingClient:
    """A client whose every streamed call answers with a :class:`_Stalled` stream."""

    def __init__(self) -> None:
        self.streams: list[_Stalled] = []

        async def create(**params: Any) -> _Stalled:
            self.streams.append(_Stalled())
            return self.streams[-1]

        self.chat = SimpleNamespace(completions=SimpleNamespace(create=create))


async def _read(stream: Any) -> tuple[int, BaseException | None, float]:
    """Chunks read, the error the stream ended with, and when it ended (virtual s)."""
    chunks, error = 0, None
    try:
        async for _ in stream:
            chunks += 1
    except Exception as exc:
        error = exc
    return chunks, error, anyio.current_time()


async def test_a_stream_stalled_after_its_first_chunk_ends_at_its_deadline() -> None:
    client = _StallingClient()
    async with Scheduler(client) as s:
        start = anyio.current_time()
        stream = await s.submit(**chat(max_tokens=50), stream=True, deadline=3)
        chunks, error, ended = await _read(stream)
        stats = s.statistics()
    assert chunks == 1
    assert isinstance(error, DeadlineExceeded) and error.phase == "in_flight"
    assert ended - start == pytest.approx(3.0)  # not a moment past the deadline
    assert client.streams[0].closed  # the upstream's stream is closed, not left open
    assert stats.open_streams == 0 and stats.engine.inflight == 0


async def test_a_stalled_stream_without_a_deadline_ends_at_the_idle_timeout() -> None:
    client = _StallingClient()
    async with Scheduler(client) as s:
        start = anyio.current_time()
        stream = await s.submit(**chat(max_tokens=50), stream=True)
        chunks, error, ended = await _read(stream)
    assert chunks == 1
    assert isinstance(error, ProviderError) and error.kind is FailureKind.TIMEOUT
    assert ended - start == pytest.approx(IDLE_TIMEOUT_S)
    assert client.streams[0].closed


async def test_a_healthy_stream_with_a_deadline_is_read_to_its_end() -> None:
    async with mock_client() as mock, Scheduler(mock.client) as s:
        stream = await s.submit(**chat(max_tokens=5), stream=True, deadline=600)
        chunks, error, _ = await _read(stream)
    assert error is None and chunks >= 5


async def test_a_long_retry_after_pauses_a_lone_endpoint_for_the_cap_then_one_probe_goes() -> None:
    script = [Scripted(429, {"retry-after": "120"})]
    async with mock_client(script=script) as mock, Scheduler(mock.client) as s:
        start = anyio.current_time()
        first = await s.submit(**chat(max_tokens=5))
        stats = s.statistics()
    log = mock.recorder.log
    assert first is not None and [e.status for e in log] == [429, 200]
    assert log[1].at - start == pytest.approx(30.0)  # the cap (max_retry_after_s), not 120 s
    (endpoint,) = stats.engine.endpoints
    assert (endpoint.circuit, endpoint.circuit_reason) == ("closed", "")  # the probe's success


async def test_a_refused_key_takes_its_endpoint_out_and_every_request_is_served_elsewhere(
    caplog: pytest.LogCaptureFixture,
) -> None:
    refused = [Scripted(401, code="invalid_api_key")] * 20
    async with mock_client(script=refused) as bad, mock_client() as good:
        fleet = [Endpoint("bad-key", bad.client), Endpoint("good", good.client)]
        config = scheduler_config("final_adrr_olc", routing="round_robin")
        with caplog.at_level(logging.WARNING, logger="semisched.retries"):
            async with Scheduler(endpoints=fleet, config=config) as s:
                results = []
                for _ in range(8):
                    results.append(await s.submit(**chat(max_tokens=5)))
                stats = s.statistics()
    assert all(r is not None for r in results)  # nobody saw the refusal
    assert [e.status for e in bad.recorder.log] == [401]  # one refusal, then out
    assert len(good.recorder.log) == 8
    endpoints = {e.name: e for e in stats.engine.endpoints}
    assert (endpoints["bad-key"].circuit, endpoints["bad-key"].circuit_reason) == ("open", "auth")
    assert stats.engine.failures.auth == 1 and stats.counters.provider_errors == 0
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "'bad-key'" in warnings[0].getMessage()
    assert "test-key" not in caplog.text  # the key itself is never logged


async def test_a_lone_endpoints_refused_key_fails_the_request_at_once() -> None:
    refused = [Scripted(401, code="invalid_api_key")] * 5
    async with mock_client(script=refused) as mock, Scheduler(mock.client) as s:
        with pytest.raises(ProviderError) as caught:
            await s.submit(**chat(max_tokens=5))
    assert (caught.value.kind, caught.value.status_code, caught.value.attempts) == (
        FailureKind.AUTH,
        401,
        1,
    )
