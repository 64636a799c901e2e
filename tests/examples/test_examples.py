"""Every example runs against the mock provider and shows what it promises (real subprocesses)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
pytestmark = pytest.mark.wallclock


def run(name: str) -> str:
    done = subprocess.run(
        [sys.executable, str(EXAMPLES / name)], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


def test_every_example_has_a_test() -> None:
    tested = set(re.findall(r'run\("(\w+\.py)"\)', Path(__file__).read_text()))
    assert {p.name for p in EXAMPLES.glob("*.py")} == tested


def test_fleet_routing_rides_out_the_outage() -> None:
    out = run("fleet_routing.py")
    assert "outcomes {'completed': 360}" in out  # nothing lost to fast-a's outage
    table = re.findall(r"^(fast-a|fast-b|slow) +(\d+) +(\d+) +(\d+) +\d+ +(\d+) ", out, flags=re.M)
    rows = {name: [int(n) for n in counts] for name, *counts in table}  # sent done failed failovers
    assert sorted(rows) == ["fast-a", "fast-b", "slow"]
    assert all(done > 0 for _, done, _, _ in rows.values())  # every endpoint served calls
    _, _, failed, failovers = rows["fast-a"]
    assert failed > 0  # the outage answered 503s ...
    assert failovers == failed  # ... and each of those calls went on to another endpoint at once
    assert rows["slow"][2] == 0  # a healthy endpoint fails nothing


def test_compress_and_route_sends_borderline_prompts_compressed_to_the_short_pool() -> None:
    out = run("compress_and_route.py")
    on, off = re.split(r"^compress_band 1\.0 ", out, flags=re.M)
    row = re.compile(r"^  ([\w-]+) +(\d+)  (short-a|short-b|long) +(\d+)$", re.M)
    rows = {"on": {n: r for n, *r in row.findall(on)}, "off": {n: r for n, *r in row.findall(off)}}
    borderline = [f"borderline-{k}" for k in range(1, 7)]
    assert len(rows["on"]) == len(rows["off"]) == 13
    for name in borderline:
        total, endpoint, sent = rows["on"][name]
        assert 1024 < int(total) <= 1536 and endpoint.startswith("short-")
        assert int(sent) <= 1024 - 128  # compressed to fit beside its max_tokens
        assert rows["off"][name][1] == "long" and int(rows["off"][name][2]) > int(sent)
    assert rows["on"]["mostly-code"][1] == rows["off"]["mostly-code"][1] == "long"
    assert rows["on"]["mostly-code"][2] == rows["off"]["mostly-code"][2]  # sent whole
    assert "compressed 6 of 6 prepared, 0 spilled, 1 too long to compress" in on
    assert "system prompt and code block verbatim in 6 of 6 sent short" in on
    assert "compressed" not in off.split("\n", 1)[1]  # off: no compression line


def test_mixed_workload_serves_both_classes() -> None:
    out = run("mixed_workload.py")
    assert "interactive  {'completed': 40}" in out
    assert "batch        {'completed': 40}" in out
    p95 = dict(re.findall(r"^(interactive|batch) .* p95 latency +([\d.]+) s", out, flags=re.M))
    # Virtual time: the short questions overtake the long jobs, however busy the machine is.
    assert float(p95["interactive"]) < 10.0 < float(p95["batch"])


def test_rate_limits_a_budget_avoids_the_429_storm() -> None:
    out = run("rate_limits.py")
    lines = dict(re.findall(r"^(no budget|budget = limit)\s+(.*)$", out, flags=re.M))
    assert set(lines) == {"no budget", "budget = limit"}
    throttled = {k: int(re.search(r"429s (\d+)", v).group(1)) for k, v in lines.items()}  # type: ignore[union-attr]
    # What the example's docstring promises, exactly: in virtual time no send-to-arrival
    # delay eats into the budget's margin, so pacing at the limit meets no 429 at all.
    assert throttled["budget = limit"] == 0
    assert throttled["no budget"] > 10
    # Paced, with its 5xx answers retried, the budgeted run loses nothing; the storm may
    # exhaust some requests' attempts (RateLimited), which is its point.
    assert "'completed': 60}" in lines["budget = limit"]


def test_virtual_time_runs_ten_minutes_in_seconds() -> None:
    out = run("virtual_time.py")
    assert "outcomes {'completed': 600}" in out
    assert "429s 0, retries 0" in out  # paced to the provider's 60 RPM
    virtual = float(re.search(r"virtual time ([\d.]+) s", out).group(1))  # type: ignore[union-attr]
    assert 600.0 <= virtual < 700.0  # 600 arrivals, 1 s apart, then the last answers


@pytest.mark.slow  # six worker processes and a Redis (15 s); test_shared_state.py: the same, fast
def test_shared_budget_keeps_three_processes_under_one_limit() -> None:
    out = run("shared_budget.py")
    alone = re.search(r"^each alone\s+completed (\d+)/90, 429s (\d+)", out, flags=re.M)
    shared = re.search(r"^shared through Redis\s+completed (\d+)/90, 429s (\d+)", out, flags=re.M)
    assert alone is not None and shared is not None, out
    assert shared.group(1) == "90" and shared.group(2) == "0"  # together, under the limit
    assert int(alone.group(2)) > 0  # alone, each at the whole limit: the storm it prevents


@pytest.mark.slow  # six worker processes and a Redis (30 s); test_sdk_spend.py: one process, fast
def test_spend_caps_hold_across_three_processes_within_one_requests_slack() -> None:
    out = run("spend_caps.py")
    line = r"^{}\s+completed (\d+)/200, refused (\d+), spent \$([\d.]+) of a \$([\d.]+) cap " \
           r"\(one request's p90: \$([\d.]+)\)"  # fmt: skip
    alone = re.search(line.format("each alone"), out, flags=re.M)
    shared = re.search(line.format("shared through Redis"), out, flags=re.M)
    assert alone is not None and shared is not None, out
    cap, slack = float(shared.group(4)), float(shared.group(5))
    assert float(alone.group(3)) > cap * 1.5  # alone, each believes it owns the whole cap
    assert float(shared.group(3)) <= cap + slack  # together, within the cap and one p90
    assert int(shared.group(2)) > 0  # the rest were refused, with the typed error
    assert int(shared.group(1)) + int(shared.group(2)) == 200


#: A row of examples/tenants.py's tables: name, completed, rejected, short p50, short p95.
TENANT_ROW = re.compile(
    r"^  (checkout|search|backfill) .* (\d+) +(\d+) +([\d.]+|-)(?: s)? +([\d.]+|-)(?: s)?$", re.M
)


def test_tenants_fair_share_shields_the_guaranteed_tenant_from_the_flood() -> None:
    out = run("tenants.py")
    runs = re.split(r"^policy (\w+):", out, flags=re.M)[1:]
    tables = dict(zip(runs[::2], runs[1::2], strict=True))
    assert set(tables) == {"fifo", "fair_share"}
    rows = {
        policy: {
            name: (int(done), int(rejected), p50, p95)
            for name, done, rejected, p50, p95 in TENANT_ROW.findall(text)
        }
        for policy, text in tables.items()
    }
    for policy in ("fifo", "fair_share"):
        assert sorted(rows[policy]) == ["backfill", "checkout", "search"]
        assert rows[policy]["checkout"][:2] == (120, 0)  # every checkout call, none shed
        assert rows[policy]["backfill"][0] > 0  # the flood still gets the surplus
    fifo, fair = rows["fifo"]["checkout"], rows["fair_share"]["checkout"]
    # Behind the whole flood under fifo; ahead of it under fair_share.
    assert float(fair[2]) * 20 < float(fifo[2])  # p50
    assert float(fair[3]) * 5 < float(fifo[3])  # p95


def test_observability_shows_metrics_logs_traces_and_an_explained_rejection() -> None:
    out = run("observability.py")
    # Metrics as Prometheus scrapes them: rejected, deferred and retried requests counted.
    for outcome in ("rejected", "deferred", "retried", "completed"):
        line = rf'^  semisched_requests_total\{{[^}}]*outcome="{outcome}"[^}}]*\}} [1-9]'
        assert re.search(line, out, flags=re.M), outcome
    # The decision log's structured fields, one line per rule that fired.
    assert re.search(r"^  reject +batch +xlong +rule=overload\.reject_xlong ", out, flags=re.M)
    assert re.search(r"^  defer +batch .*rule=overload\.defer ", out, flags=re.M)
    # One rejection explained: its rule, severity against the threshold, signals, hint.
    assert "RequestRejected: rejected: overload: severity" in out
    assert re.search(r"^  rule overload\.reject_(x?long): severity [\d.]+ >= threshold", out,
                     flags=re.M)  # fmt: skip
    assert re.search(r"^  signals: provider_load [\d.]+, queue_pressure", out, flags=re.M)
    # Traces (the test extra installs opentelemetry-sdk): a span per request, rules on them.
    assert re.search(r"^traces: \d+ spans 'semisched.request'.*'rejected': [1-9]", out, flags=re.M)
    assert "'semisched.rule': 'overload.reject_" in out


def test_the_grafana_dashboard_queries_only_metrics_semisched_exports() -> None:
    from semisched.telemetry.prometheus import METRICS

    dashboard = json.loads((EXAMPLES / "grafana-dashboard.json").read_text())
    variables = {v["name"]: v for v in dashboard["templating"]["list"]}
    assert variables["DS_PROMETHEUS"]["type"] == "datasource"
    series = {name: set(spec.labels) for name, spec in METRICS.items()}
    for name, spec in METRICS.items():
        if spec.kind == "histogram":
            series.update({f"{name}_{part}": set(spec.labels) for part in ("count", "sum")})
            series[f"{name}_bucket"] = {*spec.labels, "le"}
    titles = []
    for panel in dashboard["panels"]:
        titles.append(panel["title"])
        assert panel["datasource"]["uid"] == "${DS_PROMETHEUS}", panel["title"]
        assert panel["targets"], panel["title"]
        for target in panel["targets"]:
            expr = target["expr"]
            named = re.findall(r"\bsemisched_\w+", expr)
            assert named and set(named) <= set(series), expr  # only exported series
            labels = set().union(*(series[n] for n in named))
            grouped = {g.strip() for by in re.findall(r"\bby \(([\w, ]+)\)", expr)
                       for g in by.split(",")}  # fmt: skip
            selected = set(re.findall(r"(\w+)=\"", expr))
            assert grouped | selected <= labels, expr  # labels those series have
            legend = set(re.findall(r"\{\{(\w+)\}\}", target["legendFormat"]))
            assert legend <= (grouped - {"le"} if grouped else labels), target  # kept by sum by
    assert len(titles) == 10 and len(set(titles)) == 10


@pytest.mark.slow
def test_capacity_plan_meets_its_slo_as_planned_and_not_one_unit_smaller() -> None:
    out = run("capacity_plan.py")
    assert "Recommended: two pools split at B_short" in out
    planned = re.search(r"^as planned +(\d+) +([\d.]+) +yes", out, flags=re.M)
    smaller = re.search(r"^one short unit fewer +(\d+) +([\d.]+) +no", out, flags=re.M)
    assert planned and smaller, out
    assert int(smaller[1]) == int(planned[1]) - 1
    predicted = [float(x) for x in re.findall(r"([\d.]+) s", out.splitlines()[-1])]
    measured = float(planned[2])
    assert min(abs(p - measured) / measured for p in predicted) <= 0.15  # the short pool's tail



def test_the_gateway_example_serves_both_tenants(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import httpx2
    import openai

    from mockprovider.launch import free_port, running_process, running_server

    monkeypatch.setenv("UPSTREAM_API_KEY", "sk-upstream-example")  # the mock's and the gateway's
    port = free_port()
    with running_server("--time-scale", "10", "--api-key-env", "UPSTREAM_API_KEY") as url:
        config = tmp_path / "gateway.toml"  # the example, pointed at this test's mock
        text = (EXAMPLES / "gateway.toml").read_text()
        config.write_text(text.replace("http://127.0.0.1:8001/v1", url))
        argv = ["-m", "semisched", "serve", "--config", str(config), "--port", str(port)]
        with running_process(argv, port, startup_timeout_s=60, stop_timeout_s=60):
            base = f"http://127.0.0.1:{port}/v1"
            hi = [{"role": "user", "content": "hi"}]
            with openai.OpenAI(base_url=base, api_key="sk-gw-web-example") as web:
                reply = web.chat.completions.create(
                    model="mock-1", messages=hi, max_tokens=5,
                    extra_headers={"x-semisched-deadline": "20"},
                )  # fmt: skip
                assert reply.choices[0].message.content
            with openai.OpenAI(base_url=base, api_key="sk-gw-batch-example",
                               max_retries=0) as batch:  # fmt: skip
                stream = batch.completions.create(model="mock-1", prompt="x", max_tokens=4,
                                                  stream=True)  # fmt: skip
                assert "".join(c.choices[0].text for c in stream if c.choices)
                with pytest.raises(openai.PermissionDeniedError):  # only web may: 403
                    batch.chat.completions.create(model="mock-1", messages=hi, max_tokens=4,
                                                  service_tier="priority")  # fmt: skip
                with pytest.raises(openai.NotFoundError):  # not a model it serves: 404
                    batch.chat.completions.create(model="gpt-9", messages=hi, max_tokens=4)
            status = httpx2.get(f"http://127.0.0.1:{port}/semisched/status").json()
            assert {t["name"]: t["completed"] for t in status["tenants"]} == {
                "web": 1, "batch": 1}  # fmt: skip


def test_priority_marks_put_the_urgent_trickle_first_and_the_flood_still_moves() -> None:
    out = run("priority.py")
    rows = {
        name.strip(): tuple(float(v) for v in values.split())
        for name, values in re.findall(
            r"^(no marks|marks|strict tiers|tenant's class) +(.+)$", out, flags=re.M
        )
    }
    assert len(rows) == 4
    unmarked_flood_p50 = rows["no marks"][2]
    for name in ("marks", "strict tiers", "tenant's class"):
        urgent_p95, flood_p50 = rows[name][1], rows[name][2]
        assert urgent_p95 <= 0.4  # at most 2x the unloaded 0.2 s
        assert urgent_p95 < rows["no marks"][1]  # marked is never slower than unmarked
        assert flood_p50 <= 1.2 * unmarked_flood_p50  # the flood still completes


def test_learned_limits_find_each_endpoints_slots_with_nothing_told() -> None:
    out = run("learned_limits.py")
    rows = dict(re.findall(r"^(small|large) +slots +\d+ +learned limit (\d+)", out, flags=re.M))
    # Virtual time: two servers of 4 and 12 slots, no cap told. The small one, always
    # full, lands on its slots (a probe may stand one or two above before the next queue
    # cuts it); the large one at most a little above its slots, and below them only as far
    # as its traffic needs (a limit that is not binding does not probe).
    assert 3 <= int(rows["small"]) <= 6
    assert 8 <= int(rows["large"]) <= 15
    assert "limit.queued" in out  # each cut is explained


def test_every_api_spends_one_key_and_the_budget_meets_no_429() -> None:
    out = run("every_api.py")
    lines = dict(re.findall(r"^(no budget|budget = limit) +(.*)$", out, flags=re.M))
    answered = "answered {'chat': 15, 'embeddings': 15, 'responses': 15}"
    # Without a budget a call can spend its eight attempts on 429s in some of trio's task
    # orders (1 in 8 runs here): only the budgeted run must answer every call.
    assert answered in lines["budget = limit"]
    assert int(re.search(r"429s +(\d+)", lines["no budget"]).group(1)) > 0  # type: ignore[union-attr]
    assert "429s   0," in lines["budget = limit"]  # each API charged what it costs
