"""The prior a user gets without asking: the heuristic's reading of ``max_tokens``, the
learned model when the ``ml`` extra is installed, and overload control that can act on them.

The overload run is issue 12's: 1,000 chat calls whose ``max_tokens`` is drawn
from 16/48/200/800/2000 (the mock answers exactly that many tokens), arriving
at ~10x the provider's decode capacity, each with a 300 s deadline, through the
default ``final_adrr_olc`` with no ``prior=``. A prior that reads a 2,000-token
cap as *medium* leaves the ladder blind (medium is never shed): admitted work
piles up and misses its deadlines. The default must shed explicitly instead.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import random
from collections import Counter

import anyio
import pytest
from hypothesis import given
from hypothesis import strategies as st
from runtime_kit import chat, mock_client

from semisched import DeadlineExceeded, RequestRejected, RuntimeOptions, Scheduler
from semisched.core import Prior
from semisched.core.buckets import Bucket
from semisched.priors.default import LOADING, PRIORS_ENV, _learned
from semisched.priors.sources import NEUTRAL_P50, NEUTRAL_P90, Heuristic, PriorQuery, PriorSource

pytestmark = pytest.mark.anyio


@pytest.fixture(autouse=True, scope="module")
def _torch_before_the_clock() -> None:
    """Import the model's code (torch) on the main thread before these tests run.

    The model loads in a worker thread while the autojumping MockClock spins the loop,
    and an import of torch from that thread then crawls (minutes). Here, not at the top:
    every pytest-xdist worker collects this file, and only the one that runs it should
    pay for torch."""
    with contextlib.suppress(ImportError):
        import predictors.length_model  # noqa: F401


CAPS = (16, 48, 200, 800, 2000)


def _heuristic(cap: int | None) -> Prior:
    return Heuristic().prior(PriorQuery(request_id="r", max_tokens=cap))


def test_the_heuristic_reads_the_cap() -> None:
    assert _heuristic(None) == Prior(p50=NEUTRAL_P50, p90=NEUTRAL_P90, bucket=Bucket.UNKNOWN)
    assert _heuristic(32).routing_bucket is Bucket.SHORT  # short whatever it says
    assert _heuristic(200) == Prior(p50=200.0, p90=200.0)  # at most medium
    assert _heuristic(2000).routing_bucket is Bucket.LONG  # the cap as its own p90
    assert _heuristic(2000).p90 == 2000.0
    assert _heuristic(20_000).routing_bucket is Bucket.XLONG


@given(st.integers(1, 100_000), st.integers(1, 100_000))
def test_the_heuristic_grows_with_the_cap_and_never_exceeds_it(a: int, b: int) -> None:
    low, high = _heuristic(min(a, b)), _heuristic(max(a, b))
    assert low.p50 <= high.p50 and low.p90 <= high.p90
    assert high.p50 <= high.p90 <= max(a, b)


class _KnowsNothing:
    """What the shipped model answers for prompts like "q17": about 60 tokens (measured
    41-78), whatever the cap. Inline (not a batch source), so virtual time stays exact."""

    name = "learned"

    def prior(self, query: PriorQuery) -> Prior:
        return Prior(p50=60.0, p90=250.0)


class _ClipsNeutral:
    """The old heuristic: the neutral p50/p90 clipped to the cap (800 and 2000 -> medium)."""

    name = "clipped-neutral"

    def prior(self, query: PriorQuery) -> Prior:
        cap = float(query.max_tokens or NEUTRAL_P90)
        return Prior(p50=min(NEUTRAL_P50, cap), p90=min(NEUTRAL_P90, cap))


@pytest.fixture
def no_ml(monkeypatch: pytest.MonkeyPatch) -> None:
    """``auto`` as on a machine without the ``ml`` extra."""

    def missing() -> None:
        raise ImportError("No module named 'torch'")

    monkeypatch.delenv(PRIORS_ENV)
    monkeypatch.setattr("semisched.priors.default._learned", missing)


@pytest.fixture
def blind_model(monkeypatch: pytest.MonkeyPatch) -> None:
    """``auto`` with the ``ml`` extra, its model replaced by one that knows nothing."""
    monkeypatch.delenv(PRIORS_ENV)
    monkeypatch.setattr("semisched.priors.default._learned", _KnowsNothing)


async def _overload_run(**scheduler: object) -> tuple[Counter[str], str]:
    rng = random.Random(0)
    outcomes: Counter[str] = Counter()
    async with mock_client() as mock, Scheduler(mock.client, **scheduler) as s:  # type: ignore[arg-type]

        async def call(i: int, cap: int) -> None:
            try:
                await s.submit(**chat(f"q{i}", max_tokens=cap), deadline=300)
                outcomes["completed"] += 1
            except RequestRejected:
                outcomes["rejected"] += 1
            except DeadlineExceeded:
                outcomes["deadline_exceeded"] += 1

        async with anyio.create_task_group() as tg:
            for i in range(1000):
                tg.start_soon(call, i, rng.choice(CAPS))
                # ~8.4 calls/s: mean 613 output tokens each against ~515 tokens/s of decode.
                await anyio.sleep(rng.expovariate(8.4))
        stats = s.statistics()
    assert stats.counters.outcomes == 1000
    return outcomes, str(stats.priors)


async def test_overload_sheds_explicitly_with_the_default_prior_and_no_ml_extra(
    no_ml: None,
) -> None:
    outcomes, priors = await _overload_run()
    assert priors == "heuristic (the ml extra is not installed)"
    assert outcomes["rejected"] > 200
    assert outcomes["deadline_exceeded"] == 0


async def test_overload_sheds_explicitly_with_the_learned_default(blind_model: None) -> None:
    # The model says ~60 tokens for every call; the calibration learns from the first
    # answers that these calls' caps are their sizes, and the ladder can act.
    outcomes, priors = await _overload_run()
    assert priors.startswith("learned (MiniLM length model")
    assert outcomes["rejected"] > 200
    assert outcomes["deadline_exceeded"] == 0


@pytest.mark.parametrize(
    ("source", "calibration"), [(_ClipsNeutral(), False), (_KnowsNothing(), False)]
)
async def test_a_prior_that_calls_big_caps_medium_misses_deadlines_silently(
    source: PriorSource, calibration: bool
) -> None:
    """What the two tests above guard against (issue 12's report)."""
    outcomes, _ = await _overload_run(
        priors=source, options=RuntimeOptions(calibration=calibration)
    )
    assert outcomes["rejected"] == 0
    assert outcomes["deadline_exceeded"] > 100


async def test_auto_loads_the_shipped_model_once_per_process(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv(PRIORS_ENV)
    _learned.cache_clear()
    async with mock_client() as mock:
        async with Scheduler(mock.client) as first:
            pass
        async with Scheduler(mock.client, priors="learned") as second:
            pass
    chosen = first.statistics().priors
    assert chosen.name == "learned" and chosen.load_s is not None
    assert second.statistics().priors.load_s is not None
    assert second.statistics().priors.load_s < chosen.load_s  # the second found it loaded
    assert _learned.cache_info().misses == 1


async def test_the_environment_and_the_argument_choose(monkeypatch: pytest.MonkeyPatch) -> None:
    async with mock_client() as mock:
        async with Scheduler(mock.client) as s:  # SEMISCHED_PRIORS=heuristic (tests/conftest.py)
            await s.submit(**chat(max_tokens=10))
        assert str(s.statistics().priors) == f"heuristic ({PRIORS_ENV}=heuristic)"
        custom = _KnowsNothing()
        async with Scheduler(
            mock.client, priors=custom, options=RuntimeOptions(calibration=False)
        ) as s:
            pass
        assert s.statistics().priors.name == "learned" and s.statistics().calibration is None


def test_bad_choices_are_refused_before_anything_starts(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ValueError, match=r"^priors='model'"):
        Scheduler(object(), priors="model")
    with pytest.raises(TypeError, match=r"^priors=42"):
        Scheduler(object(), priors=42)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"^calibration="):
        Scheduler(object(), options=RuntimeOptions(calibration="yes"))  # type: ignore[arg-type]
    monkeypatch.setenv(PRIORS_ENV, "fast")
    with pytest.raises(ValueError, match=f"^{PRIORS_ENV}='fast' must be one of"):
        Scheduler(object())


@pytest.fixture
def cached_model(monkeypatch: pytest.MonkeyPatch) -> None:
    """``auto`` with the ``ml`` extra, loaded once per process like the real one (but at once)."""
    monkeypatch.delenv(PRIORS_ENV)
    monkeypatch.setattr("semisched.priors.default._learned", functools.cache(_KnowsNothing))


def _loading_lines(caplog: pytest.LogCaptureFixture) -> list[tuple[int, str]]:
    return [(r.levelno, r.getMessage()) for r in caplog.records if r.name == "semisched.priors"]


async def test_a_scheduler_that_loads_the_model_by_default_says_so_once_where_python_shows_it(
    cached_model: None, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="semisched.priors")
    async with mock_client() as mock:
        for _ in range(2):
            async with Scheduler(mock.client) as scheduler:
                pass
    assert scheduler.statistics().priors.name == "learned"
    assert _loading_lines(caplog) == [(logging.WARNING, LOADING)]
    assert 'pass priors="heuristic" to skip' in LOADING
    # A script that never configured logging sees it: the last-resort handler's level.
    assert logging.lastResort is not None and logging.lastResort.level <= logging.WARNING


async def test_a_model_asked_for_by_name_is_announced_at_info_and_the_heuristic_not_at_all(
    cached_model: None, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="semisched.priors")
    async with mock_client() as mock:
        async with Scheduler(mock.client, priors="heuristic"):
            pass
        assert _loading_lines(caplog) == []
        async with Scheduler(mock.client, priors="learned"):
            pass
    assert _loading_lines(caplog) == [(logging.INFO, LOADING)]
