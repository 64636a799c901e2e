"""``semisched batch`` over a fleet: ``--endpoint``, ``--fleet``, ``--routing``, and their errors.

The runs await :func:`semisched.batch.cli.main_async` in virtual time
(``conftest.py``) with one in-process mock provider per endpoint
(:class:`batch_testkit.MockFleet`): its ``make_client`` builds each
endpoint's client from the URL and the key the CLI read from the
environment, and each mock requires its own key. The error cases call the
real entry point, :func:`semisched.batch.cli.main`, which sends nothing.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from batch_testkit import chat_line, mock_fleet, records, write_lines

from semisched.batch.cli import main, main_async

pytestmark = pytest.mark.anyio

FLEET_TOML = """
routing = "round_robin"

[[endpoint]]
name = "east"
base_url = "http://east/v1"
key_env = "EAST_KEY"
model_map = { "gpt-logical" = "east-deployment" }

[[endpoint]]
name = "west"
base_url = "http://west/v1"
model_map = { "gpt-logical" = "west-deployment" }
"""


def _args(tmp_path: Path, *target: str) -> list[str]:
    """``semisched batch`` from ``in.jsonl`` to ``out.jsonl`` with heuristic priors."""
    return ["batch", str(tmp_path / "in.jsonl"), "-o", str(tmp_path / "out.jsonl"),
            "--priors", "heuristic", *target]  # fmt: skip


@pytest.fixture
def keys(monkeypatch: pytest.MonkeyPatch) -> None:
    """``EAST_KEY`` and the fleet's default ``FLEET_KEY`` are set."""
    monkeypatch.setenv("EAST_KEY", "sk-east")
    monkeypatch.setenv("FLEET_KEY", "sk-fleet")


@pytest.mark.usefixtures("keys")
async def test_two_endpoints_answer_every_line_and_share_the_work(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write_lines(tmp_path / "in.jsonl", [chat_line(i, out=30 + i) for i in range(24)])
    argv = _args(
        tmp_path,
        "--endpoint", "east=http://east/v1,key-env=EAST_KEY",
        "--endpoint", "west=http://west/v1,max-concurrency=4",
        "--api-key-env", "FLEET_KEY",
        "--max-concurrency", "8",
    )  # fmt: skip
    async with mock_fleet(east={"api_key": "sk-east"}, west={"api_key": "sk-fleet"}) as fleet:
        code = await main_async(argv, make_client=fleet.client)
        east, west = fleet.stats("east").counters, fleet.stats("west").counters
    err = capsys.readouterr().err
    assert code == 0, err
    assert fleet.made == [("east", "sk-east"), ("west", "sk-fleet")]
    out = records(tmp_path / "out.jsonl")
    assert sorted(r["custom_id"] for r in out) == sorted(f"req-{i}" for i in range(24))
    assert all(r["error"] is None and r["response"]["status_code"] == 200 for r in out)
    assert east.completed > 0 and west.completed > 0
    assert east.completed + west.completed == 24
    assert east.unauthorized == west.unauthorized == 0
    assert f"endpoint east: sent {east.requests}, completed {east.completed}" in err
    assert f"endpoint west: sent {west.requests}, completed {west.completed}" in err


@pytest.mark.usefixtures("keys")
async def test_a_fleet_file_maps_models_and_routes_round_robin(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    lines = [chat_line(i) for i in range(10)]
    for line in lines:
        line["body"]["model"] = "gpt-logical"
    write_lines(tmp_path / "in.jsonl", lines)
    (tmp_path / "fleet.toml").write_text(FLEET_TOML)
    argv = _args(tmp_path, "--fleet", str(tmp_path / "fleet.toml"), "--api-key-env", "FLEET_KEY")
    async with mock_fleet(east={"api_key": "sk-east"}, west={"api_key": "sk-fleet"}) as fleet:
        code = await main_async(argv, make_client=fleet.client)
        sent = {name: fleet.stats(name).counters.completed for name in ("east", "west")}
    err = capsys.readouterr().err
    assert code == 0, err
    assert sent == {"east": 5, "west": 5}  # the file's round_robin alternates
    models = {r["response"]["body"]["model"] for r in records(tmp_path / "out.jsonl")}
    assert models == {"east-deployment", "west-deployment"}


@pytest.mark.usefixtures("keys")
async def test_routing_on_the_command_line_overrides_the_file(tmp_path: Path) -> None:
    write_lines(tmp_path / "in.jsonl", [chat_line(i) for i in range(6)])
    (tmp_path / "fleet.toml").write_text(FLEET_TOML.replace("gpt-logical", "mock-1"))
    argv = _args(tmp_path, "--fleet", str(tmp_path / "fleet.toml"), "--api-key-env", "FLEET_KEY",
                 "--routing", "least_outstanding", "--max-concurrency", "1")  # fmt: skip
    async with mock_fleet(east={}, west={}) as fleet:
        assert await main_async(argv, make_client=fleet.client) == 0
        east = fleet.stats("east").counters.completed
        west = fleet.stats("west").counters.completed
    # one at a time: least_outstanding finds both idle, and its ties go to fleet order
    assert (east, west) == (6, 0)


@pytest.mark.usefixtures("keys")
async def test_a_fleet_job_resumes_and_dry_runs_without_sending(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    write_lines(tmp_path / "in.jsonl", [chat_line(i) for i in range(4)])
    argv = _args(tmp_path, "--endpoint", "east=http://east/v1,key-env=EAST_KEY",
                 "--endpoint", "west=http://west/v1", "--api-key-env", "FLEET_KEY")  # fmt: skip
    async with mock_fleet(east={}, west={}) as fleet:
        assert await main_async([*argv, "--dry-run"], make_client=fleet.client) == 0
        assert fleet.made == [] and not (tmp_path / "out.jsonl").exists()
        assert await main_async(argv, make_client=fleet.client) == 0
        write_lines(tmp_path / "in.jsonl", [chat_line(i) for i in range(6)])
        monkeypatch.delenv("EAST_KEY")  # a dry run needs no key
        assert await main_async([*argv, "--dry-run"], make_client=fleet.client) == 0
        monkeypatch.setenv("EAST_KEY", "sk-east")
        assert await main_async(argv, make_client=fleet.client) == 0
        sent = fleet.stats("east").counters.requests + fleet.stats("west").counters.requests
    assert sent == 6  # the rerun sent only the two new lines
    assert sorted(r["custom_id"] for r in records(tmp_path / "out.jsonl")) == [
        f"req-{i}" for i in range(6)
    ]
    assert "2 succeeded, 0 failed, 0 invalid lines" in capsys.readouterr().err


@pytest.mark.usefixtures("keys")
async def test_a_failing_endpoint_fails_over_to_the_other(tmp_path: Path) -> None:
    write_lines(tmp_path / "in.jsonl", [chat_line(i) for i in range(12)])
    argv = _args(tmp_path, "--endpoint", "bad=http://bad/v1", "--endpoint", "good=http://good/v1",
                 "--api-key-env", "FLEET_KEY", "--routing", "round_robin")  # fmt: skip
    async with mock_fleet(bad={"error_rate": 1.0}, good={}) as fleet:
        assert await main_async(argv, make_client=fleet.client) == 0
        assert fleet.stats("bad").counters.completed == 0
        assert fleet.stats("good").counters.completed == 12
    assert all(r["error"] is None for r in records(tmp_path / "out.jsonl"))


# -- errors before anything is sent ---------------------------------------------------------


def test_a_missing_key_variable_names_the_endpoint_and_writes_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("EAST_KEY", "sk-secret-east")
    monkeypatch.delenv("WEST_KEY", raising=False)
    write_lines(tmp_path / "in.jsonl", [chat_line(0)])
    code = main(_args(tmp_path, "--endpoint", "east=http://127.0.0.1:9/v1,key-env=EAST_KEY",
                      "--endpoint", "west=http://127.0.0.1:9/v1,key-env=WEST_KEY"))  # fmt: skip
    err = capsys.readouterr().err
    assert code == 2
    assert "semisched batch: endpoint 'west': the API key variable WEST_KEY is not set" in err
    assert "sk-secret" not in err and "Traceback" not in err
    assert not (tmp_path / "out.jsonl").exists()


def test_a_missing_default_key_names_the_variable(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    write_lines(tmp_path / "in.jsonl", [chat_line(0)])
    (tmp_path / "fleet.toml").write_text(
        '[[endpoint]]\nname = "solo"\nbase_url = "http://127.0.0.1:9/v1"\n'
    )
    code = main(_args(tmp_path, "--fleet", str(tmp_path / "fleet.toml")))
    err = capsys.readouterr().err
    assert code == 2 and "endpoint 'solo': the API key variable OPENAI_API_KEY is not set" in err


def test_a_bad_fleet_file_exits_2_naming_the_file_and_field(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write_lines(tmp_path / "in.jsonl", [chat_line(0)])
    path = tmp_path / "fleet.toml"
    path.write_text('[[endpoint]]\nname = "a"\nbase_url = "http://a/v1"\nrpn = 5\n')
    code = main(_args(tmp_path, "--fleet", str(path)))
    err = capsys.readouterr().err
    assert code == 2
    assert f"semisched batch: {path}: endpoint 'a': unknown field 'rpn'" in err
    assert not (tmp_path / "out.jsonl").exists()


@pytest.mark.usefixtures("keys")
def test_a_model_no_endpoint_serves_is_an_invalid_line_before_anything_is_sent(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write_lines(tmp_path / "in.jsonl", [chat_line(0), chat_line(1)])  # model "mock-1"
    (tmp_path / "fleet.toml").write_text(FLEET_TOML)  # serves only "gpt-logical"
    code = main(_args(tmp_path, "--fleet", str(tmp_path / "fleet.toml"), "--api-key-env",
                      "FLEET_KEY"))  # fmt: skip
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err
    assert "line 1: 'body.model' 'mock-1' is served by no endpoint (east: gpt-logical; " in err
    assert not (tmp_path / "out.jsonl").exists()


def test_a_missing_fleet_file_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(_args(tmp_path, "--fleet", str(tmp_path / "nope.toml")))
    assert code == 2 and "cannot read fleet file" in capsys.readouterr().err


def test_duplicate_endpoint_names_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(_args(tmp_path, "--endpoint", "a=http://a/v1", "--endpoint", "a=http://b/v1"))
    assert code == 2 and "duplicate endpoint name 'a'" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("target", "message"),
    [
        (["--base-url", "http://a/v1", "--endpoint", "a=http://a/v1"],
         "argument --endpoint: not allowed with argument --base-url"),
        (["--endpoint", "a=http://a/v1", "--fleet", "f.toml"],
         "argument --fleet: not allowed with argument --endpoint"),
        (["--fleet", "f.toml", "--base-url", "http://a/v1"],
         "argument --base-url: not allowed with argument --fleet"),
        (["--endpoint", "a=http://a/v1,region=eu"],
         "argument --endpoint: endpoint 'a': unknown key 'region'"),
        (["--endpoint", "a"], "argument --endpoint: --endpoint 'a': must be NAME=URL"),
        (["--endpoint", "a=http://a/v1", "--routing", "fastest"],
         "argument --routing: invalid choice: 'fastest'"),
    ],
)  # fmt: skip
def test_bad_target_arguments_are_usage_errors(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], target: list[str], message: str
) -> None:
    with pytest.raises(SystemExit) as info:
        main(_args(tmp_path, *target))
    assert info.value.code == 2
    assert message in capsys.readouterr().err


def test_an_unreachable_shared_state_is_a_clean_error_before_anything_is_sent(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import socket

    with socket.socket() as sock:  # a loopback port nobody listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    monkeypatch.setenv("OPENAI_API_KEY", "sk-unused")
    write_lines(tmp_path / "in.jsonl", [chat_line(0)])
    code = main(_args(tmp_path, "--base-url", "http://127.0.0.1:9/v1",
                      "--state", f"redis://:s3cret@127.0.0.1:{port}/0"))  # fmt: skip
    err = capsys.readouterr().err
    assert code == 2, err
    assert "the shared state cannot be reached" in err and f"127.0.0.1:{port}" in err
    assert "s3cret" not in err and "Traceback" not in err
