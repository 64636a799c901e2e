"""semisched: client-side semi-clairvoyant scheduling for OpenAI-compatible LLM APIs.

What ``Scheduler(...)`` and its arguments need is importable from here: the
scheduler and its client, the outcome exceptions (:mod:`semisched.errors`),
the config and its presets (:mod:`semisched.core`), the tenants
(:mod:`semisched.core.tenancy`) and their statistics, the retry policy, the
clocks (:mod:`semisched.clock`), the prior interface (:mod:`semisched.priors`)
and the prompt-token estimator (:mod:`semisched.estimate`).
The README's "API at a glance" lists each name; a test keeps the two in step.

Names are loaded lazily on first use, so ``import semisched`` (and
``import semisched.core``, the pure scheduling core) loads neither anyio nor
openai. Everything else (the simulator, the batch runner, the policy classes)
is imported from its own module.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from semisched.calibration import LengthCalibration
    from semisched.clock import AnyioClock, Clock, MonotonicClock, ScaledClock
    from semisched.core.config import SchedulerConfig, preset
    from semisched.core.explain import Explanation
    from semisched.core.lifecycle import FailureKind, RetryPolicy
    from semisched.core.request import Prior
    from semisched.core.stats import TenantStats
    from semisched.core.tenancy import ServiceClass, TenantConfig, TenantSpec
    from semisched.endpoints import Endpoint
    from semisched.errors import (
        DeadlineExceeded,
        ProviderError,
        QueueFull,
        QuotaExceeded,
        RateLimited,
        RequestRejected,
        SchedulerClosed,
        SemischedError,
    )
    from semisched.estimate import TokenEstimator
    from semisched.observe import RequestObserver
    from semisched.options import RuntimeOptions
    from semisched.priors import BatchPriorSource, Heuristic, PriorQuery, PriorsChoice, PriorSource
    from semisched.runtime import ScheduledClient, ScheduledStream, Scheduler, SchedulerStats
    from semisched.state.base import StateUnavailable

#: The package version, kept equal to ``[project] version`` in pyproject.toml
#: (a test compares them). A literal: no metadata lookup at import time, and it
#: is right in a source checkout that was never installed.
__version__ = "0.1.0"

_WHERE = {
    # the SDK
    "ScheduledClient": "semisched.runtime",
    "ScheduledStream": "semisched.runtime",
    "Scheduler": "semisched.runtime",
    "Endpoint": "semisched.endpoints",
    "SchedulerStats": "semisched.runtime",
    "TenantStats": "semisched.core.stats",
    "Explanation": "semisched.core.explain",
    "RequestObserver": "semisched.observe",
    "RuntimeOptions": "semisched.options",
    # configuration (pure core)
    "FailureKind": "semisched.core.lifecycle",
    "Prior": "semisched.core.request",
    "RetryPolicy": "semisched.core.lifecycle",
    "SchedulerConfig": "semisched.core.config",
    "preset": "semisched.core.config",
    "ServiceClass": "semisched.core.tenancy",
    "TenantConfig": "semisched.core.tenancy",
    "TenantSpec": "semisched.core.tenancy",
    "TokenEstimator": "semisched.estimate",
    # clocks
    "AnyioClock": "semisched.clock",
    "Clock": "semisched.clock",
    "MonotonicClock": "semisched.clock",
    "ScaledClock": "semisched.clock",
    # priors
    "BatchPriorSource": "semisched.priors",
    "Heuristic": "semisched.priors",
    "PriorQuery": "semisched.priors",
    "PriorSource": "semisched.priors",
    "PriorsChoice": "semisched.priors",
    "LengthCalibration": "semisched.calibration",
    # outcomes
    "DeadlineExceeded": "semisched.errors",
    "ProviderError": "semisched.errors",
    "QueueFull": "semisched.errors",
    "QuotaExceeded": "semisched.errors",
    "RateLimited": "semisched.errors",
    "RequestRejected": "semisched.errors",
    "SchedulerClosed": "semisched.errors",
    "SemischedError": "semisched.errors",
    "StateUnavailable": "semisched.state.base",
}

__all__ = [
    "AnyioClock",
    "BatchPriorSource",
    "Clock",
    "DeadlineExceeded",
    "Endpoint",
    "Explanation",
    "FailureKind",
    "Heuristic",
    "LengthCalibration",
    "MonotonicClock",
    "Prior",
    "PriorQuery",
    "PriorSource",
    "PriorsChoice",
    "ProviderError",
    "QueueFull",
    "QuotaExceeded",
    "RateLimited",
    "RequestObserver",
    "RequestRejected",
    "RetryPolicy",
    "RuntimeOptions",
    "ScaledClock",
    "ScheduledClient",
    "ScheduledStream",
    "Scheduler",
    "SchedulerClosed",
    "SchedulerConfig",
    "SchedulerStats",
    "SemischedError",
    "ServiceClass",
    "StateUnavailable",
    "TenantConfig",
    "TenantSpec",
    "TenantStats",
    "TokenEstimator",
    "preset",
]


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'semisched' has no attribute {name!r}")
    value = getattr(import_module(module), name)
    globals()[name] = value  # later look-ups skip this function
    return value


def __dir__() -> list[str]:
    dunders = (k for k in globals() if k.startswith("__") and k.endswith("__"))
    return sorted({*__all__, *dunders})
