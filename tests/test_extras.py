"""A feature whose optional package is missing says what to install, in one line.

Each test hides one package (``sys.modules[name] = None`` makes its import fail
as a missing one does) and forgets the project's modules that import it, so the
feature imports them again and meets the gap; ``monkeypatch`` puts both back.
"""

from __future__ import annotations

import sys
from pathlib import Path

import openai
import pytest

from semisched import Scheduler, SemischedError
from semisched.extras import MissingDependency, require


def hide(monkeypatch: pytest.MonkeyPatch, package: str, *importers: str) -> None:
    """Make ``package`` look uninstalled, and ``importers`` (module prefixes) not yet imported."""
    monkeypatch.setitem(sys.modules, package, None)
    for name in list(sys.modules):  # an imported submodule would still import by itself
        if name.startswith(package + "."):
            monkeypatch.setitem(sys.modules, name, None)
    for name in list(sys.modules):
        if any(name == p or name.startswith(p + ".") for p in importers):
            monkeypatch.delitem(sys.modules, name)


def never_serve(monkeypatch: pytest.MonkeyPatch) -> None:
    """A server that starts anyway fails the test at once instead of serving forever."""
    import uvicorn

    def serve(*args: object, **kwargs: object) -> None:
        raise AssertionError("the server started: the hidden package was imported")

    monkeypatch.setattr(uvicorn, "run", serve)
    monkeypatch.setattr(uvicorn.Server, "serve", serve)


def client() -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(api_key="unused", base_url="http://127.0.0.1:9/v1")


def test_scheduler_metrics_without_prometheus_client_says_what_to_install(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    hide(monkeypatch, "prometheus_client", "semisched.telemetry.prometheus")
    with pytest.raises(MissingDependency) as info:
        Scheduler(client(), metrics=True, priors="heuristic")
    assert str(info.value) == (
        "Scheduler(metrics=...) needs prometheus-client: pip install 'semisched[metrics]'"
    )
    # one of semisched's errors, and still an ImportError for code that catches those
    assert isinstance(info.value, SemischedError) and isinstance(info.value, ImportError)
    assert info.value.name == "prometheus_client"


def test_scheduler_tracing_without_opentelemetry_says_what_to_install(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    hide(monkeypatch, "opentelemetry", "semisched.telemetry.tracing")
    with pytest.raises(MissingDependency, match=r"pip install opentelemetry-api"):
        Scheduler(client(), priors="heuristic")  # tracing=True is the default
    Scheduler(client(), tracing=False, priors="heuristic")  # and the way around it works


def test_a_redis_state_without_the_redis_client_says_what_to_install(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    hide(monkeypatch, "redis", "semisched.state.redis")
    with pytest.raises(ImportError, match=r"needs redis: pip install 'semisched\[redis\]'"):
        Scheduler(client(), state="redis://127.0.0.1:6379/0", priors="heuristic")


def test_batch_metrics_port_without_prometheus_client_exits_2_with_the_hint(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from semisched.batch.cli import main

    hide(monkeypatch, "prometheus_client")
    monkeypatch.setenv("OPENAI_API_KEY", "unused")
    (input_file := tmp_path / "in.jsonl").write_text("")
    code = main(["batch", str(input_file), "-o", str(tmp_path / "o.jsonl"),
                 "--base-url", "http://127.0.0.1:9/v1", "--metrics-port", "9"])  # fmt: skip
    assert code == 2
    assert "--metrics-port needs prometheus-client: pip install 'semisched[metrics]'" in (
        capsys.readouterr().err
    )


def test_the_mock_server_without_starlette_exits_2_with_the_hint(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from mockprovider.__main__ import main

    never_serve(monkeypatch)
    hide(monkeypatch, "starlette", "mockprovider.app", "mockprovider.fleet",
         "mockprovider.metrics", "mockprovider.responses")  # fmt: skip
    with pytest.raises(SystemExit) as info:
        main(["--port", "9"])
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert "the mock's HTTP server needs starlette: pip install 'semisched[mock]'" in err
    assert "Traceback" not in err


def test_semisched_serve_without_starlette_exits_2_with_the_hint(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from semisched.gateway.cli import main

    never_serve(monkeypatch)
    hide(monkeypatch, "starlette", "semisched.gateway.app", "semisched.gateway.server",
         "semisched.gateway.answers", "mockprovider.app", "mockprovider.responses")  # fmt: skip
    assert main(["--demo"]) == 2
    assert capsys.readouterr().err == (
        "semisched serve: semisched serve needs starlette: pip install 'semisched[gateway]'\n"
    )


def test_a_bench_command_without_its_package_exits_2_with_the_hint(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from bench.__main__ import main

    hide(monkeypatch, "threadpoolctl", "bench.plan", "bench.plan_report", "bench.plan_compress")
    with pytest.raises(SystemExit) as info:
        main(["plan"])
    assert info.value.code == 2
    assert capsys.readouterr().err.endswith(
        "python -m bench plan needs threadpoolctl: pip install 'semisched[bench]'\n"
    )


def test_a_missing_module_that_is_no_extra_is_raised_unchanged() -> None:
    with pytest.raises(ModuleNotFoundError) as info:
        require("semisched_no_such_module", "a feature")
    assert not isinstance(info.value, MissingDependency)
