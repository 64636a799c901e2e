"""`mockprovider.virtual.inline_platform_lookup`: a virtual-time run does not depend on how
long openai's platform lookup takes in real time."""

from __future__ import annotations

import time

import anyio
import httpx2
import openai
import trio
import trio.testing
from openai import _base_client

from mockprovider.app import MockConfig, create_app
from mockprovider.virtual import inline_platform_lookup


def _first_call_virtual_seconds() -> float:
    """A fresh client's first call to the in-process mock, with a timer ticking beside it."""

    async def main() -> float:
        app = create_app(MockConfig(), clock=anyio.current_time)
        async with httpx2.AsyncClient(
            transport=httpx2.ASGITransport(app=app), base_url="http://mock"
        ) as http:
            client = openai.AsyncOpenAI(base_url="http://mock/v1", api_key="k", http_client=http)
            async with anyio.create_task_group() as tg:

                async def ticker() -> None:  # a pending timer: what an autojump jumps to
                    while True:
                        await anyio.sleep(0.01)

                tg.start_soon(ticker)
                start = anyio.current_time()
                await client.chat.completions.create(
                    model="mock-1", messages=[{"role": "user", "content": "hi"}], max_tokens=1
                )
                took = anyio.current_time() - start
                tg.cancel_scope.cancel()
        return took

    return trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))


def _slow_lookup(monkeypatch: object) -> None:
    real = _base_client.get_platform

    def slow() -> object:
        time.sleep(0.2)  # a busy machine: the lookup reads /etc and /proc
        return real()

    monkeypatch.setattr(_base_client, "get_platform", slow)  # type: ignore[attr-defined]


def test_a_slow_platform_lookup_moves_no_virtual_time(monkeypatch: object) -> None:
    with inline_platform_lookup():
        fast = _first_call_virtual_seconds()
    _slow_lookup(monkeypatch)
    with inline_platform_lookup():
        inline = _first_call_virtual_seconds()
    threaded = _first_call_virtual_seconds()
    assert inline == fast  # the answer's own time, however long the lookup took
    assert threaded > inline + 0.01  # in a thread, the clock jumped while it ran


def test_the_lookup_goes_back_to_its_thread_afterwards() -> None:
    saved = _base_client.asyncify  # type: ignore[attr-defined]
    with inline_platform_lookup():
        assert _base_client.asyncify is not saved  # type: ignore[attr-defined]
    assert _base_client.asyncify is saved  # type: ignore[attr-defined]
