"""Building the core's request for a prepared call: its prior, its tokens, its class.

`core_request` turns a validated `PreparedCall`
into the [`Request`][semisched.core.request.Request] the engine schedules: the caller's
prior or the prior source's (calibrated online when the scheduler calibrates), the
prompt's tokens (counted or estimated), the scheduling class and the deadline on
the scheduler's clock.
"""

from __future__ import annotations

from collections.abc import Callable

from semisched.core.config import SchedulerConfig
from semisched.core.request import Request
from semisched.priors.batching import PriorResolver
from semisched.priors.calibration import Calibrated, LengthCalibration
from semisched.runtime.callargs import PreparedCall
from semisched.runtime.estimate import TokenEstimator
from semisched.runtime.stats import RuntimeTally

__all__ = ["core_request"]


async def core_request(
    rid: str,
    call: PreparedCall,
    priors: PriorResolver,
    calibration: LengthCalibration | None,
    estimator: TokenEstimator,
    config: SchedulerConfig,
    tally: RuntimeTally,
    now: Callable[[], float],
) -> tuple[Request, Calibrated | None]:
    """The core's request ``rid`` for ``call``, arriving at ``now()`` once its prior is
    known, and the calibration that adjusted its prior (``None``: none did)."""
    prior = call.prior
    calibrated = None
    if prior is None:
        prior, fell_back = await priors.resolve(call.prior_query(rid))
        if fell_back:
            tally.prior_fallbacks += 1
        if calibration is not None:
            source = priors.fallback if fell_back else priors.source
            calibrated = calibration.adjust(
                prior, source=source.name, model=call.model, cap=call.output_cap
            )
            prior = calibrated.prior
    arrival = now()
    tokens = call.input_tokens(estimator)
    klass = call.klass or config.class_for(prior.routing_bucket, call.tenant)
    deadline_s = config.deadline_for(klass, call.deadline_s)
    request = Request(
        id=rid,
        klass=klass,
        prior=prior,
        input_tokens=float(tokens),
        arrival=arrival,
        deadline=None if deadline_s is None else arrival + deadline_s,
        max_output_tokens=call.output_cap,
        model=call.model,
        tenant=call.tenant,
        stream=call.stream,
    )
    return request, calibrated
