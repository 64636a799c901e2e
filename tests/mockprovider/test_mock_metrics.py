"""The mock provider's Prometheus metrics (``GET /metrics``, mockprovider.metrics).

Every test runs the in-process app in virtual time (``conftest.py``, ``served.serve``) and
reads ``/metrics`` over HTTP with ``prometheus_client.parser``: the counts must match the
requests made, the physics gauges the physics at the scrape's instant.
"""

from __future__ import annotations

import math
from dataclasses import replace

import anyio
import httpx2
import openai
import pytest
from prometheus_client import REGISTRY
from prometheus_client.parser import text_string_to_metric_families
from served import CLIENT_GENERATORS, DEFAULT, MESSAGES, PROMPT_TOKENS, lone_time, serve

from mockprovider import MockConfig
from mockprovider.fleet import FleetConfig, FleetEndpoint, create_fleet_app
from mockprovider.metrics import STATUSES, MetricsSnapshot, MockCollector

pytestmark = [pytest.mark.anyio, CLIENT_GENERATORS]

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def parse(text: str) -> Samples:
    """Every sample of an exposition, by (name, sorted labels)."""
    samples: Samples = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            samples[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return samples


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples[(name, tuple(sorted(labels.items())))]


def by_label(samples: Samples, name: str, label: str, **fixed: str) -> dict[str, float]:
    """``name``'s samples keyed by ``label``, among those with the ``fixed`` labels."""
    out = {}
    for (sample, labels), v in samples.items():
        found = dict(labels)
        if sample == name and all(found.get(k) == w for k, w in fixed.items()):
            out[found[label]] = v
    return out


async def scrape(http: httpx2.AsyncClient, path: str = "/metrics") -> Samples:
    response = await http.get(path)
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain")
    return parse(response.text)


async def test_counts_match_the_requests_made_by_status_and_outcome() -> None:
    config = MockConfig(rpm=6, api_key="k")
    async with serve(config) as mock:
        for output in (3, 5, 7, 11):
            await mock.chat(output)
        for fault in ("error", "error"):  # 500 then 503
            with pytest.raises(openai.APIStatusError):
                await mock.chat(2, extra_headers={"x-mock-fault": fault})
        with pytest.raises(openai.RateLimitError):  # the seventh request in the minute
            await mock.chat(2)
        with pytest.raises(openai.BadRequestError):
            await mock.chat(2, extra_headers={"x-mock-fault": "sometimes"})
        bad_key = await mock.http.post(
            "/v1/chat/completions",
            json={"model": "m", "messages": MESSAGES},
            headers={"authorization": "Bearer wrong"},
        )
        assert bad_key.status_code == 401
        samples = await scrape(mock.http)
        stats = await mock.stats()
    statuses = by_label(samples, "mock_requests_total", "status")
    expected = dict.fromkeys(STATUSES, 0.0)
    expected.update({"200": 4, "500": 1, "503": 1, "429": 1, "400": 1, "401": 1})
    assert statuses == expected
    assert sum(statuses.values()) == stats.counters.requests == 9
    outcomes = by_label(samples, "mock_outcomes_total", "outcome")
    assert outcomes["completed"] == 4
    assert outcomes["faults_error"] == 2
    assert outcomes["rate_limited_requests"] == 1
    assert outcomes["bad_requests"] == outcomes["unauthorized"] == 1
    for name, count in outcomes.items():
        assert count == getattr(stats.counters, name), name
    assert value(samples, "mock_generated_tokens_total") == 3 + 5 + 7 + 11
    assert value(samples, "mock_prompt_tokens_total") == 4 * PROMPT_TOKENS
    assert value(samples, "mock_virtual_time_seconds") == pytest.approx(stats.virtual_time)
    assert value(samples, "mock_active_requests") == value(samples, "mock_waiting_requests") == 0
    assert value(samples, "mock_slots") == DEFAULT.slots


async def test_physics_gauges_show_the_batch_and_the_hidden_queue_mid_flight() -> None:
    physics = replace(DEFAULT, slots=2)
    async with serve(MockConfig(physics=physics)) as mock:
        before = await scrape(mock.http)
        assert value(before, "mock_virtual_time_seconds") == 0.0  # a scrape starts no clock
        async with anyio.create_task_group() as tg:
            for _ in range(5):
                tg.start_soon(mock.chat, 100)
            await anyio.sleep(1.0)  # virtual: every request is in, none is done
            during = await scrape(mock.http)
        after = await scrape(mock.http)
    assert value(during, "mock_active_requests") == 2
    assert value(during, "mock_waiting_requests") == 3
    assert value(during, "mock_iteration_seconds") == pytest.approx(
        physics.iteration_ms(2) / 1000.0
    )
    assert value(during, "mock_virtual_time_seconds") == pytest.approx(1.0, abs=1e-6)
    assert by_label(during, "mock_requests_total", "status")["200"] == 0  # none answered yet
    assert value(after, "mock_active_requests") == value(after, "mock_waiting_requests") == 0
    assert by_label(after, "mock_requests_total", "status")["200"] == 5
    assert value(after, "mock_generated_tokens_total") == 500
    assert value(after, "mock_virtual_time_seconds") > 2 * lone_time(100, physics)


async def test_dropped_and_unanswered_requests_have_their_own_status() -> None:
    async with serve(MockConfig()) as mock:
        with pytest.raises(openai.APIConnectionError):
            await mock.chat(4, extra_headers={"x-mock-fault": "drop"})
        with anyio.move_on_after(5.0):  # a hang: the client gives up
            await mock.chat(4, extra_headers={"x-mock-fault": "hang"})
        samples = await scrape(mock.http)
    statuses = by_label(samples, "mock_requests_total", "status")
    assert (statuses["dropped"], statuses["none"], statuses["200"]) == (1, 1, 0)
    outcomes = by_label(samples, "mock_outcomes_total", "outcome")
    assert (outcomes["faults_drop"], outcomes["faults_hang"]) == (1, 1)


async def test_each_app_has_its_own_registry_not_the_global_one() -> None:
    async with serve(MockConfig()) as one, serve(MockConfig()) as two:
        await one.chat(3)
        a, b = await scrape(one.http), await scrape(two.http)
        assert one.app.state.metrics_registry is not two.app.state.metrics_registry
    assert by_label(a, "mock_requests_total", "status")["200"] == 1
    assert by_label(b, "mock_requests_total", "status")["200"] == 0
    assert REGISTRY.get_sample_value("mock_requests_total", {"status": "200"}) is None


async def test_openmetrics_when_the_scraper_asks_for_it() -> None:
    async with serve(MockConfig()) as mock:
        await mock.chat(3)
        response = await mock.http.get(
            "/metrics", headers={"accept": "application/openmetrics-text; version=1.0.0"}
        )
    assert response.headers["content-type"].startswith("application/openmetrics-text")
    assert response.text.rstrip().endswith("# EOF")


async def test_fleet_serves_every_endpoint_with_an_endpoint_label() -> None:
    fleet = FleetConfig(
        endpoints=(
            FleetEndpoint(name="a", config=MockConfig()),
            FleetEndpoint(name="b", config=MockConfig(physics=replace(DEFAULT, slots=4))),
        )
    )
    app = create_fleet_app(fleet, clock=anyio.current_time)
    transport = httpx2.ASGITransport(app=app)
    async with httpx2.AsyncClient(transport=transport, base_url="http://mock") as http:
        made = {"a": 3, "b": 2}
        for name, count in made.items():
            for output in range(1, count + 1):
                response = await http.post(
                    f"/{name}/v1/chat/completions",
                    json={"model": "m", "messages": MESSAGES, "max_tokens": 10 * output},
                )
                assert response.status_code == 200
        root = await scrape(http)
        own = await scrape(http, "/b/metrics")
        stats = app.state.fleet_stats()
    for name, count in made.items():
        statuses = by_label(root, "mock_requests_total", "status", endpoint=name)
        assert statuses["200"] == count == stats[name].counters.completed
        assert sum(statuses.values()) == count
        tokens = value(root, "mock_generated_tokens_total", endpoint=name)
        assert tokens == sum(10 * k for k in range(1, count + 1))
        clock = value(root, "mock_virtual_time_seconds", endpoint=name)
        assert math.isclose(clock, stats[name].virtual_time, rel_tol=1e-9)
    assert value(root, "mock_slots", endpoint="b") == 4
    assert value(own, "mock_slots") == 4  # the endpoint's own /metrics: no label
    assert by_label(own, "mock_requests_total", "status")["200"] == 2


def test_a_collector_takes_one_unnamed_source_or_all_named() -> None:
    def read() -> MetricsSnapshot:
        raise AssertionError("not read")

    with pytest.raises(ValueError, match="sources"):
        MockCollector([])
    with pytest.raises(ValueError, match="sources"):
        MockCollector([(None, read), ("b", read)])
    with pytest.raises(ValueError, match="sources"):
        MockCollector([(None, read), (None, read)])
