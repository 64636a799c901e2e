"""The handlers of one mock app: each request through its checks to its answer.

What it is: `Provider`, the object behind the routes of ``mockprovider.app.create_app``. It
owns one app's gate, physics driver, prefix cache, counters and Batch API, and answers
``POST`` on the four APIs (auth, parsing, the gate's decision, then a refusal, an injected
fault or a served answer), ``GET /v1/models``, ``GET /v1/models/{model}`` and
``GET /v1/mock/stats``, and takes the snapshots ``GET /metrics`` reports. Every decision is
made in the modules it calls (``mockprovider.app``'s docstring lists them); the routes, the
settings (`MockConfig`) and the exception handler are ``mockprovider.app``'s. Split from it
along that seam: the app wires the routes, this module answers them.

Check order: auth (401), body (400; a request beyond the context window gets vLLM's 400),
outage window (503), quota (429 ``insufficient_quota``, no retry-after), rate windows (429
``rate_limit_exceeded``), fault draw. A request whose token
charge exceeds the token limit can never fit: 429 without ``retry-after``. Rate windows run in
virtual time; all time-valued headers (``retry-after``, ``retry-after-ms``,
``x-ratelimit-reset-*``) are in *real* wall time, i.e. the virtual wait divided by
``time_scale``. An admitted request gets the ``x-ratelimit-*`` headers and an ``x-request-id``.

Faults as a client sees them: error: 500 and 503 alternately, OpenAI ``server_error`` body; no
physics slot is used. Hang and drop: see ``mockprovider.responses``. Capacity loss: see
``mockprovider.driver``. Outage windows (``MockConfig.outages``, virtual seconds like the
capacity loss): the endpoint is down, so *new requests are refused* with 503 ``server_error``
("... down (mock outage window) ...", no ``retry-after``: a client cannot know when it ends),
counted as ``unavailable``; requests admitted before the window starts finish normally. An
outage charges no rate window and draws no fault (``mockprovider.gate``).
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import asdict
from typing import TYPE_CHECKING, Any, Final

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from mockprovider.apis import parse_request
from mockprovider.auth import BearerAuth
from mockprovider.batches import BatchService
from mockprovider.driver import ClockOrigin, PhysicsDriver
from mockprovider.errors import (
    error_body,
    quota_message,
    rate_limit_message,
    too_large_message,
    unavailable_message,
)
from mockprovider.faults import Fault, WindowState, rate_limit_headers
from mockprovider.gate import GateDecision, GateVerdict, ProviderGate
from mockprovider.metrics import MetricsSnapshot, Traffic
from mockprovider.prefix_cache import PrefixCache
from mockprovider.responses import Answer, HangResponse, ServedResponse
from mockprovider.stats import CounterName, MockStats, Tally
from mockprovider.wire import Api, BadRequest, Job

if TYPE_CHECKING:
    from mockprovider.app import MockConfig

__all__ = ["Provider"]

_ID_PREFIXES: Final[dict[str, str]] = {
    "chat.completions": "chatcmpl",
    "completions": "cmpl",
    "embeddings": "embd",
}


def _error(
    status: int,
    message: str,
    type_: str,
    param: str | None = None,
    code: str | int | None = None,
    headers: Mapping[str, str] | None = None,
) -> JSONResponse:
    return JSONResponse(error_body(message, type_, param, code), status, headers=headers)


class Provider:
    """The handlers of one app: gate, physics driver, counters (see the module docstring)."""

    def __init__(
        self, config: MockConfig, clock: Callable[[], float], origin: ClockOrigin | None
    ) -> None:
        self.config = config
        self.driver = PhysicsDriver(
            config.physics,
            time_scale=config.time_scale,
            clock=clock,
            capacity_loss=config.capacity_loss,
            origin=origin,
        )
        self.gate = ProviderGate(config.gate_config())
        self.tally = Tally()
        self.traffic = Traffic()
        self._ids = 0
        self._request_ids = 0
        self.auth = BearerAuth(config.api_key, lambda: self.count("unauthorized"))
        self.cache = PrefixCache()
        self.batches = BatchService(
            config, now=self.driver.now, cache=self.cache, new_id=self.new_id
        )

    def __repr__(self) -> str:
        return f"<MockProvider {self.driver!r} {self.gate!r} {self.tally!r}>"

    def count(self, name: CounterName) -> None:
        """Count one more ``name``."""
        self.tally.add(name)

    def new_id(self, job: Job) -> str:
        """A fresh answer id (``chatcmpl-...``, ``cmpl-...``, ``resp_<hex>``, ``embd-...``)."""
        self._ids += 1
        if job.api == "responses":
            return f"resp_{uuid.uuid4().hex}"
        return f"{_ID_PREFIXES[job.api]}-mock{self._ids:08d}"

    def completed(self, job: Job) -> None:
        """Count a completed request and bill its tokens to the quota."""
        self.count("completed")
        self.traffic.tokens(job.input_tokens, job.output_tokens)
        self.gate.bill(job.input_tokens + job.output_tokens)

    def _rate_headers(
        self,
        requests: WindowState | None,
        tokens: WindowState | None,
        retry_after_s: float | None = None,
    ) -> dict[str, str]:
        return rate_limit_headers(
            requests, tokens, time_scale=self.config.time_scale, retry_after_s=retry_after_s
        )

    def endpoint(self, api: Api) -> Callable[[Request], Awaitable[Response]]:
        """The handler of ``POST`` requests to ``api``."""

        async def serve(request: Request) -> Response:
            return await self._serve(request, api)

        return serve

    async def _serve(self, request: Request, api: Api) -> Response:
        self.tally.received(api)
        denied = self.auth.check(request.headers)
        if denied is not None:
            return denied
        try:
            job, answer = parse_request(
                api,
                request.headers,
                await request.body(),
                default_output=self.config.default_output_tokens,
                context_tokens=self.config.context_tokens,
                cache=self.cache,
            )
        except BadRequest as exc:
            self.count("bad_requests")
            return _error(400, exc.message, exc.type, exc.param, exc.code)
        now = self.driver.tick()
        decision = self.gate.admit(now, job.charge, forced=job.forced_fault)
        if decision.verdict is GateVerdict.ADMITTED:
            return self._admitted(decision, job, answer)
        return self._refused(decision, job, now)

    def _refused(self, decision: GateDecision, job: Job, now: float) -> Response:
        if decision.verdict is GateVerdict.UNAVAILABLE:
            self.count("unavailable")
            return _error(503, unavailable_message(), "server_error")
        if decision.verdict is GateVerdict.QUOTA_EXHAUSTED:
            self.count("insufficient_quota")
            headers = self._rate_headers(*self.gate.limiter.states(now))
            return _error(
                429, quota_message(), "insufficient_quota", None, "insufficient_quota", headers
            )
        rate = decision.rate
        assert rate is not None  # the windows refused it, so they decided
        kind = rate.kind or "requests"
        self.count("rate_limited_requests" if kind == "requests" else "rate_limited_tokens")
        headers = self._rate_headers(rate.requests, rate.tokens, decision.retry_after_s)
        if decision.verdict is GateVerdict.TOO_LARGE:
            limit = rate.tokens.limit if rate.tokens else 0
            message = too_large_message(job.model, limit, job.charge)
        else:
            window = rate.requests if kind == "requests" else rate.tokens
            message = rate_limit_message(
                job.model, kind, window, job.charge, headers["retry-after-ms"]
            )
        return _error(429, message, kind, None, "rate_limit_exceeded", headers=headers)

    def _admitted(self, decision: GateDecision, job: Job, answer: Answer) -> Response:
        rate = decision.rate
        headers = {} if rate is None else self._rate_headers(rate.requests, rate.tokens)
        self._request_ids += 1
        headers["x-request-id"] = f"req_mock{self._request_ids:08d}"
        if decision.fault is Fault.ERROR:
            self.count("faults_error")
            return _error(
                self.gate.error_status(),
                "The server had an error while processing your request. Sorry about that!",
                "server_error",
                headers=headers,
            )
        if decision.fault is Fault.HANG:
            self.count("faults_hang")
            return HangResponse()
        self.cache.remember(job.prompt_text)  # served: its prompt is in the cache from now on
        return ServedResponse(self, job, answer, headers, drop=decision.fault is Fault.DROP)

    async def models(self, request: Request) -> Response:
        denied = self.auth.check(request.headers)
        if denied is not None:
            return denied
        return JSONResponse({"object": "list", "data": [self._model_object()]})

    async def model(self, request: Request) -> Response:
        denied = self.auth.check(request.headers)
        if denied is not None:
            return denied
        name = request.path_params["model"]
        if name != self.config.model:
            return _error(
                404,
                f"The model '{name}' does not exist.",
                "invalid_request_error",
                "model",
                "model_not_found",
            )
        return JSONResponse(self._model_object())

    def _model_object(self) -> dict[str, Any]:
        return {"id": self.config.model, "object": "model", "created": 0, "owned_by": "mock"}

    async def stats_endpoint(self, request: Request) -> Response:
        denied = self.auth.check(request.headers)
        if denied is not None:
            return denied
        return JSONResponse(asdict(self.stats()))

    def stats(self) -> MockStats:
        """Physics statistics, counters, window and quota state at the current virtual time."""
        now = self.driver.tick()
        requests, tokens = self.gate.limiter.states(now)
        return MockStats(
            virtual_time=now,
            time_scale=float(self.config.time_scale),
            physics=self.driver.physics.statistics(),
            counters=self.tally.snapshot(),
            requests_window=requests,
            tokens_window=tokens,
            quota_limit=self.gate.quota.limit,
            quota_used=self.gate.quota.used,
            capacity_loss_applied_at=self.driver.capacity_applied_at,
            requests_by_api=self.tally.apis(),
            batches=self.batches.stats(),
        )

    def metrics_snapshot(self) -> MetricsSnapshot:
        """What ``GET /metrics`` reports now (a scrape never starts the virtual clock)."""
        now = self.driver.tick() if self.driver.started else 0.0
        traffic = self.traffic
        return MetricsSnapshot(
            statuses=dict(traffic.statuses),
            counters=self.tally.snapshot(),
            prompt_tokens=traffic.prompt_tokens,
            output_tokens=traffic.output_tokens,
            physics=self.driver.physics.statistics(),
            virtual_time=now,
        )
