"""Tenants through the SDK: ``Scheduler(tenants=...)``, ``submit(..., tenant=)`` and the
per-tenant statistics, with the real openai client against the in-process mock in
virtual time (``conftest.py``)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import openai
import pytest
from runtime_kit import chat, mock_client

from semisched import (
    RuntimeOptions,
    Scheduler,
    ServiceClass,
    TenantConfig,
    TenantSpec,
    TenantStats,
    preset,
)
from semisched.core import OverloadConfig
from semisched.runtime.calls import prepare_call, scheduler_config

pytestmark = pytest.mark.anyio

TWO = [TenantSpec(name="acme"), TenantSpec(name="beta", weight=2.0)]


def tokens(n: int) -> dict[str, Any]:
    """A call whose answer has exactly ``n`` output tokens (the mock's hint)."""
    return {"max_tokens": n, "metadata": {"mock_output_tokens": str(n)}}


async def send(submit: Callable[..., Awaitable[Any]], tenant: str, n: int) -> None:
    """``submit`` one call of ``tenant`` whose answer has ``n`` tokens."""
    await submit(**chat(f"{tenant} asks", **tokens(n)), tenant=tenant)


async def test_an_unknown_tenant_raises_before_anything_is_queued_or_sent() -> None:
    async with (
        mock_client() as mock,
        Scheduler(mock.client, config=scheduler_config("final_adrr_olc", tenants=TWO)) as s,
    ):
        for call in (s.submit, s.check):
            with pytest.raises(ValueError, match=r"tenant='acmee' must be one of the declared"):
                await call(**chat(max_tokens=5), tenant="acmee")  # type: ignore[misc]
        with pytest.raises(ValueError, match=r"\['acme', 'beta'\]"):
            await s.client.chat.completions.create(**chat(max_tokens=5), tenant="gamma")
        # Two tenants and no default: a call must name its own.
        with pytest.raises(ValueError, match="tenant is required"):
            await s.submit(**chat(max_tokens=5))
        with pytest.raises(TypeError, match="tenant=3 must be"):
            s.check(**chat(max_tokens=5), tenant=3)  # type: ignore[arg-type]
        stats = s.statistics()
    assert mock.recorder.log == []  # nothing reached the provider
    assert stats.pending == 0
    assert [(t.name, t.queued, t.sent) for t in stats.engine.tenants] == [
        ("acme", 0, 0),
        ("beta", 0, 0),
    ]


async def test_submit_tenant_shows_up_in_the_statistics_of_that_tenant() -> None:
    async with (
        mock_client() as mock,
        Scheduler(
            mock.client, priors="heuristic", config=scheduler_config("final_adrr_olc", tenants=TWO)
        ) as s,
    ):
        async with anyio.create_task_group() as tg:
            for n in (10, 20, 30):
                tg.start_soon(send, s.submit, "acme", n)
            tg.start_soon(send, s.client.chat.completions.create, "beta", 40)  # the facade
        stats = s.statistics()
    acme, beta = stats.engine.tenant("acme"), stats.engine.tenant("beta")
    assert isinstance(acme, TenantStats)
    assert (acme.completed, acme.output_tokens, acme.rejected) == (3, 60, 0)
    assert (beta.completed, beta.output_tokens) == (1, 40)
    assert acme.served_tokens > acme.output_tokens  # work tokens count the prompt too
    assert (acme.entitlement, beta.entitlement) == pytest.approx((1 / 3, 2 / 3))
    assert acme.share + beta.share == pytest.approx(1.0)
    assert [t.name for t in stats.engine.tenants] == ["acme", "beta"]


async def test_the_default_tenant_takes_calls_that_name_none() -> None:
    tenants = TenantConfig(tenants=tuple(TWO), default="beta")
    async with (
        mock_client() as mock,
        Scheduler(mock.client, config=scheduler_config("final_adrr_olc", tenants=tenants)) as s,
    ):
        await s.submit(**chat(**tokens(5)))
        await s.submit(**chat(**tokens(5)), tenant="")  # "" names none, as in the core
        stats = s.statistics()
    assert (stats.engine.tenant("acme").completed, stats.engine.tenant("beta").completed) == (0, 2)


def test_the_tenants_argument_takes_specs_or_a_config_and_refuses_two_of_them() -> None:
    client = openai.AsyncOpenAI(base_url="http://127.0.0.1:9/v1", api_key="unused")
    s = Scheduler(
        client, priors="heuristic", config=scheduler_config("final_adrr_olc", tenants=TWO)
    )
    assert s.config.tenants == TenantConfig(tenants=tuple(TWO))  # fair_share, no default
    config = TenantConfig(tenants=(TenantSpec(name="solo"),), policy="fifo")
    assert (
        Scheduler(
            client, priors="heuristic", config=scheduler_config("final_adrr_olc", tenants=config)
        ).config.tenants
        is config
    )
    declared = preset("final_adrr_olc", tenants=config)
    assert Scheduler(client, config=declared, priors="heuristic").config.tenants is config
    with pytest.raises(ValueError, match=r"tenants=.* and config\.tenants=.* both declare"):
        Scheduler(client, priors="heuristic", config=scheduler_config(declared, tenants=TWO))
    with pytest.raises(TypeError, match="must be a TenantConfig or a sequence of TenantSpec"):
        Scheduler(
            client,
            priors="heuristic",
            config=scheduler_config("final_adrr_olc", tenants=TenantSpec(name="acme")),
        )  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="must be a TenantConfig or a sequence of TenantSpec"):
        Scheduler(
            client, priors="heuristic", config=scheduler_config("final_adrr_olc", tenants="acme")
        )  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="must have unique names"):
        Scheduler(
            client,
            config=scheduler_config(
                "final_adrr_olc", tenants=[TenantSpec(name="a"), TenantSpec(name="a")]
            ),
        )
    with pytest.raises(ValueError, match="must hold at least one tenant"):
        Scheduler(client, config=scheduler_config("final_adrr_olc", tenants=[]))


async def _light_latencies(policy: str) -> list[float]:
    """A flood of 30 medium calls from ``backfill``, then 5 short ones from ``checkout``
    a virtual second later, two calls in flight at most: each short call's latency."""
    tenants = TenantConfig(
        tenants=(
            TenantSpec(name="checkout", service=ServiceClass.GUARANTEED),
            TenantSpec(name="backfill", service="best_effort"),  # type: ignore[arg-type]
        ),
        policy=policy,
    )
    # One class and no overload control: only the tenant layer decides who goes first.
    config = preset("batch_makespan", max_inflight=2, overload=OverloadConfig(policy="none"))
    latencies: list[float] = []
    async with mock_client() as mock:
        s = Scheduler(
            mock.client,
            priors="heuristic",
            config=scheduler_config(config, tenants=tenants),
            options=RuntimeOptions(seed=0),
        )
        async with s:
            await s.submit(**chat(max_tokens=1), tenant="checkout")  # openai's platform lookup

            async def light(i: int) -> None:
                start = anyio.current_time()
                await s.submit(**chat(f"short {i}", **tokens(10)), tenant="checkout")
                latencies.append(anyio.current_time() - start)

            async with anyio.create_task_group() as tg:
                for _ in range(30):
                    tg.start_soon(send, s.submit, "backfill", 200)
                await anyio.sleep(1.0)
                for i in range(5):
                    tg.start_soon(light, i)
            stats = s.statistics()
    assert stats.engine.tenant("backfill").completed == 30  # the flood is served in full
    assert stats.engine.tenant("checkout").completed == 6
    return sorted(latencies)


async def test_fair_share_keeps_a_flood_from_delaying_a_light_tenant() -> None:
    fifo = await _light_latencies("fifo")
    fair = await _light_latencies("fair_share")
    # FIFO: the short calls wait behind the whole flood (~30 calls x ~3.7 s / 2 slots).
    assert fifo[0] > 30.0
    # fair_share: a guaranteed tenant inside its entitlement goes next; it waits at most
    # for one flood call in flight to finish (~3.7 s), then its five calls go two by two.
    assert fair[-1] < 6.0
    assert fair[-1] * 5 < fifo[0]


def test_prepare_call_resolves_the_tenant_and_never_forwards_it() -> None:
    tenants = TenantConfig(tenants=tuple(TWO), default="acme")
    call = prepare_call(**chat(), tenant="beta", tenants=tenants)
    assert call.tenant == "beta" and "tenant" not in call.params
    assert prepare_call(**chat(), tenants=tenants).tenant == "acme"  # the default
    assert prepare_call(**chat(), tenant="x").tenant == "x"  # no tenants to check
    with pytest.raises(ValueError, match=r"tenant='x' must be one of the declared tenants"):
        prepare_call(**chat(), tenant="x", tenants=tenants)
