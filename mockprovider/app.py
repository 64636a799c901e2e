"""The OpenAI-compatible HTTP face of the congestion-aware mock provider (an ASGI app).

``create_app(MockConfig(...))`` returns a Starlette app serving ``POST /v1/chat/completions``
(JSON or SSE), ``POST /v1/completions`` (JSON or SSE), ``POST /v1/responses`` (the Responses
API: JSON or its typed SSE events), ``POST /v1/embeddings`` (JSON; prefill only),
``GET /v1/models``, ``GET /v1/models/{model}``, ``GET /v1/mock/stats`` and ``GET /metrics``
(Prometheus). The four ``POST`` routes share the gate, the physics, the faults and the
counters; only their bodies differ. The Files API (``/v1/files``: ``mockprovider.files``) and
the Batch API (``/v1/batches``: ``mockprovider.batches``) answer batches of the same bodies
on the virtual clock, outside the gate and the physics. It is a thin shell: every decision is
made elsewhere.

* ``mockprovider.provider``: the handlers behind the routes (one per app): each request
  through auth, parsing, the gate and the faults to its answer; models and stats.
* ``mockprovider.wire``: request parsing, hints, output-length rules, bodies and SSE.
* ``mockprovider.completions``: what the chat and legacy completions requests read.
* ``mockprovider.apis``: each API's request and answer (Responses and Embeddings there).
* ``mockprovider.errors``: what a refusal says (OpenAI's bodies, vLLM's context-window 400).
* ``mockprovider.gate``: outage windows, quota, rate windows and the seeded fault draw.
* ``mockprovider.driver``: the physics (continuous batching, hidden FIFO) run against the
  app's clock, without a background task (no ASGI lifespan needed, so the app works unchanged
  under ``httpx2.ASGITransport``).
* ``mockprovider.responses``: served, hung and dropped answers; physics timeouts.
* ``mockprovider.stats``: what ``GET /v1/mock/stats`` reports.
* ``mockprovider.auth``: the API-key check of every route.
* ``mockprovider.prefix_cache``: the cached prompt tokens the answers' usage reports.
* ``mockprovider.metrics``: what ``GET /metrics`` reports (Prometheus text format).

Time. ``create_app(config, clock=...)`` takes a clock of wall seconds (``time.monotonic`` by
default, as ``python -m mockprovider`` uses); virtual seconds are
``(clock() - origin) * time_scale``, from the app's first request (from the fleet's first
request when apps share a ``ClockOrigin``). The app waits only through
anyio, so under trio's ``MockClock(autojump_threshold=0)``, ``clock=anyio.current_time`` runs the
whole mock in virtual time. One app instance belongs to one event loop.

Check order, and faults as a client sees them (error, hang, drop, capacity loss, outage
windows): ``mockprovider.provider``, the handlers behind the routes.

Several apps make a fleet on one port: ``mockprovider.fleet.create_fleet_app`` mounts one app
per endpoint under ``/NAME``, all sharing one clock origin (``create_app(origin=...)``).

``GET /v1/mock/stats`` (``dataclasses.asdict`` of `MockStats`)
needs the API key too when one is configured; ``app.state.mock_stats()`` returns the
dataclass itself.
"""

from __future__ import annotations

import math
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Final

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from mockprovider.batch_state import BatchSettings
from mockprovider.driver import ClockOrigin
from mockprovider.faults import WindowKind
from mockprovider.gate import GateConfig
from mockprovider.metrics import StatusCounter, metrics_endpoint, metrics_registry
from mockprovider.physics import PROFILES, PhysicsParams
from mockprovider.provider import Provider, _error
from mockprovider.responses import ConnectionDropped
from mockprovider.wire import DEFAULT_CONTEXT_TOKENS, Api

__all__ = ["ConnectionDropped", "MockConfig", "create_app"]

_MAX_BODY_BYTES: Final = 32 * 1024 * 1024
_ROUTES: Final[dict[str, Api]] = {
    "/v1/chat/completions": "chat.completions",
    "/v1/completions": "completions",
    "/v1/responses": "responses",
    "/v1/embeddings": "embeddings",
}


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


@dataclass(frozen=True, slots=True, kw_only=True)
class MockConfig:
    """Settings of one mock provider.

    Attributes:
        physics: Provider constants (slots, iteration cost, overhead, timeout).
        time_scale: Virtual seconds per wall second (100: a hundred times faster than real).
        rpm: Requests per (virtual) minute, or ``None``.
        tpm: Tokens per (virtual) minute, or ``None``; charge = prompt + max_tokens
            (``max_output_tokens`` on ``/v1/responses``; the output length when no cap is
            given); an embeddings request is charged its input tokens.
        rate_window: ``"sliding"`` or ``"fixed"`` 60 s windows.
        quota_tokens: Billed tokens (prompt + completion of completed requests) after which
            every request gets 429 ``insufficient_quota``; ``None`` for no quota.
        api_key: When set, ``Authorization: Bearer <key>`` is required (never shown in repr).
        error_rate: Fraction of admitted requests answered 500/503 at once.
        hang_rate: Fraction of admitted requests never answered.
        drop_rate: Fraction of admitted requests whose connection drops mid-response.
        capacity_loss: ``(t, f)``: at virtual time ``t`` keep fraction ``f`` of the slots.
        outages: Windows ``(start, end)`` of virtual seconds (``0 <= start < end``) during
            which the endpoint is down: new requests get 503 at once; requests already being
            served finish normally.
        seed: Seed of the fault draws.
        default_output_tokens: Output length when neither a hint nor max tokens is given.
        model: The model id listed by ``/v1/models`` (requests may name any model).
        context_tokens: The model's context window, prompt plus output tokens: a prompt
            that fills it, or a max tokens that does not fit beside the prompt, gets
            vLLM's 400 (``mockprovider.errors``). Default 131,072.
        batch_turnaround_s: Median virtual seconds from a batch's creation to its end.
        batch_turnaround_sigma: Lognormal spread of a batch's turnaround (0: the median).
        batch_failure_rate: Fraction of batch lines answered 500 in the error file.
        batch_expiry_rate: Fraction of batches that expire at the completion window's end.
        batch_window_s: The batches' completion window (``"24h"``) in virtual seconds.
            The ``batch_*`` settings are ``mockprovider.batch_state``'s.
    """

    physics: PhysicsParams = PROFILES["default"]
    time_scale: float = 1.0
    rpm: int | None = None
    tpm: int | None = None
    rate_window: WindowKind = "sliding"
    quota_tokens: int | None = None
    api_key: str | None = field(default=None, repr=False)
    error_rate: float = 0.0
    hang_rate: float = 0.0
    drop_rate: float = 0.0
    capacity_loss: tuple[float, float] | None = None
    outages: tuple[tuple[float, float], ...] = ()
    seed: int = 0
    default_output_tokens: int = 128
    model: str = "mock-1"
    context_tokens: int = DEFAULT_CONTEXT_TOKENS
    batch_turnaround_s: float = 3600.0
    batch_turnaround_sigma: float = 0.5
    batch_failure_rate: float = 0.0
    batch_expiry_rate: float = 0.0
    batch_window_s: float = 86_400.0

    def __post_init__(self) -> None:
        if not isinstance(self.physics, PhysicsParams):
            raise ValueError(f"physics={self.physics!r} must be a PhysicsParams")
        ts = self.time_scale
        if isinstance(ts, bool) or not isinstance(ts, int | float) or not math.isfinite(ts):
            raise ValueError(f"time_scale={ts!r} must be a finite number > 0")
        if ts <= 0:
            raise ValueError(f"time_scale={ts!r} must be a finite number > 0")
        self.gate_config()  # validates rpm, tpm, quota_tokens, rate_window, rates, seed, outages
        if self.api_key is not None and (not isinstance(self.api_key, str) or not self.api_key):
            raise ValueError("api_key must be a non-empty string or None")
        if self.capacity_loss is not None:
            loss = self.capacity_loss
            if not isinstance(loss, tuple) or len(loss) != 2:
                raise ValueError(f"capacity_loss={loss!r} must be a (time, fraction) pair")
            t, f = loss
            nums = all(not isinstance(v, bool) and isinstance(v, int | float) for v in loss)
            if not nums or not math.isfinite(t) or t < 0 or not 0 <= f <= 1:
                raise ValueError(f"capacity_loss={loss!r} must be (time >= 0, fraction in [0, 1])")
        if not _is_int(self.default_output_tokens) or self.default_output_tokens < 0:
            raise ValueError(
                f"default_output_tokens={self.default_output_tokens!r} must be an integer >= 0"
            )
        if not isinstance(self.model, str) or not self.model:
            raise ValueError(f"model={self.model!r} must be a non-empty string")
        if not _is_int(self.context_tokens) or self.context_tokens < 1:
            raise ValueError(f"context_tokens={self.context_tokens!r} must be an integer >= 1")
        BatchSettings.of(self)  # validates the batch_* fields

    def gate_config(self) -> GateConfig:
        """What the provider enforces at its door (60 s windows), for ``ProviderGate``.

        Raises:
            ValueError: A gate field is invalid (the message names it).
        """
        return GateConfig(
            rpm=self.rpm,
            tpm=self.tpm,
            window_s=60.0,
            rate_window=self.rate_window,
            quota_tokens=self.quota_tokens,
            error_rate=self.error_rate,
            hang_rate=self.hang_rate,
            drop_rate=self.drop_rate,
            seed=self.seed,
            outages=self.outages,
        )


def _http_error(request: Request, exc: Exception) -> Response:
    status = exc.status_code if isinstance(exc, HTTPException) else 500
    detail = exc.detail if isinstance(exc, HTTPException) else "Internal error"
    headers = exc.headers if isinstance(exc, HTTPException) else None
    code = {404: "not_found", 405: "method_not_allowed", 413: "request_too_large"}.get(status)
    return _error(status, detail, "invalid_request_error", None, code, headers=headers)


def create_app(
    config: MockConfig | None = None,
    *,
    clock: Callable[[], float] | None = None,
    origin: ClockOrigin | None = None,
) -> Starlette:
    """Build the ASGI app for ``config`` (default: ``MockConfig()``).

    Args:
        config: The provider's settings.
        clock: Wall seconds, monotonic (default ``time.monotonic``). Virtual time is
            ``(clock() - origin) * time_scale`` from the first request. Pass
            ``anyio.current_time`` under trio's ``MockClock`` to run in virtual time; the
            clock must advance with anyio's sleeps.
        origin: Where virtual time 0 lies, shared with other apps on the same ``clock`` so
            that their virtual times agree (a fleet: ``mockprovider.fleet``). Default: a
            fresh one, fixed at this app's first request.

    ``app.state.mock_stats()`` returns the `MockStats` that
    ``GET /v1/mock/stats`` serves as JSON (``MockStats.from_json`` reads it back).
    ``GET /metrics`` serves ``app.state.metrics_registry`` (the app's own
    ``prometheus_client.CollectorRegistry``; `mockprovider.metrics`), read from
    ``app.state.metrics_snapshot()``.
    """
    provider = Provider(
        MockConfig() if config is None else config,
        time.monotonic if clock is None else clock,
        origin,
    )
    handler: Callable[[Request, Exception], Response | Awaitable[Response]] = _http_error
    registry = metrics_registry([(None, provider.metrics_snapshot)])
    counted = [Middleware(StatusCounter, provider.traffic)]
    app = Starlette(
        routes=[
            *(
                Route(path, provider.endpoint(api), methods=["POST"], middleware=counted)
                for path, api in _ROUTES.items()
            ),
            Route("/v1/models", provider.models, methods=["GET"]),
            Route("/v1/models/{model:path}", provider.model, methods=["GET"]),
            Route("/v1/mock/stats", provider.stats_endpoint, methods=["GET"]),
            Route("/metrics", metrics_endpoint(registry), methods=["GET"]),
            *provider.batches.routes(provider.auth),  # the Files and Batch APIs
        ],
        exception_handlers={HTTPException: handler},
        max_body_size=_MAX_BODY_BYTES,
    )
    app.state.mock_stats = provider.stats
    app.state.metrics_snapshot = provider.metrics_snapshot
    app.state.metrics_registry = registry
    return app
