"""Fixtures of every test: virtual time, openai's platform lookup on the loop, heuristic priors.

**Virtual time.** Async tests run on trio with an autojumping ``MockClock``. The
scheduler's default clock (:class:`~semisched.runtime.clock.AnyioClock`), the batch run's
and the mock's (``create_app(..., clock=anyio.current_time)``) all read the
loop's clock, so physics, deadlines, back-offs and ``retry-after`` waits are
exact and a test sleeps minutes in microseconds. Tests that need real time (a
real server on 127.0.0.1, a subprocess, a real Redis) are marked ``wallclock``
and run on asyncio; a folder whose every test needs real time overrides
``anyio_backend`` in its own ``conftest.py``.

**openai's platform lookup.** On a client's first request openai detects the
platform in a worker thread (``asyncify(get_platform)``), and an autojumping
``MockClock`` may jump to the next timer while that thread runs, so the first
attempt would leave late. Every async test runs that detection inline instead
(`mockprovider.virtual.inline_platform_lookup`).

**Priors.** With the ``ml`` extra installed (the test extra installs it),
``Scheduler``'s default prior source is the learned length model
(``priors="auto"``), loaded on entering the context and run in a worker thread.
Tests of the scheduler's mechanics want priors they can reason about, and a
worker thread under the autojumping ``MockClock`` races the virtual clock. So
every test starts with ``SEMISCHED_PRIORS=heuristic``, the documented way to
keep a process from loading the model; the tests of the default itself
(``tests/runtime/test_default_priors.py``) unset it.

Helpers shared by test modules live in ``*_kit.py`` modules beside them: test
modules import them from there, never from a ``conftest``.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from semisched.priors.default import PRIORS_ENV


@pytest.fixture
def anyio_backend(request: pytest.FixtureRequest) -> Any:
    if request.node.get_closest_marker("wallclock") is not None:
        return "asyncio"
    import trio.testing  # here, not at the top: the oldest-openai job runs without trio

    return ("trio", {"clock": trio.testing.MockClock(autojump_threshold=0)})


@pytest.fixture(autouse=True)
def _platform_inline(request: pytest.FixtureRequest) -> Iterator[None]:
    """Detect openai's platform on the loop, not in a thread (module docstring)."""
    if "anyio_backend" not in request.fixturenames:
        yield  # not an async test: leave openai unimported
        return
    from mockprovider.virtual import inline_platform_lookup

    with inline_platform_lookup():
        yield


@pytest.fixture(autouse=True)
def _heuristic_priors_by_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(PRIORS_ENV, "heuristic")
