"""The admission layer: overload control judging one arrival or one return from deferral.

The engine asks `AdmissionLayer.judge` when a request arrives and each time it
comes back from a deferral (engine rule 6). The layer reads the current severity,
lets the tenant policy say how the request's tenant is judged (its standing: the
severity it is judged at and the ladder levels added to its bucket's), asks the
overload controller (`semisched.core.overload`) and answers with a value (without
overload control, a controller that sheds nothing, ``sheds`` is false and the engine
admits without asking, so that no severity is read):

- ``None``: admitted, the request joins its class queue;
- `Defer`: held back until a time before its deadline;
- `Reject`: shed now (or a deferral that would
  outlast its deadline).

Each defer or reject carries its explanation, with the signals the severity was
computed from.

It also answers the one question asked at a send opportunity that can refuse a
request: whether the request's tenant's own rate cap (``rpm``/``tpm``) can pay for
it (`AdmissionLayer.pays`): now, later (the lane sits out until then), or
never (rejected, rule ``tenant.tpm_cap``).

The layer keeps no books: the engine counts and queues what it answers.
Pure: no clock, no I/O.
"""

from __future__ import annotations

from collections.abc import Callable

from semisched.core.actions import Defer, Reject
from semisched.core.explain import Decision, Explainer
from semisched.core.overload import OverloadController, Verdict
from semisched.core.queue import Entry
from semisched.core.signals import Signals
from semisched.core.tenants.lanes import TenantLane, TenantView
from semisched.core.tenants.policies import TenantPolicy

__all__ = ["AdmissionLayer"]

_DEFER = Verdict.DEFER
_REJECT_D, _DEFER_D = Decision.REJECT, Decision.DEFER


class AdmissionLayer:
    """Overload control and the tenant standing, behind one question (module docstring).

    Args:
        overload: The overload controller (thresholds, ladder, deferral back-off).
        tenants: The tenant policy (its `standing`).
        view: What the tenant policy may read of the engine.
        severity: The engine's current severity (computed from ``signals``).
        signals: The signals ``severity`` is computed from (explanations show them).
        explain: The engine's explainer (it counts decisions by rule).
    """

    __slots__ = (
        "_explain", "_severity", "_signals", "_tenants", "_view", "overload", "sheds",
    )  # fmt: skip

    def __init__(
        self,
        overload: OverloadController,
        tenants: TenantPolicy,
        view: TenantView,
        severity: Callable[[], float],
        signals: Signals,
        explain: Explainer,
    ) -> None:
        self.overload = overload
        #: Whether any request can be shed; the engine asks `judge` only when it can.
        self.sheds = overload.sheds
        self._tenants = tenants
        self._view = view
        self._severity = severity
        self._signals = signals
        self._explain = explain

    def judge(self, entry: Entry, now: float) -> Defer | Reject | None:
        """Admit ``entry`` (``None``), defer it or reject it, at ``now``."""
        request = entry.request
        lane = entry.lane
        assert lane is not None
        severity, offset = self._tenants.standing(lane, self._view, self._severity())
        verdict = self.overload.shed(request.bucket, severity, now, entry.defers, offset)
        if verdict is None:
            return None
        signals = self._signals.last  # those the severity above came from
        shed = self._explain.shed
        if verdict.verdict is _DEFER:
            until = verdict.until
            assert until is not None
            deadline = request.deadline
            if deadline is None or until < deadline:
                why = shed(request, _DEFER_D, verdict.rule, verdict, until - now, signals)
                return Defer(request, until, verdict, why)
            reason = verdict.reason + "; the deferral would outlast the deadline"
            rule = "overload.defer_past_deadline"
            return Reject(request, reason, severity, None,
                          shed(request, _REJECT_D, rule, verdict, None, signals))  # fmt: skip
        # shed() only defers or rejects: this is a rejection.
        reason = verdict.reason
        retry = verdict.retry_after
        why = shed(request, _REJECT_D, verdict.rule, verdict, retry, signals, reason)
        return Reject(request, reason, severity, retry, why)

    def pays(self, lane: TenantLane, entry: Entry, now: float, severity: float) -> float | Reject:
        """Whether ``lane``'s own rate cap pays for ``entry`` at ``now``: the seconds until
        it can (``0.0``: now), or a `Reject` when it never can (its charge alone
        exceeds the cap)."""
        assert lane.budget is not None
        wait = lane.budget.wait(now, entry.charge)
        if wait is not None:
            return wait
        reason = (
            f"tenant {lane.name!r}: {entry.charge:.0f} tokens exceed its tpm={lane.spec.tpm} cap"
        )
        why = self._explain(entry.request, _REJECT_D, "tenant.tpm_cap", reason)
        return Reject(entry.request, reason, severity, None, why)
