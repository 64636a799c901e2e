"""Overload layer: admit, defer or reject a request at the admission boundary.

Scheduling the Unschedulable §3.1: above progressive severity thresholds the controller maps a
request's estimated cost to defer/reject through a *cost ladder* of bucket
weights (medium 0, long 1, xlong 2); short requests are never rejected. We
read the thresholds as rules on the ladder level:

=========================  ==========  =====================
severity at least           action      applies to levels
=========================  ==========  =====================
``reject_long_threshold``   reject      >= 1   (0.80)
``reject_xlong_threshold``  reject      >= 2   (0.65)
``defer_threshold``         defer       >= 1   (0.45)
=========================  ==========  =====================

The first row that matches wins (the table is `RULES`). A bucket policy
only chooses the level of each bucket (`OVERLOAD_POLICIES`); the rules are
the same for every policy, so the mechanism never asks which policy it runs:

- ``ladder``: medium 0, long 1, xlong 2; unknown size 1.
- ``uniform_mild``: every non-short bucket 1 (Scheduling the Unschedulable "one shared mid-tier").
- ``uniform_harsh``: every non-short bucket 2 (the harshest non-short tier).
- ``reverse``: long 2, xlong 1 (stress contrast only).
- ``none``: nothing is ever deferred or rejected.

Short requests have no level under any policy: never deferred, never
rejected. A request of unknown size (no-information priors, Scheduling the Unschedulable §4.4)
gets the policy's ``unknown`` level, a uniform admission severity.

A tenant policy (`semisched.core.tenants.lanes`) may shift a sheddable
request's level by its tenant's standing (``offset``: a best-effort tenant two
levels sooner, an elastic tenant beyond its entitlement one) or exempt it
(``None``: a guaranteed tenant inside its entitlement). Short requests stay
unshed whatever the tenant.

Deferral is bounded: the n-th deferral lasts ``backoff_s * 2**(n-1)`` capped
at ``max_backoff_s``, and a request already deferred ``max_defers`` times is
admitted instead of deferred again. Rejections carry a reason and a retry hint.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass

from semisched.core.buckets import Bucket
from semisched.core.config import OVERLOAD_LEVELS, OverloadConfig

__all__ = ["OVERLOAD_POLICIES", "RULES", "Admission", "OverloadController", "Verdict"]


class Verdict(enum.Enum):
    """What overload control says about one arrival."""

    # Members are singletons: hash by identity, in C (Enum hashes its name in Python,
    # and these key the hot path's tallies).
    __hash__ = object.__hash__

    ADMIT = "admit"
    DEFER = "defer"
    REJECT = "reject"


@dataclass(frozen=True, slots=True)
class Admission:
    """An admission decision with its explanation.

    Attributes:
        verdict: Admit, defer or reject.
        severity: The severity it was decided at.
        level: The request's ladder level (``None``: never shed).
        threshold: The threshold that triggered a defer or reject.
        bucket: The routing bucket decided on.
        until: End of a deferral.
        retry_after: Retry hint of a rejection, seconds.
        rule: The rule that fired (`semisched.core.explain.RULES`), for a defer or reject.
    """

    verdict: Verdict
    severity: float
    level: int | None
    threshold: float | None = None
    bucket: Bucket | None = None
    until: float | None = None
    retry_after: float | None = None
    rule: str = ""

    @property
    def reason(self) -> str:
        """A one-line human explanation."""
        if self.verdict is Verdict.ADMIT or self.threshold is None:
            return "admitted" if self.level is None else "admitted: below thresholds"
        key = (self.verdict, self.threshold, self.level, self.bucket)
        template = _REASONS.get(key)
        if template is None:  # the sentence but its severity, once per rule, level and bucket
            action = "rejects" if self.verdict is Verdict.REJECT else "defers"
            template = _REASONS[key] = (
                f"overload: severity %.2f >= {self.threshold:.2f} "
                f"{action} level-{self.level} ({self.bucket}) requests"
            )
        return template % self.severity


#: `Admission.reason`'s sentences by (verdict, threshold, level, bucket), each
#: with a ``%.2f`` for the severity (a defer's reason is built at every deferral).
_REASONS: dict[tuple[Verdict, float, int | None, Bucket | None], str] = {}


_ADMIT, _REJECT = Verdict.ADMIT, Verdict.REJECT


#: Ladder level per bucket, by bucket policy name; a missing bucket is never shed
#: (read-only, tables included; `semisched.core.config.OVERLOAD_LEVELS`, where a
#: config checks its name when it is built).
OVERLOAD_POLICIES: Mapping[str, Mapping[Bucket, int]] = OVERLOAD_LEVELS

#: (threshold field, minimum level, verdict, rule name), checked in order; first match wins.
RULES: tuple[tuple[str, int, Verdict, str], ...] = (
    ("reject_long_threshold", 1, Verdict.REJECT, "overload.reject_long"),
    ("reject_xlong_threshold", 2, Verdict.REJECT, "overload.reject_xlong"),
    ("defer_threshold", 1, Verdict.DEFER, "overload.defer"),
)


class OverloadController:
    """Applies `RULES` to a request's bucket level at a given severity."""

    __slots__ = ("cfg", "levels", "rules")

    def __init__(self, cfg: OverloadConfig) -> None:
        try:
            # A private plain copy: ``shed`` reads it on the engine's hot path.
            self.levels = dict(OVERLOAD_POLICIES[cfg.policy])
        except KeyError:
            raise ValueError(
                f"policy={cfg.policy!r} must be one of {sorted(OVERLOAD_POLICIES)}"
            ) from None
        self.cfg = cfg
        self.rules = tuple((float(getattr(cfg, f)), lvl, v, rule) for f, lvl, v, rule in RULES)

    @property
    def sheds(self) -> bool:
        """Whether any request can be shed: ``False`` when no bucket has a level (the
        ``none`` policy), so that every request is admitted at any severity."""
        return bool(self.levels)

    def decide(
        self, bucket: Bucket, severity: float, now: float, defers: int, offset: int | None = 0
    ) -> Admission:
        """Decide for a request of routing ``bucket`` deferred ``defers`` times so far.

        ``offset`` shifts a sheddable bucket's level for its tenant (the tenant
        policy's ``shed_offset``: best-effort tenants sooner); ``None``: never shed.
        """
        shed = self.shed(bucket, severity, now, defers, offset)
        if shed is not None:
            return shed
        level = self.levels.get(bucket)
        if level is not None and offset is not None:
            level += offset
        return Admission(_ADMIT, severity, None if offset is None else level)

    def shed(
        self, bucket: Bucket, severity: float, now: float, defers: int, offset: int | None = 0
    ) -> Admission | None:
        """`decide`'s defer or reject decision, or ``None`` when it admits.

        The engine's hot path: an admitted request needs no explanation object.
        """
        level = self.levels.get(bucket)
        if level is None or offset is None:
            return None
        level += offset
        for threshold, min_level, verdict, rule in self.rules:
            if level >= min_level and severity >= threshold:
                if verdict is _REJECT:
                    return Admission(
                        verdict,
                        severity,
                        level,
                        threshold,
                        bucket,
                        retry_after=self.cfg.retry_after_s,
                        rule=rule,
                    )
                if defers >= self.cfg.max_defers:
                    return None
                backoff = self.cfg.backoff_s * 2.0**defers
                if backoff > self.cfg.max_backoff_s:
                    backoff = self.cfg.max_backoff_s
                until = now + backoff  # positional below: keywords cost more on this hot path
                return Admission(verdict, severity, level, threshold, bucket, until, None, rule)
        return None
