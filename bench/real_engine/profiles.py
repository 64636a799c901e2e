"""Which engine profile sizes a real-engine run's load: a fit of *this* engine on *this* machine.

``headline``, ``routing`` and ``compare`` offer a share of the engine's capacity, and the
capacity comes from a mock profile (`PhysicsParams`). The
committed ``llama-cpp`` profile was fitted on another machine: on a faster one the engine
would run far below the intended load; and a shared machine's speed drifts by the hour
(a fit here gave 1.1 ms a step and 0.18 ms a prompt token one afternoon, 2.9 and 0.41 four
hours later). So before an experiment (``--profile machine``, the default)
`engine_profile` fits the engine now: a short fit (``fit --repeats 1``, about a
minute), written to the engine's cache (``fit/fit.json``, `cached_fit_dir`), not to
``OUT``: ``OUT/fit.json`` of the repository is the committed ``llama-cpp`` profile's source
and stays as the ``fit`` step wrote it. ``--profile cached`` reuses a fit of the same
engine build on the same machine when there is one, and fits only otherwise:

1. ``OUT/fit.json`` (the ``fit`` step's output), when it records the engine commit and the
   machine (`provenance`) of this run;
2. else the cached fit, on the same condition;
3. else a short fit, as above.

The machine is its host name, its core count and its CPU model; the engine commit is the
llama.cpp commit the setup step built (`bench.real_engine.setup.engine_commit`).
``--profile committed`` keeps the old behaviour explicitly: the committed ``llama-cpp``
profile (``compare``: ``OUT/fit.json`` as it is).
"""

from __future__ import annotations

import json
import os
import platform
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mockprovider.physics_params import PhysicsParams

__all__ = [
    "PROFILES",
    "EngineProfile",
    "cached_fit_dir",
    "engine_profile",
    "fit_mismatch",
    "machine_identity",
    "provenance",
    "short_fit",
]

#: ``--profile``'s choices: a fit of this engine on this machine made now, one made before
#: (made now when there is none), or the committed profile.
PROFILES = ("machine", "cached", "committed")
#: Sweeps of the fit made when none matches (``fit --repeats 1``).
SHORT_FIT_REPEATS = 1


@dataclass(frozen=True, slots=True)
class EngineProfile:
    """The profile a run sizes its load by (and simulates with), and where it came from."""

    physics: PhysicsParams
    source: str
    path: Path | None = None


def machine_identity() -> dict[str, str]:
    """This machine, as a fit records it: host name, cores, CPU model."""
    cpu = platform.processor() or "unknown"
    try:
        info = Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace")
        cpu = next((ln.split(":", 1)[1].strip() for ln in info.splitlines()
                    if ln.startswith("model name")), cpu)  # fmt: skip
    except OSError:
        pass
    return {"node": platform.node(), "cores": str(os.cpu_count()), "cpu": cpu}


def provenance(commit: str | None = None) -> dict[str, object]:
    """What a fit of the engine built in the cache records of itself: its engine commit
    (``commit``, or the cache's) and this machine."""
    if commit is None:
        from bench.real_engine.setup import EnginePaths, engine_commit

        commit = engine_commit(EnginePaths.default())
    return {"engine_commit": commit, "machine": machine_identity()}


def fit_mismatch(data: Mapping[str, Any] | None, wanted: Mapping[str, object]) -> str | None:
    """Why a fit (``fit.json``'s content, ``None`` when there is none) is not one of the
    engine and machine in ``wanted`` (`provenance`); ``None`` when it is."""
    if data is None:
        return "no fit"
    if "engine_commit" not in data or "machine" not in data:
        return "the fit records no engine commit or machine"
    if data["engine_commit"] != wanted["engine_commit"]:
        return f"the fit is of engine {data['engine_commit']}, not {wanted['engine_commit']}"
    if data["machine"] != wanted["machine"]:
        return f"the fit is of machine {data['machine']}, not {wanted['machine']}"
    return None


def _read(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def cached_fit_dir() -> Path:
    """Where `short_fit` writes: ``fit/`` in the engine's cache."""
    from bench.real_engine.setup import EnginePaths

    return EnginePaths.default().root / "fit"


def short_fit(folder: Path, parallel: int, wanted: Mapping[str, object]) -> Path:
    """Measure the engine (``fit --repeats 1``, seed 0) and write ``calibration.csv`` and
    ``fit.json`` (with ``wanted``'s provenance) into ``folder``; the fit's path."""
    from bench.real_engine.calibrate import (
        fit_engine,
        plan_fit_crosscheck,
        write_calibration,
        write_fit,
    )
    from bench.real_engine.cli import measure
    from bench.real_engine.launcher import DEFAULT_BATCH

    folder.mkdir(parents=True, exist_ok=True)
    completions = measure(parallel, SHORT_FIT_REPEATS, 0)
    write_calibration(folder, completions)
    fit = fit_engine(completions, parallel, DEFAULT_BATCH)
    write_fit(folder, fit, plan_fit_crosscheck(completions, fit), provenance=wanted)
    return folder / "fit.json"


def engine_profile(
    out: Path,
    choice: str,
    parallel: int,
    *,
    say: Callable[[str], None] = print,
    fit: Callable[[Path, int, Mapping[str, object]], Path] = short_fit,
    wanted: Mapping[str, object] | None = None,
    cache: Path | None = None,
) -> EngineProfile:
    """The profile a run sizes its load by (module docstring).

    ``choice``: ``machine``, ``cached`` or ``committed`` (`PROFILES`). ``fit``, ``wanted`` and
    ``cache`` replace the engine run, the provenance and the cached folder (tests).

    Raises:
        ValueError: An unknown ``choice``, or a fit of other slots than ``parallel``.
    """
    from mockprovider.physics import profile

    if choice == "committed":
        committed = profile("llama-cpp")
        if committed.slots != parallel:
            raise ValueError(f"the llama-cpp profile has {committed.slots} slots, not {parallel}")
        return EngineProfile(committed, "the committed `llama-cpp` profile")
    if choice not in PROFILES:
        raise ValueError(f"profile={choice!r} must be one of {', '.join(PROFILES)}")
    wanted = provenance() if wanted is None else wanted
    folder = cached_fit_dir() if cache is None else cache
    reasons = ["--profile machine: this machine's speed drifts"]
    if choice == "cached":
        reasons = []
        for path in (out / "fit.json", folder / "fit.json"):
            data = _read(path)
            reason = fit_mismatch(data, wanted)
            if reason is None and data is not None:
                source = f"the fit of this engine on this machine, {path}"
                return _fitted(data, path, parallel, source)
            reasons.append(f"{path}: {reason}")
        reasons.insert(0, "no fit of this engine on this machine")
    say("; ".join(reasons) + f": fitting it first (fit --repeats {SHORT_FIT_REPEATS}, "
        f"about a minute) into {folder}")  # fmt: skip
    path = fit(folder, parallel, wanted)
    data = _read(path)
    if data is None:
        raise ValueError(f"the fit wrote no readable {path}")
    return _fitted(data, path, parallel, f"a fit of this engine on this machine made now, {path}")


def _fitted(data: Mapping[str, Any], path: Path, parallel: int, source: str) -> EngineProfile:
    physics = PhysicsParams(**data["profile"])
    if physics.slots != parallel:
        raise ValueError(f"{path} is a fit of {physics.slots} slots, not {parallel}")
    return EngineProfile(physics, source, path)
