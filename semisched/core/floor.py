"""The makespan floor of a batch of requests under a rate budget, at the budget's steady rate.

A batch sent through requests-per-window and tokens-per-window budgets, with
at most ``max_inflight`` calls at once, takes at least the largest of these
at the budget's steady rate:

- the request bound: ``n / rpm`` windows;
- the token bound: ``sum(charge) / tpm`` windows, where a request's charge is
  what the budget (and the provider) count: its prompt plus its ``max_tokens``,
  or the prior's p90 without one (`semisched.core.budget.rate_tokens`);
- the serving bound, from the priors: the longest predicted request alone
  (``max(p50) * s_per_token``), and all predicted work spread over the
  concurrency budget (``sum(p50) * s_per_token / max_inflight``).

The rate bounds are total over rate, with no credit for the first window: a
sliding window admits a whole window's budget at once, so a run can end up to
one window *before* this floor (it is not a strict lower bound), and ends
after it by the last answers' generation time. Measured against the mock, a
schedule that keeps the binding window busy ends within about a window of it;
one that lets it idle ends well after it. That is what the ratio
makespan / floor shows. ``s_per_token`` is the client's per-token latency
estimate (Scheduling the Unschedulable Table 1's 18.7 ms until completions are observed).

Pure: a function of the requests and the budget.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

from semisched.core.budget import rate_tokens
from semisched.core.checks import check_int, check_number
from semisched.core.request import Request

__all__ = ["MakespanFloor", "makespan_floor"]


@dataclass(frozen=True, slots=True, kw_only=True)
class MakespanFloor:
    """The bounds on a batch's makespan (seconds) and which one binds.

    Attributes:
        requests: Requests to send.
        charged_tokens: Sum of their rate charges (prompt + ``max_tokens`` or p90).
        requests_s: ``requests / rpm`` windows (0 without an RPM budget).
        tokens_s: ``charged_tokens / tpm`` windows (0 without a TPM budget).
        serving_s: The serving bound from the priors (see the module docstring).
        floor_s: The largest of the three.
        binding: ``"requests"``, ``"tokens"`` or ``"serving"``: the largest bound.
    """

    requests: int
    charged_tokens: float
    requests_s: float
    tokens_s: float
    serving_s: float
    floor_s: float
    binding: str

    def ratio(self, makespan_s: float) -> float:
        """``makespan_s / floor_s`` (``nan`` for an empty batch)."""
        return makespan_s / self.floor_s if self.floor_s > 0 else math.nan


def makespan_floor(
    requests: Iterable[Request],
    *,
    rpm: int | None,
    tpm: int | None,
    window_s: float = 60.0,
    max_inflight: int | None = None,
    s_per_token: float = 0.0187,
) -> MakespanFloor:
    """The steady-rate floor of sending ``requests`` under the given budgets (module docstring).

    Raises:
        ValueError: For a budget or estimate that is not a positive number.
    """
    check_int("rpm", rpm, minimum=1, optional=True)
    check_int("tpm", tpm, minimum=1, optional=True)
    check_number("window_s", window_s, minimum=0, strict_min=True)
    check_int("max_inflight", max_inflight, minimum=1, optional=True)
    check_number("s_per_token", s_per_token, minimum=0, strict_min=True)
    n = 0
    charged = 0.0
    longest = 0.0
    total = 0.0
    for request in requests:
        n += 1
        charged += rate_tokens(request)
        longest = max(longest, request.prior.p50)
        total += request.prior.p50
    requests_s = n / rpm * window_s if rpm is not None else 0.0
    tokens_s = charged / tpm * window_s if tpm is not None else 0.0
    spread = total / max_inflight if max_inflight is not None else 0.0
    serving_s = max(longest, spread) * s_per_token
    bounds = {"requests": requests_s, "tokens": tokens_s, "serving": serving_s}
    binding = max(bounds, key=lambda name: bounds[name])
    return MakespanFloor(
        requests=n,
        charged_tokens=charged,
        requests_s=requests_s,
        tokens_s=tokens_s,
        serving_s=serving_s,
        floor_s=bounds[binding],
        binding=binding,
    )
