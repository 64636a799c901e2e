"""A call's way into the runtime: validated, given room and an id, made the core's request.

[`Scheduler`][semisched.Scheduler]'s ``submit`` and ``check`` go through an `Intake`
before anything reaches the dispatcher. It

- validates a call against the fleet (its APIs' accepted arguments, its models),
  the configured classes and the declared tenants
  (`semisched.runtime.calls.prepare_call`),
- refuses one beyond ``options.max_pending`` with `QueueFull`, counting the calls
  whose prior is still being resolved,
- gives each its request id, builds the core's request
  (`semisched.runtime.requests.core_request`) and its compressed prompt
  (`semisched.runtime.layers.Stacks.prepare`),
- hands the `Pending` to the `Dispatcher` and returns what the caller gets.

What this module is not: it checks no lifecycle (the scheduler refuses a call
when it is not running, before its intake), executes no action
(`semisched.runtime.dispatch`) and decides nothing.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from typing import Any

from semisched.core.config import SchedulerConfig
from semisched.errors import QueueFull
from semisched.fleet.endpoints import Deployments
from semisched.priors.batching import PriorResolver
from semisched.priors.calibration import LengthCalibration
from semisched.runtime.callargs import CallArgs, PreparedCall
from semisched.runtime.calls import prepare_call
from semisched.runtime.dispatch import Dispatcher
from semisched.runtime.estimate import TokenEstimator
from semisched.runtime.options import RuntimeOptions
from semisched.runtime.pending import Pending
from semisched.runtime.requests import core_request
from semisched.runtime.stats import RuntimeTally

__all__ = ["Intake"]


class Intake:
    """A call's way from the scheduler's ``submit`` to its dispatcher (module docstring).

    Args:
        config: The scheduler's configuration (classes, tenants, deadlines).
        options: The runtime's settings (``max_pending``).
        deployments: The fleet a call is checked against.
        dispatch: Where each request goes, once it is the core's.
        tally: The runtime's counters, updated in place.
        calibration: The length calibration of the priors (``None``: off).
        estimator: The prompt-token estimator.
    """

    def __init__(
        self,
        config: SchedulerConfig,
        options: RuntimeOptions,
        deployments: Deployments,
        dispatch: Dispatcher,
        tally: RuntimeTally,
        calibration: LengthCalibration | None,
        estimator: TokenEstimator,
    ) -> None:
        self.config = config
        self.options = options
        self._deployments = deployments
        self._dispatch = dispatch
        self._tally = tally
        self._calibration = calibration
        self._estimator = estimator
        self._class_names = tuple(c.name for c in config.classes)
        self._ids = itertools.count(1)
        self._preparing = 0

    def __repr__(self) -> str:
        return f"<Intake preparing={self._preparing}>"

    def prepare(self, call: Mapping[str, Any]) -> PreparedCall:
        """Validate ``call`` as ``submit`` and ``check`` do.

        Raises:
            ValueError, TypeError: Misuse, naming the argument (`prepare_call`), or a
                model no endpoint serves.
        """
        prepared = prepare_call(
            CallArgs.of(call),
            allowed_params=self._deployments.allowed_params,
            class_names=self._class_names,
            tenants=self.config.tenants,
        )
        self._deployments.check_model(prepared.model)
        return prepared

    async def submit(self, prepared: PreparedCall, priors: PriorResolver) -> Any:
        """Admit ``prepared``, build its core request (its prior from ``priors``) and
        wait for the dispatcher to resolve it.

        Returns:
            The response (or stream).

        Raises:
            QueueFull: ``options.max_pending`` requests already wait.
            RequestError: The request's outcome.
        """
        rid = f"req-{next(self._ids)}"
        self._tally.submitted += 1
        self._check_room(rid, prepared)
        self._preparing += 1  # counts towards max_pending while its prior is resolved
        try:
            request, calibrated = await core_request(
                rid, prepared, priors, self._calibration, self._estimator, self.config,
                self._tally, self._dispatch.now,
            )  # fmt: skip
            request, compressed = await self._dispatch.stacks.prepare(request, prepared)
        except BaseException:  # only cancellation: the prior resolver never fails
            self._tally.cancelled += 1
            raise
        finally:
            self._preparing -= 1
        pending = Pending(id=rid, call=prepared, request=request, calibrated=calibrated,
                          compressed=compressed)  # fmt: skip
        return await self._dispatch.run(pending)

    def _check_room(self, rid: str, call: PreparedCall) -> None:
        """Raise `QueueFull` when ``options.max_pending`` requests already wait."""
        limit = self.options.max_pending
        waiting = len(self._dispatch.pending) + self._preparing
        if limit is not None and waiting >= limit:
            self._tally.queue_full += 1
            raise QueueFull(
                f"{waiting} requests pending (max_pending={limit})",
                request_id=rid,
                klass=call.klass or "",
                limit=limit,
            )
