"""Behind a forward proxy (``HTTP_PROXY`` and friends) the gateway reaches its upstream
through it: a plain relaying proxy on 127.0.0.1 records each request line it forwards."""

from __future__ import annotations

import asyncio
import contextlib
from urllib.parse import urlsplit

import openai
import pytest
from gateway_kit import UPSTREAM_SECRET, Capture, gateway_config, mock_app, servers

from mockprovider.launch import free_port
from semisched.gateway.app import Gateway

pytestmark = pytest.mark.wallclock

HI = [{"role": "user", "content": "hi"}]
PROXY_PASSWORD = "proxy-pa55-91c2"


class RelayProxy:
    """An HTTP forward proxy: it reads a connection's first request head (absolute-form
    target; ``lines`` keeps its request line), connects to that host and relays bytes
    both ways until either side closes."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.port = free_port()
        self.server: asyncio.Server | None = None
        self.writers: list[asyncio.StreamWriter] = []

    async def start(self) -> None:
        self.server = await asyncio.start_server(self._handle, "127.0.0.1", self.port)

    async def stop(self) -> None:
        assert self.server is not None
        self.server.close()
        for writer in self.writers:
            writer.close()
        await self.server.wait_closed()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        line = head.split(b"\r\n", 1)[0].decode()
        self.lines.append(line)
        target = urlsplit(line.split()[1])
        up_reader, up_writer = await asyncio.open_connection(target.hostname, target.port)
        self.writers += [writer, up_writer]
        up_writer.write(head)

        async def pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
            with contextlib.suppress(ConnectionError):
                while chunk := await src.read(65536):
                    dst.write(chunk)
                    await dst.drain()
            dst.close()

        await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer))


def test_an_upstream_behind_a_proxy_is_reached_through_it(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with servers() as s, caplog.at_level("INFO", logger="semisched.gateway"):
        capture = Capture(mock_app(api_key=UPSTREAM_SECRET))
        upstream = s.serve_app(capture) + "/v1"
        proxy = RelayProxy()
        s.run(proxy.start())
        environ = {"UPSTREAM_KEY": UPSTREAM_SECRET,
                   "HTTP_PROXY": f"http://user:{PROXY_PASSWORD}@127.0.0.1:{proxy.port}"}
        gateway = Gateway(gateway_config(upstream), environ=environ)  # fmt: skip
        base = s.serve_gateway(gateway)
        with openai.OpenAI(base_url=base, api_key="sk-test-web", max_retries=0) as client:
            reply = client.chat.completions.create(model="mock-1", messages=HI, max_tokens=5)
            stream = client.chat.completions.create(model="mock-1", messages=HI, max_tokens=4,
                                                    stream=True)  # fmt: skip
            chunks = [c for c in stream if c.choices and c.choices[0].delta.content]
        s.run(proxy.stop())
    assert reply.usage is not None and reply.usage.completion_tokens == 5
    assert len(chunks) > 1  # streamed through the proxy chunk by chunk
    posts = [line for line in proxy.lines if line.startswith("POST ")]
    assert posts and all(line == f"POST {upstream}/chat/completions HTTP/1.1" for line in posts)
    assert len(capture.bodies) == 2 and capture.authorizations[-1] == f"Bearer {UPSTREAM_SECRET}"
    assert "endpoint 'mock': through the proxy in HTTP_PROXY" in caplog.text
    assert PROXY_PASSWORD not in caplog.text and UPSTREAM_SECRET not in caplog.text
    assert "through a proxy" in repr(gateway.clients["mock"])
