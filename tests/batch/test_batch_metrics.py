"""``semisched batch --metrics-port``: the job's Prometheus metrics over HTTP while it runs.

The job runs in virtual time against the in-process mock (``conftest.py``);
the metrics server is real (``prometheus_client``'s, on 127.0.0.1, in a
thread). The provider's transport scrapes ``/metrics`` each time a call
reaches it, from a worker thread, with the mock clock's autojump paused until
the answer is in: every scrape sees the job at a known point, and the
server's thread gets the gauges from the event loop as it would in
production. After the job the port is closed again.
"""

from __future__ import annotations

import json
import math
import socket
import urllib.error
import urllib.request
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
import httpx2
import openai
import pytest
import trio
import trio.testing
from batch_testkit import chat_line, cli_args, records, write_lines
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample

from mockprovider.app import MockConfig, create_app
from semisched.batch.cli import main, main_async

pytestmark = pytest.mark.anyio


def free_port() -> int:
    """A port nothing listens on now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def get_metrics(port: int) -> list[Sample]:
    """Scrape ``http://127.0.0.1:port/metrics`` (blocking) and parse it."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as answer:
        text = answer.read().decode()
    return [s for family in text_string_to_metric_families(text) for s in family.samples]


def total(samples: list[Sample], name: str, **labels: str) -> float:
    return sum(s.value for s in samples
               if s.name == name and labels.items() <= s.labels.items())  # fmt: skip


class Scraping(httpx2.AsyncBaseTransport):
    """Scrapes the job's metrics as each call arrives; answers the first one 503."""

    def __init__(self, inner: httpx2.AsyncBaseTransport, port: int) -> None:
        self.inner, self.port = inner, port
        self.scrapes: list[list[Sample]] = []

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        # Scrape from a worker thread (the server asks the event loop for the gauges),
        # with virtual time held still meanwhile: the scrape sees the job as it is now.
        clock = trio.lowlevel.current_clock()
        assert isinstance(clock, trio.testing.MockClock)
        clock.autojump_threshold = math.inf
        try:
            self.scrapes.append(await anyio.to_thread.run_sync(get_metrics, self.port))
        finally:
            clock.autojump_threshold = 0
        if len(self.scrapes) == 1:
            await request.aread()
            body = {"error": {"message": "busy", "type": "server_error", "code": None}}
            return httpx2.Response(503, content=json.dumps(body).encode())
        return await self.inner.handle_async_request(request)


@asynccontextmanager
async def scraping_client(port: int) -> AsyncIterator[tuple[openai.AsyncOpenAI, Scraping]]:
    app = create_app(MockConfig(), clock=anyio.current_time)
    transport = Scraping(httpx2.ASGITransport(app=app), port)
    async with httpx2.AsyncClient(transport=transport, base_url="http://mock") as http:
        client = openai.AsyncOpenAI(base_url="http://mock/v1", api_key="k", http_client=http)
        yield client, transport


async def test_the_jobs_metrics_are_served_while_it_runs_then_the_port_closes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write_lines(tmp_path / "in.jsonl", [chat_line(i, out=30 + i) for i in range(6)])
    port = free_port()
    args = cli_args(tmp_path, "--metrics-port", str(port), "--max-concurrency", "1",
                    "--rpm", "600")  # fmt: skip
    async with scraping_client(port) as (client, transport):
        code = await main_async(args, client=client)
    assert code == 0
    assert f"metrics: http://127.0.0.1:{port}/metrics" in capsys.readouterr().err
    assert len(records(tmp_path / "out.jsonl")) == 6
    # One call at a time: 7 calls (the 503'd one twice), a scrape as each arrived.
    scrapes = transport.scrapes
    assert len(scrapes) == 7
    completed = [total(s, "semisched_requests_total", outcome="completed") for s in scrapes]
    assert completed == [0, 0, 1, 2, 3, 4, 5]
    last = scrapes[-1]
    assert total(last, "semisched_requests_submitted_total") == 6
    assert total(last, "semisched_requests_total", outcome="retried", endpoint="default") == 1
    assert total(last, "semisched_decisions_total", rule="retry.backoff") == 1
    # A queue wait is observed when its request ends: the five answered so far.
    assert total(last, "semisched_queue_wait_seconds_count") == 5
    assert total(last, "semisched_output_tokens_count") == 5
    assert total(last, "semisched_inflight", endpoint="default") == 1
    assert total(last, "semisched_queue_depth") == 0
    assert {s.name for s in last} >= {"semisched_severity", "semisched_deferred"}
    # --rpm 600: 7 of the minute's 600 requests were charged by the 7th call.
    assert total(last, "semisched_budget_headroom", endpoint="fleet") == pytest.approx(1 - 7 / 600)
    with pytest.raises(urllib.error.URLError):  # the job is over: so is its server
        get_metrics(port)


async def test_a_port_in_use_is_a_clear_error_before_anything_is_sent(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write_lines(tmp_path / "in.jsonl", [chat_line(0)])
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        async with scraping_client(port) as (client, transport):
            code = await main_async(cli_args(tmp_path, "--metrics-port", str(port)), client=client)
    err = capsys.readouterr().err
    assert code == 2
    assert f"--metrics-port {port}: cannot listen on 127.0.0.1:{port}" in err
    assert "Traceback" not in err
    assert transport.scrapes == []  # nothing was sent
    assert not (tmp_path / "out.jsonl").exists()


@pytest.mark.parametrize("port", ["0", "65536", "http", "-1"])
def test_a_bad_port_is_a_usage_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], port: str
) -> None:
    with pytest.raises(SystemExit) as info:
        main(cli_args(tmp_path, f"--metrics-port={port}"))
    assert info.value.code == 2
    assert "is not a TCP port (1 to 65535)" in capsys.readouterr().err
