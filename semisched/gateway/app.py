"""The gateway's ASGI app: OpenAI's routes in front of a [`Scheduler`][semisched.Scheduler].

``Gateway(config).app()`` is an ASGI app (serve it with uvicorn:
`semisched.gateway.server`): the scheduled routes' POSTs go straight to
their handlers, everything else through Starlette. Its routes:

=================================  ==========================================================
route                              what
=================================  ==========================================================
``POST /v1/chat/completions``      scheduled, then forwarded; JSON, or SSE chunk by chunk
``POST /v1/completions``           the same for the completions API
``POST /v1/responses``             the same for the Responses API (SSE: its typed events)
``POST /v1/embeddings``            the same for embeddings (JSON only: they never stream)
``GET /v1/models``                 what the fleet serves
``GET /healthz``                   200 while the process serves
``GET /readyz``                    200 when every upstream answers and the state is shared
``GET /metrics``                   the SDK's Prometheus families (and the gateway's answers)
``GET /semisched/status``          queues by tenant and class, endpoints, budgets, circuits
=================================  ==========================================================

The scheduled routes are built from `APIS`, one
`ApiRoute` per API at its path, and serve every
API alike: key → tenant (401 without one), body and hints
(`semisched.gateway.hints`: 400/403), its class and deadline
(`semisched.gateway.priority`: an integer ``priority``, ``service_tier``,
the key's class, the class's and tenant's ``deadline_s``), the body's fields,
model and service tier (`semisched.gateway.params`: 400/403/404; nothing
is sent for a refused request), ``Scheduler.submit`` with the API, tenant, class,
deadline and prior, then the upstream's answer as it came, or the outcome's
answer (`semisched.gateway.answers`; a request shed at a deadline the
gateway gave it while still queued: 429 ``deadline_shed``). The client's
disconnect cancels the submit (a queued request is never sent; one in flight
is aborted, its upstream connection closed); so does a drain for what is
still queued (`Gateway.drain`, on SIGTERM), which answers 503.

What this module is not: it schedules nothing (the runtime and the core do),
parses no config (`semisched.gateway.config`), runs no server and handles
no scheduled request itself (`semisched.gateway.routes`).
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import AsyncIterator, Mapping
from typing import Any

from prometheus_client import CollectorRegistry, Counter, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from semisched.gateway.answers import EXCEPTION_HANDLERS, unauthorized
from semisched.gateway.config import GatewayConfig, GatewayConfigError
from semisched.gateway.keys import KeyTable, bearer_key
from semisched.gateway.params import RequestChecks
from semisched.gateway.priority import PriorityRules
from semisched.gateway.routes import ApiRoute
from semisched.gateway.status import fleet_health, status_document
from semisched.gateway.tickets import Tracker
from semisched.gateway.upstream import UpstreamClient, proxy_for
from semisched.runtime.apis import APIS
from semisched.runtime.options import RuntimeOptions
from semisched.runtime.scheduler import Scheduler

logger = logging.getLogger("semisched.gateway")

__all__ = ["Gateway", "upstream_keys"]



class Gateway:
    """The gateway: its scheduler, upstream clients, keys and routes (module docstring).

    Args:
        config: The checked configuration.
        environ: Where upstream keys are read (default ``os.environ``), at `start`.
    """

    def __init__(self, config: GatewayConfig, *, environ: Mapping[str, str] | None = None) -> None:
        self.config = config
        self.keys = KeyTable(config.keys)
        self.checks = RequestChecks.of(config)
        self.registry = CollectorRegistry()
        self.tracker = Tracker()
        self.draining = False
        self.failed = False  # the scheduler stopped while the process serves
        self.cancelled = {"queued": 0, "in_flight": 0}
        self.scheduler: Scheduler | None = None
        self.clients: dict[str, UpstreamClient] = {}
        self._environ = environ
        self.classes: tuple[str, ...] = tuple(c.name for c in config.scheduler_config().classes)
        self.rules = PriorityRules(config, self.registry)
        self._answers = Counter(
            "semisched_gateway_responses",
            "Gateway answers by route and HTTP status",
            ("route", "status"),
            registry=self.registry,
        )
        self._refused = Counter(
            "semisched_gateway_refused_connections",
            "Connections the gateway's client limits refused or cut off, by reason",
            ("reason",),
            registry=self.registry,
        )

    def count_refused(self, reason: str) -> None:
        """A connection the client limits refused or cut off, by ``reason``
        (``semisched_gateway_refused_connections_total``)."""
        self._refused.labels(reason).inc()

    def __repr__(self) -> str:
        state = "draining" if self.draining else "serving" if self.scheduler else "stopped"
        return f"<Gateway {state} endpoints={list(self.clients)} {self.tracker!r}>"

    # -- lifecycle -----------------------------------------------------------------------

    async def start(self) -> None:
        """Read the upstream keys, open the clients and enter the scheduler.

        Raises:
            GatewayConfigError: An upstream key variable is unset, or a proxy URL unusable.
            StateUnavailable: ``state`` is configured but unreachable.
        """
        keys = upstream_keys(self.config, self._environ)
        endpoints = []
        for d in self.config.fleet.endpoints:
            proxy = proxy_for(d.base_url, self._environ)
            if proxy is not None:  # the variable's name only: its value may hold credentials
                logger.info("endpoint %r: through the proxy in %s", d.name, proxy[0])
            try:
                client = UpstreamClient(d.base_url, keys[d.name],
                                        timeout_s=self.config.timeout_s, name=d.name,
                                        proxy=None if proxy is None else proxy[1])  # fmt: skip
            except ValueError as exc:  # only a proxy's URL can be bad here
                where = "" if proxy is None else f" (the proxy in {proxy[0]})"
                raise GatewayConfigError(f"endpoint {d.name!r}{where}: {exc}") from None
            self.clients[d.name] = client
            endpoints.append(d.endpoint(client))
        options = RuntimeOptions(max_pending=self.config.max_pending,
                                 namespace=self.config.namespace)  # fmt: skip
        scheduler = Scheduler(endpoints=endpoints, config=self.config.scheduler_config(),
                              priors=self.config.priors, state=self.config.state,
                              metrics=self.registry, observers=[self.tracker],
                              spend_caps=self.config.spend_caps, options=options)  # fmt: skip
        await scheduler.__aenter__()
        self.scheduler = scheduler

    def abort(self) -> None:
        """Cancel every request still live, streams included (a drain past its grace):
        each is answered 503 in OpenAI's shape, a stream with an error event."""
        self.drain()
        for ticket in list(self.tracker.live.values()):
            ticket.cancel("drain")

    def drain(self) -> None:
        """Stop taking requests and sending queued ones; answer those with 503 (SIGTERM)."""
        if self.draining:
            return
        self.draining = True
        if self.scheduler is not None:
            self.scheduler.pause()
        for ticket in self.tracker.queued():
            ticket.cancel("drain")

    async def stop(self) -> None:
        """Drain, leave the scheduler (waiting for what is left) and close the clients."""
        self.drain()
        try:
            if self.scheduler is not None:
                await self.scheduler.__aexit__(None, None, None)
        finally:
            self.scheduler = None
            for client in self.clients.values():
                await client.aclose()

    @contextlib.asynccontextmanager
    async def lifespan(self, app: Starlette) -> AsyncIterator[None]:
        """The ASGI lifespan: `start` on startup, `stop` on shutdown."""
        await self.start()
        try:
            yield
        except BaseException:  # not uvicorn's shutdown: the scheduler stopped under us
            self.failed = True
            logger.error("the scheduler stopped while the gateway serves; /healthz says 503")
            raise
        finally:
            await self.stop()

    def app(self) -> ASGIApp:
        """The ASGI app serving the module's routes.

        The scheduled routes, one `ApiRoute` per entry
        of `APIS` at its path, are answered before
        Starlette's middleware and router (they are what a gateway serves at load; the
        rest is Starlette's, which also answers their other methods: 405).
        """
        scheduled = {spec.path: ApiRoute(self, spec) for spec in APIS.values()}
        raw = [Route(path, _Raw(route), methods=["POST"]) for path, route in
               scheduled.items()]  # fmt: skip
        app = Starlette(
            routes=[
                *raw,
                Route("/v1/models", self.models, methods=["GET"]),
                Route("/healthz", self.healthz, methods=["GET"]),
                Route("/readyz", self.readyz, methods=["GET"]),
                Route("/metrics", self.metrics, methods=["GET"]),
                Route("/semisched/status", self.status, methods=["GET"]),
            ],
            exception_handlers=EXCEPTION_HANDLERS,  # 404, 405, 500 in OpenAI's shape
            lifespan=self.lifespan,
        )
        # A trailing slash is a 404, never a redirect to a URL built from the Host header.
        app.router.redirect_slashes = False
        return _Front(app, scheduled)

    # -- the scheduled routes' shared parts (`semisched.gateway.routes`) ------------

    def count(self, route: str, response: Response) -> Response:
        """Count an answer of ``route`` (``semisched_gateway_responses_total``)."""
        self._answers.labels(route, str(response.status_code)).inc()
        return response

    def tenant(self, authorization: str | None) -> str | None:
        """The caller's tenant (``""``: the default one), ``None``: no valid key."""
        if not self.config.auth:
            return self.config.default_tenant()
        return self.keys.tenant_for(bearer_key(authorization))

    def drain_s(self) -> float:
        """The scheduler's estimate of how long its queue takes to drain (its queue
        pressure, in seconds: ``SignalsConfig.queue_ref_s`` at full pressure)."""
        assert self.scheduler is not None
        pressure = self.scheduler.statistics().engine.signals.queue_pressure
        return pressure * self.scheduler.config.signals.queue_ref_s

    def stream_cancelled(self) -> None:
        """A stream the client's disconnect (or a drain) cut."""
        self.cancelled["in_flight"] += 1

    # -- the other routes ----------------------------------------------------------------

    async def models(self, request: Request) -> Response:
        """``GET /v1/models``: the configured models, the model maps' names, else the
        upstreams' own lists."""
        if self.config.auth and self.tenant(request.headers.get("authorization")) is None:
            return unauthorized()
        names = list(self.config.models)
        for d in self.config.fleet.endpoints:
            names += [m for m in (d.model_map or {}) if m not in names]
        data: list[dict[str, Any]] = [
            {"id": n, "object": "model", "created": 0, "owned_by": "semisched"} for n in names
        ]
        if not data:
            seen: set[str] = set()
            for client in self.clients.values():
                for model in await client.models():
                    if model.get("id") not in seen:
                        seen.add(str(model.get("id")))
                        data.append(model)
        return JSONResponse({"object": "list", "data": data})

    async def healthz(self, request: Request) -> Response:
        """``GET /healthz``: 200 while the process serves; 503 if its scheduler stopped
        (a restart is the cure)."""
        if self.failed or (self.scheduler is not None and not self.scheduler.alive):
            return JSONResponse({"status": "failed", "reason": "the scheduler stopped"}, 503)
        return JSONResponse({"status": "draining" if self.draining else "ok"})

    async def readyz(self, request: Request) -> Response:
        """``GET /readyz``: 200 when every upstream answers, the shared state is joined and
        some endpoint can take a request (each endpoint's health is in the body)."""
        if self.scheduler is None or self.draining:
            return JSONResponse({"ready": False, "reason": "shutting down"}, 503)
        upstreams = {name: await c.reachable() for name, c in self.clients.items()}
        stats = self.scheduler.statistics()
        state = stats.state
        shared = state is None or "fallback" not in state.backend
        threshold = self.scheduler.config.routing.failure_threshold
        usable, endpoints = fleet_health(stats, threshold)  # some endpoint takes work now
        ready = shared and all(upstreams.values()) and usable
        body = {"ready": ready, "upstreams": upstreams, "endpoints": endpoints,
                "state": "local" if state is None else state.backend}  # fmt: skip
        return JSONResponse(body, 200 if ready else 503)

    async def metrics(self, request: Request) -> Response:
        """``GET /metrics``: Prometheus text."""
        return Response(generate_latest(self.registry), media_type=CONTENT_TYPE_LATEST)

    async def status(self, request: Request) -> Response:
        """``GET /semisched/status``: `semisched.gateway.status.status_document`."""
        if self.scheduler is None:
            return JSONResponse({"serving": False}, 503)
        resent = {name: client.resent for name, client in self.clients.items()}
        document = status_document(self.scheduler.statistics(), self.tracker.table(),
                                   draining=self.draining, cancelled=self.cancelled,
                                   resent=resent)  # fmt: skip
        return JSONResponse(document)


def upstream_keys(
    config: GatewayConfig, environ: Mapping[str, str] | None = None
) -> dict[str, str | None]:
    """Each endpoint's upstream key from its ``key_env`` variable (``None``: it names none).

    Raises:
        GatewayConfigError: A named variable is unset or empty; every one is named,
            never a value.
    """
    env = os.environ if environ is None else environ
    missing = [f"endpoint {d.name!r}: the API key variable {d.key_env} is not set"
               for d in config.fleet.endpoints if d.key_env and not env.get(d.key_env)]  # fmt: skip
    if missing:
        raise GatewayConfigError("; ".join(missing))
    return {d.name: env[d.key_env] if d.key_env else None for d in config.fleet.endpoints}


class _Raw:
    """A raw ASGI endpoint for Starlette's router (which wraps functions, not objects)."""

    def __init__(self, endpoint: ASGIApp) -> None:
        self.endpoint = endpoint

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await self.endpoint(scope, receive, send)


class _Front:
    """The scheduled routes' POSTs straight to their endpoint, everything else to Starlette."""

    def __init__(self, app: Starlette, routes: Mapping[str, ASGIApp]) -> None:
        self.app = app
        self.routes = dict(routes)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["method"] == "POST":
            endpoint = self.routes.get(scope["path"])
            if endpoint is not None:
                await endpoint(scope, receive, send)
                return
        await self.app(scope, receive, send)
