"""A fake OpenAI-compatible provider at the HTTP level, for every supported ``openai``.

The tests in this folder drive :class:`semisched.Scheduler` over a real
``openai.AsyncOpenAI`` client and fake only its HTTP. Which HTTP library that is
depends on the installed ``openai`` (``openai.__version__``), so the fake picks
its mechanism from it:

- openai 1.x and 2.x run on ``httpx``: a ``respx`` router patches httpx's
  transport and the client is built with openai's *own* default HTTP client
  (no ``http_client=``), so the client a user builds is the one under test.
- openai 3.x runs on ``httpx2``, which respx does not intercept (respx 0.23.1
  imports and patches only ``httpx``/``httpcore``; httpx2 support is the
  unmerged lundberg/respx#317): the fake is an ``httpx2.MockTransport`` passed
  in through ``http_client=httpx2.AsyncClient(transport=...)``.

Both serve the same script of :class:`Reply` objects, one per request, and
record every request they saw (:class:`Seen`). A request past the end of the
script gets a 418, which no retry policy retries.

The folder runs under the repository's main environment (newest openai) and,
through ``.ci/oldest-openai``, in a virtualenv with the oldest supported openai.
"""

from __future__ import annotations

import json
import time
from collections import deque
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import openai
import pytest

#: Where the fake provider lives; nothing listens there.
BASE_URL = "http://fake-provider.test/v1"

#: httpcore's words (httpx's and httpx2's) for a connection closed before any answer.
UNANSWERED = "Server disconnected without sending a response."

#: openai 3.x switched from httpx to httpx2.
USES_HTTPX2 = int(openai.__version__.split(".")[0]) >= 3


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@dataclass(frozen=True)
class Reply:
    """One scripted answer: a status, headers and a JSON or server-sent-events body.

    ``drop=True`` answers nothing: the transport raises a connection error.
    ``closed=True`` answers nothing either: the connection closes before any byte of
    the answer (httpx's ``RemoteProtocolError``, what a kept-alive connection the
    server closed idle raises).
    """

    status: int = 200
    body: Any = None
    headers: Mapping[str, str] = field(default_factory=dict)
    events: Sequence[Mapping[str, Any]] | None = None
    drop: bool = False
    closed: bool = False

    def encode(self) -> tuple[dict[str, str], bytes]:
        """Headers and body bytes of this reply."""
        headers = dict(self.headers)
        if self.events is not None:
            lines = [f"data: {json.dumps(event)}\n\n" for event in self.events]
            headers.setdefault("content-type", "text/event-stream")
            return headers, ("".join(lines) + "data: [DONE]\n\n").encode()
        headers.setdefault("content-type", "application/json")
        return headers, json.dumps(self.body).encode()


@dataclass(frozen=True)
class Seen:
    """A request the fake received."""

    method: str
    path: str
    body: dict[str, Any]
    at: float  # time.monotonic() on arrival


def usage(prompt_tokens: int = 3, completion_tokens: int = 2) -> dict[str, int]:
    return {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
    }


def chat_completion(content: str = "ok", **headers: str) -> Reply:
    """A 200 ``chat.completion``; ``headers`` use ``_`` for ``-``."""
    body = {
        "id": "chatcmpl-fake",
        "object": "chat.completion",
        "created": 0,
        "model": "fake-1",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": content},
                "finish_reason": "stop",
            }
        ],
        "usage": usage(completion_tokens=len(content.split())),
    }
    return Reply(body=body, headers={k.replace("_", "-"): v for k, v in headers.items()})


def text_completion(text: str = "once upon") -> Reply:
    """A 200 legacy ``text_completion``."""
    body = {
        "id": "cmpl-fake",
        "object": "text_completion",
        "created": 0,
        "model": "fake-1",
        "choices": [{"index": 0, "text": text, "finish_reason": "stop", "logprobs": None}],
        "usage": usage(completion_tokens=len(text.split())),
    }
    return Reply(body=body)


def error(status: int, code: str | None, type_: str, **headers: str) -> Reply:
    """An OpenAI-style error body; ``headers`` use ``_`` for ``-``."""
    body = {"error": {"message": f"fake {status} {code}", "type": type_, "code": code}}
    return Reply(status, body, {k.replace("_", "-"): v for k, v in headers.items()})


def chat_stream(words: Sequence[str], *, with_usage: bool) -> Reply:
    """A streamed chat completion: one chunk per word, then a usage-only chunk if asked."""
    base = {"id": "chatcmpl-fake", "object": "chat.completion.chunk", "created": 0}
    events: list[dict[str, Any]] = [
        {
            **base,
            "model": "fake-1",
            "choices": [{"index": 0, "delta": {"content": word}, "finish_reason": None}],
        }
        for word in words
    ]
    if with_usage:
        events.append(
            {**base, "model": "fake-1", "choices": [], "usage": usage(completion_tokens=len(words))}
        )
    return Reply(events=events)


class FakeProvider:
    """Serves a script of replies to a real ``openai.AsyncOpenAI`` client (:attr:`client`)."""

    def __init__(self) -> None:
        self.replies: deque[Reply] = deque()
        self.seen: list[Seen] = []
        self.client: openai.AsyncOpenAI

    def script(self, *replies: Reply) -> None:
        """Answer the next requests with ``replies``, in order."""
        self.replies.extend(replies)

    def answer(self, method: str, path: str, content: bytes) -> Reply:
        self.seen.append(Seen(method, path, json.loads(content or b"{}"), time.monotonic()))
        if not self.replies:
            return error(418, "unscripted", "fake_provider")
        return self.replies.popleft()

    @asynccontextmanager
    async def running(self) -> AsyncIterator[FakeProvider]:
        serve = self._serve_httpx2 if USES_HTTPX2 else self._serve_httpx
        async with serve():
            yield self

    @asynccontextmanager
    async def _serve_httpx2(self) -> AsyncIterator[None]:
        import httpx2

        def handle(request: httpx2.Request) -> httpx2.Response:
            reply = self.answer(request.method, request.url.path, request.content)
            if reply.drop:
                raise httpx2.ConnectError("fake provider: connection refused", request=request)
            if reply.closed:
                raise httpx2.RemoteProtocolError(UNANSWERED, request=request)
            headers, content = reply.encode()
            return httpx2.Response(reply.status, headers=headers, content=content)

        async with httpx2.AsyncClient(transport=httpx2.MockTransport(handle)) as http:
            self.client = openai.AsyncOpenAI(base_url=BASE_URL, api_key="k", http_client=http)
            yield

    @asynccontextmanager
    async def _serve_httpx(self) -> AsyncIterator[None]:
        import httpx
        import respx

        def handle(request: httpx.Request) -> httpx.Response:
            reply = self.answer(request.method, request.url.path, request.content)
            if reply.drop:
                raise httpx.ConnectError("fake provider: connection refused", request=request)
            if reply.closed:
                raise httpx.RemoteProtocolError(UNANSWERED, request=request)
            headers, content = reply.encode()
            return httpx.Response(reply.status, headers=headers, content=content)

        with respx.mock(base_url=BASE_URL, assert_all_called=False) as router:
            router.route().mock(side_effect=handle)
            self.client = openai.AsyncOpenAI(base_url=BASE_URL, api_key="k")
            try:
                yield
            finally:
                await self.client.close()


@pytest.fixture
async def provider() -> AsyncIterator[FakeProvider]:
    """A fresh fake provider and its ``client`` (an ``openai.AsyncOpenAI``)."""
    async with FakeProvider().running() as fake:
        yield fake
