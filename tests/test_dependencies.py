"""The dependency directions of DESIGN.md, checked on the import statements themselves."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def imported(path: Path, members: bool = False) -> set[str]:
    """Top-level, lazy (function-level) and type-only imports of one module, as dotted names;
    with ``members``, also each ``from pkg import name`` as ``pkg.name`` (a module or not)."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.add(node.module)
            if members:
                names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return names


def modules(package: str) -> list[Path]:
    return sorted((ROOT / package).rglob("*.py"))


def offenders(package: str, forbidden: tuple[str, ...], allowed: tuple[str, ...] = ()) -> list[str]:
    found = []
    for path in modules(package):
        rel = path.relative_to(ROOT).as_posix()
        if rel in allowed:
            continue
        for name in imported(path):
            if any(name == f or name.startswith(f + ".") for f in forbidden):
                found.append(f"{rel}: {name}")
    return found


#: The packages of the SDK besides the core (docs/architecture.md, "Import directions").
SHELLS = (
    "semisched.runtime",
    "semisched.priors",
    "semisched.fleet",
    "semisched.state",
    "semisched.telemetry",
    "semisched.compress",
    "semisched.sim",
    "semisched.batch",
    "semisched.plan",
    "semisched.gateway",
    "semisched.errors",
    "semisched.extras",
    "semisched.command",
)
#: The scheduler's driver: what composes the capability packages, never what they import.
DRIVER = (
    "semisched.runtime.scheduler",
    "semisched.runtime.intake",
    "semisched.runtime.dispatch",
    "semisched.runtime.answers",
    "semisched.runtime.layers",
    "semisched.runtime.facade",
    "semisched.batch",
    "semisched.plan",
    "semisched.gateway",
    "semisched.command",
)
#: Async and network libraries: only the runtime side uses them.
ASYNC_IO = ("anyio", "openai", "httpx", "httpx2", "redis", "starlette", "uvicorn")


@pytest.mark.parametrize(
    ("package", "forbidden", "allowed"),
    [
        # The core is the model: nothing else of the project, no I/O library, no numpy.
        ("semisched/core", (*SHELLS, "predictors", "mockprovider", "bench", *ASYNC_IO, "numpy"),
         ()),
        # The SDK owns the prior protocol; only the default-priors chooser may load the
        # learned predictor, lazily (``priors="auto"``/``"learned"``, ``--priors``).
        ("semisched", ("predictors", "bench"), ("semisched/priors/default.py",)),
        # The capability packages are layers the driver composes: they never import it.
        ("semisched/fleet", DRIVER, ()),
        ("semisched/state", DRIVER, ()),
        ("semisched/telemetry", DRIVER, ()),
        ("semisched/compress", DRIVER, ()),
        ("semisched/priors", DRIVER, ()),
        # The simulator and the planner run in virtual time: no event loop, no network, and
        # neither drives the runtime.
        ("semisched/sim", (*ASYNC_IO, *DRIVER, "semisched.state", "semisched.telemetry"), ()),
        ("semisched/plan", (*ASYNC_IO, "mockprovider", "semisched.runtime.scheduler",
                            "semisched.runtime.dispatch",
                            "semisched.batch", "semisched.state", "semisched.telemetry",
                            "semisched.sim"), ()),
        # The gateway is a shell over the runtime, like batch: nothing of the SDK imports it
        # (but the command's lazy dispatch), and it imports neither batch, plan nor sim. Only
        # its server (the demo) loads the mock, lazily.
        ("semisched", ("semisched.gateway",),
         ("semisched/command.py", *(p.relative_to(ROOT).as_posix()
                                    for p in modules("semisched/gateway")))),
        ("semisched/gateway", ("semisched.batch", "semisched.plan", "semisched.sim", "bench"),
         ()),
        ("semisched/gateway", ("mockprovider",), ("semisched/gateway/server.py",
                                                  "semisched/gateway/cli.py")),
        # The mock never depends on the SDK or the benchmarks.
        ("mockprovider", ("semisched", "bench", "predictors"), ()),
        ("predictors", ("bench", "mockprovider", "semisched.runtime", "semisched.sim",
                        "semisched.batch"), ()),
    ],
)  # fmt: skip
def test_packages_import_only_what_the_design_allows(
    package: str, forbidden: tuple[str, ...], allowed: tuple[str, ...]
) -> None:
    assert offenders(package, forbidden, allowed) == []


def test_the_sdk_loads_the_predictor_only_lazily() -> None:
    tree = ast.parse((ROOT / "semisched/priors/default.py").read_text())
    top = {
        node.module
        for node in tree.body
        if isinstance(node, ast.ImportFrom) and node.module is not None
    }
    assert not any(name.startswith("predictors") for name in top)


def module_name(path: Path) -> str:
    name = ".".join(path.relative_to(ROOT).with_suffix("").parts)
    return name.removesuffix(".__init__")


def import_graph(package: str) -> dict[str, set[str]]:
    """Each module of ``package`` and the modules of it that it imports: top-level, lazy and
    type-only (``if TYPE_CHECKING``) alike, ``from pkg import module`` included."""
    names = {module_name(path): path for path in modules(package)}
    return {name: {m for m in imported(path, members=True) if m in names and m != name}
            for name, path in names.items()}  # fmt: skip


def cycle(graph: dict[str, set[str]]) -> list[str]:
    """One import cycle of ``graph`` (``[]``: none), by depth-first search."""
    state: dict[str, int] = {}  # 1: on the path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str]:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                return [*path[path.index(nxt):], nxt]
            if nxt not in state and (found := visit(nxt)):
                return found
        path.pop()
        state[node] = 2
        return []

    for node in sorted(graph):
        if node not in state and (found := visit(node)):
            return found
    return []


def test_the_core_imports_run_one_way() -> None:
    # Configs below the policies, the queue below the fleet and the tenant layer: a module of
    # the core never imports, even for a type, one that imports it (DESIGN.md's "sans-I/O
    # core" read as a stack a contributor can follow from the bottom up). The package's
    # __init__ re-exports everything and is left out.
    graph = import_graph("semisched/core")
    graph.pop("semisched.core", None)
    for deps in graph.values():
        deps.discard("semisched.core")
    assert cycle(graph) == []


def test_the_cycle_finder_finds_one() -> None:
    assert cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert cycle({"a": {"b"}, "b": set()}) == []


def self_handed_over(path: Path) -> list[str]:
    """Calls in ``path`` that pass ``self`` itself as an argument (``f(self)``,
    ``f(x, view=self)``): an object handing itself over as someone's view."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Call):
            values = [*node.args, *(k.value for k in node.keywords)]
            if any(isinstance(v, ast.Name) and v.id == "self" for v in values):
                found.append(f"{path.name}:{node.lineno}")
    return found


def test_the_engine_never_hands_itself_over_as_a_view() -> None:
    # The engine (and its decisions) own their parts and hand each policy a view
    # object of its own, never the engine.
    driver = [ROOT / "semisched/core/engine.py", ROOT / "semisched/core/decide.py"]
    assert [where for path in driver for where in self_handed_over(path)] == []


def test_the_self_finder_finds_one(tmp_path: Path) -> None:
    source = tmp_path / "m.py"
    source.write_text("class A:\n    def f(self):\n        g(1, view=self)\n", encoding="utf-8")
    assert self_handed_over(source) == ["m.py:3"]
