"""The public surface of ``semisched``: what ``__all__`` promises, the README lists, and costs."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

import semisched

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
HEADING = "### API at a glance"


def readme_api_names() -> list[str]:
    """The names the README's "API at a glance" list documents, in order."""
    text = README.read_text(encoding="utf-8")
    assert HEADING in text, f"README.md has no {HEADING!r} section"
    section = text.split(HEADING, 1)[1]
    section = re.split(r"^#{1,3} ", section, maxsplit=1, flags=re.MULTILINE)[0]
    return re.findall(r"^- `([A-Za-z_][A-Za-z0-9_]*)` — ", section, flags=re.MULTILINE)


def test_readme_api_section_lists_exactly_all() -> None:
    documented = readme_api_names()
    assert len(documented) == len(set(documented)), "a name is listed twice in the README"
    missing = sorted(set(semisched.__all__) - set(documented))
    extra = sorted(set(documented) - set(semisched.__all__))
    assert (missing, extra) == ([], []), "README 'API at a glance' and semisched.__all__ differ"


def test_all_is_sorted_and_every_name_has_a_home_module() -> None:
    assert semisched.__all__ == sorted(semisched.__all__)
    assert set(semisched._WHERE) == set(semisched.__all__)


@pytest.mark.parametrize("name", semisched.__all__)
def test_every_exported_name_resolves(name: str) -> None:
    value = getattr(semisched, name)
    assert value is not None
    # The object is the one its home module defines, not a copy.
    home = sys.modules[value.__module__]
    assert getattr(home, value.__name__) is value


def test_scheduler_arguments_are_importable_from_the_package() -> None:
    from semisched import (
        AnyioClock,
        Clock,
        FailureKind,
        Heuristic,
        MonotonicClock,
        Prior,
        PriorQuery,
        PriorSource,
        RetryPolicy,
        ScaledClock,
        SchedulerConfig,
        preset,
    )
    from semisched.core.lifecycle import RetryPolicy as CoreRetryPolicy

    assert RetryPolicy is CoreRetryPolicy  # one retry policy, the core's
    assert isinstance(preset("final_adrr_olc"), SchedulerConfig)
    assert isinstance(Heuristic(), PriorSource)
    prior = Heuristic().prior(PriorQuery(request_id="r", max_tokens=32))
    assert isinstance(prior, Prior) and prior.p90 <= 32
    clocks: list[Clock] = [AnyioClock(), MonotonicClock(), ScaledClock(10.0)]
    assert clocks[2].to_wall(10.0) == pytest.approx(1.0)
    assert FailureKind.QUOTA_EXHAUSTED not in RetryPolicy().retry_on


def test_unknown_attribute_raises_attribute_error() -> None:
    with pytest.raises(AttributeError, match="no_such_name"):
        semisched.no_such_name  # noqa: B018


def test_dir_is_all_plus_module_dunders() -> None:
    listed = dir(semisched)
    assert set(semisched.__all__) <= set(listed)
    assert {"__version__", "__all__", "__doc__", "__name__"} <= set(listed)
    extra = {n for n in listed if n not in semisched.__all__}
    assert all(n.startswith("__") and n.endswith("__") for n in extra), sorted(extra)
    assert listed == sorted(listed)


def test_version_matches_pyproject() -> None:
    with (ROOT / "pyproject.toml").open("rb") as f:
        version = tomllib.load(f)["project"]["version"]
    assert semisched.__version__ == version
    assert "__version__" not in semisched.__all__


# Forget anyio/openai (and what they pull in), import the package, report which came
# back; then touch a core name (still neither); then import anyio on purpose, so the
# probe proves it can see a heavy import when one happens.
HEAVY = ("anyio", "openai", "httpx", "httpx2")
PROBE = f"""
import json, sys
heavy = {HEAVY!r}
for name in list(sys.modules):
    if name.split(".")[0] in heavy:
        del sys.modules[name]
def loaded():
    return sorted({{m.split(".")[0] for m in sys.modules}} & set(heavy))
import semisched
after_import = loaded()
semisched.SchedulerConfig, semisched.preset, semisched.Prior, semisched.RetryPolicy
after_core_names = loaded()
import anyio
control = loaded()
print(json.dumps({{"import": after_import, "core_names": after_core_names, "control": control}}))
"""


def test_importing_semisched_loads_neither_anyio_nor_openai() -> None:
    out = subprocess.run(
        [sys.executable, "-c", PROBE], capture_output=True, text=True, check=True, timeout=60
    )
    result = json.loads(out.stdout)
    assert result["import"] == []
    assert result["core_names"] == []
    assert "anyio" in result["control"]
