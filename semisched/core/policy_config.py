"""The policy layers' configuration: classes, allocation, ordering, overload control,
signals and the rate budget, with the names of their built-in policies.

Frozen, keyword-only, validated dataclasses (`semisched.core.checks`); the
routing layer's config is `semisched.core.routing_config`, re-exported here
(`RoutingConfig`) beside the others. The scheduler's own config and the presets
that combine these are in `semisched.core.config`, which re-exports every name
here. Values only: it decides nothing and does no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

from semisched.core.buckets import Bucket
from semisched.core.checks import (
    check_bool,
    check_choice,
    check_fraction,
    check_int,
    check_number,
    check_policy,
    check_positive,
    check_str,
)
from semisched.core.registry import ALLOCATION, ORDERING
from semisched.core.routing_config import RoutingConfig

__all__ = [
    "ALLOCATION_POLICY_NAMES",
    "DEFAULT_CLASSES",
    "ORDERING_POLICY_NAMES",
    "OVERLOAD_LEVELS",
    "OVERLOAD_POLICY_NAMES",
    "AllocationConfig",
    "BudgetConfig",
    "ClassSpec",
    "OrderingConfig",
    "OverloadConfig",
    "RoutingConfig",
    "SignalsConfig",
]


#: Valid ``AllocationConfig.policy`` names, checked when a config is built: the
#: allocation registry (`semisched.core.registry`), which the policies of
#: `semisched.core.allocation` fill under their ``name`` as they load.
ALLOCATION_POLICY_NAMES: Mapping[str, type] = ALLOCATION
#: Valid ``OrderingConfig.policy`` names (the ordering registry).
ORDERING_POLICY_NAMES: Mapping[str, type] = ORDERING

#: Ladder level per bucket, by ``OverloadConfig.policy`` name
#: (`semisched.core.overload`); a missing bucket is never shed. Read-only.
OVERLOAD_LEVELS: Mapping[str, Mapping[Bucket, int]] = MappingProxyType({
    name: MappingProxyType(levels) for name, levels in {
        "ladder": {Bucket.MEDIUM: 0, Bucket.LONG: 1, Bucket.XLONG: 2, Bucket.UNKNOWN: 1},
        "uniform_mild": {Bucket.MEDIUM: 1, Bucket.LONG: 1, Bucket.XLONG: 1, Bucket.UNKNOWN: 1},
        "uniform_harsh": {Bucket.MEDIUM: 2, Bucket.LONG: 2, Bucket.XLONG: 2, Bucket.UNKNOWN: 2},
        "reverse": {Bucket.MEDIUM: 0, Bucket.LONG: 2, Bucket.XLONG: 1, Bucket.UNKNOWN: 1},
        "none": {},
    }.items()
})  # fmt: skip
#: Valid ``OverloadConfig.policy`` names.
OVERLOAD_POLICY_NAMES: Mapping[str, Mapping[Bucket, int]] = OVERLOAD_LEVELS


@dataclass(frozen=True, kw_only=True)
class ClassSpec:
    """One scheduling class.

    Attributes:
        name: Class name used in ``Request.klass``.
        weight: Relative share. DRR quantum multiplier; quota-tiered share when
            ``quota`` is unset. Scheduling the Unschedulable §3.1 gives no values; interactive 1 :
            batch 1 is our default (the congestion feedback, not the base
            weight, protects the interactive class).
        interactive: Latency-sensitive class. Adaptive DRR grows its quantum
            under stress (Scheduling the Unschedulable §3.1 "congestion feedback scales weights");
            Short-Priority serves it first.
        quota: Fraction of ``max_inflight`` reserved for this class under
            quota-tiered isolation; ``None`` splits by ``weight``.
        tier: Strict priority: while any class of a lower tier has a request
            waiting, no class of a higher tier sends (0, the default, is the most
            urgent; classes of one tier share by ``weight``). Any allocation policy
            runs inside the tier (`Tiered`).
        min_share: Starvation guard of a class behind a busier tier: while it has
            a request waiting it still gets at least this fraction of the sends
            (``None``: none; strict tiers may then starve it).
        deadline_s: The deadline of this class's requests, in seconds from
            submission, when the call's own is later or absent (``None``: none).
            A flood past it is shed (``DeadlineExceeded``; the gateway answers a
            request still queued with a 429) instead of waiting for as long as it takes.
    """

    name: str
    weight: float = 1.0
    interactive: bool = False
    quota: float | None = None
    tier: int = 0
    min_share: float | None = None
    deadline_s: float | None = None

    def __post_init__(self) -> None:
        check_str("name", self.name)
        check_positive("weight", self.weight)
        check_bool("interactive", self.interactive)
        check_fraction("quota", self.quota, strict_min=True, optional=True)
        check_int("tier", self.tier, minimum=0)
        check_fraction("min_share", self.min_share, strict_min=True, strict_max=True,
                       optional=True)  # fmt: skip
        check_positive("deadline_s", self.deadline_s, optional=True)


#: The paper's two lanes: interactive (short work) and batch (everything heavier).
DEFAULT_CLASSES: tuple[ClassSpec, ...] = (
    ClassSpec(name="interactive", weight=1.0, interactive=True, quota=0.25),
    ClassSpec(name="batch", weight=1.0, interactive=False, quota=0.75),
)


@dataclass(frozen=True, kw_only=True)
class AllocationConfig:
    """Allocation layer: which class gets the next send opportunity.

    Attributes:
        policy: ``fifo`` (oldest head across classes), ``quota_tiered``
            (per-class in-flight quotas, no borrowing), ``adaptive_drr``
            (deficit round robin in estimated tokens, work-conserving,
            congestion-aware), ``fair_queuing`` (round robin, one request per
            turn), ``short_priority`` (interactive classes strictly first);
            or your own [`AllocationPolicy`][semisched.core.AllocationPolicy] subclass
            (the class itself: the engine builds it with ``(config, classes)``).
        quantum_tokens: DRR base quantum in estimated tokens per round. 256 is
            the medium bucket's upper bound, so a medium job fits one round.
        quantum_tokens: DRR base quantum in estimated tokens per round, at most:
            a round's quantum is the largest cost waiting at a class's head when
            that is smaller, so that a class of tiny requests sends one or two a
            turn, not hundreds. 256 is the medium bucket's upper bound, so a
            medium job fits one round.
        congestion_gain: Interactive quantum is multiplied by
            ``1 + congestion_gain * severity`` (Scheduling the Unschedulable §3.1; the paper gives
            no value, 2.0 triples the interactive share at full stress).
        request_tokens: What one request costs in allocation besides its tokens,
            in tokens: the fixed part of the time it holds a slot at the provider
            (the round trip, the prefill, the slot itself), so that a class of
            one-token requests cannot send hundreds for one of another class's.
            ``None`` (the default) learns it: the endpoints' mean intercept over
            their slope, from the fit of latency on output tokens
            (`SpeedFit`); 0 turns it off.
    """

    policy: str | type = "adaptive_drr"
    quantum_tokens: float = 256.0
    congestion_gain: float = 2.0
    request_tokens: float | None = None

    def __post_init__(self) -> None:
        check_policy(self.policy, ALLOCATION_POLICY_NAMES)
        check_positive("quantum_tokens", self.quantum_tokens)
        check_positive("congestion_gain", self.congestion_gain, allow_zero=True)
        check_positive("request_tokens", self.request_tokens, allow_zero=True, optional=True)


@dataclass(frozen=True, kw_only=True)
class OrderingConfig:
    """Ordering layer: which request inside the chosen class.

    The feasible-set score (Scheduling the Unschedulable §3.1, read as written there with the
    extraction noise removed) is:

    ```text
    score = w_wait * wait / (cost / size_ref) - w_size * cost / size_ref
            + w_urgency * urgency
    ```

    ``wait`` is queue residence in seconds, ``cost`` the estimated token cost,
    ``urgency`` in [0, 1] rises as the deadline slack shrinks below
    ``urgency_horizon_s``. Dividing cost by ``size_ref`` makes the weights
    dimensionless apart from ``w_wait`` (per second).

    Attributes:
        policy: ``fifo``, ``feasible_set``, ``longest_first`` (LPT, for a
            batch job's makespan) or ``rate_packing`` (a batch job under a
            rate budget: keeps both rate windows busy, longest first); or your own
            [`OrderingPolicy`][semisched.core.OrderingPolicy] subclass (the class itself:
            the engine builds it with ``(config)``).
        w_wait: Weight of wait per unit of relative size (1/s).
        w_size: Weight of relative size.
        w_urgency: Weight of deadline urgency.
        size_ref_tokens: Reference size (1024 tokens: the long bucket's bound).
        urgency_horizon_s: Slack below which urgency starts to rise.
        band_ratio: Candidates are the oldest request of each cost band, bands
            spaced geometrically by this ratio, plus the ``urgent_candidates``
            earliest deadlines. Keeps a decision independent of queue length.
        urgent_candidates: How many earliest-deadline requests to score.
        infeasible_lookahead: When a band head cannot meet its deadline, how
            many entries behind it are searched for a feasible one.
        feasibility_quantile: Which quantile of a request's prior (a log-normal
            fit to its p50/p90) decides whether it can still meet its deadline:
            0.5 is the paper's p50; the default 0.25 keeps an uncertain request
            (the learned model's) in play while its optimistic length still fits.
            Priors without spread are unaffected.
    """

    policy: str | type = "feasible_set"
    w_wait: float = 1.0
    w_size: float = 1.0
    w_urgency: float = 2.0
    size_ref_tokens: float = 1024.0
    urgency_horizon_s: float = 30.0
    band_ratio: float = 1.5
    urgent_candidates: int = 1
    infeasible_lookahead: int = 16
    feasibility_quantile: float = 0.25

    def __post_init__(self) -> None:
        check_policy(self.policy, ORDERING_POLICY_NAMES)
        check_positive("w_wait", self.w_wait, allow_zero=True)
        check_positive("w_size", self.w_size, allow_zero=True)
        check_positive("w_urgency", self.w_urgency, allow_zero=True)
        check_positive("size_ref_tokens", self.size_ref_tokens)
        check_positive("urgency_horizon_s", self.urgency_horizon_s)
        check_fraction("feasibility_quantile", self.feasibility_quantile, strict_min=True,
                       strict_max=True)  # fmt: skip
        check_number("band_ratio", self.band_ratio, minimum=1, strict_min=True)
        check_int("urgent_candidates", self.urgent_candidates, minimum=0)
        check_int("infeasible_lookahead", self.infeasible_lookahead, minimum=0)


@dataclass(frozen=True, kw_only=True)
class OverloadConfig:
    """Overload layer: admit, defer or reject at the admission boundary.

    ``severity = w_load*provider_load + w_queue*queue_pressure
    + w_tail*tail_latency_ratio`` (Scheduling the Unschedulable §3.1), each signal in [0, 1]
    (see `semisched.core.signals`). Thresholds and the cost ladder are the
    paper's. Weights are ours (the paper gives none); they sum to 1 so
    severity stays in [0, 1].

    Attributes:
        policy: Bucket policy: ``ladder`` (medium 0, long 1, xlong 2),
            ``uniform_mild`` (all non-short 1), ``uniform_harsh`` (all
            non-short 2), ``reverse`` (long 2, xlong 1), ``none`` (admit all).
        w_load, w_queue, w_tail: Signal weights.
        defer_threshold: 0.45 (paper): defer cost >= 1.
        reject_xlong_threshold: 0.65 (paper): reject cost >= 2.
        reject_long_threshold: 0.80 (paper): reject cost >= 1.
        backoff_s: First deferral length; doubles per further deferral.
        max_backoff_s: Cap on one deferral.
        max_defers: After this many deferrals a request that would be deferred
            again is admitted: deferral is a bounded delay, never a silent drop.
        retry_after_s: Retry hint attached to rejections.
    """

    policy: str = "ladder"
    w_load: float = 0.3
    w_queue: float = 0.4
    w_tail: float = 0.3
    defer_threshold: float = 0.45
    reject_xlong_threshold: float = 0.65
    reject_long_threshold: float = 0.80
    backoff_s: float = 2.0
    max_backoff_s: float = 30.0
    max_defers: int = 3
    retry_after_s: float = 30.0

    def __post_init__(self) -> None:
        check_choice("policy", self.policy, OVERLOAD_POLICY_NAMES)
        for name in ("w_load", "w_queue", "w_tail"):
            check_positive(name, getattr(self, name), allow_zero=True)
        for name in ("defer_threshold", "reject_xlong_threshold", "reject_long_threshold"):
            check_fraction(name, getattr(self, name))
        if not (self.defer_threshold <= self.reject_xlong_threshold <= self.reject_long_threshold):
            raise ValueError(
                f"defer_threshold={self.defer_threshold!r} <= reject_xlong_threshold="
                f"{self.reject_xlong_threshold!r} <= reject_long_threshold="
                f"{self.reject_long_threshold!r} must hold (the ladder is progressive)"
            )
        check_positive("backoff_s", self.backoff_s)
        check_positive("max_backoff_s", self.max_backoff_s)
        if self.max_backoff_s < self.backoff_s:
            raise ValueError(
                f"max_backoff_s={self.max_backoff_s!r} must be >= backoff_s={self.backoff_s!r}"
            )
        check_positive("retry_after_s", self.retry_after_s, allow_zero=True)
        check_int("max_defers", self.max_defers, minimum=0)


@dataclass(frozen=True, kw_only=True)
class SignalsConfig:
    """How observed completions become the overload signals.

    Attributes:
        ewma_alpha: Weight of the newest sample in latency EWMAs.
        tail_window: Completions kept for the tail estimate.
        tail_quantile: Quantile of recent per-token latency compared with the
            best seen (0.9).
        tail_ratio_full: Tail/best per-token ratio that counts as full stress
            (signal 1.0); ratio 1 is 0.0.
        queue_ref_s: Estimated backlog drain time that counts as full queue
            pressure.
        initial_s_per_token: Per-token latency assumed before any completion
            (18.7 ms: Scheduling the Unschedulable Table 1's production slope).
        headroom_low: Rate-limit headroom (remaining/limit) below which the
            provider's window counts as pressure (0 at this value, 1 at zero).
    """

    ewma_alpha: float = 0.2
    tail_window: int = 64
    tail_quantile: float = 0.9
    tail_ratio_full: float = 4.0
    queue_ref_s: float = 60.0
    initial_s_per_token: float = 0.0187
    headroom_low: float = 0.2

    def __post_init__(self) -> None:
        check_fraction("ewma_alpha", self.ewma_alpha, strict_min=True)
        check_int("tail_window", self.tail_window, minimum=1)
        check_fraction("tail_quantile", self.tail_quantile)
        check_number("tail_ratio_full", self.tail_ratio_full, minimum=1, strict_min=True)
        check_positive("queue_ref_s", self.queue_ref_s)
        check_positive("initial_s_per_token", self.initial_s_per_token)
        check_fraction("headroom_low", self.headroom_low, strict_min=True)


@dataclass(frozen=True, kw_only=True)
class BudgetConfig:
    """Rate budget settings.

    Attributes:
        rpm: Requests per window, or ``None`` (then only a provider-advertised
            limit applies, once seen).
        tpm: Tokens per window, or ``None`` (likewise).
        window_s: Window length in the engine's seconds (60: "per minute").
        margin_s: How much longer than the window a charge is kept (network
            transit; see the module docstring). 1 s costs 1/61 of throughput.
        adapt: Follow the provider's rate-limit headers (limits, remaining).
    """

    rpm: int | None = None
    tpm: int | None = None
    window_s: float = 60.0
    margin_s: float = 1.0
    adapt: bool = True

    def __post_init__(self) -> None:
        check_int("rpm", self.rpm, minimum=1, optional=True)
        check_int("tpm", self.tpm, minimum=1, optional=True)
        check_positive("window_s", self.window_s)
        check_positive("margin_s", self.margin_s, allow_zero=True)
        check_bool("adapt", self.adapt)
