"""The gateway's client of one upstream: OpenAI's wire format in, the upstream's bytes out.

:class:`UpstreamClient` has the shape the runtime's provider seam calls
(``chat.completions.create``, ``completions.create`` and their
``with_raw_response``), but it parses nothing it does not need: a JSON answer
comes back as its bytes (:class:`RawAnswer`; only ``usage`` is read, for the
scheduler's budgets and learning), a stream as the upstream's SSE events one
by one (:class:`SSEStream`), each passed on unchanged. A failure is raised as
the ``openai`` exception an OpenAI client would raise (``APIStatusError``
holding the upstream's response and body, ``APIConnectionError``,
``APITimeoutError``), so :mod:`semisched.runtime.failures` classifies it as
it classifies any client's.

The upstream's key sits in the HTTP client's default headers only: it is in no
``repr``, message or log line.

What this module is not: it retries nothing (the scheduler owns retries) and
decides nothing.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Mapping
from types import SimpleNamespace
from typing import Any

import httpx2
import openai

__all__ = ["RawAnswer", "SSEChunk", "SSEStream", "UpstreamClient"]

_DONE = b"[DONE]"


def _usage(data: object) -> Any:
    """``data["usage"]`` as an object with ``prompt_tokens``/``completion_tokens`` (or ``None``)."""
    usage = data.get("usage") if isinstance(data, dict) else None
    if not isinstance(usage, dict):
        return None
    return SimpleNamespace(
        prompt_tokens=usage.get("prompt_tokens") or 0,
        completion_tokens=usage.get("completion_tokens") or 0,
    )


class RawAnswer:
    """An upstream's JSON answer: its bytes, status and headers, and the ``usage`` read from it."""

    __slots__ = ("content", "headers", "status_code", "usage")

    def __init__(self, response: httpx2.Response) -> None:
        self.content = response.content
        self.status_code = response.status_code
        self.headers = response.headers
        try:
            self.usage = _usage(json.loads(self.content))
        except ValueError:
            self.usage = None

    def __repr__(self) -> str:
        return f"<RawAnswer {self.status_code} {len(self.content)} bytes>"


class SSEChunk:
    """One ``data:`` event of a stream: its bytes as sent, and what the runtime reads of it."""

    __slots__ = ("choices", "data", "usage")

    def __init__(self, data: bytes) -> None:
        self.data = data
        try:
            parsed = json.loads(data)
        except ValueError:
            parsed = None
        self.choices = parsed.get("choices") if isinstance(parsed, dict) else None
        self.usage = _usage(parsed)

    def __repr__(self) -> str:
        return f"<SSEChunk {len(self.data)} bytes>"


class SSEStream:
    """The upstream's stream of events; ends at ``data: [DONE]`` or when the body ends."""

    def __init__(self, response: httpx2.Response) -> None:
        self._response = response
        self.headers = response.headers

    def __repr__(self) -> str:
        return f"<SSEStream closed={self._response.is_closed}>"

    def __aiter__(self) -> AsyncIterator[SSEChunk]:
        return self._events()

    async def _events(self) -> AsyncIterator[SSEChunk]:
        request = self._response.request
        try:
            async for line in self._response.aiter_lines():
                if not line.startswith("data:"):
                    continue  # event boundaries, comments, other fields
                data = line[5:].strip().encode("utf-8")
                if data == _DONE:
                    break
                yield SSEChunk(data)
        except httpx2.TimeoutException:
            raise openai.APITimeoutError(request=request) from None
        except httpx2.TransportError as exc:
            raise openai.APIConnectionError(request=request) from exc

    async def close(self) -> None:
        """Close the upstream connection (a client that left closes it early)."""
        await self._response.aclose()


class _Raw:
    """``with_raw_response``: ``create`` returns the answer with its headers."""

    def __init__(self, client: UpstreamClient, path: str) -> None:
        self._client = client
        self._path = path

    async def create(self, **params: Any) -> _Parsed:
        return await self._client.post(self._path, params)


class _Parsed:
    """What ``with_raw_response.create`` returns: ``parse()`` and ``headers``."""

    __slots__ = ("answer", "headers")

    def __init__(self, answer: RawAnswer | SSEStream, headers: Mapping[str, str]) -> None:
        self.answer = answer
        self.headers = headers

    def parse(self) -> RawAnswer | SSEStream:
        return self.answer


class _Route:
    """One endpoint (``chat.completions`` or ``completions``)."""

    def __init__(self, client: UpstreamClient, path: str) -> None:
        self.with_raw_response = _Raw(client, path)

    async def create(self, **params: Any) -> RawAnswer | SSEStream:
        return (await self.with_raw_response.create(**params)).parse()


class UpstreamClient:
    """An OpenAI-compatible upstream at ``base_url`` (module docstring).

    Args:
        base_url: The upstream's ``.../v1`` URL.
        api_key: Sent as ``Authorization: Bearer``; ``None``: no header.
        timeout_s: The read timeout of one call (a stream's, between events).
        max_connections: Connections kept to the upstream at most.
        transport: An ``httpx2`` transport (tests); default: a real connection pool.
    """

    def __init__(
        self,
        base_url: str,
        api_key: str | None,
        *,
        timeout_s: float = 600.0,
        max_connections: int = 1000,
        transport: httpx2.AsyncBaseTransport | None = None,
    ) -> None:
        headers = {"content-type": "application/json"}
        if api_key:
            headers["authorization"] = f"Bearer {api_key}"
        self.base_url = base_url.rstrip("/")
        self._http = httpx2.AsyncClient(
            base_url=self.base_url + "/",
            headers=headers,
            timeout=httpx2.Timeout(timeout_s, connect=min(timeout_s, 10.0)),
            limits=httpx2.Limits(max_connections=max_connections,
                                 max_keepalive_connections=max_connections),
            transport=transport,
        )  # fmt: skip
        self.chat = SimpleNamespace(completions=_Route(self, "chat/completions"))
        self.completions = _Route(self, "completions")

    def __repr__(self) -> str:
        return f"<UpstreamClient {self.base_url}>"

    async def post(self, path: str, params: Mapping[str, Any]) -> _Parsed:
        """POST ``params`` to ``path``: the answer (or the open stream) and its headers.

        Raises:
            openai.APIStatusError: The upstream answered 4xx/5xx (its body read).
            openai.APITimeoutError, openai.APIConnectionError: No answer.
        """
        request = self._http.build_request("POST", path, content=json.dumps(params))
        stream = bool(params.get("stream"))
        try:
            response = await self._http.send(request, stream=stream)
            if response.status_code >= 400:
                await response.aread()
                await response.aclose()
                raise _status_error(response)
            if not stream:
                return _Parsed(RawAnswer(response), response.headers)
        except httpx2.TimeoutException:
            raise openai.APITimeoutError(request=request) from None
        except httpx2.TransportError as exc:
            raise openai.APIConnectionError(request=request) from exc
        return _Parsed(SSEStream(response), response.headers)

    async def models(self) -> list[dict[str, Any]]:
        """The upstream's ``GET /models`` list (``[]`` when it has none or fails)."""
        try:
            response = await self._http.get("models")
            data = response.json().get("data") if response.status_code == 200 else None
        except (httpx2.HTTPError, ValueError, AttributeError):
            return []
        return [m for m in data if isinstance(m, dict)] if isinstance(data, list) else []

    async def reachable(self) -> bool:
        """Whether the upstream answers HTTP at all (any status)."""
        try:
            await self._http.get("models")
        except httpx2.HTTPError:
            return False
        return True

    async def aclose(self) -> None:
        """Close the connection pool."""
        await self._http.aclose()


def _status_error(response: httpx2.Response) -> openai.APIStatusError:
    """The exception an OpenAI client raises for ``response`` (its error body inside)."""
    try:
        body: Any = json.loads(response.content)
    except ValueError:
        body = None
    data = body.get("error", body) if isinstance(body, dict) else body
    message = data.get("message") if isinstance(data, dict) else None
    if not isinstance(message, str):
        message = f"Error code: {response.status_code}"
    return openai.APIStatusError(message, response=response, body=data)
