"""``python -m bench gateway-faults``: its fake upstream, its gateway file, its tables, and
the whole campaign at ``--quick`` sizes.

Nothing here asserts a timing or how the gateway behaved: only counts, files and that
each scenario has its table."""

from __future__ import annotations

import asyncio
import csv
import json
from pathlib import Path

import pytest

from bench.__main__ import main
from bench.gateway_faults import KEY, SCENARIOS, chat, gateway_file
from bench.gateway_faults_report import TITLES, markdown
from bench.gateway_faults_upstream import FaultyUpstream, exchange
from semisched.gateway.configfile import load_config
from semisched.gateway.keys import KeyTable


def test_the_gateway_file_declares_the_model_the_tenant_and_the_limits(tmp_path: Path) -> None:
    path = gateway_file(tmp_path, "http://127.0.0.1:9/v1",
                        gateway={"header_timeout_s": 2, "max_request_s": 3})  # fmt: skip
    config = load_config(path)
    assert config.models == ("mock-1",)
    assert (config.header_timeout_s, config.max_request_s) == (2, 3)
    assert KeyTable(config.keys).tenant_for(KEY) == "web"
    assert [d.name for d in config.fleet.endpoints] == ["fake"]


@pytest.mark.wallclock
def test_the_fake_upstream_counts_every_request_in_each_mode() -> None:
    upstream = FaultyUpstream()

    async def ask() -> tuple[int | None, bytes]:
        got = await exchange(upstream.port, chat(), timeout_s=10)
        return got.status, got.body

    with upstream.running():
        answered = asyncio.run(ask())
        upstream.reset("502")
        bad = asyncio.run(ask())
        upstream.reset("429-once")
        limited, after = asyncio.run(ask()), asyncio.run(ask())
    assert answered[0] == 200 and json.loads(answered[1])["choices"]
    assert bad[0] == 502 and str(upstream.port).encode() in bad[1]
    assert (limited[0], after[0]) == (429, 200)
    assert (upstream.received, upstream.answered, upstream.mode) == (2, 1, "ok")


def test_the_markdown_has_a_table_per_scenario_under_its_command() -> None:
    results = {name: [{"case": name, "status": 200, "seconds": 1.5}] for name in SCENARIOS}
    text = markdown(results, command="python -m bench gateway-faults --quick")
    assert "`python -m bench gateway-faults --quick`" in text
    for name in SCENARIOS:
        assert f"## {TITLES[name][0]}" in text
        assert f"| {name} | 200 | 1.50 |" in text


@pytest.mark.slow
@pytest.mark.wallclock
@pytest.mark.timeout(300)
def test_the_quick_campaign_writes_a_row_per_scenario(tmp_path: Path) -> None:
    assert main(["gateway-faults", "--quick", "--out", str(tmp_path)]) == 0
    with (tmp_path / "faults.csv").open() as fh:
        rows = list(csv.DictReader(fh))
    assert {r["scenario"] for r in rows} == set(SCENARIOS)
    text = (tmp_path / "faults.md").read_text()
    for name in SCENARIOS:
        section = text.split(f"## {TITLES[name][0]}", 1)[1].split("\n## ", 1)[0]
        assert len([line for line in section.splitlines() if line.startswith("| ")]) >= 2
