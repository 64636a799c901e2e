"""Which prior source a scheduler uses when the caller names none.

``auto`` (the default) is the shipped learned length model when the ``ml``
extra is installed, else [`Heuristic`][semisched.priors.sources.Heuristic]; ``learned``
insists on the model; ``heuristic`` never loads it. ``Scheduler(priors=...)``
and ``semisched batch --priors`` take these names; without either, the
``SEMISCHED_PRIORS`` environment variable names the default (``auto`` when
unset), so an operator can keep a deployment from loading a model without
touching its code.

The model is loaded once per process (several schedulers share it), lazily:
importing ``semisched`` never imports torch. This module is the one place the
SDK reaches into the ``predictors`` package (DESIGN.md's dependency rules).

Loading takes seconds (entering and leaving a first ``Scheduler`` took 10.6 and
16.1 s on a loaded 2-core machine, 0.3 and 0.5 s with ``priors="heuristic"``),
so the ``semisched.priors`` logger says so once, as it starts (`LOADING`).
Nobody chose the model when the default chose it: then the line is a WARNING,
which Python shows on stderr even where logging was never configured (its
last-resort handler prints WARNING and above only), so a one-call script
learns why it waits and how not to. A model chosen by name
(``priors="learned"``/``"auto"``, ``SEMISCHED_PRIORS``, ``--priors``, which
the commands announce themselves) is an INFO line.
"""

from __future__ import annotations

import functools
import logging
import os
import time
from collections.abc import Callable
from typing import Any

from semisched.core.checks import check_choice
from semisched.priors.sources import Heuristic, PriorsChoice, PriorSource

__all__ = [
    "BY_DEFAULT",
    "LOADING",
    "PRIORS_ENV",
    "PRIOR_CHOICES",
    "choose_priors",
    "default_choice",
    "model_unavailable",
    "scheduler_priors",
]

#: The environment variable naming the default choice.
PRIORS_ENV = "SEMISCHED_PRIORS"

#: What the ``semisched.priors`` logger says as the model starts loading.
LOADING = (
    "loading the learned length predictor (once per process, a few seconds); "
    'pass priors="heuristic" to skip'
)

#: ``asked_by`` when no argument or variable named the priors.
BY_DEFAULT = "the default"

logger = logging.getLogger("semisched.priors")

#: The names a choice may take.
PRIOR_CHOICES: tuple[str, ...] = ("auto", "learned", "heuristic")


def default_choice() -> str:
    """``$SEMISCHED_PRIORS``, or ``auto`` when it is unset or empty.

    Raises:
        ValueError: The variable holds another name.
    """
    value = os.environ.get(PRIORS_ENV, "").strip() or "auto"
    check_choice(PRIORS_ENV, value, PRIOR_CHOICES)
    return value


@functools.cache
def _learned() -> Any:
    """The shipped model, loaded once per process (torch is imported here)."""
    from predictors.learned import load_default

    return load_default()


def _loaded() -> bool:
    """Whether this process has loaded the model already (a stand-in for ``_learned``
    without a cache, as tests install, never has)."""
    info = getattr(_learned, "cache_info", None)
    return info is not None and info().currsize > 0


def choose_priors(choice: str, *, asked_by: str) -> tuple[PriorSource, PriorsChoice]:
    """The source ``choice`` names and why; loads the model (seconds, blocking) unless
    ``choice`` is ``heuristic``. ``asked_by`` is the setting that chose it, as the user
    wrote it (``"--priors heuristic"``, ``"SEMISCHED_PRIORS=heuristic"``): the reason a
    heuristic choice gives.

    Raises:
        ValueError: ``choice`` is not one of `PRIOR_CHOICES`.
        ImportError, FileNotFoundError: ``learned`` was asked for and cannot be loaded
            (the ``ml`` extra is missing, or the shipped weights are).
    """
    check_choice("priors", choice, PRIOR_CHOICES)
    if choice == "heuristic":
        return Heuristic(), PriorsChoice(name="heuristic", reason=asked_by)
    if not _loaded():
        level = logging.WARNING if asked_by == BY_DEFAULT else logging.INFO
        logger.log(level, LOADING)
    started = time.perf_counter()
    try:
        source: PriorSource = _learned()
    except (ImportError, FileNotFoundError) as exc:
        if choice == "learned":
            raise
        missing = "the ml extra is not installed"
        if isinstance(exc, FileNotFoundError):
            missing = "the length model's weights are missing"
        return Heuristic(), PriorsChoice(name="heuristic", reason=missing)
    loaded = time.perf_counter() - started
    return source, PriorsChoice(name="learned", reason="MiniLM length model", load_s=loaded)


def scheduler_priors(
    priors: PriorSource | str | None,
) -> tuple[PriorSource, PriorsChoice, Callable[[], tuple[PriorSource, PriorsChoice]] | None]:
    """What ``Scheduler(priors=...)`` starts with, checked; nothing is loaded here.

    Returns:
        The source and the [`PriorsChoice`][semisched.priors.sources.PriorsChoice] to use until
        a model is loaded, and the loading to do (blocking: on entering the
        scheduler, in a worker thread) or ``None``. A name other than
        ``heuristic`` loads a model; ``None`` is `default_choice`'s name.

    Raises:
        ValueError: An unknown name (in ``priors`` or ``$SEMISCHED_PRIORS``).
        TypeError: ``priors`` is neither a source, a name nor ``None``.
    """
    asked_by = f"priors={priors!r}"
    if priors is None:
        priors = default_choice()
        asked_by = f"{PRIORS_ENV}={priors}" if os.environ.get(PRIORS_ENV) else BY_DEFAULT
    if isinstance(priors, PriorSource):
        return priors, PriorsChoice(name=priors.name, reason="the priors argument"), None
    if not isinstance(priors, str):
        raise TypeError(f"priors={priors!r} must be a PriorSource, a name or None")
    check_choice("priors", priors, PRIOR_CHOICES)
    load = None
    if priors != "heuristic":
        load = functools.partial(choose_priors, priors, asked_by=asked_by)
    return Heuristic(), PriorsChoice(name="heuristic", reason=asked_by), load


def model_unavailable() -> str | None:
    """Why the learned model cannot load, found without loading it (``None``: it can):
    the ``ml`` extra's packages or the shipped weights are missing."""
    import importlib.util

    missing = [m for m in ("torch", "transformers") if importlib.util.find_spec(m) is None]
    if missing:
        return f"the ml extra is not installed (no {', '.join(missing)})"
    from predictors.learned import DEFAULT_WEIGHTS

    if not (DEFAULT_WEIGHTS / "trainable.safetensors").exists():
        return "the length model's weights are missing"
    return None
