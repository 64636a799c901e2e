"""Retries are logged at INFO, as openai-python logs its own: one line per failure kind per
ten seconds of the scheduler's clock, the next one counting the lines left out.

Virtual time: the clock the lines are rate-limited on is the scheduler's, so which
lines appear does not depend on the machine's speed.
"""

from __future__ import annotations

import logging
import re

import anyio
import pytest
from runtime_kit import Scripted, chat, mock_client

from semisched import Scheduler
from semisched.core.actions import Retry
from semisched.core.lifecycle import FailureKind
from semisched.core.request import Prior, Request
from semisched.telemetry.retries import RetryLog

pytestmark = pytest.mark.anyio

LOGGER = "semisched.retries"


def _lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        r.getMessage() for r in caplog.records if r.name == LOGGER and r.levelno == logging.INFO
    ]


async def test_a_burst_of_429s_is_one_info_line_and_the_next_counts_the_rest(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger=LOGGER)
    too_many = Scripted(429, headers={"retry-after-ms": "1000"}, code="rate_limit_exceeded")
    async with mock_client(script=[too_many] * 6) as mock:
        async with Scheduler(mock.client) as scheduler:
            async with anyio.create_task_group() as tg:
                for _ in range(6):  # six first attempts answered 429 at once
                    tg.start_soon(lambda: scheduler.submit(**chat(max_tokens=5)))
            await anyio.sleep(30)
            mock.recorder.script.append(too_many)  # a later 429, past the ten seconds
            await scheduler.submit(**chat(max_tokens=5))
        assert scheduler.statistics().counters.retries == 7
    lines = _lines(caplog)
    assert len(lines) == 2, lines
    first = r"retrying \S+ in \d+\.\d s: rate_limited \(429\) at \S+, attempt 1 failed"
    assert re.fullmatch(first, lines[0]), lines[0]
    assert re.fullmatch(first + r" \(\+5 more rate_limited retries since the last line\)",
                        lines[1]), lines[1]  # fmt: skip


def _retry(kind: FailureKind, now: float, *, attempts: int = 1) -> Retry:
    request = Request(id="r", klass="any", prior=Prior(p50=10.0, p90=20.0))
    return Retry(request=request, at=now + 2.0, kind=kind, attempts=attempts, endpoint="east")


def test_each_kind_has_its_own_window(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger=LOGGER)
    log = RetryLog(every_s=10.0)
    limited, failed = FailureKind.RATE_LIMITED, FailureKind.SERVER_ERROR
    for kind, now in [(limited, 0.0), (limited, 1.0), (failed, 2.0), (limited, 9.9),
                      (failed, 3.0), (limited, 10.0), (limited, 12.0)]:  # fmt: skip
        log.retry(_retry(kind, now), now)
    assert _lines(caplog) == [
        "retrying r in 2.0 s: rate_limited (429) at east, attempt 1 failed",
        "retrying r in 2.0 s: server_error at east, attempt 1 failed",
        "retrying r in 2.0 s: rate_limited (429) at east, attempt 1 failed "
        "(+2 more rate_limited retries since the last line)",
    ]


def test_nothing_is_counted_or_formatted_when_info_is_off(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger=LOGGER)
    log = RetryLog()
    log.retry(_retry(FailureKind.TIMEOUT, 0.0), 0.0)
    assert _lines(caplog) == [] and "left_out=0" in repr(log)
