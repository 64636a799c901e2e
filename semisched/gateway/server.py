"""Serving the gateway with uvicorn: graceful shutdown, and the demo's in-process mock.

SIGTERM (or Ctrl-C) runs `GatewayServer.shutdown`: the gateway drains
first (`drain`: nothing new is sent, what
is queued is answered 503 with ``Retry-After``, new requests too), then
uvicorn stops accepting connections and waits up to ``grace_s`` for the
requests in flight (streams included) to finish. Just before the grace ends,
what is still live is cancelled (its upstream connection closed) and answered 503
in OpenAI's shape, a stream with an ``error`` event (code ``shutting_down``):
never a plain-text 500 or a stream that stops without a word. The lifespan's
shutdown leaves the scheduler last.

The gateway's own log lines (logger ``semisched``: the proxy line, the drain,
the shared state's loss and rejoin, each request that failed inside the gateway)
go to stderr beside uvicorn's, at ``--log-level``; ``--access-log`` adds one line
per request (`log_to_stderr`).

What a client may send is bounded by `semisched.gateway.limits`: the
connection limit, header size and timeouts by its uvicorn protocol
(`uvicorn_config`), the keep-alive timeout by uvicorn's own. Serving
raises the process's open-file limit (its soft ``RLIMIT_NOFILE``, up to the
hard one) to fit ``max_connections``, and warns when it cannot.

``--demo`` serves a mock provider (`mockprovider`) in the same process,
on another loopback port, and points the gateway at it: nothing else to
install or run.

What this module is not: it parses no flag (`semisched.gateway.cli`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Iterator
from typing import Any

import uvicorn
from uvicorn.logging import DefaultFormatter

from semisched.gateway.app import Gateway
from semisched.gateway.config import GatewayConfig
from semisched.gateway.limits import protocol_for
from semisched.gateway.tickets import access_log as access_logger

__all__ = [
    "DEMO_KEYS",
    "GatewayServer",
    "demo_mock_app",
    "fit_open_files",
    "log_to_stderr",
    "loop_factory",
    "run",
    "uvicorn_config",
]  # fmt: skip

logger = logging.getLogger("semisched.gateway")

#: The demo's gateway keys and their tenants (only ever used against the in-process mock).
DEMO_KEYS = {"sk-demo-alice": "alice", "sk-demo-bob": "bob"}


class GatewayServer(uvicorn.Server):
    """uvicorn's server, draining the gateway before its own graceful shutdown."""

    def __init__(self, config: uvicorn.Config, gateway: Gateway) -> None:
        super().__init__(config)
        self.gateway = gateway

    async def shutdown(self, sockets: Any = None) -> None:
        grace = self.gateway.config.grace_s
        logger.info("draining: queued requests are answered 503, in-flight ones may finish "
                    "for %.0f s", grace)  # fmt: skip
        self.gateway.drain()
        # Just before uvicorn's grace ends (it would cancel what is left, and a request
        # cancelled there gets a plain-text 500), what is still live is answered 503 in
        # OpenAI's shape, a stream with an error event.
        cut = asyncio.get_running_loop().call_later(max(0.0, grace - min(1.0, grace / 10)),
                                                    self._past_grace)  # fmt: skip
        try:
            await super().shutdown(sockets)
        finally:
            cut.cancel()

    def _past_grace(self) -> None:
        live = len(self.gateway.tracker.live)
        if live:
            logger.info("grace over: %d requests still live are answered 503", live)
        self.gateway.abort()


class _Inner(uvicorn.Server):
    """A second server in the process (the demo's mock): signals stay the gateway's."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


def demo_mock_app() -> Any:
    """The demo's mock provider: a fast profile (ten times real time), model ``mock-1``."""
    from mockprovider.app import MockConfig, create_app

    return create_app(MockConfig(time_scale=10.0, model="mock-1"))


def uvicorn_config(
    app: Any,
    config: GatewayConfig,
    log_level: str,
    refused: Callable[[str], None] | None = None,
) -> uvicorn.Config:
    """uvicorn's settings for the gateway: the grace period, the client limits'
    protocol (`protocol_for`, ``refused`` counting what
    it refuses), no access log."""
    return uvicorn.Config(
        app,
        host=config.host,
        port=config.port,
        log_level=log_level,
        access_log=False,
        lifespan="on",
        http=protocol_for(config, refused),
        timeout_keep_alive=config.keepalive_timeout_s,  # type: ignore[arg-type]  # float works
        timeout_graceful_shutdown=config.grace_s,  # type: ignore[arg-type]  # float works
    )


def fit_open_files(connections: int, spare: int = 256) -> int:
    """Raise the soft open-file limit to hold ``connections`` (plus ``spare`` for the
    upstreams and the rest), up to the hard limit; return the soft limit now.

    On a platform without ``resource`` (Windows) nothing is changed (``-1``).
    """
    try:
        import resource
    except ImportError:  # pragma: no cover (Windows)
        return -1
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = connections + spare
    if soft != resource.RLIM_INFINITY and soft < want:
        new = want if hard == resource.RLIM_INFINITY else min(want, hard)
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (new, hard))
            soft = new
    if soft != resource.RLIM_INFINITY and soft < want:
        logger.warning("max_connections=%d needs %d open files, the process may open %d: "
                       "raise its limit (ulimit -n) or lower max_connections",
                       connections, want, soft)  # fmt: skip
    return soft


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
    fit_open_files(config.max_connections)
    gateway = Gateway(config)
    uv = uvicorn_config(gateway.app(), config, log_level, gateway.count_refused)
    server = GatewayServer(uv, gateway)
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


def log_to_stderr(log_level: str, *, access_log: bool = False) -> None:
    """Show the gateway's own log lines (logger ``semisched``) beside uvicorn's, at
    ``log_level``; the access log's lines only with ``access_log``. A process that
    already gave the logger a handler keeps its own."""
    root = logging.getLogger("semisched")
    root.setLevel(log_level.upper())
    if not root.handlers:
        handler = logging.StreamHandler()
        handler.setFormatter(DefaultFormatter("%(levelprefix)s %(name)s: %(message)s"))
        root.addHandler(handler)
    access_logger.setLevel(logging.INFO if access_log else logging.WARNING)


def run(
    config: GatewayConfig,
    *,
    log_level: str = "info",
    access_log: bool = False,
    mock: tuple[Any, int] | None = None,
    started: Callable[[], None] | None = None,
) -> None:
    """Serve ``config`` until SIGTERM or Ctrl-C (module docstring).

    Args:
        config: The gateway's configuration.
        log_level: The gateway's and uvicorn's log level.
        access_log: Log one line per request (`semisched.gateway.tickets`).
        mock: ``(asgi_app, port)`` of a mock provider served beside it (``--demo``).
        started: Called once the gateway accepts connections.
    """
    log_to_stderr(log_level, access_log=access_log)
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
