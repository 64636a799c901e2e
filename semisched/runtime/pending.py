"""A request a caller is waiting for: the runtime's record of it between submit and outcome.

`Pending` is what [`Scheduler`][semisched.Scheduler] hands the
`Dispatcher` (through its intake, `semisched.runtime.intake`) and what the dispatcher
resolves exactly
once (a response, a stream or an outcome). Values and an event; no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import anyio

from semisched.compress.runtime import CompressedPrompt
from semisched.core.request import Request
from semisched.priors.calibration import Calibrated
from semisched.runtime.callargs import PreparedCall
from semisched.runtime.failures import ProviderFailure
from semisched.runtime.seam import Declined

__all__ = ["Pending"]


@dataclass(eq=False)
class Pending:
    """One request a caller is waiting for.

    Attributes:
        id: The scheduler's request id.
        call: The validated call.
        request: The core's request.
        done: Set once the request is resolved.
        value: The response (or stream), once resolved with one.
        error: The outcome, once resolved with one.
        resolved: Whether it was resolved (rule 1).
        attempts: Sends so far.
        scope: The cancel scope of the attempt in flight, if any.
        failure: The last failed attempt and its exception.
        calibrated: The calibration's record of its prior, scored on the
            answer's length (``None``: the caller gave the prior, or
            calibration is off).
        endpoint: Where its latest attempt was sent.
        compressed: Its compressed prompt, when compress-and-route prepared one
            (`semisched.compress.runtime`).
        sent_compressed: Its latest attempt goes with the compressed prompt.
        cost_usd: What it cost, once its answer ended at a priced endpoint.
        declined: The spend cap's refusal, when one refused it.
        attempt: The attempt whose task owns it in the engine, from its ``Send``
            until that attempt reports how it ended (the dispatcher's rule 4);
            ``None``: no attempt does.
    """

    id: str
    call: PreparedCall
    request: Request
    done: anyio.Event = field(default_factory=anyio.Event)
    value: Any = None
    error: BaseException | None = None
    resolved: bool = False
    attempts: int = 0
    scope: anyio.CancelScope | None = None
    failure: tuple[ProviderFailure, BaseException] | None = None
    calibrated: Calibrated | None = None
    endpoint: str = ""
    compressed: CompressedPrompt | None = None
    sent_compressed: bool = False
    attempt: object | None = None
    cost_usd: float | None = None
    declined: Declined | None = None

    @property
    def params(self) -> Mapping[str, Any]:
        """The provider arguments of its latest attempt."""
        sent = self.compressed if self.sent_compressed else None
        return self.call.params if sent is None else sent.params

    @property
    def prompt_nbytes(self) -> int:
        """UTF-8 bytes of the prompt its latest attempt sent (the estimator learns from them)."""
        sent = self.compressed if self.sent_compressed else None
        return self.call.prompt_nbytes if sent is None else sent.nbytes
