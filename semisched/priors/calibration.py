"""Online prior correction: what the client learns from the lengths it sees.

A prior source is one opinion about a request's output length. The caller's
``max_tokens`` cap is another: in one application a cap of 2,000 means "this
answer is long", in another every call carries ``max_tokens=4096`` and the cap
means nothing. No fixed rule is right for both, but every response says which
opinion was right (``usage.completion_tokens``). `LengthCalibration`
learns that, the way [`TokenEstimator`][semisched.runtime.estimate.TokenEstimator] learns bytes
per token (Token-Budget-Aware Pool Routing §2.1), and combines the two opinions accordingly.

Two *experts* give a log-scale median for a request:

- ``source``: the prior source's p50 (the learned model, or the heuristic);
- ``heuristic``: what the call's cap alone says. With a cap, the cap read as
  the request's own p90, so its median is ``cap * NEUTRAL_P50 / NEUTRAL_P90``
  ([`Heuristic`][semisched.priors.sources.Heuristic]'s reading of a large cap); without
  one, the population's median ``NEUTRAL_P50``.

Per key (source name, model, whether the call sets a cap) we keep, for the
log errors ``e_s = log(actual / p50_source)`` and ``e_h = log(actual /
p50_heuristic)``, their EMA means ``b_s, b_h`` (the experts' biases), EMA
variances ``v_s, v_h`` and covariance ``c``. The best linear combination of
two estimators with correlated errors weights them by

    w_s     = (v_h - c) / (v_s + v_h - 2c)           (clipped to [0, 1]; w_h = 1 - w_s)
    log p50 = w_s * (log p50_s + b_s) + w_h * (log p50_h + b_h)
    v       = w_s^2 v_s + w_h^2 v_h + 2 w_s w_h c
    p90     = p50 * exp(z90 * sqrt(v) * sigma_0 / mean sigma_0)

Caps that vary from call to call carry the information; one cap on every
call does not (it can only move the combination's intercept). So the
combination above counts in proportion ``r = V / (V + 0.05)`` to the EMA
variance ``V`` of the calls' log caps (taken to be 1, caps that vary, until
``n0`` answers have shown how they vary; a cap far from those seen counts with
its own squared distance from their mean, so one new cap is never read as one
more of the same), and ``1 - r`` of the log quantiles stay the source's own.
An answer that reached its cap was cut, and says only that the request wanted at
least the cap (a censored observation): an expert whose median was above the cap
scores no error on it, one below scores the error it has at least. Scoring the cut
length as the request's own would teach, after a few ``max_tokens=1`` calls, that
requests are one token long. A call without a cap
has no second opinion at all, and its prior is used as the source gave it:
correcting the learned model's own bias and spread from answers (on the
held-out ShareGPT pairs its log errors average -0.25 with a spread of 0.95,
where its p90s claim 0.54) made its ShareGPT-trace short P95 30% worse for
one point of completion rate (a measured run). The answers are still scored, so
`LengthCalibration.statistics` shows the source's bias. ``sigma_0 =
log(p90 / p50) / z90`` is the spread the source claims for this request;
dividing by its mean over the key keeps the source's request-to-request
uncertainty while the scale comes from what was observed.

The statistics are shrunk towards a cold start worth ``n0`` pseudo-
observations (``x_eff = (n0 x_0 + n x) / (n0 + n)``): no bias, and for both
experts the variance the source's own p90 implies, fully correlated (no
credit for combining two opinions until the answers show they differ).
Before any response, the corrected median is therefore the two experts'
geometric mean and the spread the source's. EMA weight: ``max(1 - beta,
1 / (n + 1))``, a running mean at first, then ``beta = 0.95``.

Both quantiles are clipped to the cap (a provider never returns more). A prior
that carries its own routing bucket keeps it (the caller, or a class-only
source, knows the class better than any length).

Pure and synchronous: no clock, no I/O. The runtime and the simulator call
`LengthCalibration.adjust` before a request is classified and
`LengthCalibration.observe` when its answer's length is known.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from semisched.core.checks import check_fraction, check_int, check_number
from semisched.core.request import Z90, Prior
from semisched.priors.sources import NEUTRAL_P50, NEUTRAL_P90

__all__ = [
    "Calibrated",
    "CalibrationStats",
    "ExpertStats",
    "KeyStats",
    "LengthCalibration",
]

#: The cap expert's median per token of cap: the neutral p50/p90 ratio.
_CAP_RATIO = NEUTRAL_P50 / NEUTRAL_P90

#: Smallest spread a cold start assumes (a source that claims certainty).
_MIN_SIGMA = 0.25

#: How much the caps' logs vary before ``n0`` answers (assume they do: the first calls
#: of the measured run must already count their caps), and the variance at which the
#: combined opinion gets half the say (caps within about +-22% of each other).
_COLD_CAP_VARIANCE = 1.0
_CAP_VARIANCE_HALF = 0.05

#: (source name, model, whether the call sets a cap).
Key = tuple[str, str, bool]


def heuristic_median(cap: int | None) -> float:
    """The heuristic expert's median: ``cap * 250 / 550`` with a cap, else 250."""
    return max(cap * _CAP_RATIO, 1.0) if cap else NEUTRAL_P50


@dataclass(slots=True)
class _Moments:
    """EMA means, variances and covariance of the two experts' log errors under one key."""

    observations: int = 0
    bias_s: float = 0.0
    bias_h: float = 0.0
    var_s: float = 0.0
    var_h: float = 0.0
    cov: float = 0.0
    sigma0: float = 0.0
    mean_log_h: float = 0.0
    var_log_h: float = 0.0
    source_weight: float = 0.5

    def update(self, e_s: float, e_h: float, log_h: float, sigma0: float, beta: float) -> None:
        """Fold one answer in (the incremental exponentially weighted moments)."""
        w = max(1.0 - beta, 1.0 / (self.observations + 1))
        d_log_h = log_h - self.mean_log_h
        self.mean_log_h += w * d_log_h
        self.var_log_h = (1.0 - w) * (self.var_log_h + w * d_log_h * d_log_h)
        d_s, d_h = e_s - self.bias_s, e_h - self.bias_h
        self.bias_s += w * d_s
        self.bias_h += w * d_h
        self.var_s = (1.0 - w) * (self.var_s + w * d_s * d_s)
        self.var_h = (1.0 - w) * (self.var_h + w * d_h * d_h)
        self.cov = (1.0 - w) * (self.cov + w * d_s * d_h)
        self.sigma0 += w * (sigma0 - self.sigma0)
        self.observations += 1


@dataclass(frozen=True, slots=True)
class ExpertStats:
    """One expert's learned error under one key, in log space.

    Attributes:
        bias: Mean of ``log(actual / p50)``: > 0 means it predicts too short.
        sigma: Standard deviation of its log error around the bias.
        weight: Its share of the combined median at the last adjustment.
    """

    bias: float
    sigma: float
    weight: float


@dataclass(frozen=True, slots=True)
class KeyStats:
    """What was learned for one key.

    Attributes:
        source: The prior source's name.
        model: The model the calls named.
        capped: Whether these calls set ``max_tokens``.
        observations: Answers scored.
        source_expert: The source's error and weight.
        heuristic_expert: The cap's (or, uncapped, the population median's).
        correlation: Of the two experts' errors.
    """

    source: str
    model: str
    capped: bool
    observations: int
    source_expert: ExpertStats
    heuristic_expert: ExpertStats
    correlation: float


@dataclass(frozen=True, slots=True)
class CalibrationStats:
    """A snapshot of `LengthCalibration`, one entry per key seen."""

    keys: tuple[KeyStats, ...]


@dataclass(frozen=True, slots=True)
class Calibrated:
    """A corrected prior and what `LengthCalibration.observe` needs later.

    Attributes:
        prior: The prior to schedule with.
        key: ``(source name, model, capped)``.
        source_p50: The source's own median.
        heuristic_p50: The heuristic expert's median.
        sigma0: The spread the source claimed for this request.
        cap: The call's ``max_tokens`` (``None``: none): an answer that reached it was
            cut there, and says only that the request wanted at least that many.
    """

    prior: Prior
    key: Key
    source_p50: float
    heuristic_p50: float
    sigma0: float
    cap: int | None = None


class LengthCalibration:
    """Learns per key how far to trust the source and the cap (module docstring)."""

    def __init__(self, *, beta: float = 0.95, pseudo_observations: int = 4) -> None:
        check_fraction("beta", beta, strict_max=True)
        check_int("pseudo_observations", pseudo_observations, minimum=1)
        self.beta = beta
        self.pseudo_observations = pseudo_observations
        self._keys: dict[Key, _Moments] = {}
        self._unfolded: list[tuple[Key, float, float, float, float]] = []

    def __repr__(self) -> str:
        return f"<LengthCalibration keys={len(self._keys)}>"

    def adjust(self, prior: Prior, *, source: str, model: str, cap: int | None) -> Calibrated:
        """The prior to schedule with, for ``prior`` from ``source`` for ``model`` at ``cap``."""
        if cap is not None:
            check_int("cap", cap, minimum=0)
        self._fold()
        cap = cap or None
        key = (source, model, cap is not None)
        m = self._keys.get(key)
        if m is None:
            m = self._keys[key] = _Moments()
        p50_s = max(prior.p50, 1.0)
        p50_h = heuristic_median(cap)
        sigma0 = max(math.log(max(prior.p90, p50_s) / p50_s) / Z90, _MIN_SIGMA)
        n, n0 = m.observations, self.pseudo_observations
        k, k0 = n / (n0 + n), n0 / (n0 + n)
        cold = sigma0 * sigma0
        var_s = k0 * cold + k * m.var_s
        var_h = k0 * cold + k * m.var_h
        cov = k0 * cold + k * m.cov
        spread = k0 * sigma0 + k * m.sigma0
        denominator = var_s + var_h - 2.0 * cov
        w_s = (var_h - cov) / denominator if denominator > 1e-9 else 0.5
        w_s = min(1.0, max(0.0, w_s))
        if cap is None:  # no second opinion: the source's quantiles as given (docstring)
            m.source_weight = 1.0
            return Calibrated(prior, key, p50_s, p50_h, sigma0, cap)
        w_h = 1.0 - w_s
        log_p50 = w_s * (math.log(p50_s) + k * m.bias_s) + w_h * (math.log(p50_h) + k * m.bias_h)
        variance = max(w_s * w_s * var_s + w_h * w_h * var_h + 2.0 * w_s * w_h * cov, 1e-6)
        log_p90 = log_p50 + Z90 * math.sqrt(variance) * sigma0 / spread
        # Caps that vary say something; one cap on every call only moves the intercept.
        # A cap unlike those seen varies by itself: ten calls at max_tokens=1 must not
        # teach that the cap of the next one, at 256, means nothing.
        novel = math.log(p50_h) - m.mean_log_h
        varies = _COLD_CAP_VARIANCE if n < n0 else max(m.var_log_h, novel * novel)
        r = varies / (varies + _CAP_VARIANCE_HALF)
        m.source_weight = 1.0 - r * w_h
        log_p50 = (1.0 - r) * math.log(p50_s) + r * log_p50
        log_p90 = (1.0 - r) * math.log(max(prior.p90, p50_s)) + r * log_p90
        p50, p90 = min(math.exp(log_p50), float(cap)), min(math.exp(log_p90), float(cap))
        corrected = Prior(p50=p50, p90=max(p90, p50), bucket=prior.bucket)
        return Calibrated(corrected, key, p50_s, p50_h, sigma0, cap)

    def observe(self, calibrated: Calibrated, output_tokens: int) -> None:
        """Score both experts of ``calibrated`` on the answer's real length.

        An answer that reached its call's cap was cut there: its length says only "at
        least the cap" (a censored observation). An expert whose median was above the
        cap is not contradicted by it and scores no error; one whose median was below
        scores the error it is known to have at least. Scoring the cut length as the
        request's own would teach that requests are as short as their caps.

        Scores are folded in at the next `adjust` or `statistics`, all that
        arrived since in sorted order: answers that land at the same instant (one decode
        step finishes many) arrive in whatever order the event loop runs their tasks
        (trio shuffles it on purpose), and the EMA must not depend on that order.
        """
        check_number("output_tokens", output_tokens, minimum=0)
        actual = math.log(max(float(output_tokens), 1.0))
        e_s = actual - math.log(calibrated.source_p50)
        e_h = actual - math.log(calibrated.heuristic_p50)
        if calibrated.cap is not None and output_tokens >= calibrated.cap:
            # Cut at its cap (censored): an expert that said more is not contradicted.
            e_s, e_h = max(e_s, 0.0), max(e_h, 0.0)
        log_h = math.log(calibrated.heuristic_p50)
        self._unfolded.append((calibrated.key, e_s, e_h, log_h, calibrated.sigma0))

    def _fold(self) -> None:
        if not self._unfolded:
            return
        for key, e_s, e_h, log_h, sigma0 in sorted(self._unfolded):
            self._keys[key].update(e_s, e_h, log_h, sigma0, self.beta)
        self._unfolded.clear()

    def statistics(self) -> CalibrationStats:
        """What each key has learned so far."""
        self._fold()
        out = []
        for (source, model, capped), m in sorted(self._keys.items()):
            denominator = math.sqrt(m.var_s * m.var_h)
            out.append(
                KeyStats(
                    source=source,
                    model=model,
                    capped=capped,
                    observations=m.observations,
                    source_expert=ExpertStats(m.bias_s, math.sqrt(m.var_s), m.source_weight),
                    heuristic_expert=ExpertStats(
                        m.bias_h, math.sqrt(m.var_h), 1.0 - m.source_weight
                    ),
                    correlation=m.cov / denominator if denominator > 0 else 0.0,
                )
            )
        return CalibrationStats(tuple(out))
