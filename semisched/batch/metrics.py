"""Serving a batch job's Prometheus metrics: ``semisched batch --metrics-port N``.

`serve_metrics` opens ``http://127.0.0.1:N/metrics`` (the official
client's HTTP server, in a daemon thread) on a registry of the job's own, for
the scheduler of the run to fill (``BatchRun(metrics=registry)``), and closes
it when the job ends. The metrics are those of
`semisched.telemetry.prometheus`. Loopback only: a job's metrics name its
classes, tenants and endpoints, which are not for the network at large; put a
proxy or an agent in front to export them further.

What this module is not: it counts nothing itself and runs no job
(`semisched.batch.run`).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, TextIO

from semisched.batch.input import BatchError
from semisched.extras import MissingDependency, needs

if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry

__all__ = ["METRICS_HOST", "serve_metrics"]

#: The address the metrics are served on.
METRICS_HOST = "127.0.0.1"


@contextmanager
def serve_metrics(port: int | None, stream: TextIO) -> Iterator[CollectorRegistry | None]:
    """Serve a fresh registry on ``METRICS_HOST:port`` while the context lasts; say where on
    ``stream``. ``None``: serve nothing (yields ``None``).

    Raises:
        BatchError: ``prometheus-client`` is not installed, or the port cannot be
            listened on (in use, not allowed).
    """
    if port is None:
        yield None
        return
    try:
        with needs("--metrics-port"):
            from prometheus_client import CollectorRegistry, start_http_server
    except MissingDependency as exc:
        raise BatchError(str(exc)) from None
    registry = CollectorRegistry()
    try:
        server, thread = start_http_server(port, addr=METRICS_HOST, registry=registry)
    except OSError as exc:
        why = exc.strerror or str(exc)
        raise BatchError(
            f"--metrics-port {port}: cannot listen on {METRICS_HOST}:{port} ({why}); "
            "choose a free port"
        ) from None
    print(f"metrics: http://{METRICS_HOST}:{port}/metrics", file=stream, flush=True)
    try:
        yield registry
    finally:
        server.shutdown()
        server.server_close()
        thread.join()
