"""Configuration: frozen, keyword-only, validated dataclasses and the named presets.

Every knob of the three policy layers lives here with its default and where the
default comes from. Construction validates: a bad value raises ``ValueError``
naming the field (``f"{field}=... must be ..."``). Policies are chosen by *name*
(``AllocationConfig.policy`` and friends); the engine resolves names through the
registries in :mod:`semisched.core.allocation`, :mod:`semisched.core.ordering` and
:mod:`semisched.core.overload` and never branches on which one it runs.

Presets (seed 004 §4.5–4.6 strategy names) are built by :func:`preset`.

This module holds values only; it decides nothing and does no I/O.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Any

from semisched.core.buckets import Bucket

__all__ = [
    "PRESETS",
    "AllocationConfig",
    "BudgetConfig",
    "ClassSpec",
    "OrderingConfig",
    "OverloadConfig",
    "SchedulerConfig",
    "SignalsConfig",
    "preset",
]


def _positive(name: str, value: float, *, allow_zero: bool = False) -> None:
    ok = math.isfinite(value) and (value >= 0 if allow_zero else value > 0)
    if not ok:
        bound = ">= 0" if allow_zero else "> 0"
        raise ValueError(f"{name}={value!r} must be a finite number {bound}")


def _fraction(name: str, value: float) -> None:
    if not (math.isfinite(value) and 0.0 <= value <= 1.0):
        raise ValueError(f"{name}={value!r} must be in [0, 1]")


@dataclass(frozen=True, kw_only=True)
class ClassSpec:
    """One scheduling class.

    Attributes:
        name: Class name used in ``Request.klass``.
        weight: Relative share. DRR quantum multiplier; quota-tiered share when
            ``quota`` is unset. Seed 004 §3.1 gives no values; interactive 1 :
            batch 1 is our default (the congestion feedback, not the base
            weight, protects the interactive class).
        interactive: Latency-sensitive class. Adaptive DRR grows its quantum
            under stress (seed 004 §3.1 "congestion feedback scales weights");
            Short-Priority serves it first.
        quota: Fraction of ``max_inflight`` reserved for this class under
            quota-tiered isolation; ``None`` splits by ``weight``.
    """

    name: str
    weight: float = 1.0
    interactive: bool = False
    quota: float | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise ValueError(f"name={self.name!r} must be a non-empty string")
        _positive("weight", self.weight)
        if self.quota is not None and not (math.isfinite(self.quota) and 0 < self.quota <= 1):
            raise ValueError(f"quota={self.quota!r} must be None or in (0, 1]")


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
            turn), ``short_priority`` (interactive classes strictly first).
        quantum_tokens: DRR base quantum in estimated tokens per round. 256 is
            the medium bucket's upper bound, so a medium job fits one round.
        congestion_gain: Interactive quantum is multiplied by
            ``1 + congestion_gain * severity`` (seed 004 §3.1; the paper gives
            no value, 2.0 triples the interactive share at full stress).
    """

    policy: str = "adaptive_drr"
    quantum_tokens: float = 256.0
    congestion_gain: float = 2.0

    def __post_init__(self) -> None:
        _positive("quantum_tokens", self.quantum_tokens)
        _positive("congestion_gain", self.congestion_gain, allow_zero=True)


@dataclass(frozen=True, kw_only=True)
class OrderingConfig:
    """Ordering layer: which request inside the chosen class.

    The feasible-set score (seed 004 §3.1, read as written there with the
    extraction noise removed) is::

        score = w_wait * wait / (cost / size_ref) - w_size * cost / size_ref
                + w_urgency * urgency

    ``wait`` is queue residence in seconds, ``cost`` the estimated token cost,
    ``urgency`` in [0, 1] rises as the deadline slack shrinks below
    ``urgency_horizon_s``. Dividing cost by ``size_ref`` makes the weights
    dimensionless apart from ``w_wait`` (per second).

    Attributes:
        policy: ``fifo``, ``feasible_set`` or ``longest_first`` (LPT, for a
            batch job's makespan).
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
    """

    policy: str = "feasible_set"
    w_wait: float = 1.0
    w_size: float = 1.0
    w_urgency: float = 2.0
    size_ref_tokens: float = 1024.0
    urgency_horizon_s: float = 30.0
    band_ratio: float = 1.5
    urgent_candidates: int = 1
    infeasible_lookahead: int = 16

    def __post_init__(self) -> None:
        _positive("w_wait", self.w_wait, allow_zero=True)
        _positive("w_size", self.w_size, allow_zero=True)
        _positive("w_urgency", self.w_urgency, allow_zero=True)
        _positive("size_ref_tokens", self.size_ref_tokens)
        _positive("urgency_horizon_s", self.urgency_horizon_s)
        if not (math.isfinite(self.band_ratio) and self.band_ratio > 1.0):
            raise ValueError(f"band_ratio={self.band_ratio!r} must be a finite number > 1")
        for name in ("urgent_candidates", "infeasible_lookahead"):
            value = getattr(self, name)
            if not (isinstance(value, int) and not isinstance(value, bool) and value >= 0):
                raise ValueError(f"{name}={value!r} must be an int >= 0")


@dataclass(frozen=True, kw_only=True)
class OverloadConfig:
    """Overload layer: admit, defer or reject at the admission boundary.

    ``severity = w_load*provider_load + w_queue*queue_pressure
    + w_tail*tail_latency_ratio`` (seed 004 §3.1), each signal in [0, 1]
    (see :mod:`semisched.core.signals`). Thresholds and the cost ladder are the
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
        for name in ("w_load", "w_queue", "w_tail"):
            _positive(name, getattr(self, name), allow_zero=True)
        for name in ("defer_threshold", "reject_xlong_threshold", "reject_long_threshold"):
            _fraction(name, getattr(self, name))
        if not (self.defer_threshold <= self.reject_xlong_threshold <= self.reject_long_threshold):
            raise ValueError(
                f"defer_threshold={self.defer_threshold!r} <= reject_xlong_threshold="
                f"{self.reject_xlong_threshold!r} <= reject_long_threshold="
                f"{self.reject_long_threshold!r} must hold (the ladder is progressive)"
            )
        _positive("backoff_s", self.backoff_s)
        _positive("max_backoff_s", self.max_backoff_s)
        if self.max_backoff_s < self.backoff_s:
            raise ValueError(
                f"max_backoff_s={self.max_backoff_s!r} must be >= backoff_s={self.backoff_s!r}"
            )
        _positive("retry_after_s", self.retry_after_s, allow_zero=True)
        if not (isinstance(self.max_defers, int) and self.max_defers >= 0):
            raise ValueError(f"max_defers={self.max_defers!r} must be an int >= 0")


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
            (18.7 ms: seed 004 Table 1's production slope).
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
        if not (math.isfinite(self.ewma_alpha) and 0 < self.ewma_alpha <= 1):
            raise ValueError(f"ewma_alpha={self.ewma_alpha!r} must be in (0, 1]")
        if not (isinstance(self.tail_window, int) and self.tail_window >= 1):
            raise ValueError(f"tail_window={self.tail_window!r} must be an int >= 1")
        _fraction("tail_quantile", self.tail_quantile)
        if not (math.isfinite(self.tail_ratio_full) and self.tail_ratio_full > 1):
            raise ValueError(f"tail_ratio_full={self.tail_ratio_full!r} must be > 1")
        _positive("queue_ref_s", self.queue_ref_s)
        _positive("initial_s_per_token", self.initial_s_per_token)
        if not (math.isfinite(self.headroom_low) and 0 < self.headroom_low <= 1):
            raise ValueError(f"headroom_low={self.headroom_low!r} must be in (0, 1]")


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
        for name in ("rpm", "tpm"):
            value = getattr(self, name)
            if value is not None and (
                isinstance(value, bool) or not isinstance(value, int) or value < 1
            ):
                raise ValueError(f"{name}={value!r} must be None or an int >= 1")
        if not (math.isfinite(self.window_s) and self.window_s > 0):
            raise ValueError(f"window_s={self.window_s!r} must be a finite number > 0")
        if not (math.isfinite(self.margin_s) and self.margin_s >= 0):
            raise ValueError(f"margin_s={self.margin_s!r} must be a finite number >= 0")


@dataclass(frozen=True, kw_only=True)
class SchedulerConfig:
    """Everything the engine needs.

    Attributes:
        classes: The scheduling classes, in round-robin order.
        max_inflight: Client-side concurrency budget (send opportunities);
            ``None`` = unlimited, i.e. send on arrival (direct dispatch).
        max_inflight_tokens: Optional budget on in-flight estimated tokens
            (p90 output + input); one request is always allowed through. The
            budget is checked against the request allocation and ordering
            picked: when it does not fit, sending waits for capacity rather
            than skipping to a smaller request of another class (no
            starvation of large requests by small ones).
        input_token_weight: Cost of one prompt token relative to one output
            token. 1/512: a prefill chunk of 512 tokens costs one iteration,
            like one decoded token (seed 000 eq. 4).
        budget: Optional requests/tokens-per-window budget
            (:mod:`semisched.core.budget`); sends wait until it can pay.
        allocation, ordering, overload, signals: Layer configs.
    """

    classes: tuple[ClassSpec, ...] = DEFAULT_CLASSES
    max_inflight: int | None = 32
    max_inflight_tokens: float | None = None
    input_token_weight: float = 1.0 / 512.0
    budget: BudgetConfig | None = None
    allocation: AllocationConfig = field(default_factory=AllocationConfig)
    ordering: OrderingConfig = field(default_factory=OrderingConfig)
    overload: OverloadConfig = field(default_factory=OverloadConfig)
    signals: SignalsConfig = field(default_factory=SignalsConfig)

    def __post_init__(self) -> None:
        if not self.classes:
            raise ValueError("classes=() must name at least one class")
        names = [c.name for c in self.classes]
        if len(set(names)) != len(names):
            raise ValueError(f"classes={names!r} must have unique names")
        if self.max_inflight is not None and not (
            isinstance(self.max_inflight, int) and self.max_inflight >= 1
        ):
            raise ValueError(f"max_inflight={self.max_inflight!r} must be None or an int >= 1")
        if self.max_inflight_tokens is not None:
            _positive("max_inflight_tokens", self.max_inflight_tokens)
        _positive("input_token_weight", self.input_token_weight, allow_zero=True)

    def class_for(self, bucket: Bucket) -> str:
        """Default class of a request routed by ``bucket`` when the caller names none:
        the first interactive class for short requests, else the first other class
        (seed 004's short versus heavy lanes)."""
        if bucket is Bucket.SHORT:
            for spec in self.classes:
                if spec.interactive:
                    return spec.name
        for spec in self.classes:
            if not spec.interactive:
                return spec.name
        return self.classes[0].name

    def with_(self, **changes: Any) -> SchedulerConfig:
        """Return a copy with fields replaced (validated again)."""
        return replace(self, **changes)


def _presets() -> dict[str, SchedulerConfig]:
    no_olc = OverloadConfig(policy="none")
    full = SchedulerConfig()
    return {
        # Send on arrival, no client queue: every request goes straight into
        # the provider (seed 004 "direct naive dispatch").
        "direct_naive": SchedulerConfig(
            max_inflight=None,
            allocation=AllocationConfig(policy="fifo"),
            ordering=OrderingConfig(policy="fifo"),
            overload=no_olc,
        ),
        # Fixed per-class in-flight quotas, FIFO inside a class.
        "quota_tiered": SchedulerConfig(
            allocation=AllocationConfig(policy="quota_tiered"),
            ordering=OrderingConfig(policy="fifo"),
            overload=no_olc,
        ),
        # Adaptive DRR + feasible-set ordering, no overload control.
        "adaptive_drr": SchedulerConfig(overload=no_olc),
        # The full stack: adaptive DRR + ordering + cost-ladder overload control.
        "final_adrr_olc": full,
        # Allocation swapped, ordering and overload unchanged (seed 004 §4.6).
        "fair_queuing": full.with_(allocation=AllocationConfig(policy="fair_queuing")),
        "short_priority": full.with_(allocation=AllocationConfig(policy="short_priority")),
        # Beyond the paper: a batch job's makespan. One class, longest predicted
        # work first, nothing shed (every request of a batch is wanted).
        "batch_makespan": SchedulerConfig(
            classes=(ClassSpec(name="batch"),),
            allocation=AllocationConfig(policy="fifo"),
            ordering=OrderingConfig(policy="longest_first"),
            overload=no_olc,
        ),
    }


#: Named strategies from seed 004.
PRESETS: dict[str, SchedulerConfig] = _presets()


def preset(name: str, **changes: Any) -> SchedulerConfig:
    """Return the named preset, optionally with fields replaced.

    Raises:
        ValueError: If ``name`` is not a preset.
    """
    try:
        base = PRESETS[name]
    except KeyError:
        raise ValueError(f"name={name!r} must be one of {sorted(PRESETS)}") from None
    return base.with_(**changes) if changes else base
