"""The layers around the provider seam: built from what a run uses, and what each one does."""

from __future__ import annotations

import contextlib
import json
from types import SimpleNamespace
from typing import Any

import anyio
import httpx2
import openai
import pytest

from semisched import Scheduler
from semisched.core.request import Prior, Request
from semisched.runtime.layers import (
    Answer,
    CompressionLayer,
    HeaderLayer,
    LearningLayer,
    ObserverLayer,
    ProviderSeam,
    Refused,
    ReservationLayer,
)
from semisched.state.base import Grant
from semisched.state.local import LocalState
from semisched.telemetry.observe import RequestObserver

pytestmark = [pytest.mark.anyio]

_ANSWER = {
    "id": "x",
    "object": "chat.completion",
    "created": 0,
    "model": "m",
    "choices": [
        {"index": 0, "message": {"role": "assistant", "content": "ok"}, "finish_reason": "stop"}
    ],
    "usage": {"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4},
}


def _client(status: int = 200, headers: dict[str, str] | None = None) -> openai.AsyncOpenAI:
    def handler(request: httpx2.Request) -> httpx2.Response:
        json.loads(request.content)
        body = _ANSWER if status == 200 else {"error": {"message": "no", "type": "x"}}
        return httpx2.Response(status, json=body, headers=headers or {})

    http = httpx2.AsyncClient(transport=httpx2.MockTransport(handler))
    return openai.AsyncOpenAI(base_url="http://x/v1", api_key="k", http_client=http)


def _layers(scheduler: Scheduler, endpoint: str = "default") -> list[type]:
    seam: Any = scheduler._dispatch.stacks[endpoint]
    kinds = []
    while seam is not None:
        kinds.append(type(seam))
        seam = getattr(seam, "inner", None)
    return kinds


def test_a_plain_run_builds_only_the_layers_it_uses() -> None:
    scheduler = Scheduler(_client(), tracing=False)
    assert _layers(scheduler) == [LearningLayer, HeaderLayer, ProviderSeam]


class _InContext(RequestObserver):
    """An observer whose provider calls run in a context of its own."""

    def attempt(self, request: Request, attempt: int, endpoint: str) -> Any:
        return contextlib.nullcontext()


def test_each_configured_part_adds_its_layer_in_order() -> None:
    scheduler = Scheduler(
        _client(),
        state=LocalState(clock=anyio.current_time),
        observers=[_InContext()],
        tracing=False,
    )
    kinds = _layers(scheduler)
    assert kinds[:2] == [ReservationLayer, ObserverLayer]
    assert kinds[-3:] == [LearningLayer, HeaderLayer, ProviderSeam]
    assert CompressionLayer not in kinds  # compress-and-route is off by default


def test_observers_without_a_call_context_add_no_layer() -> None:
    # Metrics-like observers hear every event but wrap no call: no extra await per send.
    scheduler = Scheduler(_client(), observers=[RequestObserver()], tracing=False)
    assert ObserverLayer not in _layers(scheduler)


async def test_the_header_layer_learns_limits_from_answers() -> None:
    headers = {"x-ratelimit-limit-requests": "60", "x-ratelimit-remaining-requests": "59"}
    async with Scheduler(_client(headers=headers), tracing=False) as scheduler:
        await scheduler.submit(model="m", messages=[{"role": "user", "content": "hi"}])
        stats = scheduler.statistics()
    assert stats.rate_limits is not None
    assert stats.rate_limits_by_endpoint.keys() == {"default"}


class _Refusing:
    """A shared state that refuses the first ``refusals`` reservations."""

    def __init__(self, refusals: int) -> None:
        self.refusals = refusals
        self.released: list[str] = []

    async def reserve(self, request_id: str, endpoint: str, tokens: float) -> tuple[Grant, bool]:
        if self.refusals:
            self.refusals -= 1
            return Grant(ok=False, wait_s=1.0, scope="fleet", reason="rpm"), True
        return Grant(ok=True), False

    def refusal_until(self, grant: Grant, now: float) -> float:
        return now + grant.wait_s

    async def release(self, request_id: str, endpoint: str) -> None:
        self.released.append(request_id)


class _Inner:
    def __init__(self) -> None:
        self.sent = 0

    async def send(self, pending: Any) -> Answer | Refused:
        self.sent += 1
        return Answer("response", {})

    def ended(self, pending: Any, end: Any) -> None:
        return None


async def test_a_refusal_is_a_typed_result_and_nothing_is_sent() -> None:
    inner, shared = _Inner(), _Refusing(refusals=1)
    spawned: list[tuple[Any, ...]] = []
    layer = ReservationLayer(inner, shared, None, lambda: 10.0,  # type: ignore[arg-type]
                             lambda *call: spawned.append(call))  # fmt: skip
    pending = SimpleNamespace(
        id="r1",
        endpoint="default",
        request=Request(
            id="r1", klass="batch", prior=Prior(p50=10, p90=20), input_tokens=5.0, arrival=0.0
        ),
    )
    assert await layer.send(pending) == Refused(at=10.0, until=11.0, fleet_wide=True)  # type: ignore[arg-type]
    assert inner.sent == 0 and spawned == []  # nothing sent, nothing to release
    assert await layer.send(pending) == Answer("response", {})  # type: ignore[arg-type]
    assert inner.sent == 1
