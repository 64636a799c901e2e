"""``semisched plan fit``: the endpoint speed a log gives back, and the timing batch records carry.

Simulated logs come from the real simulator against physics with a known W, H
and overhead; batch logs from ``semisched batch`` runs against the in-process
mock provider in virtual time (trio's autojumping ``MockClock``, as in
this folder's conftest). A fit must give back the physics it was taken from.
"""

from __future__ import annotations

import io
import json
import random
from pathlib import Path
from typing import Any

import anyio
import httpx2
import openai
import pytest

from mockprovider.app import MockConfig, create_app
from mockprovider.physics import PhysicsParams
from semisched.batch import BatchOptions, BatchRun
from semisched.core.config import preset
from semisched.core.request import Prior, Request
from semisched.plan.fit import fit_log, fit_main, read_log
from semisched.plan.profile import load_profile, named_profile
from semisched.sim.simulator import SimJob, simulate

W, H, SLOTS = 20.0, 2.0, 32


def _jobs(seed: int, rates: tuple[float, ...], per_rate: int = 100) -> list[SimJob]:
    """``per_rate`` Poisson arrivals at each rate (per second), a minute apart."""
    rng = random.Random(seed)
    jobs, t = [], 0.0
    for level, rate in enumerate(rates):
        for i in range(per_rate):
            t += rng.expovariate(rate)
            out, prompt = rng.randint(20, 300), rng.randint(10, 2000)
            request = Request(
                id=f"j{level}-{i}",
                klass="batch",
                prior=Prior(p50=out, p90=out),
                input_tokens=prompt,
                arrival=t,
            )
            jobs.append(SimJob(request, out, prompt))
        t += 60.0
    return jobs


def _trace(
    tmp_path: Path, overhead_ms: float = 0.0, rates: tuple[float, ...] = (0.4, 1.0, 1.8)
) -> Path:
    physics = PhysicsParams(slots=SLOTS, base_iter_ms=W, per_slot_ms=H, overhead_ms=overhead_ms)
    path = tmp_path / "trace.csv"
    path.write_text(simulate(_jobs(7, rates), preset("direct_naive"), physics).trace_csv())
    return path


def test_the_trace_carries_each_jobs_true_prompt_length(tmp_path: Path) -> None:
    rows = _trace(tmp_path).read_text().splitlines()
    header = rows[0].split(",")
    first = dict(zip(header, rows[1].split(","), strict=True))
    job = _jobs(7, (0.4, 1.0, 1.8))[0]
    assert first["id"] == job.request.id and int(first["input_tokens"]) == job.input_tokens


@pytest.mark.parametrize("overhead_ms", [0.0, 3294.0])
def test_a_simulated_trace_gives_back_w_h_and_the_overhead(
    tmp_path: Path, overhead_ms: float
) -> None:
    fit = fit_log(_trace(tmp_path, overhead_ms), named_profile("default"))
    # the model is the simulator's fluid batching exactly: far inside the 10% asked for
    assert fit.base_iter_ms == pytest.approx(W, rel=0.01)
    assert fit.per_slot_ms == pytest.approx(H, rel=0.01)
    assert fit.overhead_ms == pytest.approx(overhead_ms, abs=5.0)
    assert fit.r_squared > 0.999 and fit.residual_p95_ms < 1.0
    assert fit.n_bar_min < 2 and fit.n_bar_max > 10  # the three load levels were seen
    assert fit.observations + fit.dropped + fit.skipped == 300
    assert fit.profile.base_iter_ms == fit.base_iter_ms and fit.profile.slots == SLOTS


def test_requests_that_queued_beyond_the_slots_are_dropped_not_fitted(tmp_path: Path) -> None:
    fit = fit_log(_trace(tmp_path, rates=(0.4, 1.0, 4.0)), named_profile("default"))
    assert fit.dropped > 20  # the busiest level overflowed the 32 slots
    assert fit.per_slot_ms == pytest.approx(H, rel=0.10)
    fewer = fit_log(tmp_path / "trace.csv", named_profile("default"), slots=8)
    assert fewer.dropped > fit.dropped
    assert fewer.per_slot_ms == pytest.approx(H, rel=0.10)
    # told the endpoint has more slots than it has, the queued requests bias the fit
    blind = fit_log(tmp_path / "trace.csv", named_profile("default"), slots=64)
    assert blind.dropped == 0 and blind.r_squared < 0.95 and blind.residual_p95_ms > 1000


# -- batch output --------------------------------------------------------------------------------


def _line(i: int, rng: random.Random) -> dict[str, Any]:
    out, words = rng.randint(20, 300), rng.randint(5, 1500)
    return {
        "custom_id": f"c{i}",
        "method": "POST",
        "url": "/v1/chat/completions",
        "body": {
            "model": "mock-1",
            "max_tokens": 400,
            "messages": [{"role": "user", "content": " ".join(["word"] * words)}],
            "metadata": {"mock_output_tokens": str(out)},
        },
    }


async def _batch_runs(tmp_path: Path, caps: tuple[int, ...], per_run: int = 40) -> Path:
    """One ``semisched batch`` run per concurrency cap, each with new lines, all appended
    to one output file, against one mock provider (W, H, 32 slots) in virtual time."""
    physics = PhysicsParams(slots=SLOTS, base_iter_ms=W, per_slot_ms=H)
    app = create_app(MockConfig(physics=physics), clock=anyio.current_time)
    rng = random.Random(3)
    output = tmp_path / "out.jsonl"
    async with httpx2.AsyncClient(
        transport=httpx2.ASGITransport(app=app), base_url="http://mock"
    ) as http:
        client = openai.AsyncOpenAI(
            base_url="http://mock/v1", api_key="k", http_client=http, max_retries=0
        )
        for run, cap in enumerate(caps):
            lines = [_line(run * per_run + i, rng) for i in range(per_run)]
            source = tmp_path / f"in{run}.jsonl"
            source.write_text("".join(json.dumps(line) + "\n" for line in lines))
            options = BatchOptions(
                input=source,
                output=output,
                base_url="http://mock/v1",
                priors="heuristic",
                max_concurrency=cap,
            )
            summary = await BatchRun(options, client=client).run()
            assert summary.succeeded == per_run
    return output


@pytest.mark.anyio
async def test_batch_records_say_when_each_request_was_sent_and_answered(tmp_path: Path) -> None:
    output = await _batch_runs(tmp_path, caps=(4, 4), per_run=12)
    records = [json.loads(line) for line in output.read_text().splitlines()]
    assert len(records) == 24
    runs = {r["semisched"]["run"] for r in records}
    assert len(runs) == 2  # a second invocation appending to the file is told apart
    for record in records:
        timing = record["semisched"]
        assert set(timing) == {"endpoint", "sent_s", "first_token_s", "done_s", "run"}
        assert timing["endpoint"] == "default" and timing["first_token_s"] is None
        assert 0.0 <= timing["sent_s"] < timing["done_s"]
        # at most 4 in flight, 12 requests of <= 300 tokens at <= 28 ms a token: minutes, not hours
        assert timing["done_s"] < 600.0
        usage = record["response"]["body"]["usage"]
        # the provider was busy at least iterations * W for it
        assert (timing["done_s"] - timing["sent_s"]) * 1000 >= W * usage["completion_tokens"]


@pytest.mark.anyio
async def test_a_batch_output_gives_back_the_mock_providers_w_and_h(tmp_path: Path) -> None:
    output = await _batch_runs(tmp_path, caps=(2, 10, 24))
    fit = fit_log(output, named_profile("default"))
    assert fit.observations == 120 and fit.dropped == 0 and fit.skipped == 0
    # virtual time: the client sees the provider's own send and finish instants
    assert fit.base_iter_ms == pytest.approx(W, rel=0.01)
    assert fit.per_slot_ms == pytest.approx(H, rel=0.01)
    assert fit.overhead_ms == pytest.approx(0.0, abs=5.0)


# -- bad input and the command -------------------------------------------------------------------


def _record(i: int, sent: float, done: float, out: int) -> str:
    usage = {"prompt_tokens": 10, "completion_tokens": out, "total_tokens": 10 + out}
    timing = {"endpoint": "e", "sent_s": sent, "first_token_s": None, "done_s": done, "run": "r"}
    return json.dumps(
        {
            "id": f"b{i}",
            "custom_id": f"c{i}",
            "error": None,
            "semisched": timing,
            "response": {"status_code": 200, "body": {"usage": usage}},
        }
    )


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "the log is empty"),
        ("\n\n", "the log is empty"),
        ("hello world\n", "line 1: neither a simulator trace header nor a batch output record"),
        (_record(0, 0.0, 1.0, 5) + "\n{oops\n", "line 2: not JSON"),
        ('{"custom_id": "c0", "error": {"code": "x"}, "response": null}\n', "no completed request"),
    ],
)
def test_bad_logs_are_refused_with_a_clear_message(tmp_path: Path, text: str, message: str) -> None:
    (tmp_path / "log").write_text(text)
    with pytest.raises(ValueError, match=message):
        fit_log(tmp_path / "log")


def test_a_log_at_one_concurrency_level_cannot_separate_w_from_h(tmp_path: Path) -> None:
    t, lines = 0.0, []
    for i in range(20):  # one request at a time: always 1 in flight
        out = 10 + 7 * i
        done = t + (W + H) * (out + 1) / 1000.0
        lines.append(_record(i, t, done, out))
        t = done + 1.0
    (tmp_path / "log").write_text("\n".join(lines) + "\n")
    assert len(read_log(tmp_path / "log")) == 20
    with pytest.raises(ValueError, match=r"same concurrency.*varied load"):
        fit_log(tmp_path / "log")


def test_a_log_where_more_in_flight_is_faster_is_refused_not_clipped(tmp_path: Path) -> None:
    t, lines = 0.0, []
    for i in range(20):  # alone: 30 ms a token; two at a time: 10 ms a token (H < 0)
        out = 10 + 7 * i
        alone = t + 30.0 * (out + 1) / 1000.0
        lines.append(_record(2 * i, t, alone, out))
        both = alone + 10.0 * (out + 1) / 1000.0
        lines += [_record(2 * i + 1, alone, both, out), _record(100 + i, alone, both, out)]
        t = both + 1.0
    (tmp_path / "log").write_text("\n".join(lines) + "\n")
    with pytest.raises(ValueError, match=r"H=-.*must be positive.*batching model"):
        fit_log(tmp_path / "log")


def test_fit_main_prints_the_fit_and_writes_a_profile_that_loads(tmp_path: Path) -> None:
    log, out = _trace(tmp_path, 500.0), tmp_path / "fitted.json"
    stream = io.StringIO()
    assert fit_main([str(log), "--out", str(out)], stream) == 0
    text = stream.getvalue()
    assert "W  base iteration" in text and "profile written to" in text
    profile = load_profile(out)
    assert profile.base_iter_ms == pytest.approx(W, rel=0.10)
    assert profile.overhead_ms == pytest.approx(500.0, abs=50.0)
    assert profile.lone_decode_ms_per_token() == pytest.approx(W + H, rel=0.10)
    stream = io.StringIO()
    assert fit_main([str(log), "--json", "--slots", "16"], stream) == 0
    data = json.loads(stream.getvalue())
    assert data["profile"]["slots"] == 16 and data["per_slot_ms"] == pytest.approx(H, rel=0.10)


@pytest.mark.parametrize(
    "argv",
    [["missing.jsonl"], ["{log}", "--profile", "nope"], ["{log}", "--slots", "x"], []],
)
def test_fit_main_answers_bad_input_with_one_line_and_exit_2(
    tmp_path: Path, argv: list[str]
) -> None:
    log = _trace(tmp_path)
    stream = io.StringIO()
    assert fit_main([a.format(log=log) for a in argv], stream) == 2
    lines = stream.getvalue().splitlines()
    assert len(lines) == 1 and lines[0].startswith("semisched plan fit: ")
