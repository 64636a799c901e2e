"""The gateway's file and flags: keys as hashes, tenants, errors that name the culprit."""

from __future__ import annotations

import subprocess
import sys
from importlib.util import find_spec
from pathlib import Path
from typing import Any

import pytest

from semisched.gateway.cli import build_config, parser
from semisched.gateway.config import GatewayConfigError
from semisched.gateway.configfile import config_from_dict, load_config
from semisched.gateway.keys import KeyTable, key_hash

ENDPOINT = {"endpoint": [{"name": "a", "base_url": "http://127.0.0.1:1/v1"}]}


def test_keys_are_stored_as_hashes_and_map_to_their_tenant() -> None:
    config = config_from_dict({
        **ENDPOINT,
        "tenant": [{"name": "web", "weight": 3, "key_sha256": [key_hash("k1"), key_hash("k2")]},
                   {"name": "batch", "key_sha256": key_hash("k3")}],
    })  # fmt: skip
    table = KeyTable(config.keys)
    assert [table.tenant_for(k) for k in ("k1", "k2", "k3", "k4", "", None)] == [
        "web", "web", "batch", None, None, None]  # fmt: skip
    assert "k1" not in repr(config) and "k1" not in repr(table)


def test_a_key_pasted_instead_of_its_hash_is_refused_without_being_repeated() -> None:
    with pytest.raises(GatewayConfigError) as caught:
        config_from_dict({**ENDPOINT, "tenant": [{"name": "web", "key_sha256": "sk-live-123"}]})
    assert "64 hex digits" in str(caught.value)
    assert "sk-live-123" not in str(caught.value)


def test_without_keys_the_gateway_needs_no_auth_said_aloud() -> None:
    with pytest.raises(GatewayConfigError, match="--no-auth"):
        config_from_dict(ENDPOINT)
    assert not config_from_dict(ENDPOINT, auth=False).auth


def test_an_unknown_field_is_named_with_the_file(tmp_path: Path) -> None:
    path = tmp_path / "gw.toml"
    path.write_text('[gateway]\nprot = 80\n[[endpoint]]\nname = "a"\nbase_url = "http://x/v1"\n')
    with pytest.raises(GatewayConfigError, match=r"gw.toml: \[gateway\]: unknown field 'prot'"):
        load_config(path)


def test_flags_make_the_simple_case_and_override_the_file(tmp_path: Path) -> None:
    args = parser().parse_args(["--upstream", "http://127.0.0.1:1/v1", "--rpm", "60",
                                "--key", f"web={key_hash('k')}", "--port", "9000"])  # fmt: skip
    config = build_config(args)
    assert config.port == 9000 and config.budget is not None and config.budget.rpm == 60
    assert config.keys == {key_hash("k"): "web"}
    path = tmp_path / "gw.toml"
    path.write_text(
        f'[gateway]\nport = 8000\n[[tenant]]\nname = "web"\nkey_sha256 = "{key_hash("k")}"\n'
        '[[endpoint]]\nname = "a"\nbase_url = "http://x/v1"\n'
    )
    config = build_config(parser().parse_args(["--config", str(path), "--port", "9001"]))
    assert config.port == 9001


def test_serve_exits_with_one_line_naming_a_missing_upstream_key_variable() -> None:
    run = subprocess.run(
        [sys.executable, "-m", "semisched", "serve", "--upstream", "http://127.0.0.1:1/v1",
         "--upstream-key-env", "SEMISCHED_TEST_UNSET_VAR", "--no-auth"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert run.returncode == 2
    assert "SEMISCHED_TEST_UNSET_VAR is not set" in run.stderr


@pytest.mark.parametrize(
    ("url", "environ", "named"),
    [
        ("https://api.example.com/v1", {"HTTPS_PROXY": "http://proxy:3128"}, "HTTPS_PROXY"),
        ("https://api.example.com/v1", {"https_proxy": "http://proxy:3128"}, "https_proxy"),
        ("http://10.0.0.5:8000/v1", {"ALL_PROXY": "socks5://proxy:1080"}, "ALL_PROXY"),
        ("http://10.0.0.5:8000/v1", {"HTTPS_PROXY": "http://proxy:3128"}, None),  # other scheme
        ("https://api.example.com/v1",
         {"HTTPS_PROXY": "http://proxy:3128", "NO_PROXY": "localhost,.example.com"}, None),
        ("https://api.example.com/v1", {"HTTPS_PROXY": "http://proxy:3128", "no_proxy": "*"}, None),
        ("https://api.example.org/v1",
         {"HTTPS_PROXY": "http://proxy:3128", "NO_PROXY": "example.com"}, "HTTPS_PROXY"),
        ("https://api.example.com/v1", {"HTTPS_PROXY": ""}, None),  # set but empty
    ],
)  # fmt: skip
def test_the_proxy_an_upstream_goes_through_follows_the_environment(
    url: str, environ: dict[str, str], named: str | None
) -> None:
    from semisched.gateway.upstream import proxy_for

    found = proxy_for(url, environ)
    assert found == (None if named is None else (named, environ[named]))


@pytest.mark.parametrize(
    ("proxy", "says"),
    [("ftp://user:s3cret@proxy:21", "is not an http://, https:// or socks5:// URL"),
     pytest.param("socks5://user:s3cret@proxy:1080", "needs the socksio package",
                  marks=pytest.mark.skipif(find_spec("socksio") is not None,
                                           reason="socksio is installed"))],
)  # fmt: skip
def test_an_unusable_proxy_stops_the_start_naming_its_variable_but_not_its_url(
    proxy: str, says: str
) -> None:
    import anyio

    from semisched.gateway.app import Gateway
    from semisched.gateway.config import GatewayConfigError

    config = config_from_dict(ENDPOINT, auth=False)
    gateway = Gateway(config, environ={"ALL_PROXY": proxy})
    with pytest.raises(GatewayConfigError) as caught:
        anyio.run(gateway.start)
    assert "endpoint 'a' (the proxy in ALL_PROXY)" in str(caught.value)
    assert says in str(caught.value) and "s3cret" not in str(caught.value)


def test_the_cap_on_an_upstreams_retry_after_is_set_in_the_file() -> None:
    endpoint = [{"name": "up", "base_url": "http://127.0.0.1:9/v1"}]

    def scheduler_config(**gateway: Any) -> Any:
        data = {"gateway": {"auth": False, **gateway}, "endpoint": endpoint}
        return config_from_dict(data, where="test").scheduler_config()

    assert scheduler_config().retry.max_retry_after_s == 30.0
    assert scheduler_config(max_retry_after_s=5).retry.max_retry_after_s == 5
    with pytest.raises(GatewayConfigError, match="max_retry_after_s"):
        scheduler_config(max_retry_after_s=0)
