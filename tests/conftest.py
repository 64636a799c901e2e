"""Fixtures of every test: the prior source a ``Scheduler`` defaults to.

With the ``ml`` extra installed (the test extra installs it), ``Scheduler``'s
default prior source is the learned length model (``priors="auto"``), loaded
on entering the context and run in a worker thread. Tests of the scheduler's
mechanics want priors they can reason about, and a worker thread under trio's
autojumping ``MockClock`` races the virtual clock. So every test starts with
``SEMISCHED_PRIORS=heuristic``, the documented way to keep a process from
loading the model; the tests of the default itself
(``tests/runtime/test_default_priors.py``) unset it.
"""

from __future__ import annotations

import pytest

from semisched.default_priors import PRIORS_ENV


@pytest.fixture(autouse=True)
def _heuristic_priors_by_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(PRIORS_ENV, "heuristic")
