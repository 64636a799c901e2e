"""Helpers of the gateway tests: real uvicorn servers on 127.0.0.1, in a background loop.

:class:`Servers` runs one asyncio loop in a thread and serves ASGI apps on free
loopback ports there (the gateway, the mock provider behind it), so a test
talks to them over real sockets with the Python ``openai`` client from its own
thread. :class:`Capture` wraps an upstream app: it records every scheduled API's
body the upstream receives and can hold requests until released, so a test
controls what is in flight without any timing assumption.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import uvicorn

from mockprovider.app import MockConfig, create_app
from mockprovider.launch import free_port
from semisched.gateway.app import Gateway
from semisched.gateway.config import GatewayConfig
from semisched.gateway.configfile import config_from_dict
from semisched.gateway.keys import key_hash
from semisched.gateway.server import GatewayServer, uvicorn_config
from semisched.runtime.apis import APIS

KEYS = {"sk-test-web": "web", "sk-test-batch": "batch"}
UPSTREAM_SECRET = "sk-upstream-secret-7d1e0c9a"


#: The scheduled APIs' paths: the requests :class:`Capture` records.
SCHEDULED_PATHS = frozenset(spec.path for spec in APIS.values())


class Capture:
    """An upstream app that records the scheduled APIs' bodies (chat, completions, responses,
    embeddings) and may hold them (module docstring)."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self.bodies: list[dict[str, Any]] = []
        self.authorizations: list[str] = []
        self.open = threading.Event()
        self.open.set()
        self.disconnected = 0
        #: ``(status, body)``: answer every request with it instead of the app's answer.
        self.answer: tuple[int, dict[str, Any]] | None = None

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope["path"] not in SCHEDULED_PATHS:
            await self.app(scope, receive, send)
            return
        chunks = []
        while True:
            message = await receive()
            chunks.append(message.get("body", b""))
            if not message.get("more_body"):
                break
        raw = b"".join(chunks)
        self.bodies.append(json.loads(raw))
        self.authorizations.append(dict(scope["headers"]).get(b"authorization", b"").decode())
        if not self.open.is_set() and await self._held(receive):
            self.disconnected += 1
            return
        if self.answer is not None:
            status, body = self.answer
            await send({"type": "http.response.start", "status": status,
                        "headers": [(b"content-type", b"application/json")]})  # fmt: skip
            await send({"type": "http.response.body", "body": json.dumps(body).encode()})
            return
        sent = False

        async def replay() -> Any:
            nonlocal sent
            if not sent:
                sent = True
                return {"type": "http.request", "body": raw, "more_body": False}
            return await receive()

        await self.app(scope, replay, send)

    async def _held(self, receive: Any) -> bool:
        """Wait until released; ``True`` when the client disconnected first."""
        gone = asyncio.ensure_future(receive())
        try:
            while not self.open.is_set():
                if gone.done():
                    return gone.result()["type"] == "http.disconnect"
                await asyncio.sleep(0.002)
            return False
        finally:
            gone.cancel()


def mock_app(**options: Any) -> Any:
    """The mock provider, fast (ten times real time) unless told otherwise."""
    return create_app(MockConfig(**{"time_scale": 10.0, **options}))


def gateway_config(upstream: str, **gateway: Any) -> GatewayConfig:
    """Two tenants (``web``, ``batch``) with the :data:`KEYS`, one upstream needing a key."""
    data: dict[str, Any] = {
        "gateway": {"port": 0, **gateway.pop("gateway", {})},
        "tenant": [{"name": tenant, "key_sha256": key_hash(key)} for key, tenant in KEYS.items()],
        "endpoint": [{"name": "mock", "base_url": upstream, "key_env": "UPSTREAM_KEY"}],
        **gateway,
    }
    return config_from_dict(data, where="test")


class Servers:
    """A loop in a thread serving apps on 127.0.0.1 (module docstring)."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.servers: list[uvicorn.Server] = []
        self.tasks: list[Any] = []

    def run(self, coro: Any, timeout: float = 30.0) -> Any:
        """Run ``coro`` on the loop and wait for its result."""
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def call(self, func: Callable[[], Any]) -> Any:
        """Call ``func()`` on the loop's thread."""

        async def call() -> Any:
            return func()

        return self.run(call())

    def serve(self, server: uvicorn.Server) -> str:
        """Start ``server`` (its config's port); return ``http://127.0.0.1:PORT``."""
        self.servers.append(server)
        self.tasks.append(asyncio.run_coroutine_threadsafe(server.serve(), self.loop))
        deadline = time.monotonic() + 30
        while not server.started:
            if self.tasks[-1].done():
                self.tasks[-1].result()  # raises what stopped it
                raise RuntimeError("the server stopped before it started")
            if time.monotonic() > deadline:
                raise RuntimeError("the server did not start in 30 s")
            time.sleep(0.01)
        return f"http://127.0.0.1:{server.config.port}"

    def serve_app(self, app: Any) -> str:
        config = uvicorn.Config(app, host="127.0.0.1", port=free_port(), log_level="warning",
                                lifespan="off", access_log=False)  # fmt: skip
        return self.serve(uvicorn.Server(config))

    def serve_gateway(self, gateway: Gateway) -> str:
        config = gateway.config
        port = free_port()
        uv = uvicorn_config(gateway.app(), config, "warning", gateway.count_refused)
        uv.port = port
        return self.serve(GatewayServer(uv, gateway)) + "/v1"

    def close(self) -> None:
        for server in reversed(self.servers):
            server.should_exit = True
        for task in reversed(self.tasks):
            task.result(60)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
        self.loop.close()


@contextmanager
def servers() -> Iterator[Servers]:
    s = Servers()
    try:
        yield s
    finally:
        s.close()


def wait_for(predicate: Callable[[], bool], timeout: float = 30.0, what: str = "") -> None:
    """Poll ``predicate`` until true; fail after ``timeout`` s (a bound, not a timing)."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what or predicate}")
        time.sleep(0.01)
