"""A connection that closes before any byte of its answer: sent once more at once, no failure.

HTTP/1.1 lets a server close an idle kept-alive connection at any time, and one that
closes it for its keep-alive timeout (llama.cpp's server: 5 s, as long as httpx's own
pool expiry) can do so just as the next request goes out on it. The client sees httpx's
``RemoteProtocolError`` ("Server disconnected without sending a response"). That is no
failure of the endpoint: the attempt is sent again at once, counted in
``counters.resent``, and neither the retry policy, the endpoint's health nor its learned
concurrency limit hear of it. A second close in a row is the attempt's failure.

In virtual time through the real ``openai`` client (the recorder raises httpx's error),
and once over a real socket against a server that closes a kept-alive connection as a
request arrives on it.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import socket

import openai
import pytest
from runtime_kit import CLOSED, Scripted, chat, mock_client

from semisched import Endpoint, ProviderError, RetryPolicy, Scheduler
from semisched.runtime.calls import scheduler_config

pytestmark = pytest.mark.anyio

#: Exact back-offs: no jitter.
EXACT = RetryPolicy(max_attempts=3, base_delay_s=0.5, jitter=0.0)


async def test_a_connection_closed_unanswered_is_sent_again_at_once_and_is_no_failure() -> None:
    config = scheduler_config("final_adrr_olc", retry=EXACT)
    async with mock_client(script=[Scripted(CLOSED)]) as mock:
        endpoint = Endpoint("local", mock.client)  # its limit is learned
        async with Scheduler(endpoints=[endpoint], config=config) as s:
            response = await s.submit(**chat(max_tokens=5), deadline=600)
            stats = s.statistics()
    assert isinstance(response, openai.types.chat.ChatCompletion)
    sent = mock.recorder.sent
    assert len(sent) == 2 and sent[1] == sent[0]  # again at once: no back-off
    assert stats.counters.resent == 1
    assert stats.counters.retries == 0 and stats.engine.counters.retries == 0
    (local,) = stats.engine.endpoints
    assert local.failed_attempts == 0 and local.consecutive_failures == 0
    assert "limit.failed" not in local.limit_changes  # its limit heard of no failure


async def test_a_second_close_in_a_row_is_the_attempts_failure() -> None:
    config = scheduler_config("final_adrr_olc", retry=EXACT)
    async with (
        mock_client(script=[Scripted(CLOSED), Scripted(CLOSED)]) as mock,
        Scheduler(mock.client, config=config) as s,
    ):
        response = await s.submit(**chat(max_tokens=5), deadline=600)
        stats = s.statistics()
    assert isinstance(response, openai.types.chat.ChatCompletion)
    sent = mock.recorder.sent
    # The attempt and its one resend closed; the retry policy's back-off; the retry.
    assert [b - a for a, b in itertools.pairwise(sent)] == pytest.approx([0.0, 0.5])
    assert stats.counters.resent == 1 and stats.counters.retries == 1
    assert stats.engine.failures.connection == 1


@pytest.mark.wallclock
async def test_other_connection_failures_are_not_resent() -> None:
    """A refused connection (nothing listens) is a failure at once, never resent."""
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    client = openai.AsyncOpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="k")
    config = scheduler_config("final_adrr_olc", retry=RetryPolicy(max_attempts=1))
    async with Scheduler(client, config=config) as s:
        with pytest.raises(ProviderError):
            await s.submit(**chat(max_tokens=5), deadline=600)
        stats = s.statistics()
    await client.close()
    assert stats.counters.resent == 0 and stats.engine.failures.connection == 1


ANSWER = json.dumps({
    "id": "c1", "object": "chat.completion", "created": 0, "model": "m",
    "choices": [{"index": 0, "finish_reason": "stop",
                 "message": {"role": "assistant", "content": "hi"}}],
    "usage": {"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4},
}).encode()  # fmt: skip
OK = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n%s" % (
    len(ANSWER), ANSWER)  # fmt: skip


class _ClosesSecondRequest:
    """An HTTP/1.1 server that answers the first request on its first connection, keeps
    it alive, and closes it unanswered when the next request arrives on it (its
    keep-alive timeout racing that request); every later connection is answered."""

    def __init__(self) -> None:
        self.connections = 0
        self.requests = 0

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        first = self.connections == 1
        try:
            for n in range(100):
                head = await reader.readuntil(b"\r\n\r\n")
                length = next(int(line.split(b":")[1]) for line in head.split(b"\r\n")
                              if line.lower().startswith(b"content-length"))  # fmt: skip
                await reader.readexactly(length)
                self.requests += 1
                if first and n == 1:
                    break  # closed, unanswered
                writer.write(OK)
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()


@pytest.mark.wallclock
async def test_a_real_kept_alive_connection_closed_as_a_request_arrives() -> None:
    server = _ClosesSecondRequest()
    listener = await asyncio.start_server(server.handle, "127.0.0.1", 0)
    port = listener.sockets[0].getsockname()[1]
    client = openai.AsyncOpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="k")
    try:
        async with Scheduler(client, priors="heuristic") as s:
            for _ in range(3):  # one after another: each reuses the kept-alive connection
                answer = await s.submit(model="m", messages=[{"role": "user", "content": "x"}])
                assert answer.choices[0].message.content == "hi"
            stats = s.statistics()
    finally:
        await client.close()
        listener.close()
    assert stats.counters.succeeded == 3 and stats.counters.resent == 1
    assert stats.counters.retries == 0 and stats.engine.failures.connection == 0
    assert (server.connections, server.requests) == (2, 4)
