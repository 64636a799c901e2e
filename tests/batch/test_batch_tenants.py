"""``semisched batch`` with tenants: ``--tenant``, ``body.metadata.tenant`` and the summary.

The runs await :func:`semisched.batch.cli.main_async` in virtual time (``conftest.py``)
with the in-process mock provider behind a transport that records every body
it forwards, so a test sees exactly what the provider received. The error
cases call the real entry point, :func:`semisched.batch.cli.main`, which sends nothing.
"""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx2
import openai
import pytest
from batch_testkit import chat_line, cli_args, records, write_lines

from mockprovider.app import MockConfig, create_app
from semisched.batch.cli import main, main_async
from semisched.batch.tenants import (
    line_tenant_problem,
    parse_tenant_option,
    take_tenant,
    tenant_config,
)
from semisched.core.tenants.config import ServiceClass, TenantConfig, TenantSpec

pytestmark = pytest.mark.anyio

TENANTS = ("--tenant", "acme,weight=2", "--tenant", "beta,service=best_effort,max-concurrency=2")


def line(i: int, tenant: str | None, **metadata: str) -> dict[str, Any]:
    """A chat line ``req-<i>`` of ``tenant`` (``None``: it names none)."""
    obj = chat_line(i, out=20)
    obj["body"]["metadata"] = dict(metadata)
    if tenant is not None:
        obj["body"]["metadata"]["tenant"] = tenant
    if not obj["body"]["metadata"]:
        del obj["body"]["metadata"]
    return obj


class _Bodies(httpx2.AsyncBaseTransport):
    """Records the JSON body of every completion request on its way to the mock."""

    def __init__(self, inner: httpx2.AsyncBaseTransport) -> None:
        self.inner = inner
        self.bodies: list[dict[str, Any]] = []

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        if request.url.path.endswith("completions"):
            self.bodies.append(json.loads(await request.aread()))
        return await self.inner.handle_async_request(request)


@asynccontextmanager
async def recording_provider() -> AsyncIterator[tuple[openai.AsyncOpenAI, _Bodies]]:
    """A client to a fresh in-process mock in virtual time, and what it was sent."""
    app = create_app(MockConfig(), clock=anyio.current_time)
    bodies = _Bodies(httpx2.ASGITransport(app=app))
    async with httpx2.AsyncClient(transport=bodies, base_url="http://mock") as http:
        client = openai.AsyncOpenAI(
            base_url="http://mock/v1", api_key="k", http_client=http, max_retries=0
        )
        yield client, bodies


async def test_metadata_tenant_never_reaches_the_provider_and_the_summary_has_each_tenant(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    lines = [line(i, "acme", mock_output_tokens="20") for i in range(4)]
    lines += [line(i, "beta") for i in range(4, 7)]  # metadata only named the tenant
    write_lines(tmp_path / "in.jsonl", lines)
    async with recording_provider() as (client, sent):
        code = await main_async(cli_args(tmp_path, *TENANTS), client=client)
    err = capsys.readouterr().err
    assert code == 0, err
    assert len(sent.bodies) == 7
    assert all("tenant" not in body.get("metadata", {}) for body in sent.bodies)
    kept = [body["metadata"] for body in sent.bodies if "metadata" in body]
    assert kept == [{"mock_output_tokens": "20"}] * 4  # the other metadata goes through
    assert all(r["error"] is None for r in records(tmp_path / "out.jsonl"))
    assert "  tenant acme (elastic): completed 4, rejected 0, expired 0; served " in err
    assert "  tenant beta (best_effort): completed 3, rejected 0, expired 0; served " in err
    acme = next(x for x in err.splitlines() if x.startswith("  tenant acme"))
    beta = next(x for x in err.splitlines() if x.startswith("  tenant beta"))
    assert "(80 output), " in acme  # four answers of 20 tokens
    shares = [int(re.search(r"(\d+)% of the job's", x).group(1)) for x in (acme, beta)]  # type: ignore[union-attr]
    assert 99 <= sum(shares) <= 101 and shares[0] < shares[1]  # beta's answers are longer
    assert acme.endswith("(entitled 100%)") and beta.endswith("(entitled 0%)")  # best-effort


async def test_one_declared_tenant_takes_every_line_and_the_summary_stays_short(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write_lines(tmp_path / "in.jsonl", [line(0, "solo"), line(1, None)])
    async with recording_provider() as (client, sent):
        code = await main_async(cli_args(tmp_path, "--tenant", "solo"), client=client)
    assert code == 0
    assert len(sent.bodies) == 2
    assert "  tenant " not in capsys.readouterr().err  # one tenant: no per-tenant lines


async def test_a_dry_run_plans_tenant_lines_and_sends_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write_lines(tmp_path / "in.jsonl", [line(0, "acme"), line(1, "beta", trace="t")])
    async with recording_provider() as (client, sent):
        code = await main_async(cli_args(tmp_path, *TENANTS, "--dry-run"), client=client)
    assert code == 0
    assert sent.bodies == []
    assert "to send: 2 requests" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("extra", "lines", "message"),
    [
        (
            TENANTS,
            [line(0, "acme"), line(1, "acmee")],
            "line 2: 'body.metadata.tenant' 'acmee' is not a declared tenant "
            "(--tenant: acme, beta)",
        ),
        (
            TENANTS,
            [line(0, "acme"), line(1, None)],
            "line 2: 'body.metadata.tenant' is missing: the job declares several tenants "
            "(acme, beta) and no --default-tenant",
        ),
        (
            (),
            [line(0, None), line(1, "acme")],
            "line 2: 'body.metadata.tenant' 'acme' is not declared: no tenants are "
            "(declare it with --tenant acme)",
        ),
        (
            TENANTS,
            [line(0, "acme"), line(1, "")],
            "line 2: 'body.metadata.tenant' '' must be a non-empty string",
        ),
    ],
)
def test_a_line_with_an_undeclared_or_missing_tenant_is_invalid_and_nothing_is_sent(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    extra: tuple[str, ...],
    lines: list[dict[str, Any]],
    message: str,
) -> None:
    write_lines(tmp_path / "in.jsonl", lines)
    # The base URL refuses connections: had anything been sent, it would have failed.
    argv = cli_args(tmp_path, *extra)
    argv[argv.index("--base-url") + 1] = "http://127.0.0.1:9/v1"
    code = main(argv)
    err = capsys.readouterr().err
    assert code == 2
    assert "1 invalid line(s) in the input; nothing was sent" in err
    assert message in err
    assert not (tmp_path / "out.jsonl").exists()


async def test_skip_invalid_records_the_bad_tenant_line_and_a_default_takes_the_unnamed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write_lines(tmp_path / "in.jsonl", [line(0, "acme"), line(1, "nobody"), line(2, None)])
    argv = cli_args(tmp_path, *TENANTS, "--default-tenant", "beta", "--skip-invalid")
    async with recording_provider() as (client, sent):
        code = await main_async(argv, client=client)
    err = capsys.readouterr().err
    assert code == 1  # an invalid line is an error record
    assert len(sent.bodies) == 2
    bad = {r["custom_id"]: r for r in records(tmp_path / "out.jsonl") if r["error"]}
    assert list(bad) == ["req-1"]
    assert "'nobody' is not a declared tenant" in bad["req-1"]["error"]["message"]
    assert "tenant acme (elastic): completed 1," in err
    assert "tenant beta (best_effort): completed 1," in err  # the line that named none


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (("--tenant", "acme,weight=0"), "tenant 'acme': weight=0.0 must be a finite number > 0"),
        (("--tenant", "acme,colour=red"), "tenant 'acme': unknown key 'colour' (known: weight,"),
        (("--tenant", "acme,service=gold"), "tenant 'acme': service='gold' must be one of"),
        (("--tenant", "acme,rpm=many"), "tenant 'acme': rpm='many' must be an int"),
        (("--tenant", "acme=2"), "--tenant 'acme=2': must be NAME[,weight=W]"),
        (("--tenant-policy", "lottery"), "invalid choice: 'lottery'"),
    ],
)
def test_bad_tenant_options_are_usage_errors_naming_the_field(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], extra: tuple[str, ...], message: str
) -> None:
    with pytest.raises(SystemExit) as info:
        main(cli_args(tmp_path, *extra))
    assert info.value.code == 2
    assert message in capsys.readouterr().err


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (("--default-tenant", "acme"), "--default-tenant acme needs at least one --tenant"),
        (("--tenant-policy", "fifo"), "--tenant-policy fifo needs at least one --tenant"),
        (("--tenant", "a", "--default-tenant", "b"), "default='b' must be one of the tenants"),
        (("--tenant", "a", "--tenant", "a"), "--tenant: tenants=['a', 'a'] must have unique"),
    ],
)
def test_inconsistent_tenant_options_stop_the_job_before_reading_anything(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], extra: tuple[str, ...], message: str
) -> None:
    code = main(cli_args(tmp_path, *extra))
    assert code == 2
    assert message in capsys.readouterr().err


# -- the pieces, without a run --------------------------------------------------------------


def test_parse_tenant_option_reads_every_field() -> None:
    spec = parse_tenant_option(
        "acme, weight=2.5, service=guaranteed, rpm=60, tpm=9000, max_concurrency=3"
    )
    assert spec == TenantSpec(
        name="acme",
        weight=2.5,
        service=ServiceClass.GUARANTEED,
        rpm=60,
        tpm=9000,
        max_concurrency=3,
    )
    assert parse_tenant_option("solo") == TenantSpec(name="solo")
    with pytest.raises(ValueError, match="weight given twice"):
        parse_tenant_option("acme,weight=1,weight=2")


def test_tenant_config_is_none_without_tenants_and_carries_policy_and_default() -> None:
    assert tenant_config(()) is None
    config = tenant_config([TenantSpec(name="a"), TenantSpec(name="b")], policy="fifo", default="b")
    assert config == TenantConfig(
        tenants=(TenantSpec(name="a"), TenantSpec(name="b")), policy="fifo", default="b"
    )


def test_take_tenant_leaves_the_rest_of_metadata_and_the_callers_dict_alone() -> None:
    metadata = {"tenant": "acme", "trace": "x"}
    body: dict[str, Any] = {"model": "m", "metadata": metadata}
    assert take_tenant(body) == "acme"
    assert body == {"model": "m", "metadata": {"trace": "x"}}
    assert metadata == {"tenant": "acme", "trace": "x"}
    alone: dict[str, Any] = {"model": "m", "metadata": {"tenant": "acme"}}
    assert take_tenant(alone) == "acme" and alone == {"model": "m"}
    untouched: dict[str, Any] = {"model": "m", "metadata": {"trace": "x"}}
    assert take_tenant(untouched) is None and untouched["metadata"] == {"trace": "x"}


def test_line_tenant_problem_follows_the_declared_tenants() -> None:
    one = TenantConfig(tenants=(TenantSpec(name="solo"),))
    assert line_tenant_problem(None, one) is None  # the only tenant takes it
    assert line_tenant_problem("solo", one) is None
    assert line_tenant_problem(None, None) is None  # no tenants, none named: fine
    problem = line_tenant_problem("Solo", one)
    assert problem is not None and "'Solo' is not a declared tenant (--tenant: solo)" in problem
