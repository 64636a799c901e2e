"""HTTP to one upstream through a forward proxy: ``httpx2`` behind `Wire`'s shape.

The gateway's own connections (`.wire`) are direct. When the environment
routes an upstream through a proxy (``HTTPS_PROXY``, ``HTTP_PROXY``,
``ALL_PROXY``, unless ``NO_PROXY`` exempts its host: what an HTTP client that
honours them would do), the upstream client sends through `ProxyWire`
instead: a general client (``httpx2``, which speaks to HTTP proxies, ``CONNECT``
for ``https``, and to SOCKS ones with its ``socks`` extra). It costs more per
request than the direct wire, which is why it is used only where a proxy is.

Same contract as `Wire`: ``request`` returns the answer's head
with its body still to read; failures are `WireError` (no
connection, a proxy that refuses) or `TimeoutError`.

What this module is not: it decides nothing about which proxy applies
(`semisched.gateway.upstream.proxy_for` does), retries nothing, and reads no JSON.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping

import httpx2

from semisched.gateway.wire import WireError

__all__ = ["ProxyReply", "ProxyWire"]


class ProxyReply:
    """One answer: ``status``, ``headers`` (names lower-cased), then the body."""

    __slots__ = ("_response", "headers", "status")

    def __init__(self, response: httpx2.Response) -> None:
        self._response = response
        self.status = response.status_code
        self.headers = {k.lower(): v for k, v in response.headers.items()}

    def __repr__(self) -> str:
        return f"<ProxyReply {self.status}>"

    async def read(self) -> bytes:
        """The whole body."""
        return b"".join([chunk async for chunk in self.chunks()])

    async def chunks(self) -> AsyncIterator[bytes]:
        """The body as it arrives."""
        try:
            async for chunk in self._response.aiter_raw():
                yield chunk
        except httpx2.TimeoutException:
            raise TimeoutError() from None
        except httpx2.TransportError as exc:
            raise WireError(f"the upstream's answer broke off: {exc}") from exc
        finally:
            await self._response.aclose()

    async def aclose(self) -> None:
        """Close the answer (read or not: an unread one's connection is not reused)."""
        await self._response.aclose()


class ProxyWire:
    """Requests to ``base_url`` through the proxy at ``proxy`` (module docstring).

    Args:
        base_url: ``http://`` or ``https://`` URL; its path prefixes every request's.
        proxy: The proxy's URL (``http://host:port``, credentials allowed: they stay
            in the client and are in no ``repr``).
        headers: Sent with every request.
        timeout_s: The longest wait for one read; connect_timeout_s for a connection.
        max_connections: Requests on the wire at once.

    Raises:
        ValueError: ``proxy`` is not a usable proxy URL, or a SOCKS one without
            ``socksio`` (the message never holds the URL: it may hold credentials).
    """

    def __init__(
        self,
        base_url: str,
        proxy: str,
        *,
        headers: Mapping[str, str] | None = None,
        timeout_s: float = 600.0,
        connect_timeout_s: float = 10.0,
        max_connections: int = 1000,
    ) -> None:
        self.base_url = base_url.rstrip("/") + "/"
        timeout = httpx2.Timeout(timeout_s, connect=connect_timeout_s, pool=None)
        limits = httpx2.Limits(max_connections=max_connections)
        try:
            self._client = httpx2.AsyncClient(proxy=proxy, headers=dict(headers or {}),
                                              timeout=timeout, limits=limits,
                                              trust_env=False)  # fmt: skip
        except ImportError:  # the message is httpx's: no URL in it
            raise ValueError("a SOCKS proxy needs the socksio package "
                             "(pip install socksio)") from None  # fmt: skip
        except (ValueError, httpx2.InvalidURL):  # its message may show the URL: not passed on
            raise ValueError("the proxy's URL is not an http://, https:// or socks5:// "
                             "URL with a host") from None  # fmt: skip

    def __repr__(self) -> str:
        return f"<ProxyWire {self.base_url} (through a proxy)>"

    async def request(self, method: str, path: str, body: bytes = b"") -> ProxyReply:
        """Send ``method path`` with ``body``; the answer's head, its body still to read.

        Raises:
            WireError: No connection through the proxy. TimeoutError: a wait ran out.
        """
        request = self._client.build_request(method, self.base_url + path.lstrip("/"),
                                             content=body)  # fmt: skip
        try:
            response = await self._client.send(request, stream=True)
        except httpx2.TimeoutException:
            raise TimeoutError() from None
        except httpx2.TransportError as exc:
            raise WireError(f"cannot reach the upstream through the proxy: {exc}") from exc
        return ProxyReply(response)

    async def aclose(self) -> None:
        """Close the connections."""
        await self._client.aclose()
