"""The records the mock's physics keeps (`mockprovider.physics`): each request's
state and the ranks that order internal transitions falling on the same instant.

Split from `mockprovider.physics` (the batching model) along its seam: these are the
data, that module the rules. Internal to the mock provider.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

__all__ = ["ACTIVE", "DONE", "DOOM", "FINISH", "FIRST", "PREFILLED", "QUEUED", "RELEASE", "Req",
           "Transition"]  # fmt: skip

# Transition ranks: order of internal state changes that fall on the same instant.
FIRST: Final = 0  # first token reached in the batch
FINISH: Final = 1  # batch work done, slot freed
DOOM: Final = 2  # at deadline - overhead, unfinished: the completion can no longer be in time
RELEASE: Final = 3  # at the deadline, a doomed request leaves its slot or queue place
PREFILLED: Final = 4  # its prompt is done: its tokens leave the iteration time
# Request states.
QUEUED: Final = 0
ACTIVE: Final = 1
DONE: Final = 2


@dataclass(slots=True, eq=False)
class Req:
    """One submitted request's state in the physics."""

    seq: int
    request_id: str
    submitted: float
    deadline: float
    input_tokens: int
    output_tokens: int
    prefill_iters: int
    work: int
    state: int = QUEUED
    doomed: bool = False
    cancelled_at: float | None = None
    started: float | None = None
    started_g: float = 0.0
    finish_g: float = 0.0
    terminal_time: float | None = None
    tokens_done: int = 0
    prefill_load: float = 0.0  # prompt tokens it adds to each iteration while it prefills


Transition = tuple[float, int, int, Req]  # (time, rank, seq, request)
