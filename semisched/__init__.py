"""semisched: client-side semi-clairvoyant scheduling for OpenAI-compatible LLM APIs.

``Scheduler`` (the async SDK, :mod:`semisched.runtime`) and the outcome
exceptions (:mod:`semisched.errors`) are importable from here. They are loaded
lazily, so ``import semisched.core`` (the pure scheduling core) loads neither
anyio nor openai.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
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
    from semisched.runtime import (
        RetryPolicy,
        ScheduledClient,
        ScheduledStream,
        Scheduler,
        SchedulerStats,
    )

_WHERE = {
    "DeadlineExceeded": "semisched.errors",
    "ProviderError": "semisched.errors",
    "QueueFull": "semisched.errors",
    "QuotaExceeded": "semisched.errors",
    "RateLimited": "semisched.errors",
    "RequestRejected": "semisched.errors",
    "SchedulerClosed": "semisched.errors",
    "SemischedError": "semisched.errors",
    "RetryPolicy": "semisched.runtime",
    "ScheduledClient": "semisched.runtime",
    "ScheduledStream": "semisched.runtime",
    "Scheduler": "semisched.runtime",
    "SchedulerStats": "semisched.runtime",
}

__all__ = [
    "DeadlineExceeded",
    "ProviderError",
    "QueueFull",
    "QuotaExceeded",
    "RateLimited",
    "RequestRejected",
    "RetryPolicy",
    "ScheduledClient",
    "ScheduledStream",
    "Scheduler",
    "SchedulerClosed",
    "SchedulerStats",
    "SemischedError",
]


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'semisched' has no attribute {name!r}")
    return getattr(import_module(module), name)
