"""The M/G/c queue of one pool: Erlang-C, Kimura's tail, and sojourn quantiles.

FleetOpt §3.1 models a pool of ``n`` units with ``s`` slots each as
an M/G/c queue with ``c = n * s`` servers. With offered load ``a = λ E[S]`` and
utilisation ``ϱ = a / c``:

- **Erlang-C** (eq. 5, computed as in its Appendix A, in log space so
  ``c`` in the tens of thousands neither overflows nor loses precision): the
  probability ``C(c, ϱ)`` that an arrival waits for a slot. We go through
  Erlang-B, ``B = pmf(c) / cdf(c)`` of a Poisson(``a``) law, and
  ``C = B / (1 - ϱ (1 - B))``.
- **Kimura's tail** (eq. 6): the waiting time of an arrival that waits is
  taken to be exponential with rate ``θ = 2 (c μ - λ) / (1 + C_s²)``, so
  ``P(W > t) = C e^{-θ t}`` and the P99 wait is ``ln(C / 0.01) / θ`` (the
  paper's W99). ``C_s²`` is the squared coefficient of variation of the
  service time.
- **Sojourn quantiles** (beyond the paper): eq. 8 bounds TTFT by adding the
  P99 wait to the P99 prefill, which double-counts two tails. We instead take
  the wait independent of the request's own service (FIFO) and solve
  ``P(W + S > t) = 1 - q`` exactly for the empirical service distribution:
  ``P(W + S > t) = E[1{S > t} + 1{S <= t} C e^{-θ (t - S)}]``, by bisection.

Pure numpy; no clock, no I/O.
"""

from __future__ import annotations

import math

import numpy as np
import numpy.typing as npt

__all__ = ["erlang_c", "kimura_rate", "sojourn_quantile", "wait_quantile"]

FloatArray = npt.NDArray[np.float64]


def erlang_c(servers: int, offered: float) -> float:
    """Probability that an arrival waits: Erlang-C for ``servers`` and offered load ``offered``.

    Returns 1.0 when the queue is unstable (``offered >= servers``) and 0.0 for no load.
    """
    if servers < 1:
        raise ValueError(f"servers={servers!r} must be an int >= 1")
    if offered <= 0.0:
        return 0.0
    if offered >= servers:
        return 1.0
    # Poisson(a) log-pmf over k = 0..c; only terms within ~12 sd of the mean matter.
    spread = 12.0 * math.sqrt(offered) + 30.0
    if servers > offered + spread:
        return 0.0  # pmf(c) / cdf(c) < e^-72: no arrival waits, to double precision
    low = max(0, int(offered - spread))
    k = np.arange(low, servers + 1, dtype=np.float64)
    log_pmf = -offered + k * math.log(offered) - _log_factorial(k)
    top = float(log_pmf.max())
    log_cdf = top + math.log(float(np.exp(log_pmf - top).sum()))
    erlang_b = math.exp(float(log_pmf[-1]) - log_cdf)
    rho = offered / servers
    return erlang_b / (1.0 - rho * (1.0 - erlang_b))


_SMALL_LOG_FACTORIALS = np.array([math.lgamma(x + 1.0) for x in range(9)])


def _log_factorial(k: FloatArray) -> FloatArray:
    # lgamma(k + 1), vectorised: Stirling's series is exact to ~1e-10 above k = 8.
    out = np.empty_like(k)
    small = k < 9
    out[small] = _SMALL_LOG_FACTORIALS[k[small].astype(np.int64)]
    big = k[~small]
    out[~small] = (
        (big + 0.5) * np.log(big + 1.0)
        - (big + 1.0)
        + 0.5 * math.log(2.0 * math.pi)
        + 1.0 / (12.0 * (big + 1.0))
        - 1.0 / (360.0 * (big + 1.0) ** 3)
    )
    return out


def kimura_rate(servers: int, service_rate: float, arrival_rate: float, scv: float) -> float:
    """``θ``: the decay rate of Kimura's waiting-time tail (``P(W > t) = C e^{-θ t}``)."""
    spare = servers * service_rate - arrival_rate
    if spare <= 0.0:
        return 0.0
    return 2.0 * spare / (1.0 + scv)


def wait_quantile(p_wait: float, theta: float, q: float) -> float:
    """The ``q`` quantile of the wait alone (the paper's W99 at ``q = 0.99``)."""
    if p_wait <= 1.0 - q:
        return 0.0
    if theta <= 0.0:
        return math.inf
    return math.log(p_wait / (1.0 - q)) / theta


def sojourn_quantile(
    values: FloatArray, weights: FloatArray, p_wait: float, theta: float, q: float
) -> float:
    """The ``q`` quantile of ``W + S`` (seconds), ``W`` independent of ``S``.

    ``S`` takes ``values`` with probabilities proportional to ``weights`` (a
    histogram of service times); ``W`` is Kimura's waiting time
    (``P(W > t) = p_wait e^{-θ t}``). Exact for that law to ~1e-5 relative.
    """
    total = float(weights.sum())
    if values.size == 0 or total <= 0.0:
        raise ValueError("a service distribution needs at least one value of positive weight")
    tail = 1.0 - q
    probs = weights / total
    order = np.argsort(values, kind="stable")
    cum = np.cumsum(probs[order])
    base = float(values[order][min(int(np.searchsorted(cum, q - 1e-12)), len(cum) - 1)])
    if p_wait <= 1e-12:
        return base  # the wait moves less than 1e-12 of probability: no quantile moves
    if theta <= 0.0:
        return math.inf
    keep = probs > 0.0
    values, probs = values[keep], probs[keep]
    low = base
    high = float(values.max()) + max(0.0, math.log(p_wait / tail)) / theta
    while high - low > 1e-5 * max(1.0, high):
        mid = 0.5 * (low + high)
        gap = mid - values
        over = np.where(gap < 0.0, 1.0, p_wait * np.exp(-theta * np.maximum(gap, 0.0)))
        if float(over @ probs) > tail:
            low = mid
        else:
            high = mid
    return high
