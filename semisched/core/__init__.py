"""The pure scheduling core: no I/O, no clock reads, no asyncio.

Everything that decides lives here; the async runtime and the simulator only
execute the actions the :class:`Engine` returns. Importing this package loads
none of ``asyncio``, ``time``, ``httpx``, ``httpx2`` or ``openai`` (a test
checks it).
"""

from semisched.core.buckets import BUCKET_BOUNDS, SIZED_BUCKETS, Bucket, bucket_for_tokens
from semisched.core.budget import BudgetSnapshot, ProviderLimits, RateBudget
from semisched.core.config import (
    PRESETS,
    AllocationConfig,
    BudgetConfig,
    ClassSpec,
    OrderingConfig,
    OverloadConfig,
    SchedulerConfig,
    SignalsConfig,
    preset,
)
from semisched.core.engine import Action, Defer, Engine, EngineStats, Expire, Reject, Send, Wake
from semisched.core.request import Prior, Request
from semisched.core.signals import SignalSnapshot

__all__ = [
    "BUCKET_BOUNDS",
    "PRESETS",
    "SIZED_BUCKETS",
    "Action",
    "AllocationConfig",
    "Bucket",
    "BudgetConfig",
    "BudgetSnapshot",
    "ClassSpec",
    "Defer",
    "Engine",
    "EngineStats",
    "Expire",
    "OrderingConfig",
    "OverloadConfig",
    "Prior",
    "ProviderLimits",
    "RateBudget",
    "Reject",
    "Request",
    "SchedulerConfig",
    "Send",
    "SignalSnapshot",
    "SignalsConfig",
    "Wake",
    "bucket_for_tokens",
    "preset",
]
