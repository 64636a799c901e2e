"""Fleet files (:mod:`semisched.fleet.fleetfile`): every bad input named before anything is sent.

Table-driven: each bad file or ``--endpoint`` value with the message a user
must see (the file, the endpoint, the field). Keys are read from a mapping
passed as ``environ`` or from the environment, never from the file, and never
appear in an error.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from semisched.core.budget import ProviderLimits, RateBudget
from semisched.core.config import RoutingConfig
from semisched.fleet.endpoints import Endpoint
from semisched.fleet.fleetfile import (
    EndpointDef,
    FleetFile,
    FleetFileError,
    build_endpoints,
    load_fleet,
    openai_client,
    parse_endpoint_option,
)

GOOD = """
routing = "token_budget"

[routing_options]
short_pool_tokens = 4096
failover = false

[[endpoint]]
name = "east"
base_url = "http://127.0.0.1:8000/east/v1"
key_env = "EAST_KEY"
model_map = { "gpt-4o-mini" = "east-deployment" }
rpm = 500
tpm = 200000
max_concurrency = 8
weight = 2
pool = "short"
context_tokens = 16384

[[endpoint]]
name = "west"
base_url = "https://west.example/v1"
"""

ENDPOINT = '[[endpoint]]\nname = "a"\nbase_url = "http://a/v1"\n'


def _fleet(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "fleet.toml"
    path.write_text(text)
    return path


def test_a_good_file_round_trips(tmp_path: Path) -> None:
    fleet = load_fleet(_fleet(tmp_path, GOOD))
    assert fleet == FleetFile(
        endpoints=(
            EndpointDef(
                name="east",
                base_url="http://127.0.0.1:8000/east/v1",
                key_env="EAST_KEY",
                model_map={"gpt-4o-mini": "east-deployment"},
                rpm=500,
                tpm=200000,
                max_concurrency=8,
                weight=2,
                pool="short",
                context_tokens=16384,
            ),
            EndpointDef(name="west", base_url="https://west.example/v1"),
        ),
        routing=RoutingConfig(policy="token_budget", short_pool_tokens=4096, failover=False),
    )
    assert fleet.names == ("east", "west")
    east = fleet.endpoints[0]
    assert east.spec().budget is not None and east.spec().budget.rpm == 500
    assert east.spec().models == frozenset({"gpt-4o-mini"})


def test_routing_is_none_unless_the_file_chooses(tmp_path: Path) -> None:
    assert load_fleet(_fleet(tmp_path, ENDPOINT)).routing is None
    only_options = "[routing_options]\ncooloff_s = 5\n" + ENDPOINT
    assert load_fleet(_fleet(tmp_path, only_options)).routing == RoutingConfig(cooloff_s=5)
    only_policy = 'routing = "round_robin"\n' + ENDPOINT
    assert load_fleet(_fleet(tmp_path, only_policy)).routing == RoutingConfig(policy="round_robin")


BAD_FILES: list[tuple[str, str, str]] = [
    ("unknown top-level field", 'rooting = "x"\n' + ENDPOINT, "unknown field 'rooting'"),
    (
        "unknown endpoint field",
        ENDPOINT + "rpn = 5\n",
        "endpoint 'a': unknown field 'rpn' (known: name, base_url, key_env",
    ),
    (
        "unknown routing option",
        "[routing_options]\nspill = 3\n" + ENDPOINT,
        "[routing_options]: unknown field 'spill'",
    ),
    (
        "policy belongs at the top",
        '[routing_options]\npolicy = "random"\n' + ENDPOINT,
        "[routing_options]: unknown field 'policy'",
    ),
    (
        "unknown routing policy",
        'routing = "fastest"\n' + ENDPOINT,
        "routing='fastest' must be one of round_robin, random",
    ),
    ("routing not a string", "routing = 3\n" + ENDPOINT, "routing=3 must be one of"),
    (
        "bad routing option value",
        "[routing_options]\ncooloff_s = -1\n" + ENDPOINT,
        "[routing_options]: cooloff_s=-1 must be",
    ),
    (
        "routing_options not a table",
        "routing_options = 3\n" + ENDPOINT,
        "routing_options must be a table",
    ),
    (
        "duplicate names",
        ENDPOINT + ENDPOINT.replace("http://a/v1", "http://b/v1"),
        "duplicate endpoint name 'a'",
    ),
    (
        "missing name",
        ENDPOINT + '[[endpoint]]\nbase_url = "http://b/v1"\n',
        "endpoint #2 has no 'name'",
    ),
    ("missing base_url", '[[endpoint]]\nname = "a"\n', "endpoint 'a': missing 'base_url'"),
    (
        "name not a string",
        '[[endpoint]]\nname = 3\nbase_url = "http://a/v1"\n',
        "endpoint #1: name=3 must",
    ),
    (
        "empty name",
        '[[endpoint]]\nname = ""\nbase_url = "http://a/v1"\n',
        "endpoint #1: name='' must",
    ),
    (
        "rpm a string",
        ENDPOINT + 'rpm = "500"\n',
        "endpoint 'a': rpm='500' must be None or an int >= 1",
    ),
    ("rpm zero", ENDPOINT + "rpm = 0\n", "endpoint 'a': rpm=0 must be"),
    ("rpm a float", ENDPOINT + "rpm = 5.5\n", "endpoint 'a': rpm=5.5 must be"),
    ("tpm a bool", ENDPOINT + "tpm = true\n", "endpoint 'a': tpm=True must be"),
    (
        "max_concurrency zero",
        ENDPOINT + "max_concurrency = 0\n",
        "endpoint 'a': max_concurrency=0 must be",
    ),
    ("weight zero", ENDPOINT + "weight = 0\n", "endpoint 'a': weight=0 must be"),
    ("unknown pool", ENDPOINT + 'pool = "medium"\n', "endpoint 'a': pool='medium' must be"),
    ("context_tokens zero", ENDPOINT + "context_tokens = 0\n", "context_tokens=0 must be"),
    (
        "base_url without a scheme",
        '[[endpoint]]\nname = "a"\nbase_url = "localhost:8000/v1"\n',
        "endpoint 'a': base_url='localhost:8000/v1' must be an http:// or https:// URL",
    ),
    ("key_env empty", ENDPOINT + 'key_env = ""\n', "endpoint 'a': key_env='' must be"),
    ("key_env a number", ENDPOINT + "key_env = 1\n", "endpoint 'a': key_env=1 must be"),
    ("model_map a string", ENDPOINT + 'model_map = "x"\n', "endpoint 'a': model_map='x' must"),
    ("model_map empty", ENDPOINT + "model_map = {}\n", "endpoint 'a': model_map={} must"),
    (
        "model_map value a number",
        ENDPOINT + "model_map = { m = 1 }\n",
        "endpoint 'a': model_map['m']=1 must be a non-empty string",
    ),
    ("no endpoints", 'routing = "random"\n', "no endpoints"),
    ("endpoint not a table array", 'endpoint = "a"\n', "'endpoint' must be an array of tables"),
    ("endpoint items not tables", "endpoint = [1]\n", "endpoint #1 must be a table"),
    ("not TOML", "name = \n", "not valid TOML"),
]


@pytest.mark.parametrize(("case", "text", "message"), BAD_FILES, ids=[c[0] for c in BAD_FILES])
def test_a_bad_file_is_an_error_naming_the_file_and_the_culprit(
    tmp_path: Path, case: str, text: str, message: str
) -> None:
    path = _fleet(tmp_path, text)
    with pytest.raises(FleetFileError) as info:
        load_fleet(path)
    assert str(info.value).startswith(f"{path}: "), case
    assert message in str(info.value), case


def test_an_unreadable_file_is_an_error_naming_it(tmp_path: Path) -> None:
    with pytest.raises(FleetFileError, match=r"cannot read fleet file '.*missing\.toml'"):
        load_fleet(tmp_path / "missing.toml")


def test_fleet_file_error_is_a_value_error() -> None:
    assert issubclass(FleetFileError, ValueError)


# -- the --endpoint short form ------------------------------------------------------------


def test_an_endpoint_option_with_every_key() -> None:
    got = parse_endpoint_option(
        "east=http://127.0.0.1:8000/east/v1,key-env=EAST_KEY,rpm=500,tpm=9000,"
        "max-concurrency=4,weight=0.5,pool=long,context_tokens=8192,learn-limits=false"
    )
    assert got == EndpointDef(
        name="east",
        base_url="http://127.0.0.1:8000/east/v1",
        key_env="EAST_KEY",
        rpm=500,
        tpm=9000,
        max_concurrency=4,
        weight=0.5,
        pool="long",
        context_tokens=8192,
        learn_limits=False,
    )
    assert parse_endpoint_option("w=https://w/v1") == EndpointDef(name="w", base_url="https://w/v1")


BAD_OPTIONS: list[tuple[str, str]] = [
    ("east", "--endpoint 'east': must be NAME=URL[,key-env=VAR]"),
    ("=http://a/v1", "must be NAME=URL"),
    ("east=", "endpoint 'east': base_url='' must be a non-empty string"),
    ("east=ftp://a/v1", "endpoint 'east': base_url='ftp://a/v1' must be an http://"),
    ("east=http://a/v1,region=eu", "endpoint 'east': unknown key 'region' (known: key-env"),
    ("east=http://a/v1,rpm", "endpoint 'east': 'rpm' must be KEY=VALUE"),
    ("east=http://a/v1,rpm=many", "endpoint 'east': rpm='many' must be an int"),
    ("east=http://a/v1,weight=x", "endpoint 'east': weight='x' must be a number"),
    ("east=http://a/v1,rpm=0", "endpoint 'east': rpm=0 must be"),
    ("east=http://a/v1,pool=mid", "endpoint 'east': pool='mid' must be one of"),
    ("east=http://a/v1,key-env=", "endpoint 'east': key_env='' must be"),
    ("east=http://a/v1,rpm=1,rpm=2", "endpoint 'east': rpm given twice"),
    ("east=http://a/v1,learn-limits=off", "endpoint 'east': learn-limits='off' must be true or"),
]


@pytest.mark.parametrize(("text", "message"), BAD_OPTIONS, ids=[c[0] for c in BAD_OPTIONS])
def test_a_bad_endpoint_option_names_the_endpoint_and_key(text: str, message: str) -> None:
    with pytest.raises(FleetFileError, match=re.escape(message)):
        parse_endpoint_option(text)


def test_direct_definitions_are_checked_too() -> None:
    with pytest.raises(ValueError, match=r"^rpm=-1 must be"):
        EndpointDef(name="a", base_url="http://a/v1", rpm=-1)
    with pytest.raises(FleetFileError, match="duplicate endpoint name 'a'"):
        FleetFile(endpoints=(EndpointDef(name="a", base_url="http://a/v1"),) * 2)
    with pytest.raises(FleetFileError, match="no endpoints"):
        FleetFile(endpoints=())


# -- building endpoints: keys from the environment ----------------------------------------


class _Factory:
    """A ``make_client`` that records what it was given and returns a stand-in client."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str]] = []

    def __call__(self, base_url: str, api_key: str) -> Any:
        self.calls.append((base_url, api_key))
        return _client()


def _client() -> Any:
    class Completions:
        async def create(self, **params: Any) -> Any:  # pragma: no cover - never called
            raise AssertionError("sent")

    class Chat:
        completions = Completions()

    class Client:
        chat = Chat()

    return Client()


def test_keys_come_from_the_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EAST_KEY", "sk-east")
    monkeypatch.setenv("DEFAULT_KEY", "sk-default")
    fleet = load_fleet(_fleet(tmp_path, GOOD))
    factory = _Factory()
    endpoints = build_endpoints(fleet.endpoints, default_key_env="DEFAULT_KEY", make_client=factory)
    assert factory.calls == [
        ("http://127.0.0.1:8000/east/v1", "sk-east"),
        ("https://west.example/v1", "sk-default"),
    ]
    assert [type(e) for e in endpoints] == [Endpoint, Endpoint]
    east, west = endpoints
    assert east.name == "east" and east.deployment("gpt-4o-mini") == "east-deployment"
    assert east.spec == fleet.endpoints[0].spec()
    assert west.model_map is None
    assert west.spec.budget is not None and west.spec.budget.rpm is None  # limits learned


def test_the_default_client_is_an_openai_client_without_retries() -> None:
    (endpoint,) = build_endpoints(
        [EndpointDef(name="a", base_url="http://a.example/v1")], environ={"OPENAI_API_KEY": "k"}
    )
    assert str(endpoint.client.base_url) == "http://a.example/v1/"
    assert endpoint.client.max_retries == 0


def test_a_missing_or_empty_key_names_every_endpoint_and_variable_but_no_key() -> None:
    defs = [
        EndpointDef(name="east", base_url="http://e/v1", key_env="EAST_KEY"),
        EndpointDef(name="west", base_url="http://w/v1", key_env="WEST_KEY"),
        EndpointDef(name="south", base_url="http://s/v1"),
    ]
    environ = {"EAST_KEY": "sk-secret-east", "WEST_KEY": "", "OTHER": "sk-secret-other"}
    factory = _Factory()
    with pytest.raises(FleetFileError) as info:
        build_endpoints(defs, default_key_env="FLEET_KEY", make_client=factory, environ=environ)
    message = str(info.value)
    assert "endpoint 'west': the API key variable WEST_KEY is not set" in message
    assert "endpoint 'south': the API key variable FLEET_KEY is not set" in message
    assert "east" not in message and "sk-secret" not in message
    assert factory.calls == []  # no client made before every key is found


def test_building_refuses_duplicates_and_an_empty_fleet() -> None:
    a = EndpointDef(name="a", base_url="http://a/v1")
    with pytest.raises(FleetFileError, match="duplicate endpoint name 'a'"):
        build_endpoints([a, a], environ={"OPENAI_API_KEY": "k"})
    with pytest.raises(FleetFileError, match="no endpoints"):
        build_endpoints([], environ={"OPENAI_API_KEY": "k"})


def test_the_example_client_fleet_matches_the_example_mock_fleet() -> None:
    """The README's demo: examples/client-fleet.toml points at examples/fleet.toml's endpoints."""
    from mockprovider.fleet import load_fleet as load_mock_fleet

    root = Path(__file__).resolve().parents[2] / "examples"
    client = load_fleet(root / "client-fleet.toml")
    mock = load_mock_fleet(root / "fleet.toml")
    assert client.names == mock.names
    for endpoint in client.endpoints:
        assert endpoint.base_url == f"http://127.0.0.1:8200/{endpoint.name}/v1"
    assert client.routing is not None and client.routing.policy == "anticipated_load"


def _learned_limit(endpoint: Endpoint) -> int | None:
    """The request limit the endpoint's budget keeps after a header advertised 5 per minute."""
    assert endpoint.spec.budget is not None
    budget = RateBudget(endpoint.spec.budget)
    budget.charge(0.0, "r1", 10.0)
    budget.observe("r1", 0.1, ProviderLimits(limit_requests=5, remaining_requests=4))
    return budget.snapshot(0.2).limit_requests


def test_an_endpoint_learns_advertised_limits_unless_told_not_to(tmp_path: Path) -> None:
    path = tmp_path / "fleet.toml"
    path.write_text(
        '[[endpoint]]\nname = "a"\nbase_url = "http://a/v1"\nrpm = 100\n'
        '[[endpoint]]\nname = "b"\nbase_url = "http://b/v1"\nrpm = 100\nlearn_limits = false\n'
        '[[endpoint]]\nname = "c"\nbase_url = "http://c/v1"\nlearn_limits = false\n'
    )
    a, b, c = load_fleet(path).endpoints
    assert (a.learn_limits, b.learn_limits) == (True, False)
    client = openai_client("http://a/v1", "unused")
    assert _learned_limit(a.endpoint(client)) == 5  # the header's tighter limit
    assert _learned_limit(b.endpoint(client)) == 100  # only its own rpm counts
    assert c.spec().budget is None  # nothing to keep: no rpm/tpm, no learning
