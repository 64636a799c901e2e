"""semisched: client-side semi-clairvoyant scheduling for OpenAI-compatible LLM APIs.

What ``Scheduler(...)`` and its arguments need is importable from here: the
scheduler and its client, the outcome exceptions (`semisched.errors`),
the config and its presets (`semisched.core`), the tenants
(`semisched.core.tenants.config`) and their statistics, the retry policy, the
clocks (`semisched.runtime.clock`), the prior interface (`semisched.priors.sources`)
and the prompt-token estimator (`semisched.runtime.estimate`).
The API reference (docs/reference/api.md) lists each name; a test keeps the two in step.

Names are loaded lazily on first use, so ``import semisched`` (and
``import semisched.core``, the pure scheduling core) loads neither anyio nor
openai. Everything else (the simulator, the batch runner, the policy classes)
is imported from its own module.
"""

from __future__ import annotations

import warnings
from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from semisched.batch.input import BatchError, InvalidInput, InvalidLine
    from semisched.compress.runtime import CompressionStats
    from semisched.core.allocation import AllocationPolicy
    from semisched.core.buckets import Bucket
    from semisched.core.budget import BudgetSnapshot, ProviderLimits
    from semisched.core.config import (
        AllocationConfig,
        BudgetConfig,
        ClassSpec,
        OrderingConfig,
        OverloadConfig,
        RoutingConfig,
        SchedulerConfig,
        SignalsConfig,
        preset,
    )
    from semisched.core.explain import Decision, DecisionCounts, Explanation
    from semisched.core.fleet.limits import ConcurrencyLimit, LimitChange
    from semisched.core.fleet.routing import RoutingPolicy
    from semisched.core.lifecycle import FailureKind, RetryPolicy
    from semisched.core.ordering import OrderingPolicy
    from semisched.core.request import Prior, Request
    from semisched.core.signals import SignalSnapshot
    from semisched.core.spend import Price, SpendCap
    from semisched.core.stats import (
        BucketCounts,
        EndpointStats,
        EngineCounters,
        EngineStats,
        FailureCounts,
        TenantStats,
    )
    from semisched.core.tenants.config import ServiceClass, TenantConfig, TenantSpec
    from semisched.core.tenants.policies import TenantPolicy
    from semisched.errors import (
        DeadlineExceeded,
        ProviderError,
        QueueFull,
        QuotaExceeded,
        RateLimited,
        RequestError,
        RequestRejected,
        SchedulerClosed,
        SemischedError,
        SpendCapExceeded,
    )
    from semisched.extras import MissingDependency
    from semisched.fleet.endpoints import Endpoint
    from semisched.fleet.fleetfile import FleetFileError
    from semisched.plan.pools import Infeasible
    from semisched.priors.calibration import (
        Calibrated,
        CalibrationStats,
        ExpertStats,
        KeyStats,
        LengthCalibration,
    )
    from semisched.priors.sources import (
        BatchPriorSource,
        Heuristic,
        PriorQuery,
        PriorsChoice,
        PriorSource,
    )
    from semisched.runtime.apis import ApiSpec, ApiUsage
    from semisched.runtime.clock import AnyioClock, Clock, MonotonicClock, ScaledClock
    from semisched.runtime.estimate import CategoryStats, EstimatorStats, TokenEstimator
    from semisched.runtime.options import RuntimeOptions
    from semisched.runtime.scheduler import (
        ScheduledClient,
        ScheduledStream,
        Scheduler,
        SchedulerStats,
    )
    from semisched.runtime.spending import SpendStats
    from semisched.runtime.stats import RuntimeCounters
    from semisched.state.base import Grant, Scope, StateBackend, StateStats, StateUnavailable
    from semisched.telemetry.observe import Finished, Outcome, RequestObserver

#: The package version, kept equal to ``[project] version`` in pyproject.toml
#: (a test compares them). A literal: no metadata lookup at import time, and it
#: is right in a source checkout that was never installed.
__version__ = "0.1.0"

_WHERE = {
    # the SDK
    "ScheduledClient": "semisched.runtime.scheduler",
    "ScheduledStream": "semisched.runtime.scheduler",
    "ApiSpec": "semisched.runtime.apis",
    "ApiUsage": "semisched.runtime.apis",
    "Scheduler": "semisched.runtime.scheduler",
    "Endpoint": "semisched.fleet.endpoints",
    "SchedulerStats": "semisched.runtime.scheduler",
    "TenantStats": "semisched.core.stats",
    "Explanation": "semisched.core.explain",
    "RequestObserver": "semisched.telemetry.observe",
    "RuntimeOptions": "semisched.runtime.options",
    # configuration (pure core)
    "FailureKind": "semisched.core.lifecycle",
    "Prior": "semisched.core.request",
    "RetryPolicy": "semisched.core.lifecycle",
    "SchedulerConfig": "semisched.core.config",
    "preset": "semisched.core.config",
    "ServiceClass": "semisched.core.tenants.config",
    "TenantConfig": "semisched.core.tenants.config",
    "TenantSpec": "semisched.core.tenants.config",
    "TokenEstimator": "semisched.runtime.estimate",
    # clocks
    "AnyioClock": "semisched.runtime.clock",
    "Clock": "semisched.runtime.clock",
    "MonotonicClock": "semisched.runtime.clock",
    "ScaledClock": "semisched.runtime.clock",
    # priors
    "BatchPriorSource": "semisched.priors.sources",
    "Heuristic": "semisched.priors.sources",
    "PriorQuery": "semisched.priors.sources",
    "PriorSource": "semisched.priors.sources",
    "PriorsChoice": "semisched.priors.sources",
    "LengthCalibration": "semisched.priors.calibration",
    # outcomes
    "DeadlineExceeded": "semisched.errors",
    "InternalError": "semisched.errors",
    "ProviderError": "semisched.errors",
    "QueueFull": "semisched.errors",
    "QuotaExceeded": "semisched.errors",
    "RateLimited": "semisched.errors",
    "RequestRejected": "semisched.errors",
    "SpendCapExceeded": "semisched.errors",
    "Price": "semisched.core.spend",
    "SpendCap": "semisched.core.spend",
    "SpendStats": "semisched.runtime.spending",
    "SchedulerClosed": "semisched.errors",
    "SemischedError": "semisched.errors",
    "StateUnavailable": "semisched.state.base",
    "MissingDependency": "semisched.extras",
    # the types of public signatures, and the rest of the error tree
    "Outcome": "semisched.telemetry.observe",
    "Calibrated": "semisched.priors.calibration",
    "CalibrationStats": "semisched.priors.calibration",
    "CompressionStats": "semisched.compress.runtime",
    "Bucket": "semisched.core.buckets",
    "AllocationConfig": "semisched.core.config",
    "BudgetConfig": "semisched.core.config",
    "ClassSpec": "semisched.core.config",
    "OrderingConfig": "semisched.core.config",
    "OverloadConfig": "semisched.core.config",
    "RoutingConfig": "semisched.core.config",
    "SignalsConfig": "semisched.core.config",
    "Decision": "semisched.core.explain",
    "Request": "semisched.core.request",
    "SignalSnapshot": "semisched.core.signals",
    "EngineStats": "semisched.core.stats",
    "TenantPolicy": "semisched.core.tenants.policies",
    "EstimatorStats": "semisched.runtime.estimate",
    "Finished": "semisched.telemetry.observe",
    "StateBackend": "semisched.state.base",
    "StateStats": "semisched.state.base",
    "RuntimeCounters": "semisched.runtime.stats",
    "RequestError": "semisched.errors",
    "FleetFileError": "semisched.fleet.fleetfile",
    "BatchError": "semisched.batch.input",
    "InvalidInput": "semisched.batch.input",
    "Infeasible": "semisched.plan.pools",
    "ExpertStats": "semisched.priors.calibration",
    "AllocationPolicy": "semisched.core.allocation",
    "BucketCounts": "semisched.core.stats",
    "BudgetSnapshot": "semisched.core.budget",
    "CategoryStats": "semisched.runtime.estimate",
    "DecisionCounts": "semisched.core.explain",
    "EndpointStats": "semisched.core.stats",
    "EngineCounters": "semisched.core.stats",
    "FailureCounts": "semisched.core.stats",
    "Grant": "semisched.state.base",
    "InvalidLine": "semisched.batch.input",
    "KeyStats": "semisched.priors.calibration",
    "OrderingPolicy": "semisched.core.ordering",
    "ProviderLimits": "semisched.core.budget",
    "RoutingPolicy": "semisched.core.fleet.routing",
    "ConcurrencyLimit": "semisched.core.fleet.limits",
    "LimitChange": "semisched.core.fleet.limits",
    "Scope": "semisched.state.base",
}

__all__ = [
    "AllocationConfig",
    "AllocationPolicy",
    "AnyioClock",
    "ApiSpec",
    "ApiUsage",
    "BatchError",
    "BatchPriorSource",
    "Bucket",
    "BucketCounts",
    "BudgetConfig",
    "BudgetSnapshot",
    "Calibrated",
    "CalibrationStats",
    "CategoryStats",
    "ClassSpec",
    "Clock",
    "CompressionStats",
    "ConcurrencyLimit",
    "DeadlineExceeded",
    "Decision",
    "DecisionCounts",
    "Endpoint",
    "EndpointStats",
    "EngineCounters",
    "EngineStats",
    "EstimatorStats",
    "ExpertStats",
    "Explanation",
    "FailureCounts",
    "FailureKind",
    "Finished",
    "FleetFileError",
    "Grant",
    "Heuristic",
    "Infeasible",
    "InternalError",
    "InvalidInput",
    "InvalidLine",
    "KeyStats",
    "LengthCalibration",
    "LimitChange",
    "MissingDependency",
    "MonotonicClock",
    "OrderingConfig",
    "OrderingPolicy",
    "Outcome",
    "OverloadConfig",
    "Price",
    "Prior",
    "PriorQuery",
    "PriorSource",
    "PriorsChoice",
    "ProviderError",
    "ProviderLimits",
    "QueueFull",
    "QuotaExceeded",
    "RateLimited",
    "Request",
    "RequestError",
    "RequestObserver",
    "RequestRejected",
    "RetryPolicy",
    "RoutingConfig",
    "RoutingPolicy",
    "RuntimeCounters",
    "RuntimeOptions",
    "ScaledClock",
    "ScheduledClient",
    "ScheduledStream",
    "Scheduler",
    "SchedulerClosed",
    "SchedulerConfig",
    "SchedulerStats",
    "Scope",
    "SemischedError",
    "ServiceClass",
    "SignalSnapshot",
    "SignalsConfig",
    "SpendCap",
    "SpendCapExceeded",
    "SpendStats",
    "StateBackend",
    "StateStats",
    "StateUnavailable",
    "TenantConfig",
    "TenantPolicy",
    "TenantSpec",
    "TenantStats",
    "TokenEstimator",
    "preset",
]


#: Names that were merged into another, still resolved (with a DeprecationWarning).
_MERGED = {"RateLimitInfo": "ProviderLimits"}


def __getattr__(name: str) -> Any:
    merged = _MERGED.get(name)
    if merged is not None:
        warnings.warn(
            f"semisched.{name} is semisched.{merged} (one class for rate-limit headers)",
            DeprecationWarning,
            stacklevel=2,
        )
        return __getattr__(merged)
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'semisched' has no attribute {name!r}")
    value = getattr(import_module(module), name)
    globals()[name] = value  # later look-ups skip this function
    return value


def __dir__() -> list[str]:
    dunders = (k for k in globals() if k.startswith("__") and k.endswith("__"))
    return sorted({*__all__, *dunders})
