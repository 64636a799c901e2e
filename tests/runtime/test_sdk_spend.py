"""Spend in the SDK: each request's cost from its usage at its endpoint's price, spend caps
refused before sending with ``SpendCapExceeded``, the books back to zero, and the ``cost``
routing policy; the real openai client against in-process mocks, in virtual time."""

from __future__ import annotations

import anyio
import pytest
from prometheus_client import CollectorRegistry
from runtime_kit import chat, mock_client

from semisched import (
    Endpoint,
    Price,
    RequestRejected,
    Scheduler,
    SemischedError,
    SpendCap,
    SpendCapExceeded,
)
from semisched.core.explain import RULES
from semisched.core.tenants.config import TenantSpec
from semisched.runtime.calls import scheduler_config

pytestmark = pytest.mark.anyio

PRICE = Price(input=2.0, output=10.0, cached_input=0.5)


async def test_each_finished_request_costs_its_usage_at_its_price() -> None:
    registry = CollectorRegistry()
    async with mock_client() as mock:
        endpoint = Endpoint("east", mock.client, price=PRICE)
        async with Scheduler(endpoints=[endpoint], metrics=registry) as s:
            response = await s.submit(**chat(max_tokens=20), tenant=None)
            stats = s.statistics()
    usage = response.usage
    expected = (usage.prompt_tokens * 2.0 + usage.completion_tokens * 10.0) / 1e6
    assert stats.spend is not None
    assert stats.spend.spent_usd == pytest.approx(expected)
    assert dict(stats.spend.by_endpoint) == {"east": pytest.approx(expected)}
    assert stats.spend.reserved_usd == 0
    metric = registry.get_sample_value(
        "semisched_spend_usd_total", {"tenant": "default", "endpoint": "east"}
    )
    assert metric == pytest.approx(expected)


async def test_no_price_and_no_cap_adds_nothing() -> None:
    async with mock_client() as mock, Scheduler(mock.client) as s:
        await s.submit(**chat(max_tokens=5))
        assert s.statistics().spend is None


async def test_a_cap_refuses_before_sending_and_names_the_cap() -> None:
    # each request reserves its prompt plus its p90 output: 40 tokens of output at most
    price = Price(input=0.0, output=1000.0)  # $0.001 per output token
    cap = SpendCap(usd=0.1, per="day")  # 100 output tokens: two reservations of 40 fit
    async with mock_client() as mock:
        endpoint = Endpoint("only", mock.client, price=price)
        async with Scheduler(endpoints=[endpoint], spend_caps=[cap]) as s:
            outcomes: list[object] = []

            async def one() -> None:
                try:
                    outcomes.append(await s.submit(**chat(max_tokens=40), prior=(20.0, 40.0)))
                except SpendCapExceeded as exc:
                    outcomes.append(exc)

            async with anyio.create_task_group() as tg:
                for _ in range(6):
                    tg.start_soon(one)
            stats = s.statistics()
    refused = [o for o in outcomes if isinstance(o, SpendCapExceeded)]
    served = len(outcomes) - len(refused)
    assert served >= 2 and refused, outcomes
    error = refused[0]
    assert isinstance(error, RequestRejected) and isinstance(error, SemischedError)
    assert error.cap == "$0.10 per day for this key" and error.limit_usd == 0.1
    assert error.reset_at % 86400 == 0
    assert error.explanation is not None and error.explanation.rule == "spend.cap"
    assert stats.spend is not None
    assert stats.spend.spent_usd <= 0.1 + 40 * 0.001  # within the cap plus one p90 slack
    assert stats.spend.refused == len(refused) and stats.spend.reserved_usd == 0
    assert stats.engine.inflight == 0 and stats.pending == 0
    assert mock.recorder.log and len(mock.recorder.log) == served  # refused: never sent
    assert "spend.cap" in RULES


async def test_a_tenant_cap_leaves_other_tenants_alone() -> None:
    price = Price(input=0.0, output=1000.0)
    caps = [SpendCap(usd=0.01, per="hour", tenant="small")]  # less than one reservation
    async with mock_client() as mock:
        endpoint = Endpoint("only", mock.client, price=price)
        tenants = [TenantSpec(name="small"), TenantSpec(name="big")]
        config = scheduler_config("final_adrr_olc", tenants=tenants)
        async with Scheduler(endpoints=[endpoint], spend_caps=caps, config=config) as s:
            await s.submit(**chat(max_tokens=20), tenant="big", prior=(10.0, 20.0))
            with pytest.raises(SpendCapExceeded, match="tenant small"):
                await s.submit(**chat(max_tokens=20), tenant="small", prior=(10.0, 20.0))


async def test_spend_caps_must_be_caps() -> None:
    async with mock_client() as mock:
        with pytest.raises(TypeError, match="spend_caps"):
            Scheduler(mock.client, spend_caps=SpendCap(usd=1))  # type: ignore[arg-type]
        with pytest.raises(ValueError, match="per="):
            SpendCap(usd=1, per="week")


async def test_cost_routing_sends_to_the_cheapest_endpoint_that_meets_the_deadline() -> None:
    cheap, dear = Price(input=0.1, output=0.4), Price(input=2.0, output=8.0)
    async with mock_client() as a, mock_client() as b:
        fleet = [Endpoint("dear", a.client, price=dear), Endpoint("cheap", b.client, price=cheap)]
        config = scheduler_config("final_adrr_olc", routing="cost")
        async with Scheduler(endpoints=fleet, config=config) as s:
            for _ in range(4):
                await s.submit(**chat(max_tokens=5))
            stats = s.statistics()
    assert [(e.name, e.completed) for e in stats.engine.endpoints] == [("dear", 0), ("cheap", 4)]
    assert stats.spend is not None and set(stats.spend.by_endpoint) == {"cheap"}
