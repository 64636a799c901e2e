"""Client-observable congestion signals and the severity they add up to.

The client cannot see the provider's batch or queue (Scheduling the Unschedulable §1). What it can
see is what comes back: how long completions took per generated token, how
much work it has in flight, and how much it is holding in its own queue. This
module turns those observations into three signals in [0, 1] and their
weighted sum, the overload *severity* (Scheduling the Unschedulable §3.1):

``provider_load``
    in-flight requests / the client's concurrency budget (0 when unlimited).
``queue_pressure``
    estimated time to drain the client's own queue at the observed service
    rate, divided by ``queue_ref_s``, capped at 1. Drain rate is
    ``max(in_flight, budget) / s_per_token`` tokens per second: every in-flight
    request decodes one token per observed ``s_per_token``.
``tail_latency_ratio``
    ``quantile(recent per-token latency) / best per-token latency seen``,
    mapped linearly from ``[1, tail_ratio_full]`` onto ``[0, 1]``. The best
    seen is the client's estimate of the uncongested speed (like BBR's
    min-RTT); the ratio says how much slower the tail is running now.

Rate-limit answers (429) raise a throttle signal, and ``x-ratelimit-remaining-*``
headers a headroom signal, that the runtime feeds; both enter severity through
``tail_latency_ratio``'s slot as floors (a 429 is the strongest tail signal there
is, and an almost empty rate window is the next one). The throttle decays with
each completion. Nothing here reads a clock:
callers pass ``now``.
"""

from __future__ import annotations

import math
from bisect import bisect_left, insort
from collections import deque
from dataclasses import dataclass

from semisched.core.buckets import Bucket, bucket_for_tokens
from semisched.core.config import OverloadConfig, SignalsConfig

__all__ = ["SignalSnapshot", "Signals"]


@dataclass(frozen=True, slots=True)
class SignalSnapshot:
    """The three overload signals and their weighted severity, all in [0, 1]."""

    provider_load: float
    queue_pressure: float
    tail_latency_ratio: float
    severity: float


class Signals:
    """Running estimates built from completions; pure and deterministic.

    ``last`` holds the ``(load, queue, tail, severity)`` of the last `severity`
    call (`last_snapshot` as a `SignalSnapshot`).
    """

    __slots__ = (
        "_alpha",
        "_best",
        "_bucket_latency",
        "_cfg",
        "_headroom_pressure",
        "_s_per_token",
        "_tail",
        "_tail_cache",
        "_tail_sorted",
        "_throttle",
        "_track_tail",
        "completions",
        "failures",
        "last",
        "throttles",
    )

    def __init__(self, cfg: SignalsConfig, *, track_tail: bool = True) -> None:
        """``track_tail=False`` keeps only the latency averages (a fleet's aggregate:
        the tail signal comes from its endpoints' own objects)."""
        self._cfg = cfg
        self._alpha = cfg.ewma_alpha
        self._s_per_token = cfg.initial_s_per_token
        self._best = math.inf
        self._track_tail = track_tail
        self._tail: deque[float] = deque()
        self._tail_sorted: list[float] = []
        self._tail_cache: float | None = 0.0
        self._bucket_latency: dict[Bucket, float] = {}
        self._throttle = 0.0
        self._headroom_pressure = 0.0
        self.last: tuple[float, float, float, float] = (0.0, 0.0, 0.0, 0.0)
        self.completions = 0
        self.failures = 0
        self.throttles = 0

    def __repr__(self) -> str:
        best = "n/a" if math.isinf(self._best) else f"{self._best * 1000:.1f}ms"
        return (
            f"<Signals s_per_token={self._s_per_token * 1000:.1f}ms best={best} "
            f"tail={self.tail_signal():.2f} completions={self.completions} "
            f"failures={self.failures} throttles={self.throttles}>"
        )

    @property
    def tracks_tail(self) -> bool:
        """Whether this object keeps the tail window (an endpoint's own signals do)."""
        return self._track_tail

    def split(self) -> Signals:
        """Hand this object's full state (tail included) to a copy, and keep only the
        latency averages here: a fleet's aggregate that one endpoint shared until a
        second one joined (`Fleet`)."""
        copy = Signals(self._cfg)
        for name in Signals.__slots__:
            value = getattr(self, name)
            if isinstance(value, (deque, list, dict)):
                value = type(value)(value)
            setattr(copy, name, value)
        copy._track_tail = True
        self._track_tail = False
        self._tail.clear()
        self._tail_sorted.clear()
        return copy

    # -- observations -------------------------------------------------------------

    def record_completion(self, latency_s: float, output_tokens: int) -> None:
        """Fold one completed call's end-to-end latency into the estimates."""
        if not (math.isfinite(latency_s) and latency_s >= 0):
            raise ValueError(f"{latency_s=} must be a finite number >= 0")
        if output_tokens < 0:
            raise ValueError(f"{output_tokens=} must be >= 0")
        per_token = latency_s / (output_tokens if output_tokens > 1 else 1)
        self._s_per_token += self._alpha * (per_token - self._s_per_token)
        if per_token < self._best:
            self._best = per_token
        if self._track_tail:
            self._tail.append(per_token)
            insort(self._tail_sorted, per_token)
            if len(self._tail) > self._cfg.tail_window:
                oldest = self._tail.popleft()
                del self._tail_sorted[bisect_left(self._tail_sorted, oldest)]
            self._tail_cache = None
        bucket = bucket_for_tokens(output_tokens)
        old = self._bucket_latency.get(bucket)
        self._bucket_latency[bucket] = (
            latency_s if old is None else old + self._alpha * (latency_s - old)
        )
        self._throttle *= 1.0 - self._alpha
        self.completions += 1

    def record_headroom(self, fraction: float) -> None:
        """Fold the provider's rate-limit headroom (remaining/limit, smallest of
        requests and tokens) into the tail signal: below ``headroom_low`` of the
        window left, pressure rises linearly to 1 at zero headroom."""
        if not math.isfinite(fraction):
            raise ValueError(f"{fraction=} must be finite")
        low = self._cfg.headroom_low
        self._headroom_pressure = min(1.0, max(0.0, (low - fraction) / low))

    def record_failure(self) -> None:
        """Count a failed attempt (provider error or timeout)."""
        self.failures += 1

    def record_throttle(self) -> None:
        """Count a 429 rate-limit answer; it pushes the tail signal to full."""
        self.throttles += 1
        self._throttle = 1.0

    # -- estimates ----------------------------------------------------------------

    @property
    def s_per_token(self) -> float:
        """EWMA of observed end-to-end seconds per generated token."""
        return self._s_per_token

    def bucket_latency(self, bucket: Bucket) -> float | None:
        """EWMA completion latency for a true bucket, if any was observed."""
        return self._bucket_latency.get(bucket)

    def estimate_latency(self, output_tokens: float) -> float:
        """Expected seconds from send to completion for ``output_tokens``."""
        return self._s_per_token * (output_tokens if output_tokens > 1.0 else 1.0)

    def tail_signal(self) -> float:
        """The tail-latency ratio mapped onto [0, 1]."""
        tail = self._tail_cache
        if tail is None:
            tail = self._tail_cache = self._tail_ratio_signal()
        # max(tail, throttle, headroom) without the builtin's call overhead (hot path)
        if self._throttle > tail:
            tail = self._throttle
        return self._headroom_pressure if self._headroom_pressure > tail else tail

    def _tail_ratio_signal(self) -> float:
        if not self._tail or not math.isfinite(self._best) or self._best <= 0:
            return 0.0
        ordered = self._tail_sorted
        last = len(ordered) - 1
        idx = int(self._cfg.tail_quantile * len(ordered))
        ratio = ordered[idx if idx < last else last] / self._best
        full = self._cfg.tail_ratio_full
        signal = (ratio - 1.0) / (full - 1.0)
        # clamp to [0, 1] (min/max are slow builtins; this runs after every completion)
        return 0.0 if not signal > 0.0 else signal if signal < 1.0 else 1.0

    def severity(
        self,
        inflight: int,
        max_inflight: int | None,
        queued_tokens: float,
        weights: OverloadConfig,
        tail: float | None = None,
        load_floor: float = 0.0,
    ) -> float:
        """Weighted severity only (the hot path of admission and allocation).

        ``tail`` replaces this object's own tail signal (a fleet passes its least
        stressed endpoint's); ``load_floor`` is a lower bound on the load signal
        (a fleet's least loaded endpoint's in-flight / ``max_concurrency``).
        """
        # Same arithmetic as `snapshot`, with conditionals for min/max (hot path).
        load = load_floor
        if max_inflight is not None:
            load = inflight / max_inflight
            if load > 1.0:
                load = 1.0
            if load < load_floor:
                load = load_floor
        lanes = inflight if inflight > 1 else 1
        if max_inflight is not None and max_inflight > lanes:
            lanes = max_inflight
        queue = queued_tokens * self._s_per_token / lanes / self._cfg.queue_ref_s
        if queue > 1.0:
            queue = 1.0
        if tail is None:
            tail = self._tail_cache
            if tail is None or self._throttle > tail or self._headroom_pressure > tail:
                tail = self.tail_signal()  # the cached ratio alone is the common case
        severity = weights.w_load * load + weights.w_queue * queue + weights.w_tail * tail
        if severity > 1.0:
            severity = 1.0
        self.last = (load, queue, tail, severity)
        return severity

    def last_snapshot(self) -> SignalSnapshot:
        """The signals of the last `severity` call, as `snapshot` would have
        given them then (an explanation of the decision that severity fed)."""
        return SignalSnapshot(*self.last)

    def snapshot(
        self,
        *,
        inflight: int,
        max_inflight: int | None,
        queued_tokens: float,
        weights: OverloadConfig,
        tail: float | None = None,
        load_floor: float = 0.0,
    ) -> SignalSnapshot:
        """Compute the signals and severity for the current client state
        (``tail``, ``load_floor``: as for `severity`)."""
        load = 0.0 if max_inflight is None else min(1.0, inflight / max_inflight)
        load = max(load, load_floor)
        lanes = max(1, inflight, max_inflight or 0)
        drain_s = queued_tokens * self._s_per_token / lanes
        queue = min(1.0, drain_s / self._cfg.queue_ref_s)
        if tail is None:
            tail = self.tail_signal()
        severity = weights.w_load * load + weights.w_queue * queue + weights.w_tail * tail
        return SignalSnapshot(load, queue, tail, min(1.0, severity))
