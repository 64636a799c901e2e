"""Blocking prior sources in the runtime: micro-batched in a worker thread, with a fallback.

These tests wait on a real worker thread, so their clock may jump only once
every task has been blocked for a while of *real* time: trio's ``MockClock``
with ``autojump_threshold`` of 50 ms (with 0 it would jump to the prior
timeout while a fast model is still answering in its thread).
"""

from __future__ import annotations

import time
from typing import Any, ClassVar

import anyio
import pytest
import trio.testing
from runtime_kit import chat, mock_client

from semisched import RuntimeOptions, Scheduler
from semisched.core import Prior
from semisched.priors.sources import PriorQuery

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> Any:
    return ("trio", {"clock": trio.testing.MockClock(autojump_threshold=0.05)})


async def test_a_slow_model_backed_source_falls_back_without_stalling() -> None:
    class SlowModel:
        name = "slow"
        batches: ClassVar[list[int]] = []

        def prior(self, query: PriorQuery) -> Prior:
            return self.prior_batch([query])[0]

        def prior_batch(self, queries: list[PriorQuery]) -> list[Prior]:
            self.batches.append(len(queries))
            time.sleep(0.2)  # a blocking model in a worker thread, not on the loop
            return [Prior(p50=30, p90=60) for _ in queries]

    source = SlowModel()
    async with mock_client() as mock:
        async with Scheduler(
            mock.client, priors=source, options=RuntimeOptions(prior_timeout_s=0.02)
        ) as s:
            async with anyio.create_task_group() as tg:
                for _ in range(5):
                    tg.start_soon(lambda: s.submit(**chat(max_tokens=5)))
            stats = s.statistics()
    assert stats.counters.prior_fallbacks == 5
    assert stats.counters.succeeded == 5
    assert max(source.batches) > 1  # micro-batched


async def test_a_fast_model_backed_source_is_used() -> None:
    class Fast:
        name = "fast"

        def prior(self, query: PriorQuery) -> Prior:
            return Prior(p50=3000, p90=4000)

        def prior_batch(self, queries: list[PriorQuery]) -> list[Prior]:
            return [self.prior(q) for q in queries]

    async with mock_client() as mock:
        async with Scheduler(
            mock.client, priors=Fast(), options=RuntimeOptions(prior_timeout_s=5.0)
        ) as s:
            await s.submit(**chat(max_tokens=5))
            stats = s.statistics()
    assert stats.counters.prior_fallbacks == 0
    assert stats.engine.counters.submitted == 1
