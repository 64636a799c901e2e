"""The gateway's upstream connections (:mod:`semisched.gateway.wire`) against a raw server.

The server is a plain asyncio one that answers canned HTTP/1.1 bytes and counts the
connections it accepted, so each test sees exactly what went over the wire."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import pytest

from semisched.gateway.wire import Wire, WireError

pytestmark = pytest.mark.wallclock

OK = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 2\r\n\r\n{}"
CLOSE = (b"HTTP/1.1 200 OK\r\nconnection: close\r\ncontent-length: 2\r\n\r\n{}")
CHUNKED = (b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n"
           b"5\r\ndata:\r\n3\r\n 1\n\r\n0\r\n\r\n")  # fmt: skip

Answer = Callable[[bytes], bytes | None]


#: An answer that closes the connection without a byte sent.
DROP = b""


class Upstream:
    """Answers each request (its head and body, as read) with ``answer(request)``;
    ``None``: never answers; `DROP`: closes the connection unanswered."""

    def __init__(self, answer: Answer) -> None:
        self.answer = answer
        self.connections = 0
        self.requests: list[bytes] = []

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = next((int(line.split(b":")[1]) for line in head.split(b"\r\n")
                               if line.lower().startswith(b"content-length")), 0)  # fmt: skip
                request = head + await reader.readexactly(length)
                self.requests.append(request)
                reply = self.answer(request)
                if reply == DROP:
                    break
                if reply is None:
                    await asyncio.sleep(3600)
                    return
                writer.write(reply)
                await writer.drain()
                if b"connection: close" in reply:
                    break
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()


Body = Callable[[Wire, "Upstream"], Awaitable[None]]


def run(answer: Answer, body: Body, **options: float) -> Upstream:
    async def main() -> Upstream:
        upstream = Upstream(answer)
        server = await asyncio.start_server(upstream.handle, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        wire = Wire(f"http://127.0.0.1:{port}/v1", headers={"authorization": "Bearer k"},
                    **options)  # fmt: skip
        try:
            await body(wire, upstream)
        finally:
            await wire.aclose()
            server.close()
        return upstream

    return asyncio.run(main())


def test_sequential_requests_share_one_kept_alive_connection() -> None:
    async def body(wire: Wire, upstream: Upstream) -> None:
        for _ in range(5):
            reply = await wire.request("POST", "chat/completions", b'{"a": 1}')
            assert (reply.status, await reply.read()) == (200, b"{}")
            assert reply.headers["content-type"] == "application/json"

    upstream = run(lambda _: OK, body)
    assert upstream.connections == 1
    first = upstream.requests[0]
    assert first.startswith(b"POST /v1/chat/completions HTTP/1.1\r\n")
    assert b"authorization: Bearer k\r\n" in first and first.endswith(b'{"a": 1}')


def test_a_connection_the_upstream_closes_is_not_reused() -> None:
    async def body(wire: Wire, upstream: Upstream) -> None:
        for _ in range(3):
            reply = await wire.request("POST", "completions", b"{}")
            assert await reply.read() == b"{}"

    assert run(lambda _: CLOSE, body).connections == 3


def test_concurrent_requests_open_connections_that_are_then_reused() -> None:
    async def body(wire: Wire, upstream: Upstream) -> None:
        async def one() -> bytes:
            return await (await wire.request("POST", "x", b"{}")).read()

        for _ in range(3):
            assert await asyncio.gather(*(one() for _ in range(4))) == [b"{}"] * 4

    assert run(lambda _: OK, body).connections <= 4  # never one per request (12)


def test_a_chunked_body_arrives_whole_and_in_order() -> None:
    async def body(wire: Wire, upstream: Upstream) -> None:
        reply = await wire.request("POST", "x", b"{}")
        assert b"".join([chunk async for chunk in reply.chunks()]) == b"data: 1\n"
        again = await wire.request("POST", "x", b"{}")  # the same connection, read to the end
        assert await again.read() == b"data: 1\n"

    assert run(lambda _: CHUNKED, body).connections == 1


def test_a_reply_closed_early_closes_its_connection() -> None:
    async def body(wire: Wire, upstream: Upstream) -> None:
        reply = await wire.request("POST", "x", b"{}")
        await reply.aclose()  # the client left before the body: never reused
        assert await (await wire.request("POST", "x", b"{}")).read() == b"data: 1\n"

    assert run(lambda _: CHUNKED, body).connections == 2


def test_no_answer_times_out_and_no_server_is_a_wire_error() -> None:
    async def body(wire: Wire, upstream: Upstream) -> None:
        with pytest.raises(TimeoutError):
            await wire.request("POST", "x", b"{}")

    run(lambda _: None, body, timeout_s=0.5)

    async def refused() -> None:
        import socket

        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]  # bound, never listening: refused
            with pytest.raises(WireError, match="cannot connect"):
                await Wire(f"http://127.0.0.1:{port}/v1").request("GET", "models")

    asyncio.run(refused())


def test_misuse_is_refused_before_anything_is_sent() -> None:
    with pytest.raises(ValueError, match="base_url"):
        Wire("ftp://example.com/v1")
    with pytest.raises(ValueError, match="line break"):
        Wire("http://example.com/v1", headers={"authorization": "Bearer k\r\nx-evil: 1"})
    with pytest.raises(ValueError, match="max_connections"):
        Wire("http://example.com/v1", max_connections=0)


def test_requests_beyond_max_connections_wait_for_an_answer_to_finish() -> None:
    async def body(wire: Wire, upstream: Upstream) -> None:
        first = await wire.request("POST", "x", b"{}")  # its body not read yet: slot held
        second = asyncio.ensure_future(wire.request("POST", "x", b"{}"))
        await asyncio.sleep(0.2)  # time for a wrong implementation to send it anyway
        assert not second.done() and len(upstream.requests) == 1
        assert await first.read() == b"{}"
        assert await (await second).read() == b"{}"

    upstream = run(lambda _: OK, body, max_connections=1)
    assert (upstream.connections, len(upstream.requests)) == (1, 2)


def test_a_kept_alive_connection_closed_as_a_request_goes_out_is_resent_once() -> None:
    """An upstream that closes an idle connection just as the next request arrives on
    it (a keep-alive timeout racing the request): the request goes again on a new
    connection, and the caller gets its answer."""
    answers = iter([OK, DROP, OK])

    async def body(wire: Wire, upstream: Upstream) -> None:
        assert (await (await wire.request("POST", "chat/completions", b"{}")).read()) == b"{}"
        reply = await wire.request("POST", "chat/completions", b'{"n": 2}')
        assert reply.status == 200 and await reply.read() == b"{}"
        assert wire.resent == 1

    upstream = run(lambda request: next(answers), body)
    assert upstream.connections == 2  # the first, closed on the second request; a new one
    assert [r.endswith(b'{"n": 2}') for r in upstream.requests] == [False, True, True]


def test_a_new_connection_closed_unanswered_is_a_wire_error_sent_once() -> None:
    """Without a reused connection to blame, a close before any answer is the upstream's
    failure: raised, not resent (the retry policy decides what comes next)."""

    async def body(wire: Wire, upstream: Upstream) -> None:
        with pytest.raises(WireError):
            await wire.request("POST", "chat/completions", b"{}")
        assert wire.resent == 0 and wire.open == 0

    upstream = run(lambda request: DROP, body)
    assert len(upstream.requests) == 1 and upstream.connections == 1


def test_a_resent_request_closed_again_is_a_wire_error() -> None:
    """The one resend closed unanswered too: the upstream is failing, and that is raised."""
    answers = iter([OK, DROP, DROP])

    async def body(wire: Wire, upstream: Upstream) -> None:
        await (await wire.request("POST", "chat/completions", b"{}")).read()
        with pytest.raises(WireError):
            await wire.request("POST", "chat/completions", b"{}")
        assert wire.resent == 1 and wire.open == 0

    upstream = run(lambda request: next(answers), body)
    assert len(upstream.requests) == 3  # the first, and the second twice: never a third


def test_the_gateways_upstream_client_counts_the_resends_its_status_shows() -> None:
    """``UpstreamClient.resent`` (each endpoint's ``resent`` in the status document)."""
    from semisched.gateway.upstream import UpstreamClient

    answers = iter([OK, DROP, OK])

    async def main() -> tuple[int, int]:
        upstream = Upstream(lambda request: next(answers))
        server = await asyncio.start_server(upstream.handle, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        client = UpstreamClient(f"http://127.0.0.1:{port}/v1", "k", name="local")
        try:
            for _ in range(2):
                await client.post("chat/completions", {"model": "m", "messages": []})
            return client.resent, upstream.connections
        finally:
            await client.aclose()
            server.close()

    assert asyncio.run(main()) == (1, 2)
