"""The public surface of ``semisched``: what ``__all__`` promises, the API reference lists,
and costs."""

from __future__ import annotations

import ast
import dataclasses
import importlib
import inspect
import json
import re
import subprocess
import sys
import tomllib
from collections.abc import Sequence
from pathlib import Path

import pytest

import semisched

ROOT = Path(__file__).resolve().parents[1]
REFERENCE = ROOT / "docs/reference/api.md"
HEADING = "## API at a glance"


def readme_api_names() -> list[str]:
    """The names the API reference's "API at a glance" list documents, in order."""
    text = REFERENCE.read_text(encoding="utf-8")
    assert HEADING in text, f"{REFERENCE.name} has no {HEADING!r} section"
    section = text.split(HEADING, 1)[1]
    section = re.split(r"^#{1,2} ", section, maxsplit=1, flags=re.MULTILINE)[0]
    return re.findall(r"^- `([A-Za-z_][A-Za-z0-9_]*)` — ", section, flags=re.MULTILINE)


def test_readme_api_section_lists_exactly_all() -> None:
    documented = readme_api_names()
    assert len(documented) == len(set(documented)), "a name is listed twice in the reference"
    missing = sorted(set(semisched.__all__) - set(documented))
    extra = sorted(set(documented) - set(semisched.__all__))
    assert (missing, extra) == ([], []), "'API at a glance' and semisched.__all__ differ"


def test_the_api_reference_renders_every_name_from_its_docstring() -> None:
    text = REFERENCE.read_text(encoding="utf-8")
    rendered = re.findall(r"^::: ([\w.]+)$", text, flags=re.MULTILINE)
    names = {path.rsplit(".", 1)[1]: path for path in rendered}
    assert sorted(names) == sorted(semisched.__all__)
    for name, path in names.items():  # each directive names the object's own module
        assert getattr(semisched, name).__module__ == path.rsplit(".", 1)[0], path


def test_a_merged_name_still_resolves_to_the_one_class_with_a_warning() -> None:
    with pytest.warns(DeprecationWarning, match="ProviderLimits"):
        merged = semisched.RateLimitInfo
    assert merged is semisched.ProviderLimits
    assert "RateLimitInfo" not in semisched.__all__


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


# -- every type in a public signature is exported -----------------------------------


def _type_checking_names(module: object) -> dict[str, object]:
    """What ``module`` imports under ``if TYPE_CHECKING:`` (names its annotations use)."""
    source = inspect.getsource(module)  # type: ignore[arg-type]
    found: dict[str, object] = {}
    for node in ast.parse(source).body:
        if not (isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)):
            continue
        for stmt in node.body:
            if isinstance(stmt, ast.ImportFrom) and stmt.module:
                try:
                    home = importlib.import_module(stmt.module)
                except ImportError:  # an optional extra's types: not ours anyway
                    continue
                for alias in stmt.names:
                    found[alias.asname or alias.name] = getattr(home, alias.name, None)
    return found


def _annotation_types(annotation: object, namespace: dict[str, object]) -> set[type]:
    """The classes an annotation (a string under postponed evaluation) names."""
    if annotation is inspect.Parameter.empty or annotation is None:
        return set()
    text = annotation if isinstance(annotation, str) else getattr(annotation, "__name__", "")
    try:
        tree = ast.parse(str(text), mode="eval")
    except SyntaxError:
        return set()
    found: set[type] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            value = namespace.get(node.id)
        elif isinstance(node, ast.Attribute):
            try:
                value = eval(ast.unparse(node), dict(namespace))  # a dotted name, e.g. abc.X
            except Exception:
                continue
        else:
            continue
        if isinstance(value, type):
            found.add(value)
    return found


def _signature_types(obj: object) -> set[type]:
    """Every class named by ``obj``'s public signature(s): a function's parameters and
    return; a class's constructor, public methods, properties and dataclass fields."""
    module = sys.modules[obj.__module__]  # type: ignore[attr-defined]
    namespace = {**vars(module), **_type_checking_names(module)}
    found: set[type] = set()

    def of_callable(function: object) -> None:
        try:
            sig = inspect.signature(function)  # type: ignore[arg-type]
        except (TypeError, ValueError):
            return
        for param in sig.parameters.values():
            found.update(_annotation_types(param.annotation, namespace))
        found.update(_annotation_types(sig.return_annotation, namespace))

    if not isinstance(obj, type):
        of_callable(obj)
        return found
    of_callable(obj.__init__)
    for name, member in vars(obj).items():
        if name.startswith("_"):
            continue
        if isinstance(member, property) and member.fget is not None:
            of_callable(member.fget)
        elif isinstance(member, staticmethod | classmethod):
            of_callable(member.__func__)
        elif inspect.isfunction(member):
            of_callable(member)
    if dataclasses.is_dataclass(obj):
        for field in dataclasses.fields(obj):
            found.update(_annotation_types(field.type, namespace))
    return found


#: The policy interfaces: a user names a policy in the config (so the class is exported
#: from ``semisched``), but writing one is extending the core, whose own surface is
#: ``semisched.core`` (the engine's views and entries a policy reads).
POLICY_INTERFACES = (
    "AllocationPolicy", "ConcurrencyLimit", "OrderingPolicy", "RoutingPolicy", "TenantPolicy"
)


def _unexported(
    package: object, names: Sequence[str], skip: Sequence[str] = ()
) -> dict[str, set[str]]:
    """Types named in the signatures of ``package``'s ``names`` that it does not export."""
    exported = {id(getattr(package, name)) for name in package.__all__}  # type: ignore[attr-defined]
    missing: dict[str, set[str]] = {}
    for name in names:
        if name in skip:
            continue
        for kind in _signature_types(getattr(package, name)):
            if kind.__module__.split(".")[0] != "semisched" or id(kind) in exported:
                continue
            missing.setdefault(f"{kind.__module__}.{kind.__qualname__}", set()).add(name)
    return missing


def test_every_type_in_a_public_signature_is_exported() -> None:
    missing = _unexported(semisched, semisched.__all__, skip=POLICY_INTERFACES)
    assert missing == {}, "types in public signatures that `semisched` does not export"


def test_every_type_a_policy_interface_names_is_exported_by_the_core() -> None:
    import semisched.core

    assert set(POLICY_INTERFACES) <= set(semisched.__all__)
    missing = _unexported(semisched.core, POLICY_INTERFACES)
    assert missing == {}, "types in policy interfaces that `semisched.core` does not export"
