"""The gateway's client of one upstream: OpenAI's wire format in, the upstream's bytes out.

`UpstreamClient` has the shape the runtime's provider seam calls
(one resource per scheduled API, `APIS`:
``chat.completions.create``, ``completions.create``, ``responses.create``,
``embeddings.create`` and their ``with_raw_response``, each posting JSON to its
API's path), but it parses nothing it does not need: a JSON answer comes back
as its bytes (`RawAnswer`; only ``usage`` is read, for the scheduler's
budgets and learning), a stream as the upstream's SSE events one by one
(`SSEStream`), each passed on unchanged with its ``event:`` name (the
Responses API's typed events) and readable as the JSON object it carries (what
`ApiSpec.read_chunk` reads).
A failure is raised as the ``openai`` exception an OpenAI client would raise
(``APIStatusError`` holding the upstream's response and body,
``APIConnectionError``, ``APITimeoutError``), so `semisched.runtime.failures`
classifies it as it classifies any client's.

The upstream's key sits in the HTTP client's default headers only: it is in no
``repr``, message or log line. Its URL is in no message either: messages and the
``repr`` name the endpoint (its configured ``name``), which is what a gateway's
client may read; the URL stays on the exception's ``request`` for the SDK's own
hints.

What this module is not: it retries nothing (the scheduler owns retries) and
decides nothing.
"""

from __future__ import annotations

import json
import os
from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from types import MappingProxyType, SimpleNamespace
from typing import Any
from urllib.parse import urlsplit

import httpx2
import openai

from semisched.gateway.proxied import ProxyReply, ProxyWire
from semisched.gateway.wire import Reply, Wire, WireError
from semisched.runtime.apis import APIS, ApiSpec

__all__ = ["RawAnswer", "SSEChunk", "SSEStream", "UpstreamClient", "proxy_for"]

_DONE = b"[DONE]"


def proxy_for(base_url: str, environ: Mapping[str, str] | None = None) -> tuple[str, str] | None:
    """The proxy an HTTP client that honours the environment would route ``base_url``
    through: ``(variable, proxy URL)`` from ``HTTPS_PROXY``/``HTTP_PROXY`` (by the URL's
    scheme) or ``ALL_PROXY``, any case, unless ``NO_PROXY`` exempts its host (``*``, the
    host, or a domain it is in); ``None`` when there is none (``environ``: default
    ``os.environ``)."""
    env = os.environ if environ is None else environ
    given = {name.lower(): name for name, value in env.items() if value}
    host = (urlsplit(base_url).hostname or "").lower()
    exempt = given.get("no_proxy")
    for entry in env[exempt].split(",") if exempt is not None else ():
        domain = entry.strip().lower().split(":", 1)[0].lstrip(".")
        if domain == "*" or (domain and (host == domain or host.endswith("." + domain))):
            return None
    for name in (f"{urlsplit(base_url).scheme}_proxy", "all_proxy"):
        if name in given:
            return given[name], env[given[name]]
    return None


def _usage(data: object) -> Any:
    """``data["usage"]`` as the upstream sent it (a JSON object), or ``None``."""
    usage = data.get("usage") if isinstance(data, dict) else None
    return usage if isinstance(usage, dict) else None


class RawAnswer:
    """An upstream's JSON answer: its bytes, status and headers, and the ``usage`` read from it."""

    __slots__ = ("content", "headers", "json_object", "status_code", "usage")

    def __init__(self, content: bytes, status_code: int, headers: Mapping[str, str]) -> None:
        self.content = content
        self.status_code = status_code
        self.headers = headers
        try:
            data = json.loads(self.content)
        except ValueError:
            data = None
        self.json_object = isinstance(data, dict)  # else not an answer a client can read
        self.usage = _usage(data)

    def __repr__(self) -> str:
        return f"<RawAnswer {self.status_code} {len(self.content)} bytes>"


_EMPTY: Mapping[str, Any] = MappingProxyType({})


class SSEChunk(Mapping[str, Any]):
    """One ``data:`` event of a stream: its bytes as sent, its ``event:`` name (``b""``:
    none), and the JSON object it carries, read as a mapping (``chunk.get("usage")``,
    ``chunk.get("type")``: what the runtime reads of it; empty when it is no object)."""

    __slots__ = ("data", "event", "parsed")

    def __init__(self, data: bytes, event: bytes = b"") -> None:
        self.data = data
        self.event = event
        try:
            parsed = json.loads(data)
        except ValueError:
            parsed = None
        self.parsed: Mapping[str, Any] = parsed if isinstance(parsed, dict) else _EMPTY

    def __getitem__(self, name: str) -> Any:
        return self.parsed[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self.parsed)

    def __len__(self) -> int:
        return len(self.parsed)

    def __repr__(self) -> str:
        named = f" {self.event.decode('latin-1')}" if self.event else ""
        return f"<SSEChunk{named} {len(self.data)} bytes>"


class SSEStream:
    """The upstream's stream of events; ends at ``data: [DONE]`` or when the body ends (a
    Responses stream sends no ``[DONE]``)."""

    def __init__(self, reply: Reply | ProxyReply, request: Callable[[], httpx2.Request]) -> None:
        self._reply = reply
        self._request = request
        self.headers = reply.headers

    def __repr__(self) -> str:
        return f"<SSEStream {self._reply!r}>"

    def __aiter__(self) -> AsyncIterator[SSEChunk]:
        return self._events()

    async def _events(self) -> AsyncIterator[SSEChunk]:
        event = b""  # the pending event's name: an ``event:`` line before its ``data:``
        try:
            async for line in _lines(self._reply.chunks()):
                if line.startswith(b"data:"):
                    data = line[5:].strip()
                    if data == _DONE:
                        break
                    yield SSEChunk(data, event)
                elif line.startswith(b"event:"):
                    event = line[6:].strip()
                elif not line:
                    event = b""  # an event's end
                # comments and other fields: skipped
        except TimeoutError:
            raise openai.APITimeoutError(request=self._request()) from None
        except WireError as exc:
            raise openai.APIConnectionError(request=self._request()) from exc

    async def close(self) -> None:
        """Close the upstream connection (a client that left closes it early)."""
        await self._reply.aclose()


async def _lines(chunks: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
    """The lines of a byte stream (``\n``, ``\r\n`` or ``\r`` ended), without their ends."""
    rest = b""
    async for chunk in chunks:
        rest += chunk
        if b"\r" in rest:
            rest = rest.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        *lines, rest = rest.split(b"\n")
        for line in lines:
            yield line
    if rest:
        yield rest


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
    """One scheduled API's resource: ``create`` posts to its path."""

    def __init__(self, client: UpstreamClient, path: str) -> None:
        self.with_raw_response = _Raw(client, path)

    async def create(self, **params: Any) -> RawAnswer | SSEStream:
        return (await self.with_raw_response.create(**params)).parse()


def _mount(root: object, spec: ApiSpec, route: _Route) -> None:
    """Put ``route`` at ``spec.resource`` under ``root`` (``chat.completions``: a namespace
    ``chat`` holding ``completions``), as an ``openai`` client has it."""
    *parents, name = spec.resource
    node = root
    for parent in parents:
        child = getattr(node, parent, None)
        if child is None:
            child = SimpleNamespace()
            setattr(node, parent, child)
        node = child
    setattr(node, name, route)


class UpstreamClient:
    """An OpenAI-compatible upstream at ``base_url`` (module docstring).

    Args:
        base_url: The upstream's ``.../v1`` URL.
        api_key: Sent as ``Authorization: Bearer``; ``None``: no header.
        timeout_s: The read timeout of one call (a stream's, between events).
        max_connections: Connections kept to the upstream at most.
        proxy: A forward proxy's URL to send through (`.proxied`); ``None``: the
            direct connections of `.wire`.
        name: The endpoint's configured name, which messages and the ``repr`` give
            instead of the URL (default: ``upstream``).
    """

    def __init__(
        self,
        base_url: str,
        api_key: str | None,
        *,
        timeout_s: float = 600.0,
        max_connections: int = 1000,
        proxy: str | None = None,
        name: str = "upstream",
    ) -> None:
        self.name = name
        headers = {"content-type": "application/json", "accept": "application/json"}
        if api_key:
            headers["authorization"] = f"Bearer {api_key}"
        self.base_url = base_url.rstrip("/")
        connect_s = min(timeout_s, 10.0)
        self._wire: Wire | ProxyWire
        if proxy is None:
            self._wire = Wire(self.base_url, headers=headers, timeout_s=timeout_s,
                              connect_timeout_s=connect_s,
                              max_connections=max_connections)  # fmt: skip
        else:
            self._wire = ProxyWire(self.base_url, proxy, headers=headers, timeout_s=timeout_s,
                                   connect_timeout_s=connect_s,
                                   max_connections=max_connections)  # fmt: skip
        for spec in APIS.values():  # the base URL ends in /v1: each API's path under it
            _mount(self, spec, _Route(self, spec.path.removeprefix("/v1/")))

    def __repr__(self) -> str:
        through = " (through a proxy)" if isinstance(self._wire, ProxyWire) else ""
        return f"<UpstreamClient {self.name!r}{through}>"

    @property
    def resent(self) -> int:
        """Requests sent once more because a reused connection closed before any byte of
        the answer (`semisched.gateway.wire` rule 5; 0 through a proxy, whose client
        keeps its own connections)."""
        wire = self._wire
        return wire.resent if isinstance(wire, Wire) else 0

    async def post(self, path: str, params: Mapping[str, Any]) -> _Parsed:
        """POST ``params`` to ``path``: the answer (or the open stream) and its headers.

        Raises:
            openai.APIStatusError: The upstream answered 4xx/5xx (its body read).
            openai.APITimeoutError, openai.APIConnectionError: No answer.
        """
        body = json.dumps(params).encode()

        def request() -> httpx2.Request:  # only for an exception: openai's need one
            return httpx2.Request("POST", f"{self.base_url}/{path}", content=body)

        try:
            reply = await self._wire.request("POST", path, body)
            if reply.status >= 400:
                content = await reply.read()
                raise _status_error(reply.status, reply.headers, content, request(), self.name)
            if not params.get("stream"):
                answer = RawAnswer(await reply.read(), reply.status, reply.headers)
                if not answer.json_object:  # a broken answer is the upstream's failure (502)
                    raise _status_error(502, reply.headers, b"", request(), self.name)
                return _Parsed(answer, reply.headers)
        except TimeoutError:
            raise openai.APITimeoutError(request=request()) from None
        except WireError as exc:
            message = f"the upstream {self.name!r} could not be reached ({type(exc).__name__})"
            raise openai.APIConnectionError(message=message, request=request()) from exc
        return _Parsed(SSEStream(reply, request), reply.headers)

    async def _get_models(self) -> Reply | ProxyReply:
        return await self._wire.request("GET", "models")

    async def models(self) -> list[dict[str, Any]]:
        """The upstream's ``GET /models`` list (``[]`` when it has none or fails)."""
        try:
            reply = await self._get_models()
            content = await reply.read()
            data = json.loads(content).get("data") if reply.status == 200 else None
        except (WireError, TimeoutError, ValueError, AttributeError):
            return []
        return [m for m in data if isinstance(m, dict)] if isinstance(data, list) else []

    async def reachable(self) -> bool:
        """Whether the upstream answers HTTP at all (any status)."""
        try:
            await (await self._get_models()).read()
        except (WireError, TimeoutError):
            return False
        return True

    async def aclose(self) -> None:
        """Close the connections."""
        await self._wire.aclose()


def _status_error(
    status: int, headers: Mapping[str, str], content: bytes, request: httpx2.Request, name: str
) -> openai.APIStatusError:
    """The exception an OpenAI client raises for this answer (its error body inside); a
    body without a message is said as the endpoint ``name``'s status, never its URL."""
    response = httpx2.Response(status, headers=dict(headers), content=content, request=request)
    try:
        body: Any = json.loads(content)
    except ValueError:
        body = None
    data = body.get("error", body) if isinstance(body, dict) else body
    message = data.get("message") if isinstance(data, dict) else None
    if not isinstance(message, str):
        message = f"Error code: {status} from the upstream {name!r}"
        if status == 502 and not content:
            message = f"the upstream {name!r} answered with a body that is not a JSON object"
    return openai.APIStatusError(message, response=response, body=data)
