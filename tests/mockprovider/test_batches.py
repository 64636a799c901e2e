"""The mock's Batch API (``/v1/batches``, mockprovider.batches, batch_state, batch_lines),
driven by the real openai client: the status progression on the virtual clock, output and
error files, validation failures, cancel, expiry, the failure rate, the turnaround flags and
the statistics.

Every test runs in virtual time (``conftest.py``, ``served.serve``): a batch's hour takes
microseconds, and every instant below is exact.
"""

from __future__ import annotations

import json
from dataclasses import asdict, replace
from typing import Any

import anyio
import openai
import pytest
from openai.types import Batch, Completion, CreateEmbeddingResponse
from openai.types.chat import ChatCompletion
from openai.types.responses import Response
from served import CLIENT_GENERATORS, Mock, serve

from mockprovider import MockConfig, MockStats
from mockprovider.__main__ import build_parser, config_from_args, main
from mockprovider.batch_state import BatchSettings, Schedule
from mockprovider.stats import BatchStats

pytestmark = [pytest.mark.anyio, CLIENT_GENERATORS]

CHAT = "/v1/chat/completions"
BODIES: dict[str, tuple[dict[str, Any], type[Any]]] = {
    CHAT: ({"messages": [{"role": "user", "content": "Say something."}]}, ChatCompletion),
    "/v1/completions": ({"prompt": "Say something."}, Completion),
    "/v1/responses": ({"input": "Say something."}, Response),
    "/v1/embeddings": ({"input": ["one", "two"]}, CreateEmbeddingResponse),
}


def exact(**settings: Any) -> MockConfig:
    """A mock whose batches all take 1000 virtual seconds (no spread)."""
    return MockConfig(batch_turnaround_s=1000.0, batch_turnaround_sigma=0.0, **settings)


def line(custom_id: str, url: str = CHAT, output: int = 3, **body: Any) -> dict[str, Any]:
    """One input line for ``url`` (its body hints ``output`` tokens)."""
    payload = {"model": "m", **BODIES[url][0], "metadata": {"mock_output_tokens": str(output)}}
    return {"custom_id": custom_id, "method": "POST", "url": url, "body": {**payload, **body}}


def jsonl(lines: list[Any]) -> bytes:
    return "".join((x if isinstance(x, str) else json.dumps(x)) + "\n" for x in lines).encode()


async def submit(mock: Mock, lines: list[Any], endpoint: str = CHAT) -> Batch:
    uploaded = await mock.client.files.create(file=("in.jsonl", jsonl(lines)), purpose="batch")
    return await mock.client.batches.create(
        input_file_id=uploaded.id,
        endpoint=endpoint,  # type: ignore[arg-type]
        completion_window="24h",
    )


async def file_lines(mock: Mock, file_id: str | None) -> list[dict[str, Any]]:
    if file_id is None:
        return []
    content = await mock.client.files.content(file_id)
    return [json.loads(x) for x in content.text.splitlines()]


async def at(mock: Mock, t: float, batch_id: str) -> Batch:
    """The batch at virtual time ``t`` (from the first request)."""
    await anyio.sleep(t - mock.app.state.mock_stats().virtual_time)
    return await mock.client.batches.retrieve(batch_id)


def span(batch: Batch, field: str) -> int:
    value = getattr(batch, field)
    assert isinstance(value, int)
    return value - batch.created_at


# -- the happy path -------------------------------------------------------------------------


async def test_a_batch_validates_runs_finalizes_and_completes_on_the_virtual_clock() -> None:
    # T = 1000: validating to 50, lines finish at 50 + (i + 1) * 225, finalizing 950, done 1000.
    async with serve(exact()) as mock:
        created = await submit(mock, [line(f"r{i}", output=i + 1) for i in range(4)])
        seen = {t: await at(mock, t, created.id) for t in (40, 60, 300, 520, 960, 1001)}
        output = await file_lines(mock, seen[1001].output_file_id)
        stats = await mock.stats()
    assert created.id.startswith("batch_") and created.object == "batch"
    assert (created.status, created.endpoint, created.completion_window) == (
        "validating",
        CHAT,
        "24h",
    )
    assert created.expires_at == created.created_at + 86_400
    assert [b.status for b in seen.values()] == [
        *("validating", "in_progress", "in_progress", "in_progress", "finalizing", "completed")
    ]
    counts = [b.request_counts for b in seen.values()]
    assert [(c.total, c.completed) for c in counts if c] == [
        *((0, 0), (4, 0), (4, 1), (4, 2), (4, 4), (4, 4))
    ]
    done = seen[1001]
    assert span(done, "in_progress_at") in (49, 50, 51)
    assert span(done, "finalizing_at") in (949, 950, 951)
    assert span(done, "completed_at") in (999, 1000, 1001)
    assert (done.failed_at, done.expired_at, done.cancelled_at, done.errors) == (None,) * 4
    assert done.error_file_id is None and done.model == "m"
    assert [x["custom_id"] for x in output] == ["r0", "r1", "r2", "r3"]
    for i, x in enumerate(output):
        assert x["id"].startswith("batch_req_") and x["error"] is None
        assert x["response"]["status_code"] == 200
        assert x["response"]["request_id"].startswith("req_")
        answer = ChatCompletion.model_validate(x["response"]["body"])
        assert answer.usage is not None
        assert (answer.usage.prompt_tokens, answer.usage.completion_tokens) == (4, i + 1)
    assert done.usage is not None
    assert (done.usage.input_tokens, done.usage.output_tokens) == (16, 10)
    assert stats.batches == BatchStats(batches=1, completed=1, lines=4, lines_completed=4)
    assert stats.counters.requests == stats.counters.completed == 0  # lines are not requests
    assert stats.quota_used == 0


@pytest.mark.parametrize("endpoint", list(BODIES))
async def test_each_endpoint_answers_its_real_time_body(endpoint: str) -> None:
    async with serve(exact()) as mock:
        created = await submit(mock, [line("a", endpoint), line("b", endpoint)], endpoint)
        done = await at(mock, 1000, created.id)
        output = await file_lines(mock, done.output_file_id)
    assert done.status == "completed"
    kind = BODIES[endpoint][1]
    for x in output:
        raw = x["response"]["body"]
        if endpoint == "/v1/responses":
            # The installed openai's ResponseUsage requires input_tokens_details.
            # cache_write_tokens, which the mock's Responses route does not send (its
            # real-time answers neither: openai's client parses them without validating).
            raw["usage"]["input_tokens_details"].setdefault("cache_write_tokens", 0)
        body = kind.model_validate(raw)
        assert body.usage is not None


async def test_the_list_pages_newest_first() -> None:
    async with serve(exact()) as mock:
        ids = [(await submit(mock, [line("a")])).id for _ in range(3)]
        first = await mock.client.batches.list(limit=2)
        rest = await mock.client.batches.list(limit=2, after=first.data[-1].id)
        with pytest.raises(openai.NotFoundError):
            await mock.client.batches.retrieve("batch_nope")
    assert [b.id for b in first.data] == ids[::-1][:2] and first.has_more
    assert [b.id for b in rest.data] == ids[:1] and not rest.has_more


# -- validation -----------------------------------------------------------------------------


async def test_a_malformed_file_fails_the_batch_with_its_errors() -> None:
    lines: list[Any] = [
        line("ok"),
        "{not json",
        line("ok"),  # a repeated custom_id
        {**line("c"), "url": "/v1/embeddings"},
        {**line("d"), "method": "GET"},
        {"custom_id": "e", "method": "POST", "url": CHAT},
        [1, 2],
    ]
    async with serve(exact()) as mock:
        created = await submit(mock, lines)
        failed = await at(mock, 50, created.id)
        empty = await submit(mock, ["", "  "])
        empty = await at(mock, 100, empty.id)
        stats = await mock.stats()
    assert failed.status == "failed" and span(failed, "failed_at") in (49, 50, 51)
    assert failed.errors is not None and failed.errors.data is not None
    codes = [(e.code, e.line) for e in failed.errors.data]
    assert codes == [
        ("invalid_json_line", 2),
        ("duplicate_custom_id", 3),
        ("invalid_url", 4),
        ("invalid_method", 5),
        ("missing_required_parameter", 6),
        ("invalid_json_line", 7),
    ]
    assert failed.request_counts is not None and failed.request_counts.total == 0
    assert (failed.output_file_id, failed.error_file_id, failed.in_progress_at) == (None,) * 3
    assert empty.status == "failed"
    assert [e.code for e in empty.errors.data] == ["empty_file"]  # type: ignore[union-attr]
    assert stats.batches.failed == 2 and stats.batches.lines == 0


async def test_a_bad_create_request_is_refused() -> None:
    async with serve(MockConfig()) as mock:
        notes = await mock.client.files.create(file=("n.jsonl", b"{}"), purpose="user_data")
        refusals = []
        cases: list[tuple[dict[str, Any], type[openai.APIStatusError]]] = [
            ({"input_file_id": "file-nope"}, openai.NotFoundError),
            ({"input_file_id": notes.id}, openai.BadRequestError),
            ({"input_file_id": notes.id, "endpoint": "/v1/images"}, openai.BadRequestError),
            ({"input_file_id": notes.id, "completion_window": "1h"}, openai.BadRequestError),
            ({"input_file_id": notes.id, "metadata": {"k": 1}}, openai.BadRequestError),
        ]
        for kwargs, error in cases:
            request: dict[str, Any] = {"endpoint": CHAT, "completion_window": "24h", **kwargs}
            with pytest.raises(error) as info:
                await mock.client.batches.create(**request)
            refusals.append(info.value.body["param"])  # type: ignore[index]
    assert refusals == [
        *("input_file_id", "input_file_id", "endpoint", "completion_window", "metadata")
    ]


async def test_a_body_its_endpoint_refuses_is_a_400_in_the_error_file() -> None:
    no_model = {"custom_id": "b", "method": "POST", "url": CHAT, "body": {"messages": []}}
    async with serve(exact()) as mock:
        created = await submit(mock, [line("a"), no_model, line("c", stream=True)])
        done = await at(mock, 1000, created.id)
        output = await file_lines(mock, done.output_file_id)
        errors = await file_lines(mock, done.error_file_id)
    assert done.status == "completed"
    assert (done.request_counts.completed, done.request_counts.failed) == (1, 2)  # type: ignore[union-attr]
    assert [x["custom_id"] for x in output] == ["a"]
    assert [(x["custom_id"], x["response"]["status_code"]) for x in errors] == [
        ("b", 400),
        ("c", 400),
    ]
    assert [x["response"]["body"]["error"]["param"] for x in errors] == ["model", "stream"]
    assert all(x["error"] is None for x in errors)


# -- cancel, expiry, failures ---------------------------------------------------------------


async def test_a_cancel_keeps_the_lines_finished_before_it() -> None:
    # T = 1000, 10 lines: line i finishes at 50 + (i + 1) * 90; cancelling lasts 50.
    async with serve(exact()) as mock:
        created = await submit(mock, [line(f"r{i}") for i in range(10)])
        await at(mock, 330, created.id)  # 3 lines done
        cancelling = await mock.client.batches.cancel(created.id)
        again = await mock.client.batches.cancel(created.id)
        mid = await at(mock, 370, created.id)
        cancelled = await at(mock, 380, created.id)
        output = await file_lines(mock, cancelled.output_file_id)
        errors = await file_lines(mock, cancelled.error_file_id)
        other = await submit(mock, [line("x")])
        await at(mock, 2000, other.id)
        with pytest.raises(openai.BadRequestError):
            await mock.client.batches.cancel(other.id)
        stats = await mock.stats()
    assert (cancelling.status, again.status, mid.status) == ("cancelling",) * 3
    assert span(cancelling, "cancelling_at") in (329, 330, 331) and cancelling.cancelled_at is None
    assert cancelled.status == "cancelled" and span(cancelled, "cancelled_at") in (379, 380, 381)
    assert cancelled.finalizing_at is None and cancelled.completed_at is None
    assert cancelled.request_counts is not None
    assert (cancelled.request_counts.completed, cancelled.request_counts.failed) == (3, 7)
    assert [x["custom_id"] for x in output] == ["r0", "r1", "r2"]
    assert [x["custom_id"] for x in errors] == [f"r{i}" for i in range(3, 10)]
    assert {x["error"]["code"] for x in errors} == {"batch_cancelled"}
    assert all(x["response"] is None for x in errors)
    assert (stats.batches.cancelled, stats.batches.completed) == (1, 1)
    assert (stats.batches.lines_completed, stats.batches.lines_failed) == (4, 7)


async def test_a_batch_cancelled_while_validating_runs_nothing() -> None:
    async with serve(exact()) as mock:
        created = await submit(mock, [line("a")])
        await mock.client.batches.cancel(created.id)
        cancelled = await at(mock, 1000, created.id)
    assert cancelled.status == "cancelled" and cancelled.in_progress_at is None
    assert (cancelled.output_file_id, cancelled.error_file_id) == (None, None)
    assert cancelled.request_counts is not None and cancelled.request_counts.total == 0


async def test_a_batch_slower_than_its_window_expires_with_the_lines_done_by_then() -> None:
    # T = 1000 > window 480: lines finish at 50 + (i + 1) * 90, so 4 by 480.
    async with serve(exact(batch_window_s=480.0)) as mock:
        created = await submit(mock, [line(f"r{i}") for i in range(10)])
        running = await at(mock, 479, created.id)
        expired = await at(mock, 480, created.id)
        output = await file_lines(mock, expired.output_file_id)
        errors = await file_lines(mock, expired.error_file_id)
    assert running.status == "in_progress"
    assert expired.status == "expired" and span(expired, "expired_at") in (479, 480, 481)
    assert expired.expires_at == expired.expired_at
    assert [x["custom_id"] for x in output] == ["r0", "r1", "r2", "r3"]
    assert [x["custom_id"] for x in errors] == [f"r{i}" for i in range(4, 10)]
    assert {x["error"]["code"] for x in errors} == {"batch_expired"}
    assert expired.request_counts is not None
    assert (expired.request_counts.completed, expired.request_counts.failed) == (4, 6)


async def test_the_expiry_rate_expires_batches_at_the_window_with_some_lines_or_none() -> None:
    config = exact(batch_expiry_rate=1.0, seed=3)
    async with serve(config) as mock:
        ids = [(await submit(mock, [line(f"r{i}") for i in range(20)])).id for _ in range(6)]
        running = await at(mock, 86_399, ids[0])
        ended = [await at(mock, 86_400, i) for i in ids]
        outputs = [await file_lines(mock, b.output_file_id) for b in ended]
        errors = [await file_lines(mock, b.error_file_id) for b in ended]
    assert running.status == "in_progress"  # never finalizing: it cannot finish in time
    assert {b.status for b in ended} == {"expired"}
    done = [len(x) for x in outputs]
    assert len(set(done)) > 1 and all(0 <= n < 20 for n in done)
    for output, error in zip(outputs, errors, strict=True):
        ran = [x["custom_id"] for x in output]
        assert ran + [x["custom_id"] for x in error] == [f"r{i}" for i in range(20)]
        assert {x["error"]["code"] for x in error} == {"batch_expired"}


async def test_the_failure_rate_answers_its_share_of_lines_500_in_the_error_file() -> None:
    async with serve(exact(batch_failure_rate=0.25, seed=1)) as mock:
        created = await submit(mock, [line(f"r{i}") for i in range(400)])
        done = await at(mock, 1000, created.id)
        output = await file_lines(mock, done.output_file_id)
        errors = await file_lines(mock, done.error_file_id)
    assert done.status == "completed"
    assert 60 <= len(errors) <= 140 and len(output) + len(errors) == 400
    assert done.request_counts is not None
    assert (done.request_counts.completed, done.request_counts.failed) == (
        len(output),
        len(errors),
    )
    for x in errors:
        assert x["response"]["status_code"] == 500 and x["error"] is None
        assert x["response"]["body"]["error"]["type"] == "server_error"


# -- the turnaround and its flags -----------------------------------------------------------


async def test_the_time_scale_applies_to_the_turnaround() -> None:
    config = MockConfig(time_scale=100, batch_turnaround_s=3600, batch_turnaround_sigma=0)
    async with serve(config) as mock:
        start = anyio.current_time()
        created = await submit(mock, [line("a")])
        await anyio.sleep(35.9 - (anyio.current_time() - start))
        before = await mock.client.batches.retrieve(created.id)
        await anyio.sleep(0.2)
        after = await mock.client.batches.retrieve(created.id)
    assert (before.status, after.status) == ("finalizing", "completed")
    assert span(after, "completed_at") in (3599, 3600, 3601)  # virtual seconds


async def turnarounds(config: MockConfig, n: int) -> list[int]:
    async with serve(config) as mock:
        ids = [(await submit(mock, [line("a")])).id for _ in range(n)]
        await anyio.sleep(86_400)
        return [span(await mock.client.batches.retrieve(i), "completed_at") for i in ids]


async def test_turnarounds_spread_lognormally_around_the_median_as_seeded() -> None:
    config = MockConfig(batch_turnaround_s=600, batch_turnaround_sigma=0.5, seed=7)
    spread = await turnarounds(config, 40)
    assert spread == await turnarounds(config, 40)  # the seed decides
    assert spread != await turnarounds(replace(config, seed=8), 40)
    assert len(set(spread)) > 30
    assert 400 < sorted(spread)[20] < 900
    exact = await turnarounds(replace(config, batch_turnaround_sigma=0), 5)
    assert set(exact) <= {599, 600, 601}


def test_the_schedule_draw_is_lognormal_with_the_median_as_its_scale() -> None:
    import random

    rng = random.Random(0)
    settings = BatchSettings(turnaround_s=100.0, turnaround_sigma=1.0)
    ends = sorted(Schedule.draw(0.0, settings, rng).completed for _ in range(4001))
    assert 90 < ends[2000] < 110
    assert ends[0] < 10 and ends[-1] > 1000


def test_the_batch_flags_set_the_config_and_bad_values_exit(
    capsys: pytest.CaptureFixture[str],
) -> None:
    parser = build_parser()
    argv = ["--batch-turnaround-s", "600", "--batch-turnaround-sigma", "0"]
    argv += ["--batch-failure-rate", "0.1", "--batch-expiry-rate", "0.2"]
    argv += ["--batch-window-s", "7200"]
    config = config_from_args(parser.parse_args(argv), parser)
    assert (config.batch_turnaround_s, config.batch_turnaround_sigma) == (600, 0)
    assert (config.batch_failure_rate, config.batch_expiry_rate) == (0.1, 0.2)
    assert config.batch_window_s == 7200
    defaults = MockConfig()
    assert (defaults.batch_turnaround_s, defaults.batch_turnaround_sigma) == (3600, 0.5)
    assert (defaults.batch_failure_rate, defaults.batch_expiry_rate) == (0, 0)
    assert defaults.batch_window_s == 86_400
    for bad in (
        ["--batch-turnaround-s", "0"],
        ["--batch-turnaround-sigma", "-1"],
        ["--batch-failure-rate", "2"],
        ["--batch-window-s", "inf"],
    ):
        with pytest.raises(SystemExit) as info:
            main(bad)
        assert info.value.code == 2
    assert "--batch-turnaround-s" in capsys.readouterr().err  # the usage line names it
    assert "--batch-window-s" in parser.format_help()


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("batch_turnaround_s", 0.0),
        ("batch_turnaround_sigma", -0.5),
        ("batch_failure_rate", 1.5),
        ("batch_expiry_rate", True),
        ("batch_window_s", float("nan")),
    ],
)
def test_config_validation_names_the_batch_field(field: str, value: object) -> None:
    with pytest.raises(ValueError, match=field):
        MockConfig(**{field: value})  # type: ignore[arg-type]


async def test_the_stats_json_carries_the_batches_and_reads_an_older_mock() -> None:
    async with serve(MockConfig()) as mock:
        stats = replace(await mock.stats(), batches=BatchStats(batches=2, lines=5))
    wire = json.loads(json.dumps(asdict(stats)))
    assert MockStats.from_json(wire) == stats
    del wire["batches"]  # what a mock before the Batch API served
    assert MockStats.from_json(wire).batches == BatchStats()


def test_a_fleet_file_sets_the_batch_keys(tmp_path: Any) -> None:
    from mockprovider.fleet import load_fleet

    path = tmp_path / "fleet.toml"
    path.write_text('batch_turnaround_s = 600\n[[endpoint]]\nname = "a"\n'
                    '[[endpoint]]\nname = "b"\nbatch_expiry_rate = 0.5\n')  # fmt: skip
    fleet = load_fleet(path)
    a, b = fleet.config("a"), fleet.config("b")
    assert (a.batch_turnaround_s, b.batch_turnaround_s) == (600, 600)
    assert (a.batch_expiry_rate, b.batch_expiry_rate) == (0, 0.5)
