"""``semisched batch``'s priors: the line that names them, and the model's priors arriving
while the job sends (:mod:`semisched.batch.streamed`).

The model runs in a worker thread, so these tests let trio's ``MockClock`` jump only
once every task has been blocked for 50 ms of real time (with 0 it would jump while a
fast fake model is still answering in its thread), as ``tests/runtime/test_prior_sources.py``.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
import trio.testing
from batch_testkit import chat_line, cli_args, provider, write_lines

from semisched.batch.cli import main_async
from semisched.core import Prior
from semisched.priors.default import PRIORS_ENV, _learned
from semisched.priors.sources import PriorQuery

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> Any:
    return ("trio", {"clock": trio.testing.MockClock(autojump_threshold=0.05)})


class _FakeLearned:
    """Stands in for the length model: p50 = the prompt's length in characters."""

    name = "learned"

    def prior(self, query: PriorQuery) -> Prior:
        return self.prior_batch([query])[0]

    def prior_batch(self, queries: Sequence[PriorQuery]) -> list[Prior]:
        sizes = [float(len(json.dumps(q.messages))) for q in queries]
        return [Prior(p50=size, p90=2 * size) for size in sizes]


@pytest.fixture
def loads(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[int]]:
    """Replace the model's loader by a fake; the list counts its calls."""
    calls: list[int] = []

    def load_default() -> _FakeLearned:
        calls.append(1)
        return _FakeLearned()

    monkeypatch.setattr("predictors.learned.load_default", load_default)
    monkeypatch.delenv(PRIORS_ENV)  # as a user runs it: the SDK's own default is auto
    _learned.cache_clear()  # the SDK keeps one model per process; start without one
    yield calls
    _learned.cache_clear()


LOADING = "priors: learned (loading while the first requests go out with the max_tokens heuristic's"
LOADED = "priors: learned (MiniLM length model, loaded in 0.0 s)"


@pytest.mark.parametrize(
    ("priors", "words", "line", "summary", "advice", "loaded"),
    [
        ("heuristic", 20, "priors: heuristic (--priors heuristic)",
         "priors: heuristic (--priors heuristic)", False, 0),
        ("auto", 20, LOADING, LOADED, False, 1),
        ("auto", 2, LOADING, LOADED, True, 1),
        ("learned", 20, LOADING, LOADED, False, 1),
    ],
)  # fmt: skip
async def test_the_priors_line_names_the_source_and_the_model_loads_at_most_once(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    loads: list[int],
    priors: str,
    words: int,
    line: str,
    summary: str,
    advice: bool,
    loaded: int,
) -> None:
    write_lines(tmp_path / "in.jsonl", [chat_line(i, words=words) for i in range(5)])
    async with provider() as (client, _):
        assert await main_async(cli_args(tmp_path, priors=priors), client=client) == 0
    err = capsys.readouterr().err
    shown = [text for text in err.splitlines() if text.startswith("priors: ")]
    assert len(shown) == 1 and shown[0].startswith(line)
    tiny = "the prompts are tiny (median 3 tokens, under 8): the heuristic is the better choice"
    assert (tiny in shown[0]) == advice and ("--priors heuristic)" in shown[0]) == (
        advice or priors == "heuristic"
    )
    # Once, in the background; never for heuristic (nor by the run's own scheduler,
    # whose calls all bring their priors).
    assert len(loads) == loaded
    assert summary in err.splitlines()[-1]  # the summary names the source it ended with


async def test_the_model_never_delays_a_send(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A model that never answers: past the look-ahead the sender waits for a request to
    finish instead, so every line still goes out, with the heuristic's priors."""
    release = threading.Event()

    class Stuck(_FakeLearned):
        def prior_batch(self, queries: Sequence[PriorQuery]) -> list[Prior]:
            release.wait(30)  # abandoned by the run; let go when the test ends
            raise RuntimeError("released")

    monkeypatch.setattr("predictors.learned.load_default", Stuck)
    _learned.cache_clear()
    write_lines(tmp_path / "in.jsonl", [chat_line(i) for i in range(6)])
    try:
        async with provider() as (client, stats):
            args = cli_args(tmp_path, "--max-concurrency", "1", priors="auto")  # look-ahead 2
            assert await main_async(args, client=client) == 0
            assert stats().counters.requests == 6
    finally:
        release.set()
        _learned.cache_clear()
    last = capsys.readouterr().err.splitlines()[-1]
    assert "for 0 of 6 requests (the rest: heuristic)" in last


async def test_a_model_that_fails_mid_run_leaves_the_rest_to_the_heuristic(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    class Broken(_FakeLearned):
        def prior_batch(self, queries: Sequence[PriorQuery]) -> list[Prior]:
            raise RuntimeError("out of memory")

    monkeypatch.setattr("predictors.learned.load_default", Broken)
    _learned.cache_clear()
    write_lines(tmp_path / "in.jsonl", [chat_line(i) for i in range(6)])
    async with provider() as (client, stats):
        args = cli_args(tmp_path, "--max-concurrency", "1", priors="auto")  # look-ahead 2
        assert await main_async(args, client=client) == 0
        assert stats().counters.requests == 6
    _learned.cache_clear()
    last = capsys.readouterr().err.splitlines()[-1]
    assert "the model failed: RuntimeError: out of memory" in last


async def test_without_the_ml_extra_auto_says_so_and_learned_refuses(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    def missing() -> None:
        raise ImportError("the learned predictor needs the ml extra: pip install 'semisched[ml]'")

    monkeypatch.setattr("predictors.learned.load_default", missing)
    monkeypatch.setattr(
        "semisched.batch.run.model_unavailable", lambda: "the ml extra is not installed (no torch)"
    )
    _learned.cache_clear()
    write_lines(tmp_path / "in.jsonl", [chat_line(0)])
    async with provider() as (client, _):
        assert await main_async(cli_args(tmp_path, "--dry-run", priors="auto"), client=client) == 0
        assert "priors: heuristic (the ml extra is not installed)" in capsys.readouterr().err
        assert await main_async(cli_args(tmp_path, priors="learned"), client=client) == 2
        assert "--priors learned: the ml extra is not installed" in capsys.readouterr().err
        assert await main_async(cli_args(tmp_path, priors="auto"), client=client) == 0
        assert "priors: heuristic (the ml extra is not installed" in capsys.readouterr().err


async def test_past_the_look_ahead_lines_go_out_with_the_models_priors(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], loads: list[int]
) -> None:
    write_lines(tmp_path / "in.jsonl", [chat_line(i) for i in range(6)])
    async with provider() as (client, _):
        args = cli_args(tmp_path, "--max-concurrency", "1", priors="learned")  # look-ahead 2
        assert await main_async(args, client=client) == 0
    # Two went out at once with the heuristic's priors; the model had the other four.
    assert "for 4 of 6 requests (the rest: heuristic)" in capsys.readouterr().err
