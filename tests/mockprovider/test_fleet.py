"""A fleet of mock endpoints on one port (mockprovider.fleet, ``python -m mockprovider --fleet``).

The fleet app runs in-process in virtual time (``conftest.py``): each endpoint's latencies are
exact physics times. The fleet file's errors are checked on real files in ``tmp_path``; one
``wallclock`` test serves ``examples/fleet.toml`` with uvicorn through ``running_fleet``.
"""

from __future__ import annotations

import contextlib
import json
import re
import textwrap
import urllib.request
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any

import anyio
import httpx2
import openai
import pytest
from served import CLIENT_GENERATORS, DEFAULT, MESSAGES, lone_time
from starlette.applications import Starlette

from mockprovider import MockConfig, MockStats
from mockprovider.__main__ import main
from mockprovider.fleet import (
    FleetConfig,
    FleetEndpoint,
    create_fleet_app,
    fleet_from_dict,
    load_fleet,
)
from mockprovider.launch import running_fleet

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "fleet.toml"
SLOW = replace(DEFAULT, base_iter_ms=2 * DEFAULT.base_iter_ms, per_slot_ms=2 * DEFAULT.per_slot_ms)


class Fleet:
    """A fleet app, the HTTP client on it, and one openai client per endpoint."""

    def __init__(
        self, app: Starlette, http: httpx2.AsyncClient, clients: dict[str, openai.AsyncOpenAI]
    ) -> None:
        self.app = app
        self.http = http
        self.clients = clients

    async def timed_chat(self, name: str, output: int) -> float:
        """The latency of one chat call to endpoint ``name``, in (virtual) seconds."""
        start = anyio.current_time()
        await self.clients[name].chat.completions.create(
            model="m", messages=MESSAGES, extra_headers={"x-mock-output-tokens": str(output)}
        )
        return anyio.current_time() - start

    async def stats(self, name: str) -> MockStats:
        """Endpoint ``name``'s stats over HTTP, checked against ``fleet_stats()``."""
        response = await self.http.get(f"/{name}/v1/mock/stats")
        assert response.status_code == 200
        stats = MockStats.from_json(response.json())
        assert stats == self.app.state.fleet_stats()[name]
        return stats


@asynccontextmanager
async def serve_fleet(fleet: FleetConfig) -> AsyncIterator[Fleet]:
    app = create_fleet_app(fleet, clock=anyio.current_time)
    async with httpx2.AsyncClient(
        transport=httpx2.ASGITransport(app=app), base_url="http://mock"
    ) as http:
        clients = {}
        for endpoint in fleet:
            client = openai.AsyncOpenAI(
                base_url=f"http://mock{endpoint.base_path}",
                api_key="k",
                http_client=http,
                max_retries=0,
            )
            # As in served.serve: openai's first call looks its platform up in a worker thread.
            with contextlib.suppress(openai.NotFoundError):
                await client.get("/mock/warm-up", cast_to=httpx2.Response)
            clients[endpoint.name] = client
        yield Fleet(app, http, clients)


def fleet_of(**configs: MockConfig) -> FleetConfig:
    return FleetConfig(endpoints=tuple(FleetEndpoint(name=n, config=c) for n, c in configs.items()))


# -- serving --------------------------------------------------------------------------------


@pytest.mark.anyio
@CLIENT_GENERATORS
async def test_each_prefix_reaches_its_own_physics_limits_and_stats() -> None:
    fleet = fleet_of(fast=MockConfig(model="m-fast"), slow=MockConfig(physics=SLOW, rpm=1))
    async with serve_fleet(fleet) as mock:
        fast = await mock.timed_chat("fast", 100)
        slow = await mock.timed_chat("slow", 100)
        with pytest.raises(openai.RateLimitError):  # the slow endpoint's own RPM limit
            await mock.timed_chat("slow", 1)
        assert await mock.timed_chat("fast", 1) > 0  # no limit here
        models = [m.id for m in (await mock.clients["fast"].models.list()).data]
        fast_stats, slow_stats = await mock.stats("fast"), await mock.stats("slow")
    assert fast == pytest.approx(lone_time(100), rel=1e-9)
    assert slow == pytest.approx(lone_time(100, SLOW), rel=1e-9)
    assert slow == pytest.approx(2 * fast, rel=1e-9)  # half the decode speed
    assert models == ["m-fast"]
    assert (fast_stats.counters.requests, fast_stats.counters.completed) == (2, 2)
    assert (slow_stats.counters.requests, slow_stats.counters.completed) == (2, 1)
    assert (fast_stats.counters.rate_limited, slow_stats.counters.rate_limited) == (0, 1)
    assert fast_stats.requests_window is None
    assert slow_stats.requests_window is not None


@pytest.mark.anyio
@CLIENT_GENERATORS
async def test_endpoints_share_one_clock_from_the_fleets_first_request() -> None:
    fleet = fleet_of(a=MockConfig(), b=MockConfig(outages=((1.0, 2.0),), capacity_loss=(1.5, 0.5)))
    async with serve_fleet(fleet) as mock:
        await mock.timed_chat("a", 100)  # t=0 to 1.89: b's window is on, though b saw nothing
        with pytest.raises(openai.InternalServerError) as info:
            await mock.timed_chat("b", 1)
        b = await mock.stats("b")
        a = await mock.stats("a")
    assert info.value.status_code == 503
    assert b.virtual_time == a.virtual_time == pytest.approx(lone_time(100), rel=1e-9)
    assert b.counters.unavailable == 1
    assert (b.capacity_loss_applied_at, b.physics.slots) == (1.5, 16)
    assert a.counters.unavailable == 0


@pytest.mark.anyio
async def test_the_root_lists_the_fleet_and_unknown_paths_are_openai_404s() -> None:
    fleet = fleet_of(east=MockConfig(model="gpt-east"), west=MockConfig())
    async with serve_fleet(fleet) as mock:
        listing = await mock.http.get("/v1/mock/fleet")
        unknown_endpoint = await mock.http.get("/north/v1/models")
        unknown_route = await mock.http.get("/east/v1/nope")
        bare_root = await mock.http.get("/v1/models")
        stats = mock.app.state.fleet_stats()
    assert listing.json() == {
        "object": "list",
        "time_scale": 1.0,
        "data": [
            {"name": "east", "base_path": "/east/v1", "model": "gpt-east"},
            {"name": "west", "base_path": "/west/v1", "model": "mock-1"},
        ],
    }
    for response in (unknown_endpoint, unknown_route, bare_root):
        assert response.status_code == 404
        assert response.json()["error"]["code"] == "not_found"
    assert list(stats) == ["east", "west"]
    assert all(s.counters.requests == 0 for s in stats.values())


@pytest.mark.anyio
async def test_each_endpoint_checks_its_own_api_key() -> None:
    data: dict[str, Any] = {
        "endpoint": [{"name": "keyed", "api_key_env": "FLEET_TEST_KEY"}, {"name": "open"}]
    }
    fleet = fleet_from_dict(data, environ={"FLEET_TEST_KEY": "sk-fleet"})
    body = {"model": "m", "messages": MESSAGES, "max_tokens": 1}
    async with serve_fleet(fleet) as mock:
        wrong = await mock.http.post("/keyed/v1/chat/completions", json=body)
        right = await mock.http.post(
            "/keyed/v1/chat/completions", json=body, headers={"authorization": "Bearer sk-fleet"}
        )
        open_ = await mock.http.post("/open/v1/chat/completions", json=body)
    assert (wrong.status_code, right.status_code, open_.status_code) == (401, 200, 200)
    assert "sk-fleet" not in repr(fleet)


# -- the fleet file -------------------------------------------------------------------------


def test_the_example_fleet_loads_as_documented() -> None:
    fleet = load_fleet(EXAMPLE)
    assert fleet.names == ("fast-a", "fast-b", "slow")
    assert fleet.time_scale == 20.0
    fast_a, fast_b, slow = (fleet.config(n) for n in fleet.names)
    assert fast_a.outages == ((60.0, 120.0),)
    assert (fast_b.rpm, fast_b.outages) == (120, ())
    assert fast_a.physics == fast_b.physics == DEFAULT
    assert slow.physics.lone_decode_ms_per_token() == pytest.approx(
        2 * DEFAULT.lone_decode_ms_per_token()
    )
    assert [c.seed for c in (fast_a, fast_b, slow)] == [0, 1, 2]  # fleet seed + index
    assert {c.model for c in (fast_a, fast_b, slow)} == {"mock-1"}


def test_top_level_keys_are_defaults_that_an_endpoint_overrides(tmp_path: Path) -> None:
    path = tmp_path / "fleet.toml"
    path.write_text(
        textwrap.dedent(
            """
            time_scale = 50
            seed = 10
            rpm = 600
            slots = 8
            [[endpoint]]
            name = "a"
            [[endpoint]]
            name = "b.2"
            rpm = 60
            seed = 99
            profile = "production-fit"
            capacity_loss = [30, 0.5]
            outages = [[0, 5.5], [100, 200]]
            """
        )
    )
    fleet = load_fleet(path)
    a, b = fleet.config("a"), fleet.config("b.2")
    assert (a.rpm, a.seed, a.physics.slots, a.time_scale) == (600, 10, 8, 50)
    assert (b.rpm, b.seed, b.physics.slots, b.physics.overhead_ms) == (60, 99, 8, 3294.0)
    assert b.capacity_loss == (30, 0.5)
    assert b.outages == ((0, 5.5), (100, 200))
    with pytest.raises(KeyError):
        fleet.config("c")


def test_a_fleet_file_sets_each_endpoints_context_window(tmp_path: Path) -> None:
    path = tmp_path / "fleet.toml"
    path.write_text('context_tokens = 8192\n[[endpoint]]\nname = "a"\n'
                    '[[endpoint]]\nname = "b"\ncontext_tokens = 32768\n')  # fmt: skip
    fleet = load_fleet(path)
    assert (fleet.config("a").context_tokens, fleet.config("b").context_tokens) == (8192, 32768)


ONE = '[[endpoint]]\nname = "a"\n'

BAD_FILES = [
    ("rps = 3\n" + ONE, "top level: unknown key 'rps'; known keys: "),
    (ONE + "rmp = 60\n", "endpoint 'a': unknown key 'rmp'"),
    (ONE + "time_scale = 2\n", "endpoint 'a': time_scale is fleet-wide"),
    (ONE + ONE, "duplicate endpoint name 'a'"),
    ('[[endpoint]]\nname = "a/b"\n', "endpoint 'a/b': name='a/b' must be"),
    ('[[endpoint]]\nname = ""\n', "name='' must be"),
    ('[[endpoint]]\nname = "-a"\n', "name='-a' must be"),
    ('[[endpoint]]\nname = "a b"\n', "name='a b' must be"),
    ('[[endpoint]]\nname = "v1"\n', "name='v1' is reserved"),
    ("[[endpoint]]\nname = 7\n", "endpoint 7: name=7 must be"),
    (ONE + "[[endpoint]]\nrpm = 5\n", "endpoint #2: name is required"),
    ("time_scale = 2.0\n", "no endpoints"),
    ("endpoint = []\n", "no endpoints"),
    ('[endpoint]\nname = "a"\n', "write [[endpoint]], not [endpoint]"),
    ('time_scale = "fast"\n' + ONE, "time_scale='fast' must be a finite number > 0"),
    ("time_scale = 0\n" + ONE, "time_scale=0 must be"),
    ("seed = 1.5\n" + ONE, "seed=1.5 must be an integer"),
    (ONE + 'rpm = "60"\n', "endpoint 'a': rpm='60' must be an integer"),
    ("rpm = 0\n" + ONE, "endpoint 'a': rpm=0 must be an integer"),
    (ONE + "slots = 1.5\n", "endpoint 'a': slots=1.5 must be an integer"),
    (ONE + "base_iter_ms = -1\n", "endpoint 'a': base_iter_ms=-1 must be"),
    (ONE + "profile = 3\n", "endpoint 'a': profile=3 must be a profile name"),
    (ONE + 'profile = "fastest"\n', "endpoint 'a': unknown profile 'fastest'"),
    (ONE + "outages = [60, 120]\n", "endpoint 'a': outages="),
    (ONE + "outages = [[120, 60]]\n", "endpoint 'a': outages="),
    (ONE + 'capacity_loss = "soon"\n', "endpoint 'a': capacity_loss='soon'"),
    (ONE + "error_rate = 2\n", "endpoint 'a': error_rate=2 must be"),
    (ONE + "model = 5\n", "endpoint 'a': model=5 must be"),
    (ONE + "rate_window = 'leaky'\n", "endpoint 'a': rate_window='leaky'"),
    (ONE + 'api_key_env = "FLEET_TEST_UNSET_VARIABLE"\n', "FLEET_TEST_UNSET_VARIABLE is unset"),
    (ONE + "api_key_env = 1\n", "endpoint 'a': api_key_env=1 must be"),
    ("time_scale = \n", "Invalid value"),  # not TOML at all
]


@pytest.mark.parametrize(("text", "message"), BAD_FILES)
def test_a_bad_fleet_file_names_the_file_and_the_culprit(
    tmp_path: Path, text: str, message: str
) -> None:
    path = tmp_path / "bad-fleet.toml"
    path.write_text(text)
    with pytest.raises(ValueError, match=re.escape(message)) as info:
        load_fleet(path, environ={})
    assert str(info.value).startswith(f"{path}: ")


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (lambda: FleetConfig(endpoints=()), "endpoints=() must be a non-empty tuple"),
        (lambda: FleetConfig(endpoints=[]), "must be a non-empty tuple"),  # type: ignore[arg-type]
        (
            lambda: FleetConfig(endpoints=(MockConfig(),)),  # type: ignore[arg-type]
            "must be a FleetEndpoint",
        ),
        (
            lambda: FleetEndpoint(name="a", config=None),  # type: ignore[arg-type]
            "config=None must be a MockConfig",
        ),
        (
            lambda: fleet_of(a=MockConfig(time_scale=2), b=MockConfig(time_scale=3)),
            "time_scale must be the same for every endpoint (one clock): a=2, b=3",
        ),
    ],
)
def test_fleet_config_validation(build: Any, message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        build()


# -- command line and the real server -------------------------------------------------------


def test_cli_fleet_refuses_endpoint_options_and_bad_files(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text(ONE + "rmp = 1\n")
    for argv, message in [
        (["--fleet", str(EXAMPLE), "--rpm", "5", "--outage", "1:2"], "--rpm, --outage"),
        (["--fleet", str(EXAMPLE), "--seed", "0"], "cannot be combined with --seed"),
        (["--fleet", str(tmp_path / "missing.toml")], "missing.toml"),
        (["--fleet", str(bad)], f"--fleet: {bad}: endpoint 'a': unknown key 'rmp'"),
    ]:
        with pytest.raises(SystemExit) as info:
            main(argv)
        assert info.value.code == 2
        assert message in capsys.readouterr().err


def test_cli_fleet_prints_each_base_url_and_serves_the_fleet_app(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import uvicorn

    served: dict[str, Any] = {}
    monkeypatch.setattr(uvicorn, "run", lambda app, **kwargs: served.update(app=app, **kwargs))
    argv = ["--fleet", str(EXAMPLE), "--host", "127.0.0.2", "--port", "9100"]
    assert main([*argv, "--log-level", "warning"]) == 0
    assert capsys.readouterr().out.splitlines() == [
        "fast-a: http://127.0.0.2:9100/fast-a/v1",
        "fast-b: http://127.0.0.2:9100/fast-b/v1",
        "slow: http://127.0.0.2:9100/slow/v1",
    ]
    assert list(served["app"].state.endpoint_apps) == ["fast-a", "fast-b", "slow"]
    assert (served["port"], served["log_level"]) == (9100, "warning")


@pytest.mark.wallclock
def test_running_fleet_serves_the_example_over_http() -> None:
    with running_fleet(EXAMPLE, "--log-level", "warning") as urls:
        assert list(urls) == ["fast-a", "fast-b", "slow"]
        results = {}
        for name in ("fast-a", "slow"):
            with openai.OpenAI(base_url=urls[name], api_key="none", max_retries=0) as client:
                results[name] = client.chat.completions.create(
                    model="m", messages=MESSAGES, extra_headers={"x-mock-output-tokens": "5"}
                )
        root = urls["slow"].removesuffix("/slow/v1")
        with urllib.request.urlopen(f"{root}/v1/mock/fleet", timeout=10) as response:
            listing = json.load(response)
        with urllib.request.urlopen(f"{urls['fast-b']}/mock/stats", timeout=10) as response:
            fast_b = MockStats.from_json(json.load(response))
    assert all(r.usage is not None and r.usage.completion_tokens == 5 for r in results.values())
    assert [e["name"] for e in listing["data"]] == ["fast-a", "fast-b", "slow"]
    assert fast_b.time_scale == 20.0
    assert fast_b.counters.requests == 0
