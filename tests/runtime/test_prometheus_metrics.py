"""Prometheus metrics of a Scheduler: every outcome counted, histograms and gauges, no secrets.

Virtual time, the real openai client against the in-process mock
(``conftest.py``). Each test gives the scheduler its own ``CollectorRegistry``,
renders it with ``prometheus_client.generate_latest`` and reads it back with
``prometheus_client.parser``: what a Prometheus server would scrape.
"""

from __future__ import annotations

import gc
import math
import re
import threading
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import httpx2
import openai
import pytest
import trio
import trio.testing
from prometheus_client import REGISTRY, CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample
from runtime_kit import FOREVER, Recorder, Scripted, chat, overload_scenario

from mockprovider.app import MockConfig, create_app
from semisched import (
    DeadlineExceeded,
    Endpoint,
    Price,
    ProviderError,
    RequestRejected,
    Scheduler,
    TenantSpec,
)
from semisched.core import preset
from semisched.core.budget import BudgetSnapshot
from semisched.core.config import BudgetConfig, OverloadConfig
from semisched.core.explain import RULES
from semisched.core.lifecycle import RetryPolicy
from semisched.runtime.calls import scheduler_config
from semisched.telemetry import prometheus
from semisched.telemetry.gauges import headroom
from semisched.telemetry.prometheus import METRICS, PrometheusMetrics

pytestmark = [
    pytest.mark.anyio,
    # openai's AsyncStream leaves its SSE generators at [DONE] unclosed; trio closes them
    # and says so (as in test_scheduler.py).
    pytest.mark.filterwarnings("ignore:Async generator 'openai._streaming.:ResourceWarning"),
    pytest.mark.filterwarnings(
        "ignore:Async generator 'httpx2._models.Response.aiter_bytes':ResourceWarning"
    ),
]

SECRET_PROMPT = "TOP-SECRET-PROMPT-TEXT"
SECRET_KEY = "sk-SECRET-KEY-0123456789"
TERMINAL = ("completed", "rejected", "expired", "failed", "cancelled")


@asynccontextmanager
async def client(
    script: tuple[Scripted, ...] = (), **mock: Any
) -> AsyncIterator[openai.AsyncOpenAI]:
    app = create_app(MockConfig(**mock), clock=anyio.current_time)
    transport = Recorder(httpx2.ASGITransport(app=app), script)
    async with httpx2.AsyncClient(transport=transport, base_url="http://mock") as http:
        yield openai.AsyncOpenAI(base_url="http://mock/v1", api_key=SECRET_KEY, http_client=http)


def overloaded(**changes: Any) -> Any:
    # Two calls in flight fill max_inflight (load 1.0 * w_load 0.3), which crosses these
    # lowered thresholds: long requests are deferred, xlong ones rejected, short admitted.
    overload = OverloadConfig(defer_threshold=0.25, reject_xlong_threshold=0.28,
                              reject_long_threshold=0.95, max_defers=2)  # fmt: skip
    return preset("final_adrr_olc", max_inflight=2, overload=overload,
                  retry=RetryPolicy(max_attempts=2, base_delay_s=1.0, jitter=0.0),
                  budget=BudgetConfig(rpm=1000), **changes)  # fmt: skip


def scrape(registry: CollectorRegistry) -> tuple[str, list[Sample]]:
    """The exposition text and every sample in it."""
    text = generate_latest(registry).decode()
    samples = [s for family in text_string_to_metric_families(text) for s in family.samples]
    return text, samples


def total(samples: list[Sample], name: str, **labels: str) -> float:
    """The sum of ``name``'s samples whose labels include ``labels``."""
    return sum(s.value for s in samples
               if s.name == name and labels.items() <= s.labels.items())  # fmt: skip


def values(samples: list[Sample], name: str, label: str) -> dict[str, float]:
    """``name``'s samples by the value of ``label``."""
    return {s.labels[label]: s.value for s in samples if s.name == name}


def s_registry(s: Scheduler) -> CollectorRegistry:
    """The registry ``s``'s metrics live in."""
    (metrics,) = [o for o in s._dispatch.events.observers.items if isinstance(o, PrometheusMetrics)]
    return metrics.registry


async def mixed_run(registry: CollectorRegistry) -> tuple[dict[str, Any], Any]:
    """Completed, cancelled, deferred, rejected, retried, failed and expired requests,
    and one stream; returns the overload scenario's results and the final statistics."""
    script = (Scripted(500), Scripted(500), Scripted(503))
    async with client(script) as c, Scheduler(c, config=overloaded(), metrics=registry) as s:
        with pytest.raises(ProviderError):  # 500, retried, 500: attempts spent
            await s.submit(**chat(SECRET_PROMPT, max_tokens=5), klass="interactive")
        await s.submit(**chat(SECRET_PROMPT, max_tokens=5), klass="interactive")  # 503, then ok
        results = await overload_scenario(s, SECRET_PROMPT, lambda: scrape(s_registry(s))[1])
        with pytest.raises(DeadlineExceeded):  # in flight past its deadline
            await s.submit(**chat(SECRET_PROMPT, max_tokens=FOREVER), deadline=30)
        stream = await s.submit(**chat(SECRET_PROMPT, max_tokens=12), stream=True)
        async for _ in stream:
            pass
        stats = s.statistics()
    return results, stats


async def test_every_outcome_is_counted_once_and_terminal_ones_add_up_to_submitted() -> None:
    registry = CollectorRegistry()
    results, stats = await mixed_run(registry)
    assert isinstance(results["xlong"], RequestRejected)
    _, samples = scrape(registry)
    submitted = values(samples, "semisched_requests_submitted_total", "class")
    assert sum(submitted.values()) == stats.counters.submitted == 9
    for klass, n in submitted.items():
        ends = sum(total(samples, "semisched_requests_total", outcome=o, **{"class": klass})
                   for o in TERMINAL)  # fmt: skip
        assert ends == n, klass
        count = total(samples, "semisched_request_duration_seconds_count", **{"class": klass})
        assert count == n, klass
    outcomes = values(samples, "semisched_requests_total", "outcome")
    assert set(outcomes) == {*TERMINAL, "deferred", "retried"}
    by_outcome = {o: total(samples, "semisched_requests_total", outcome=o) for o in outcomes}
    assert by_outcome == {
        "completed": stats.counters.succeeded,
        "rejected": 1,  # the xlong call
        "expired": 1,  # the call in flight at its deadline
        "failed": 1,  # 500, 500: its two attempts spent
        "cancelled": 2,  # the two calls that filled the flight
        "deferred": stats.engine.counters.deferrals,
        "retried": 2,  # the failed call's first 500 and the 503
    }
    assert by_outcome["completed"] == 4 and by_outcome["deferred"] >= 1
    # The rejection never left the queue; the retries name the endpoint that failed.
    rejected = [s for s in samples if s.name == "semisched_requests_total"
                and s.labels["outcome"] == "rejected"]  # fmt: skip
    assert [(s.labels["class"], s.labels["endpoint"]) for s in rejected] == [("batch", "")]
    assert total(samples, "semisched_requests_total", outcome="retried",
                 endpoint="default") == 2  # fmt: skip
    # One explained decision per rule firing, as the engine counts them.
    for rule in RULES:
        assert total(samples, "semisched_decisions_total", rule=rule) == stats.engine.decisions.of(
            rule
        ), rule
    assert total(samples, "semisched_decisions_total", decision="reject",
                 rule="overload.reject_xlong") == 1  # fmt: skip
    # Histograms: every request but the rejected one was sent; one stream; the completed
    # calls' usage (a stream's output is counted from its chunks, its prompt is unknown).
    assert total(samples, "semisched_queue_wait_seconds_count") == 9 - 1
    assert total(samples, "semisched_time_to_first_token_seconds_count") == 1
    assert total(samples, "semisched_output_tokens_count") == 4
    assert total(samples, "semisched_prompt_tokens_count") == 3
    assert total(samples, "semisched_output_tokens_sum") == 5 + 20 + 20 + 12
    assert total(samples, "semisched_request_duration_seconds_count", outcome="expired") == 1
    expired = total(samples, "semisched_request_duration_seconds_sum", outcome="expired")
    assert expired == pytest.approx(30.0)  # virtual time: its deadline exactly
    assert total(samples, "semisched_request_duration_seconds_bucket", outcome="expired",
                 le="20.0") == 0  # fmt: skip
    assert total(samples, "semisched_request_duration_seconds_bucket", outcome="expired",
                 le="30.0") == 1  # fmt: skip


async def test_gauges_show_the_state_at_scrape_time() -> None:
    registry = CollectorRegistry()
    results, _ = await mixed_run(registry)
    during: list[Sample] = results["during"]
    assert values(during, "semisched_inflight", "endpoint") == {"default": 2.0}
    assert total(during, "semisched_severity") >= 0.28  # what rejected the xlong call
    assert total(during, "semisched_queue_depth") + total(during, "semisched_deferred") >= 1
    fleet = values(during, "semisched_budget_headroom", "endpoint")["fleet"]
    assert 0.99 < fleet < 1.0  # a few of its 1000 requests a minute are used
    _, after = scrape(registry)
    assert values(after, "semisched_inflight", "endpoint") == {"default": 0.0}
    assert values(after, "semisched_queue_depth", "class") == {"interactive": 0.0, "batch": 0.0}
    assert total(after, "semisched_deferred") == 0
    assert values(after, "semisched_tenant_share", "tenant") == {"default": 1.0}
    assert values(after, "semisched_tenant_entitlement", "tenant") == {"default": 1.0}
    assert values(after, "semisched_tenant_debt_tokens", "tenant") == {"default": 0.0}


async def test_the_exposition_holds_exactly_the_documented_metrics_and_labels() -> None:
    registry = CollectorRegistry()
    await mixed_run(registry)
    # A priced endpoint beside it (what its calls cost), under a rate budget: still
    # referenced at the scrape, so a budget's headroom is there whenever the garbage
    # collector takes the closed scheduler above.
    async with client() as c:
        endpoint = Endpoint("priced", c, price=Price(input=1.0, output=4.0))
        config = preset("final_adrr_olc", budget=BudgetConfig(rpm=1000))
        async with Scheduler(endpoints=[endpoint], config=config, metrics=registry) as s:
            await s.submit(**chat(SECRET_PROMPT, max_tokens=5))
    _, samples = scrape(registry)
    seen: dict[str, set[str]] = {}
    for sample in samples:
        name = sample.name
        if name.endswith("_created"):  # prometheus_client's creation times of counters
            continue
        base = re.sub(r"_(bucket|count|sum)$", "", name)
        spec = METRICS.get(name) or METRICS[base]
        labels = set(sample.labels) - ({"le"} if name.endswith("_bucket") else set())
        assert labels == set(spec.labels), name
        seen.setdefault(name if name in METRICS else base, set()).update(labels)
    assert set(seen) == set(METRICS)  # every documented metric is there after a mixed run
    doc = prometheus.__doc__ or ""
    for name in METRICS:  # and the module's table documents each
        assert f"``{name}``" in doc, name


async def test_no_label_holds_a_request_id_a_prompt_or_a_key() -> None:
    registry = CollectorRegistry()
    await mixed_run(registry)
    text, samples = scrape(registry)
    assert SECRET_PROMPT not in text and SECRET_KEY not in text
    labels = {value for s in samples for value in s.labels.values()}
    assert not [v for v in labels if re.fullmatch(r"req-\d+", v)]
    names = {name for s in samples for name in s.labels}
    assert names <= {"class", "tenant", "outcome", "endpoint", "decision", "rule", "le", "where"}


async def test_tenants_are_labelled_and_their_share_entitlement_and_debt_are_gauges() -> None:
    registry = CollectorRegistry()
    tenants = [TenantSpec(name="acme"), TenantSpec(name="beta", weight=3.0)]
    async with (
        client() as c,
        Scheduler(
            c, metrics=registry, config=scheduler_config("final_adrr_olc", tenants=tenants)
        ) as s,
    ):
        async with anyio.create_task_group() as tg:
            for tenant, n in (("acme", 40), ("acme", 40), ("beta", 10)):
                call = chat(max_tokens=n, metadata={"mock_output_tokens": str(n)})
                tg.start_soon(lambda call=call, tenant=tenant: s.submit(**call, tenant=tenant))
        engine = s.statistics().engine
    _, samples = scrape(registry)
    assert values(samples, "semisched_requests_submitted_total", "tenant") == {
        "acme": 2.0,
        "beta": 1.0,
    }
    share = values(samples, "semisched_tenant_share", "tenant")
    assert share == pytest.approx({t.name: t.share for t in engine.tenants})
    assert sum(share.values()) == pytest.approx(1.0) and share["acme"] > share["beta"]
    assert values(samples, "semisched_tenant_entitlement", "tenant") == pytest.approx(
        {"acme": 0.25, "beta": 0.75}
    )
    debt = values(samples, "semisched_tenant_debt_tokens", "tenant")
    assert debt["acme"] > 0 > debt["beta"]  # acme was served beyond its quarter
    assert total(samples, "semisched_output_tokens_sum", tenant="acme") == 80


async def test_schedulers_on_one_registry_share_its_metrics() -> None:
    registry = CollectorRegistry()
    async with client() as c:
        async with Scheduler(c, metrics=registry) as one, Scheduler(c, metrics=registry) as two:
            scopes = [anyio.CancelScope(), anyio.CancelScope(), anyio.CancelScope()]

            async def hold(s: Scheduler, scope: anyio.CancelScope) -> None:
                with scope:
                    await s.submit(**chat(max_tokens=FOREVER))

            async with anyio.create_task_group() as tg:
                for s, scope in zip((one, two, two), scopes, strict=True):
                    tg.start_soon(hold, s, scope)
                await anyio.wait_all_tasks_blocked()
                _, during = scrape(registry)
                for scope in scopes:
                    scope.cancel()
            await one.submit(**chat(max_tokens=5))
        _, after = scrape(registry)
    # In flight is summed over both; the counters count both schedulers' requests.
    assert values(during, "semisched_inflight", "endpoint") == {"default": 3.0}
    assert total(after, "semisched_requests_submitted_total") == 4
    assert total(after, "semisched_requests_total", outcome="cancelled") == 3
    del one, two, s
    gc.collect()  # a scheduler that is gone no longer shows in the gauges
    _, gone = scrape(registry)
    assert values(gone, "semisched_inflight", "endpoint") == {}
    assert total(gone, "semisched_requests_submitted_total") == 4


async def test_the_default_registry_takes_several_schedulers() -> None:
    async with client() as c:
        before = REGISTRY.get_sample_value(
            "semisched_requests_submitted_total", {"class": "interactive", "tenant": "default"}
        )
        for _ in range(2):  # registering twice would raise "Duplicated timeseries"
            async with Scheduler(c, metrics=True) as s:
                await s.submit(**chat(max_tokens=5))
    after = REGISTRY.get_sample_value(
        "semisched_requests_submitted_total", {"class": "interactive", "tenant": "default"}
    )
    assert after == (before or 0.0) + 2


def on_the_loop_only(monkeypatch: pytest.MonkeyPatch) -> set[int]:
    """Records the threads ``Scheduler.statistics`` runs in."""
    threads: set[int] = set()
    original = Scheduler.statistics

    def statistics(self: Scheduler) -> Any:
        threads.add(threading.get_ident())
        return original(self)

    monkeypatch.setattr(Scheduler, "statistics", statistics)
    return threads


async def test_a_scrape_from_another_thread_takes_the_gauges_on_the_event_loop(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    threads = on_the_loop_only(monkeypatch)
    registry = CollectorRegistry()
    clock = trio.lowlevel.current_clock()
    assert isinstance(clock, trio.testing.MockClock)
    async with client() as c, Scheduler(c, metrics=registry) as s:
        with anyio.CancelScope() as scope:
            async with anyio.create_task_group() as tg:
                for _ in range(2):
                    tg.start_soon(lambda: s.submit(**chat(max_tokens=FOREVER)))
                await anyio.wait_all_tasks_blocked()
                clock.autojump_threshold = math.inf  # virtual time stands still meanwhile
                _, samples = await anyio.to_thread.run_sync(scrape, registry)
                clock.autojump_threshold = 0
                scope.cancel()
        # A loop that does not answer in time (blocked here) leaves the gauges out.
        monkeypatch.setattr(prometheus, "LOOP_TIMEOUT_S", 0.05)
        blocked: list[Sample] = []
        scraping = threading.Thread(target=lambda: blocked.extend(scrape(registry)[1]))
        scraping.start()
        scraping.join()  # blocks the event loop
    assert values(samples, "semisched_inflight", "endpoint") == {"default": 2.0}
    assert threads == {threading.get_ident()}  # never the scraping thread
    assert total(blocked, "semisched_requests_submitted_total") == 2  # the counters are there
    assert not [x for x in blocked if x.name == "semisched_inflight"]


def test_after_its_loop_has_finished_a_scheduler_is_read_from_any_thread(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    registry = CollectorRegistry()

    async def job() -> Scheduler:
        async with client() as c, Scheduler(c, metrics=registry) as s:
            await s.submit(**chat(max_tokens=5))
        return s

    s = trio.run(job, clock=trio.testing.MockClock(autojump_threshold=0))
    found: list[Sample] = []
    scraping = threading.Thread(target=lambda: found.extend(scrape(registry)[1]))
    scraping.start()
    scraping.join()
    assert values(found, "semisched_inflight", "endpoint") == {"default": 0.0}
    assert s.statistics().counters.succeeded == 1


def test_another_collector_with_these_names_is_refused() -> None:
    registry = CollectorRegistry()
    from prometheus_client import Counter

    Counter("semisched_requests_submitted", "someone else's", registry=registry)
    with pytest.raises(ValueError, match="Duplicated timeseries"):
        PrometheusMetrics(lambda: None, registry=registry)  # type: ignore[arg-type,return-value]


@pytest.mark.parametrize(
    ("limits", "used", "paused_until", "expected"),
    [
        ((None, None), (5.0, 500.0), None, None),  # no limit: no gauge
        ((100, None), (25.0, 1e9), None, 0.75),
        ((100, 1000), (25.0, 900.0), None, 0.1),  # the tighter window
        ((100, 1000), (150.0, 0.0), None, 0.0),  # over a lowered limit: clipped
        ((100, 1000), (0.0, 0.0), 11.0, 0.0),  # a 429 pauses it
        ((100, 1000), (0.0, 0.0), 10.0, 1.0),  # the pause is over
    ],
)
def test_headroom_is_the_tightest_window(
    limits: tuple[int | None, int | None],
    used: tuple[float, float],
    paused_until: float | None,
    expected: float | None,
) -> None:
    budget = BudgetSnapshot(limit_requests=limits[0], limit_tokens=limits[1],
                            used_requests=used[0], used_tokens=used[1],
                            paused_until=paused_until)  # fmt: skip
    assert headroom(budget, now=10.0) == (None if expected is None else pytest.approx(expected))
