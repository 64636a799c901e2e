"""Serving the gateway with uvicorn: graceful shutdown, and the demo's in-process mock.

SIGTERM (or Ctrl-C) runs :meth:`GatewayServer.shutdown`: the gateway drains
first (:meth:`~semisched.gateway.app.Gateway.drain`: nothing new is sent, what
is queued is answered 503 with ``Retry-After``, new requests too), then
uvicorn stops accepting connections and waits up to ``grace_s`` for the
requests in flight (streams included) to finish; what is still running then is
cancelled (its upstream connection closed). The lifespan's shutdown leaves the
scheduler last.

``--demo`` serves a mock provider (:mod:`mockprovider`) in the same process,
on another loopback port, and points the gateway at it: nothing else to
install or run.

What this module is not: it parses no flag (:mod:`semisched.gateway.cli`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Iterator
from typing import Any

import uvicorn

from semisched.gateway.app import Gateway
from semisched.gateway.config import GatewayConfig

__all__ = ["DEMO_KEYS", "GatewayServer", "demo_mock_app", "loop_factory", "run"]

logger = logging.getLogger("semisched.gateway")

#: The demo's gateway keys and their tenants (only ever used against the in-process mock).
DEMO_KEYS = {"sk-demo-alice": "alice", "sk-demo-bob": "bob"}


class GatewayServer(uvicorn.Server):
    """uvicorn's server, draining the gateway before its own graceful shutdown."""

    def __init__(self, config: uvicorn.Config, gateway: Gateway) -> None:
        super().__init__(config)
        self.gateway = gateway

    async def shutdown(self, sockets: Any = None) -> None:
        logger.info("draining: queued requests are answered 503, in-flight ones may finish "
                    "for %.0f s", self.gateway.config.grace_s)  # fmt: skip
        self.gateway.drain()
        await super().shutdown(sockets)


class _Inner(uvicorn.Server):
    """A second server in the process (the demo's mock): signals stay the gateway's."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


def demo_mock_app() -> Any:
    """The demo's mock provider: a fast profile (ten times real time), model ``mock-1``."""
    from mockprovider.app import MockConfig, create_app

    return create_app(MockConfig(time_scale=10.0, model="mock-1"))


def uvicorn_config(app: Any, config: GatewayConfig, log_level: str) -> uvicorn.Config:
    """uvicorn's settings for the gateway: the grace period, no access log."""
    return uvicorn.Config(
        app,
        host=config.host,
        port=config.port,
        log_level=log_level,
        access_log=False,
        lifespan="on",
        timeout_graceful_shutdown=config.grace_s,  # type: ignore[arg-type]  # float works
    )


async def _serve(
    config: GatewayConfig,
    log_level: str,
    mock: tuple[Any, int] | None,
    started: Callable[[], None] | None,
) -> None:
    inner = None
    if mock is not None:
        app, port = mock
        inner = _Inner(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning",
                                      lifespan="off", access_log=False))  # fmt: skip
        inner_task = asyncio.create_task(inner.serve())
        while not inner.started:
            if inner_task.done():
                await inner_task  # raises what stopped it
                raise RuntimeError("the demo's mock provider stopped")  # pragma: no cover
            await asyncio.sleep(0.01)  # bounded by the mock's start-up
    gateway = Gateway(config)
    server = GatewayServer(uvicorn_config(gateway.app(), config, log_level), gateway)
    watch = asyncio.create_task(_announce(server, started)) if started else None
    try:
        await server.serve()
    finally:
        if watch is not None:
            watch.cancel()
        if inner is not None:
            inner.should_exit = True
            await inner_task


async def _announce(server: uvicorn.Server, started: Callable[[], None]) -> None:
    while not server.started:
        await asyncio.sleep(0.01)
    started()


def run(
    config: GatewayConfig,
    *,
    log_level: str = "info",
    mock: tuple[Any, int] | None = None,
    started: Callable[[], None] | None = None,
) -> None:
    """Serve ``config`` until SIGTERM or Ctrl-C (module docstring).

    Args:
        config: The gateway's configuration.
        log_level: uvicorn's log level.
        mock: ``(asgi_app, port)`` of a mock provider served beside it (``--demo``).
        started: Called once the gateway accepts connections.
    """
    with asyncio.Runner(loop_factory=loop_factory()) as runner:
        runner.run(_serve(config, log_level, mock, started))


def loop_factory() -> Callable[[], asyncio.AbstractEventLoop] | None:
    """uvloop's event loop when it is installed (the ``gateway`` extra), else asyncio's."""
    try:
        import uvloop  # type: ignore[import-not-found, unused-ignore]
    except ImportError:
        return None
    factory: Callable[[], asyncio.AbstractEventLoop] = uvloop.new_event_loop
    return factory
