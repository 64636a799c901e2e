"""The pure scheduling core: no I/O, no clock reads, no asyncio.

Everything that decides lives here; the async runtime and the simulator only
execute the actions the `Engine` returns. Importing this package loads
none of ``asyncio``, ``time``, ``httpx``, ``httpx2`` or ``openai`` (a test
checks it).

Writing a policy needs only the names exported here: an allocation policy
subclasses `AllocationPolicy` and reads the engine through
`AllocationView`; an ordering policy subclasses `OrderingPolicy`
and picks an `Entry` of a `ClassQueue`, with a
`LatencyEstimate` for deadlines. The built-in policies are the read-only
registries `ALLOCATION_POLICIES`, `ORDERING_POLICIES` and
`OVERLOAD_POLICIES`; a config names one of them. Routing (which
endpoint of a fleet executes a send) has `RoutingPolicy`, reading
`EndpointState`, and `ROUTING_POLICIES`; an endpoint is described
by an `EndpointSpec`. Tenants (who shares the scheduler, with what
entitlement and service class) are a `TenantConfig` of
`TenantSpec`; which tenant sends next is a `TenantPolicy`
(reading `TenantLane` through a `TenantView`), from
`TENANT_POLICIES`.
"""

from semisched.core.actions import (
    Action,
    Defer,
    Expire,
    Fail,
    Pause,
    Reject,
    Retry,
    Send,
    Wake,
)
from semisched.core.allocation import ALLOCATION_POLICIES, AllocationPolicy, AllocationView
from semisched.core.buckets import BUCKET_BOUNDS, SIZED_BUCKETS, Bucket, bucket_for_tokens
from semisched.core.budget import BudgetSnapshot, ProviderLimits, RateBudget
from semisched.core.config import (
    PRESETS,
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
from semisched.core.engine import Engine
from semisched.core.errors import SemischedError
from semisched.core.fleet.concurrency import CONCURRENCY_POLICIES
from semisched.core.fleet.endpoint import Circuit, EndpointSpec, EndpointState
from semisched.core.fleet.limits import Answered, ConcurrencyLimit, FixedLimit, LimitChange
from semisched.core.fleet.queue_delay import QueueDelayLimit
from semisched.core.fleet.routing import ROUTING_POLICIES, RoutingPolicy
from semisched.core.floor import MakespanFloor, makespan_floor
from semisched.core.lifecycle import DEFAULT_RETRY_ON, FailureKind, RetryPolicy
from semisched.core.ordering import (
    ORDERING_POLICIES,
    LatencyEstimate,
    OrderingPolicy,
    PackingView,
)
from semisched.core.overload import OVERLOAD_POLICIES, Admission, OverloadController, Verdict
from semisched.core.queue import ClassQueue, Entry
from semisched.core.request import Prior, Request
from semisched.core.signals import SignalSnapshot
from semisched.core.states import IllegalTransition
from semisched.core.stats import (
    BucketCounts,
    EndpointStats,
    EngineCounters,
    EngineStats,
    FailureCounts,
    TenantStats,
)
from semisched.core.tenants.config import ServiceClass, TenantConfig, TenantSpec
from semisched.core.tenants.lanes import TenantLane, TenantView
from semisched.core.tenants.policies import TENANT_POLICIES, TenantPolicy

__all__ = [
    "ALLOCATION_POLICIES",
    "BUCKET_BOUNDS",
    "CONCURRENCY_POLICIES",
    "DEFAULT_RETRY_ON",
    "ORDERING_POLICIES",
    "OVERLOAD_POLICIES",
    "PRESETS",
    "ROUTING_POLICIES",
    "SIZED_BUCKETS",
    "TENANT_POLICIES",
    "Action",
    "Admission",
    "AllocationConfig",
    "AllocationPolicy",
    "AllocationView",
    "Answered",
    "Bucket",
    "BucketCounts",
    "BudgetConfig",
    "BudgetSnapshot",
    "Circuit",
    "ClassQueue",
    "ClassSpec",
    "ConcurrencyLimit",
    "Defer",
    "EndpointSpec",
    "EndpointState",
    "EndpointStats",
    "Engine",
    "EngineCounters",
    "EngineStats",
    "Entry",
    "Expire",
    "Fail",
    "FailureCounts",
    "FailureKind",
    "FixedLimit",
    "IllegalTransition",
    "LatencyEstimate",
    "LimitChange",
    "MakespanFloor",
    "OrderingConfig",
    "OrderingPolicy",
    "OverloadConfig",
    "OverloadController",
    "PackingView",
    "Pause",
    "Prior",
    "ProviderLimits",
    "QueueDelayLimit",
    "RateBudget",
    "Reject",
    "Request",
    "Retry",
    "RetryPolicy",
    "RoutingConfig",
    "RoutingPolicy",
    "SchedulerConfig",
    "SemischedError",
    "Send",
    "ServiceClass",
    "SignalSnapshot",
    "SignalsConfig",
    "TenantConfig",
    "TenantLane",
    "TenantPolicy",
    "TenantSpec",
    "TenantStats",
    "TenantView",
    "Verdict",
    "Wake",
    "bucket_for_tokens",
    "makespan_floor",
    "preset",
]
