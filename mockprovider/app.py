"""The OpenAI-compatible HTTP face of the congestion-aware mock provider (an ASGI app).

``create_app(MockConfig(...))`` returns a Starlette app serving ``POST /v1/chat/completions``
(JSON or SSE), ``POST /v1/completions``, ``GET /v1/models`` and ``GET /v1/mock/stats``. Every
answered request is timed by ``mockprovider.physics`` (continuous batching, hidden FIFO), in
real time compressed by ``time_scale``: virtual seconds = wall seconds since the app's first
request x ``time_scale``.

The demand-driven clock. There is no background task (ASGI lifespan is not needed, so the app
works unchanged under ``httpx2.ASGITransport``, which does not run lifespan). Handlers waiting
for a physics event share one clock: the first waiter to find no *driver* becomes the driver;
it computes ``physics.next_event_time()``, sleeps until then (in wall time, divided by
``time_scale``) or until a state change (submit, cancel, an event delivered to it) sets the
``changed`` event, then calls ``physics.advance(now)`` and hands each event to its request's
waiter. Every other waiter sleeps on its own event. When the driver's own event arrives (or it
is cancelled) it steps down and wakes one sleeper, which takes over. A request that is cancelled
or whose client disconnects is ``physics.cancel``-ed in a ``finally``, so no slot ever leaks.
One app instance belongs to one event loop.

``GET /v1/mock/stats`` (physics statistics, counters, limiter and quota state, the virtual time)
needs the API key too when one is configured.

Per-request hints (headers, for benchmarks and tests): ``x-mock-output-tokens`` (output length),
``x-mock-input-tokens`` (prompt length) and ``x-mock-fault`` (``none|error|hang|drop``: force
that fault for this request; the seeded fault draw is consumed anyway). Requests that cannot set
headers (a Batch API file) may hint the output length in the body instead:
``"metadata": {"mock_output_tokens": "250"}`` (the header wins when both are given).

Output length: the ``x-mock-output-tokens`` hint, else ``max_completion_tokens``/``max_tokens``,
else ``default_output_tokens``; always capped by the max tokens when given. ``finish_reason`` is
``"length"`` when that cap cut the wanted length, else ``"stop"``. Prompt tokens: the hint, else
UTF-8 bytes of the prompt text / 4 (rounded up, at least 1). The content is filler words, one
word per token. ``n`` other than 1 is refused; a list ``prompt`` counts as one prompt.

Faults as a client sees them:

* error: 500 and 503 alternately, OpenAI ``server_error`` body; no physics slot is used.
* hang: no answer, no physics slot; the handler waits for the client to disconnect (uvicorn) or
  to cancel its call (``ASGITransport`` runs the app inside the caller's task, so cancelling the
  call cancels the handler). ``ASGITransport`` enforces no timeouts: only cancellation ends it.
* drop: the request is served by the physics; at completion (JSON) or at the first token (SSE)
  the app sends the status line, headers and part of the body, then raises ``ConnectionDropped``.
  Under uvicorn the server closes the socket: the client reads an incomplete body, httpx2
  raises ``RemoteProtocolError`` and openai raises ``APIConnectionError``. Under
  ``ASGITransport`` the exception itself propagates into the client call; ``ConnectionDropped``
  subclasses ``httpx2.RemoteProtocolError`` so that openai maps it to the same
  ``APIConnectionError`` (openai only wraps httpx2 request errors, not arbitrary exceptions).
* capacity loss ``(t, f)``: when the virtual clock first passes ``t`` the physics keeps
  ``max(1, round(slots * f))`` slots (applied at ``t``, or at the physics' last time if later).
* physics timeout (``PhysicsParams.timeout_s``): 504 ``server_error``/``timeout`` before the
  first byte; mid-stream, an SSE ``data: {"error": ...}`` event, which openai raises as
  ``APIError``.

Rate limits and quota (``mockprovider.faults``): windows run in virtual time; all time-valued
headers (``retry-after``, ``retry-after-ms``, ``x-ratelimit-reset-*``) are in *real* wall time,
i.e. the virtual wait divided by ``time_scale``. Check order: auth (401), body (400), quota
(429 ``insufficient_quota``, no retry-after), rate windows (429 ``rate_limit_exceeded``), fault
draw. A request whose token charge exceeds the token limit can never fit: 429 without
``retry-after``.
"""

from __future__ import annotations

import hmac
import json
import math
import time
from collections import deque
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any, Final, Literal

import anyio
import anyio.lowlevel
import httpx2
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from starlette.types import Receive, Scope, Send

from mockprovider.faults import (
    Fault,
    FaultInjector,
    QuotaMeter,
    RateLimiter,
    WindowKind,
    WindowState,
    capacity_slots,
    rate_limit_headers,
)
from mockprovider.physics import PROFILES, EventKind, PhysicsParams, ProviderEvent, ProviderPhysics

__all__ = ["ConnectionDropped", "MockConfig", "create_app"]

_WORDS: Final = (
    *("lorem", "ipsum", "dolor", "sit", "amet", "consectetur", "adipiscing", "elit", "sed"),
    *("do", "eiusmod", "tempor", "incididunt", "ut", "labore", "et", "dolore", "magna", "aliqua"),
)
_STREAM_CONTENT_CHUNKS: Final = 4  # content chunks after the first one
_MAX_BODY_BYTES: Final = 32 * 1024 * 1024
_WAKE_EPS_S: Final = 1e-6  # wall seconds: an event this close is treated as due


class ConnectionDropped(httpx2.RemoteProtocolError):
    """Raised by the app to drop a connection mid-response (see the module docstring)."""


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


@dataclass(frozen=True, slots=True, kw_only=True)
class MockConfig:
    """Settings of one mock provider.

    Attributes:
        physics: Provider constants (slots, iteration cost, overhead, timeout).
        time_scale: Virtual seconds per wall second (100: a hundred times faster than real).
        rpm: Requests per (virtual) minute, or ``None``.
        tpm: Tokens per (virtual) minute, or ``None``; charge = prompt + max_tokens (or the
            output length when ``max_tokens`` is absent).
        rate_window: ``"sliding"`` or ``"fixed"`` 60 s windows.
        quota_tokens: Billed tokens (prompt + completion of completed requests) after which
            every request gets 429 ``insufficient_quota``; ``None`` for no quota.
        api_key: When set, ``Authorization: Bearer <key>`` is required (never shown in repr).
        error_rate: Fraction of admitted requests answered 500/503 at once.
        hang_rate: Fraction of admitted requests never answered.
        drop_rate: Fraction of admitted requests whose connection drops mid-response.
        capacity_loss: ``(t, f)``: at virtual time ``t`` keep fraction ``f`` of the slots.
        seed: Seed of the fault draws.
        default_output_tokens: Output length when neither a hint nor max tokens is given.
        model: The model id listed by ``/v1/models`` (requests may name any model).
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
    seed: int = 0
    default_output_tokens: int = 128
    model: str = "mock-1"

    def __post_init__(self) -> None:
        if not isinstance(self.physics, PhysicsParams):
            raise ValueError(f"physics={self.physics!r} must be a PhysicsParams")
        ts = self.time_scale
        if isinstance(ts, bool) or not isinstance(ts, int | float) or not math.isfinite(ts):
            raise ValueError(f"time_scale={ts!r} must be a finite number > 0")
        if ts <= 0:
            raise ValueError(f"time_scale={ts!r} must be a finite number > 0")
        for name in ("rpm", "tpm", "quota_tokens"):
            value = getattr(self, name)
            if value is not None and (not _is_int(value) or value < 1):
                raise ValueError(f"{name}={value!r} must be an integer >= 1 or None")
        if self.rate_window not in ("sliding", "fixed"):
            raise ValueError(f"rate_window={self.rate_window!r} must be 'sliding' or 'fixed'")
        if self.api_key is not None and (not isinstance(self.api_key, str) or not self.api_key):
            raise ValueError("api_key must be a non-empty string or None")
        rates = ("error_rate", "hang_rate", "drop_rate")
        for name in rates:
            value = getattr(self, name)
            ok = not isinstance(value, bool) and isinstance(value, int | float)
            if not ok or not 0 <= value <= 1:
                raise ValueError(f"{name}={value!r} must be a number in [0, 1]")
        if sum(getattr(self, name) for name in rates) > 1 + 1e-12:
            raise ValueError("error_rate + hang_rate + drop_rate must not exceed 1")
        if self.capacity_loss is not None:
            loss = self.capacity_loss
            if not isinstance(loss, tuple) or len(loss) != 2:
                raise ValueError(f"capacity_loss={loss!r} must be a (time, fraction) pair")
            t, f = loss
            nums = all(not isinstance(v, bool) and isinstance(v, int | float) for v in loss)
            if not nums or not math.isfinite(t) or t < 0 or not 0 <= f <= 1:
                raise ValueError(f"capacity_loss={loss!r} must be (time >= 0, fraction in [0, 1])")
        if not _is_int(self.seed):
            raise ValueError(f"seed={self.seed!r} must be an integer")
        if not _is_int(self.default_output_tokens) or self.default_output_tokens < 0:
            raise ValueError(
                f"default_output_tokens={self.default_output_tokens!r} must be an integer >= 0"
            )
        if not isinstance(self.model, str) or not self.model:
            raise ValueError(f"model={self.model!r} must be a non-empty string")


# -- the demand-driven clock ---------------------------------------------------------------


class _Flight:
    """One request inside the physics, as seen by its handler."""

    __slots__ = ("events", "request_id", "terminal", "wake")

    def __init__(self, request_id: str) -> None:
        self.request_id = request_id
        self.events: deque[ProviderEvent] = deque()
        self.terminal = False
        self.wake: anyio.Event | None = None


class _Engine:
    """Physics + scaled clock + event delivery (see the module docstring)."""

    def __init__(self, config: MockConfig) -> None:
        self.physics = ProviderPhysics(config.physics)
        self._scale = float(config.time_scale)
        self._t0: float | None = None
        self._flights: dict[str, _Flight] = {}
        self._driver: _Flight | None = None
        self._sleepers: dict[str, _Flight] = {}
        self._changed: anyio.Event | None = None
        self._seq = 0
        self._capacity: tuple[float, int] | None = None
        if config.capacity_loss is not None:
            t, f = config.capacity_loss
            self._capacity = (float(t), capacity_slots(config.physics.slots, f))
        self.capacity_applied_at: float | None = None

    def now(self) -> float:
        """Virtual now: wall seconds since the first call x time_scale (never decreasing)."""
        wall = anyio.current_time()
        if self._t0 is None:
            self._t0 = wall
        return max((wall - self._t0) * self._scale, self.physics.now)

    def tick(self, now: float | None = None) -> float:
        """Bring the physics to ``now`` (default: the clock) and deliver due events."""
        if now is None:
            now = self.now()
        if self._capacity is not None and now >= self._capacity[0]:
            at = max(self._capacity[0], self.physics.now)
            self._deliver(self.physics.advance(at))
            self.physics.set_slots(at, self._capacity[1])
            self._capacity = None
            self.capacity_applied_at = at
            self._poke()
        self._deliver(self.physics.advance(now))
        return now

    def submit(self, input_tokens: int, output_tokens: int) -> _Flight:
        now = self.tick()
        flight = _Flight(f"r{self._seq}")
        self._seq += 1
        self.physics.submit(now, flight.request_id, input_tokens, output_tokens)
        self._flights[flight.request_id] = flight
        self._poke()
        return flight

    def release(self, flight: _Flight) -> bool:
        """Forget ``flight``; cancel it in the physics unless it ended. True if cancelled."""
        if flight.terminal:
            self._flights.pop(flight.request_id, None)
            return False
        now = self.tick()
        self._flights.pop(flight.request_id, None)
        if flight.terminal:
            return False
        cancelled = self.physics.cancel(now, flight.request_id)
        self._poke()
        return cancelled

    async def next_event(self, flight: _Flight) -> ProviderEvent:
        """The flight's next event, waiting (and driving the clock if needed) for it.

        Baton invariant: while any flight sleeps, there is a driver or a woken flight that
        has not run yet. Every exit from here (event, cancellation) with no driver wakes one
        sleeper, which either takes over or, if it has its event, passes the baton on.
        """
        try:
            while not flight.events:
                if self._driver is None:
                    self._driver = flight
                    try:
                        await self._drive(flight)
                    finally:
                        self._driver = None
                else:
                    flight.wake = anyio.Event()
                    self._sleepers[flight.request_id] = flight
                    try:
                        await flight.wake.wait()
                    finally:
                        self._sleepers.pop(flight.request_id, None)
                        flight.wake = None
            return flight.events.popleft()
        finally:
            if self._driver is None:
                self._hand_over()

    async def terminal_event(self, flight: _Flight) -> ProviderEvent:
        """The flight's COMPLETED or TIMED_OUT event (skipping FIRST_TOKEN)."""
        while True:
            event = await self.next_event(flight)
            if event.kind is not EventKind.FIRST_TOKEN:
                return event

    async def _drive(self, flight: _Flight) -> None:
        scale = self._scale
        while True:
            now = self.tick()
            if flight.events:
                return
            nxt = self.physics.next_event_time()
            if self._capacity is not None:
                nxt = self._capacity[0] if nxt is None else min(nxt, self._capacity[0])
            changed = self._changed = anyio.Event()
            if nxt is None:  # cannot happen while the flight is live; wait for any change
                await changed.wait()
                continue
            delay = (nxt - now) / scale
            if delay <= _WAKE_EPS_S:
                self.tick(max(now, nxt))
                await anyio.lowlevel.checkpoint()  # huge time scales: still let others run
                continue
            with anyio.move_on_after(delay):
                await changed.wait()

    def _deliver(self, events: list[ProviderEvent]) -> None:
        for event in events:
            flight = self._flights.get(event.request_id)
            if flight is None:
                continue
            flight.events.append(event)
            if event.kind is not EventKind.FIRST_TOKEN:
                flight.terminal = True
            if flight.wake is not None:
                self._sleepers.pop(flight.request_id, None)
                flight.wake.set()
            if flight is self._driver:
                self._poke()

    def _poke(self) -> None:
        if self._changed is not None:
            self._changed.set()

    def _hand_over(self) -> None:
        """Wake the longest sleeper (it leaves the sleepers at once: never woken twice)."""
        if self._sleepers:
            heir = self._sleepers.pop(next(iter(self._sleepers)))
            if heir.wake is not None:
                heir.wake.set()


# -- request parsing -----------------------------------------------------------------------


class _BadRequest(Exception):
    def __init__(self, message: str, param: str | None, code: str | None = None) -> None:
        super().__init__(message)
        self.message, self.param, self.code = message, param, code


@dataclass(frozen=True, slots=True)
class _Job:
    chat: bool
    model: str
    stream: bool
    include_usage: bool
    input_tokens: int
    output_tokens: int
    finish_reason: str
    charge: int
    forced_fault: Fault | None


def _header_int(request: Request, name: str) -> int | None:
    raw = request.headers.get(name)
    if raw is None:
        return None
    try:
        value = int(raw.strip())
    except ValueError:
        raise _BadRequest(f"Header {name} must be an integer >= 0.", name) from None
    if value < 0:
        raise _BadRequest(f"Header {name} must be an integer >= 0.", name)
    return value


def _metadata_int(body: Mapping[str, Any], name: str) -> int | None:
    """An output-length hint in ``body.metadata`` (strings, as OpenAI's ``metadata`` is):
    batch files carry no headers, so they hint the mock this way."""
    metadata = body.get("metadata")
    if not isinstance(metadata, dict) or name not in metadata:
        return None
    raw = metadata[name]
    try:
        value = int(str(raw))
    except ValueError:
        raise _BadRequest(
            f"Invalid 'metadata.{name}': expected an integer string.", "metadata"
        ) from None
    if value < 0:
        raise _BadRequest(f"Invalid 'metadata.{name}': must be >= 0.", "metadata")
    return value


def _opt_int(body: Mapping[str, Any], name: str) -> int | None:
    value = body.get(name)
    if value is None:
        return None
    if not _is_int(value) or value < 1:
        raise _BadRequest(f"Invalid '{name}': expected an integer >= 1.", name, "invalid_type")
    return int(value)


def _estimate_tokens(text: str) -> int:
    return max(1, math.ceil(len(text.encode("utf-8")) / 4))


def _chat_prompt(body: Mapping[str, Any]) -> str:
    messages = body.get("messages")
    if messages is None:
        raise _BadRequest("Missing required parameter: 'messages'.", "messages", "missing")
    if not isinstance(messages, list) or not messages:
        raise _BadRequest("Invalid 'messages': expected a non-empty array.", "messages")
    parts: list[str] = []
    for i, message in enumerate(messages):
        param = f"messages[{i}]"
        if not isinstance(message, dict):
            raise _BadRequest(f"Invalid '{param}': expected an object.", param, "invalid_type")
        if not isinstance(message.get("role"), str):
            raise _BadRequest(f"Invalid '{param}.role': expected a string.", f"{param}.role")
        content = message.get("content")
        if isinstance(content, str):
            parts.append(content)
        elif isinstance(content, list):
            for part in content:
                if not isinstance(part, dict):
                    raise _BadRequest(
                        f"Invalid '{param}.content': expected an array of objects.",
                        f"{param}.content",
                        "invalid_type",
                    )
                text = part.get("text")
                if isinstance(text, str):
                    parts.append(text)
        elif content is not None:
            raise _BadRequest(
                f"Invalid '{param}.content': expected a string, an array or null.",
                f"{param}.content",
                "invalid_type",
            )
    return "\n".join(parts)


def _completion_prompt(body: Mapping[str, Any]) -> tuple[str, int]:
    """(text, extra tokens given as token ids)."""
    prompt = body.get("prompt")
    if prompt is None:
        raise _BadRequest("Missing required parameter: 'prompt'.", "prompt", "missing")
    if isinstance(prompt, str):
        return prompt, 0
    bad = _BadRequest(
        "Invalid 'prompt': expected a string, an array of strings or an array of token arrays.",
        "prompt",
        "invalid_type",
    )
    if not isinstance(prompt, list) or not prompt:
        raise bad
    if all(isinstance(p, str) for p in prompt):
        return "".join(prompt), 0
    if all(_is_int(p) for p in prompt):
        return "", len(prompt)
    if all(isinstance(p, list) and all(_is_int(x) for x in p) for p in prompt):
        return "", sum(len(p) for p in prompt)
    raise bad


def _parse_job(request: Request, raw: bytes, *, chat: bool, default_output: int) -> _Job:
    try:
        body = json.loads(raw)
    except (ValueError, RecursionError):
        raise _BadRequest(
            "We could not parse the JSON body of your request. (The body must be valid JSON.)",
            None,
            "invalid_json",
        ) from None
    if not isinstance(body, dict):
        raise _BadRequest("The request body must be a JSON object.", None, "invalid_type")
    model = body.get("model")
    if model is None:
        raise _BadRequest("Missing required parameter: 'model'.", "model", "missing")
    if not isinstance(model, str) or not model:
        raise _BadRequest("Invalid 'model': expected a non-empty string.", "model", "invalid_type")
    stream = body.get("stream")
    if stream is not None and not isinstance(stream, bool):
        raise _BadRequest("Invalid 'stream': expected a boolean.", "stream", "invalid_type")
    options = body.get("stream_options")
    include_usage = False
    if options is not None:
        if not isinstance(options, dict):
            raise _BadRequest(
                "Invalid 'stream_options': expected an object.", "stream_options", "invalid_type"
            )
        if not stream:
            raise _BadRequest(
                "The 'stream_options' parameter is only allowed when 'stream' is enabled.",
                "stream_options",
            )
        usage = options.get("include_usage")
        if usage is not None and not isinstance(usage, bool):
            raise _BadRequest(
                "Invalid 'stream_options.include_usage': expected a boolean.",
                "stream_options.include_usage",
                "invalid_type",
            )
        include_usage = bool(usage)
    n = body.get("n")
    if n is not None and (not _is_int(n) or n != 1):
        raise _BadRequest("Invalid 'n': the mock provider supports only n=1.", "n")
    extra = 0
    if chat:
        text = _chat_prompt(body)
        max_tokens = _opt_int(body, "max_completion_tokens")
        legacy_max = _opt_int(body, "max_tokens")
        if max_tokens is None:
            max_tokens = legacy_max
    else:
        text, extra = _completion_prompt(body)
        max_tokens = _opt_int(body, "max_tokens")
    hinted_in = _header_int(request, "x-mock-input-tokens")
    if hinted_in is not None:
        input_tokens = hinted_in
    else:
        input_tokens = (_estimate_tokens(text) if text else 0) + extra or 1
    hinted_out = _header_int(request, "x-mock-output-tokens")
    if hinted_out is None:
        hinted_out = _metadata_int(body, "mock_output_tokens")
    if hinted_out is not None:
        wanted = hinted_out
    elif max_tokens is not None:
        wanted = max_tokens
    else:
        wanted = default_output
    output_tokens = wanted if max_tokens is None else min(wanted, max_tokens)
    finish = "length" if max_tokens is not None and wanted > max_tokens else "stop"
    raw_fault = request.headers.get("x-mock-fault")
    forced: Fault | None = None
    if raw_fault is not None:
        try:
            forced = Fault(raw_fault.strip().lower())
        except ValueError:
            raise _BadRequest(
                "Header x-mock-fault must be one of none, error, hang, drop.", "x-mock-fault"
            ) from None
    return _Job(
        chat=chat,
        model=model,
        stream=bool(stream),
        include_usage=include_usage,
        input_tokens=input_tokens,
        output_tokens=output_tokens,
        finish_reason=finish,
        charge=input_tokens + (max_tokens if max_tokens is not None else output_tokens),
        forced_fault=forced,
    )


# -- response building ---------------------------------------------------------------------


def _error_body(message: str, type_: str, param: str | None, code: str | None) -> dict[str, Any]:
    return {"error": {"message": message, "type": type_, "param": param, "code": code}}


def _error(
    status: int,
    message: str,
    type_: str,
    param: str | None = None,
    code: str | None = None,
    headers: Mapping[str, str] | None = None,
) -> JSONResponse:
    return JSONResponse(_error_body(message, type_, param, code), status, headers=headers)


def _words(n: int) -> list[str]:
    return [_WORDS[i % len(_WORDS)] for i in range(n)]


def _usage(job: _Job) -> dict[str, int]:
    return {
        "prompt_tokens": job.input_tokens,
        "completion_tokens": job.output_tokens,
        "total_tokens": job.input_tokens + job.output_tokens,
    }


def _completion_body(job: _Job, rid: str, created: int) -> dict[str, Any]:
    content = " ".join(_words(job.output_tokens))
    if job.chat:
        choice: dict[str, Any] = {
            "index": 0,
            "message": {"role": "assistant", "content": content, "refusal": None},
            "logprobs": None,
            "finish_reason": job.finish_reason,
        }
        obj = "chat.completion"
    else:
        choice = {"text": content, "index": 0, "logprobs": None, "finish_reason": job.finish_reason}
        obj = "text_completion"
    return {
        "id": rid,
        "object": obj,
        "created": created,
        "model": job.model,
        "system_fingerprint": "mock",
        "choices": [choice],
        "usage": _usage(job),
    }


def _chunk(
    job: _Job, rid: str, created: int, text: str | None, finish: str | None, *, role: bool = False
) -> dict[str, Any]:
    if job.chat:
        delta: dict[str, Any] = {}
        if role:
            delta["role"] = "assistant"
        if text is not None:
            delta["content"] = text
        choice: dict[str, Any] = {
            "index": 0,
            "delta": delta,
            "logprobs": None,
            "finish_reason": finish,
        }
    else:
        choice = {"text": text or "", "index": 0, "logprobs": None, "finish_reason": finish}
    chunk: dict[str, Any] = {
        "id": rid,
        "object": "chat.completion.chunk" if job.chat else "text_completion",
        "created": created,
        "model": job.model,
        "system_fingerprint": "mock",
        "choices": [choice],
    }
    if job.include_usage:
        chunk["usage"] = None
    return chunk


def _sse(data: Mapping[str, Any] | str) -> bytes:
    text = data if isinstance(data, str) else json.dumps(data, separators=(",", ":"))
    return f"data: {text}\n\n".encode()


def _raw_headers(headers: Mapping[str, str], content_type: str) -> list[tuple[bytes, bytes]]:
    out = [(b"content-type", content_type.encode("latin-1"))]
    out.extend((k.encode("latin-1"), v.encode("latin-1")) for k, v in headers.items())
    return out


def _timeout_body() -> dict[str, Any]:
    return _error_body(
        "The server had an error processing your request: the request timed out.",
        "server_error",
        None,
        "timeout",
    )


async def _until_disconnect(receive: Receive) -> None:
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return


# -- the provider --------------------------------------------------------------------------

_Outcome = Literal["pending", "done", "dropped", "disconnected"]


class _Served(Response):
    """A response that waits for the physics, then answers (JSON or SSE) or drops."""

    def __init__(
        self, provider: _Provider, job: _Job, headers: dict[str, str], *, drop: bool
    ) -> None:
        super().__init__(status_code=200)
        self._provider = provider
        self._job = job
        self._extra = headers
        self._drop = drop
        self._outcome: _Outcome = "pending"

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        provider = self._provider
        flight = provider.engine.submit(self._job.input_tokens, self._job.output_tokens)
        try:
            async with anyio.create_task_group() as tg:

                async def watch() -> None:
                    await _until_disconnect(receive)
                    if self._outcome == "pending":
                        self._outcome = "disconnected"
                        tg.cancel_scope.cancel()

                tg.start_soon(watch)
                if self._job.stream:
                    await self._stream(flight, send)
                else:
                    await self._json(flight, send)
                tg.cancel_scope.cancel()
        finally:
            if provider.engine.release(flight):
                provider.count("client_cancelled")
        if self._outcome == "dropped":
            provider.count("faults_drop")
            raise ConnectionDropped("mock provider dropped the connection mid-response")

    async def _start(
        self, send: Send, status: int, content_type: str, length: int | None = None
    ) -> None:
        headers = _raw_headers(self._extra, content_type)
        if length is not None:
            headers.append((b"content-length", str(length).encode()))
        await send({"type": "http.response.start", "status": status, "headers": headers})

    async def _body(self, send: Send, body: bytes, *, more: bool) -> None:
        await send({"type": "http.response.body", "body": body, "more_body": more})

    async def _timed_out(self, send: Send) -> None:
        self._provider.count("timeouts")
        self._outcome = "done"
        data = json.dumps(_timeout_body()).encode()
        await self._start(send, 504, "application/json", len(data))
        await self._body(send, data, more=False)

    async def _json(self, flight: _Flight, send: Send) -> None:
        event = await self._provider.engine.terminal_event(flight)
        if event.kind is EventKind.TIMED_OUT:
            await self._timed_out(send)
            return
        job = self._job
        self._provider.completed(job)
        body = json.dumps(_completion_body(job, self._provider.new_id(job), int(time.time())))
        data = body.encode()
        if self._drop:
            self._outcome = "dropped"
            await self._start(send, 200, "application/json", len(data))
            await self._body(send, data[: len(data) // 2], more=True)
            return
        self._outcome = "done"
        await self._start(send, 200, "application/json", len(data))
        await self._body(send, data, more=False)

    async def _stream(self, flight: _Flight, send: Send) -> None:
        engine, job = self._provider.engine, self._job
        event = await engine.next_event(flight)
        if event.kind is EventKind.TIMED_OUT:
            await self._timed_out(send)
            return
        rid, created = self._provider.new_id(job), int(time.time())
        words = _words(job.output_tokens)
        await self._start(send, 200, "text/event-stream; charset=utf-8")
        first = words[0] if words else ""
        await self._body(send, _sse(_chunk(job, rid, created, first, None, role=True)), more=True)
        if self._drop:
            self._outcome = "dropped"
            return
        if event.kind is EventKind.FIRST_TOKEN:
            event = await engine.terminal_event(flight)
        if event.kind is EventKind.TIMED_OUT:
            self._provider.count("timeouts")
            self._outcome = "done"
            await self._body(send, _sse(_timeout_body()), more=False)
            return
        self._provider.completed(job)
        self._outcome = "done"
        rest = words[1:]
        pieces = min(_STREAM_CONTENT_CHUNKS, len(rest))
        out: list[bytes] = []
        for i in range(pieces):
            group = rest[i * len(rest) // pieces : (i + 1) * len(rest) // pieces]
            text = "".join(" " + w for w in group)
            out.append(_sse(_chunk(job, rid, created, text, None)))
        out.append(_sse(_chunk(job, rid, created, None, job.finish_reason)))
        if job.include_usage:
            usage_chunk = _chunk(job, rid, created, None, None)
            usage_chunk["choices"] = []
            usage_chunk["usage"] = _usage(job)
            out.append(_sse(usage_chunk))
        out.append(_sse("[DONE]"))
        for piece in out[:-1]:
            await self._body(send, piece, more=True)
        await self._body(send, out[-1], more=False)


class _Hang(Response):
    """A response that never comes: it waits for the client to go away."""

    def __init__(self) -> None:
        super().__init__(status_code=200)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await _until_disconnect(receive)


_COUNTERS: Final = (
    "requests",
    "completed",
    "bad_requests",
    "unauthorized",
    "rate_limited_requests",
    "rate_limited_tokens",
    "insufficient_quota",
    "faults_error",
    "faults_hang",
    "faults_drop",
    "timeouts",
    "client_cancelled",
)


class _Provider:
    def __init__(self, config: MockConfig) -> None:
        self.config = config
        self.engine = _Engine(config)
        self.limiter = RateLimiter(rpm=config.rpm, tpm=config.tpm, kind=config.rate_window)
        self.quota = QuotaMeter(config.quota_tokens)
        self.faults = FaultInjector(
            error_rate=config.error_rate,
            hang_rate=config.hang_rate,
            drop_rate=config.drop_rate,
            seed=config.seed,
        )
        self.counters = dict.fromkeys(_COUNTERS, 0)
        self._ids = 0
        self._request_ids = 0
        self._key = None if config.api_key is None else config.api_key.encode()

    def count(self, name: str) -> None:
        self.counters[name] += 1

    def new_id(self, job: _Job) -> str:
        self._ids += 1
        return f"{'chatcmpl' if job.chat else 'cmpl'}-mock{self._ids:08d}"

    def completed(self, job: _Job) -> None:
        self.count("completed")
        self.quota.bill(job.input_tokens + job.output_tokens)

    def _authorized(self, request: Request) -> JSONResponse | None:
        if self._key is None:
            return None
        header = request.headers.get("authorization", "").strip()
        scheme, _, token = header.partition(" ")
        if not header:
            self.count("unauthorized")
            return _error(
                401,
                "You didn't provide an API key. Provide it in an Authorization header "
                "(Authorization: Bearer YOUR_KEY).",
                "invalid_request_error",
            )
        if scheme.lower() != "bearer" or not hmac.compare_digest(token.strip().encode(), self._key):
            self.count("unauthorized")
            return _error(
                401, "Incorrect API key provided.", "invalid_request_error", None, "invalid_api_key"
            )
        return None

    def _rate_headers(
        self,
        requests: WindowState | None,
        tokens: WindowState | None,
        retry_after_s: float | None = None,
    ) -> dict[str, str]:
        return rate_limit_headers(
            requests, tokens, time_scale=self.config.time_scale, retry_after_s=retry_after_s
        )

    async def chat(self, request: Request) -> Response:
        return await self._completion(request, chat=True)

    async def completions(self, request: Request) -> Response:
        return await self._completion(request, chat=False)

    async def _completion(self, request: Request, *, chat: bool) -> Response:
        self.count("requests")
        denied = self._authorized(request)
        if denied is not None:
            return denied
        try:
            job = _parse_job(
                request,
                await request.body(),
                chat=chat,
                default_output=self.config.default_output_tokens,
            )
        except _BadRequest as exc:
            self.count("bad_requests")
            return _error(400, exc.message, "invalid_request_error", exc.param, exc.code)
        now = self.engine.tick()
        if self.quota.exhausted:
            self.count("insufficient_quota")
            return _error(
                429,
                "You exceeded your current quota, please check your plan and billing details.",
                "insufficient_quota",
                None,
                "insufficient_quota",
                headers=self._rate_headers(*self.limiter.states(now)),
            )
        decision = self.limiter.acquire(now, job.charge)
        if not decision.allowed:
            kind = decision.kind or "requests"
            self.count(f"rate_limited_{kind}")
            headers = self._rate_headers(decision.requests, decision.tokens, decision.retry_after_s)
            if decision.retry_after_s is None:
                limit = decision.tokens.limit if decision.tokens else 0
                message = (
                    f"Request too large for {job.model}: Limit {limit}, "
                    f"Requested {job.charge}. The input or output tokens must be reduced."
                )
            else:
                window = decision.requests if kind == "requests" else decision.tokens
                used = (window.limit - window.remaining) if window else 0
                message = (
                    f"Rate limit reached for {job.model} on {kind} per min: "
                    f"Limit {window.limit if window else 0}, Used {used}, "
                    f"Requested {1 if kind == 'requests' else job.charge}. "
                    f"Please try again in {headers['retry-after-ms']}ms."
                )
            return _error(429, message, kind, None, "rate_limit_exceeded", headers=headers)
        headers = self._rate_headers(decision.requests, decision.tokens)
        self._request_ids += 1
        headers["x-request-id"] = f"req_mock{self._request_ids:08d}"
        drawn = self.faults.draw()
        fault = job.forced_fault if job.forced_fault is not None else drawn
        if fault is Fault.ERROR:
            self.count("faults_error")
            status = self.faults.error_status()
            return _error(
                status,
                "The server had an error while processing your request. Sorry about that!",
                "server_error",
                headers=headers,
            )
        if fault is Fault.HANG:
            self.count("faults_hang")
            return _Hang()
        return _Served(self, job, headers, drop=fault is Fault.DROP)

    async def models(self, request: Request) -> Response:
        denied = self._authorized(request)
        if denied is not None:
            return denied
        return JSONResponse({"object": "list", "data": [self._model_object()]})

    async def model(self, request: Request) -> Response:
        denied = self._authorized(request)
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

    async def stats(self, request: Request) -> Response:
        denied = self._authorized(request)
        if denied is not None:
            return denied
        return JSONResponse(self.snapshot())

    def snapshot(self) -> dict[str, Any]:
        """Physics statistics, counters and limiter state at the current virtual time."""
        now = self.engine.tick()
        requests, tokens = self.limiter.states(now)
        return {
            "virtual_time": now,
            "time_scale": self.config.time_scale,
            "physics": asdict(self.engine.physics.statistics()),
            "counters": dict(self.counters),
            "rate_limits": {
                "requests": None if requests is None else asdict(requests),
                "tokens": None if tokens is None else asdict(tokens),
            },
            "quota": {"limit": self.quota.limit, "used": self.quota.used},
            "capacity_loss_applied_at": self.engine.capacity_applied_at,
        }


def _http_error(request: Request, exc: Exception) -> Response:
    status = exc.status_code if isinstance(exc, HTTPException) else 500
    detail = exc.detail if isinstance(exc, HTTPException) else "Internal error"
    headers = exc.headers if isinstance(exc, HTTPException) else None
    code = {404: "not_found", 405: "method_not_allowed", 413: "request_too_large"}.get(status)
    return _error(status, detail, "invalid_request_error", None, code, headers=headers)


def create_app(config: MockConfig | None = None) -> Starlette:
    """Build the ASGI app for ``config`` (default: ``MockConfig()``).

    ``app.state.mock_snapshot()`` returns the same dictionary as ``GET /v1/mock/stats``.
    """
    provider = _Provider(MockConfig() if config is None else config)
    handler: Callable[[Request, Exception], Response | Awaitable[Response]] = _http_error
    app = Starlette(
        routes=[
            Route("/v1/chat/completions", provider.chat, methods=["POST"]),
            Route("/v1/completions", provider.completions, methods=["POST"]),
            Route("/v1/models", provider.models, methods=["GET"]),
            Route("/v1/models/{model:path}", provider.model, methods=["GET"]),
            Route("/v1/mock/stats", provider.stats, methods=["GET"]),
        ],
        exception_handlers={HTTPException: handler},
        max_body_size=_MAX_BODY_BYTES,
    )
    app.state.mock_snapshot = provider.snapshot
    return app
