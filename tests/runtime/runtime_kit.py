"""Helpers of the runtime tests: the real ``openai.AsyncOpenAI`` client against the in-process
mock provider, in virtual time (see ``conftest.py``).

:class:`Recorder` sits between the client and the mock and writes down each
exchange with its virtual time, so a test can assert *when* an attempt was
sent; it can also answer the first requests itself with scripted failures.

A module of its own (not ``conftest``): test modules import it by a name no
other test folder uses.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import anyio
import httpx2
import openai
from starlette.applications import Starlette

from mockprovider.app import MockConfig, create_app
from mockprovider.stats import MockStats

#: Virtual seconds per wall second in the ``wallclock`` tests (a real server).
SCALE = 200.0

#: A `Scripted` status: the connection closes unanswered.
CLOSED = 0

#: Output tokens of a call that stays in flight until the test cancels it
#: (~1870 virtual seconds of decoding).
FOREVER = 100_000


@dataclass(frozen=True)
class Exchange:
    """One request the client sent, as the recorder saw it.

    Attributes:
        at: Loop time (virtual) when the request left the client.
        path: URL path.
        status: The answer's status.
        headers: The answer's headers.
        scripted: Answered by the recorder's script, not by the mock.
    """

    at: float
    path: str
    status: int
    headers: Mapping[str, str]
    scripted: bool


@dataclass(frozen=True)
class Scripted:
    """A failure the recorder answers itself, before the mock sees anything; ``status``
    `CLOSED`: the connection closes before any byte of an answer (httpx's
    ``RemoteProtocolError``, as a kept-alive connection the server closed idle raises)."""

    status: int
    headers: Mapping[str, str] = field(default_factory=dict)
    code: str | None = None


class Recorder(httpx2.AsyncBaseTransport):
    """Records every request of a scheduled API (its body too); answers the first ones
    from ``script``."""

    def __init__(self, inner: httpx2.AsyncBaseTransport, script: Sequence[Scripted]) -> None:
        self.inner = inner
        self.script = list(script)
        self._answered: dict[int, Exchange] = {}
        self._sent = 0
        self.bodies: list[dict[str, Any]] = []
        #: When each request of a scheduled API left the client, answered or not.
        self.sent: list[float] = []

    @property
    def log(self) -> list[Exchange]:
        """The answered completion requests, in the order they were sent."""
        return [self._answered[i] for i in sorted(self._answered)]

    def attempts(self) -> list[float]:
        """Virtual send times of the answered completion requests, in order."""
        return [e.at for e in self.log]

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        if not request.url.path.endswith(("completions", "responses", "embeddings")):
            return await self.inner.handle_async_request(request)
        self.bodies.append(json.loads(await request.aread() or b"{}"))
        at, seq = anyio.current_time(), self._sent
        self._sent += 1
        self.sent.append(at)
        if self.script:
            step = self.script.pop(0)
            if step.status == CLOSED:
                raise httpx2.RemoteProtocolError("Server disconnected without sending a response.")
            body = {"error": {"message": f"scripted {step.status}", "type": step.code,
                              "code": step.code, "param": None}}  # fmt: skip
            await request.aread()
            self._answered[seq] = Exchange(at, request.url.path, step.status, step.headers, True)
            return httpx2.Response(
                step.status, headers=dict(step.headers), content=json.dumps(body).encode()
            )
        response = await self.inner.handle_async_request(request)
        self._answered[seq] = Exchange(
            at, request.url.path, response.status_code, response.headers, False
        )
        return response


@dataclass
class Mock:
    """A client wired to a fresh in-process mock provider."""

    client: openai.AsyncOpenAI
    app: Starlette
    recorder: Recorder

    def stats(self) -> MockStats:
        """The mock's named statistics."""
        stats: MockStats = self.app.state.mock_stats()
        return stats


@asynccontextmanager
async def mock_client(*, script: Sequence[Scripted] = (), **config: Any) -> AsyncIterator[Mock]:
    """An AsyncOpenAI client wired to a fresh in-process mock provider in virtual time."""
    app = create_app(MockConfig(**config), clock=anyio.current_time)
    recorder = Recorder(httpx2.ASGITransport(app=app), script)
    async with httpx2.AsyncClient(transport=recorder, base_url="http://mock") as http:
        client = openai.AsyncOpenAI(base_url="http://mock/v1", api_key="test-key", http_client=http)
        yield Mock(client, app, recorder)


def chat(content: str = "hello", **kwargs: Any) -> dict[str, Any]:
    """Arguments of a small chat call."""
    return {"model": "mock-1", "messages": [{"role": "user", "content": content}], **kwargs}


async def overload_scenario(
    s: Any, prompt: str, during: Callable[[], Any] | None = None
) -> dict[str, Any]:
    """Fill a two-slot flight, then submit a short, a long and an xlong call while it is
    full (under lowered thresholds: the long one is deferred, the xlong one rejected);
    ``during()`` runs while all three wait (its value under ``"during"``); then the
    fill is cancelled. The results (responses or ``RequestRejected``) by name."""
    from semisched import RequestRejected

    results: dict[str, Any] = {}
    fills = [anyio.CancelScope(), anyio.CancelScope()]

    async def fill(scope: anyio.CancelScope) -> None:
        with scope:
            await s.submit(**chat(prompt, max_tokens=FOREVER), prior=(200.0, 256.0))

    async def call(name: str, prior: tuple[float, float]) -> None:
        try:
            results[name] = await s.submit(**chat(prompt, max_tokens=20), prior=prior,
                                           deadline=600)  # fmt: skip
        except RequestRejected as exc:
            results[name] = exc

    async with anyio.create_task_group() as tg:
        for scope in fills:
            tg.start_soon(fill, scope)
        await anyio.wait_all_tasks_blocked()
        tg.start_soon(call, "short", (30.0, 60.0))
        tg.start_soon(call, "long", (600.0, 1000.0))
        tg.start_soon(call, "xlong", (3000.0, 4000.0))
        await anyio.wait_all_tasks_blocked()
        if during is not None:
            results["during"] = during()
        for scope in fills:
            scope.cancel()
    return results
