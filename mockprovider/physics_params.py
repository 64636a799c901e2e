"""The mock provider's values: its constants (`PhysicsParams`, the named
profiles) and what its physics reports (`EventKind`, `ProviderEvent`,
`PhysicsStats`).

Split from `mockprovider.physics` (the batching model), which re-exports every
name. Values only: nothing here simulates.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

__all__ = [
    "PROFILES",
    "EventKind",
    "PhysicsParams",
    "PhysicsStats",
    "ProviderEvent",
    "profile",
]


def _check_int(name: str, value: object, minimum: int) -> None:
    if type(value) is int and value >= minimum:  # the common case, without isinstance
        return
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"{name}={value!r} must be an integer >= {minimum}")


def _is_real(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _check_number(name: str, value: object, *, positive: bool) -> None:
    ok = (
        not isinstance(value, bool)
        and isinstance(value, int | float)
        and math.isfinite(value)
        and (value > 0 if positive else value >= 0)
    )
    if not ok:
        raise ValueError(f"{name}={value!r} must be a finite number {'>' if positive else '>='} 0")


@dataclass(frozen=True, slots=True, kw_only=True)
class PhysicsParams:
    """Constants of one simulated provider.

    Attributes:
        slots: Concurrent sequences in the batch. 32 is a modelling choice: enough for
            batching to matter, small enough that a client can saturate it.
        base_iter_ms: ``W``, the fixed cost of one batch iteration. FleetOpt gives W = 8 ms and
            H = 0.65 ms/slot (Llama-3-70B, A100); both are scaled by 18.7 / 8.65 so that
            W + H = 18.7 ms, the lone-request decode slope of the main paper's production fit.
        per_slot_ms: ``H``, the extra iteration cost per active sequence (see above).
        prefill_chunk: ``C_chunk``, prompt tokens processed per prefill iteration (FleetOpt §3,
            §6 setup: 512).
        prefill_ms_per_token: ``P``, what each prompt token adds to the iteration that
            processes it: an iteration lasts ``W + H*n + P*p`` with ``p`` the prompt tokens
            in it (a prefilling request's ``L_in / ceil(L_in / C_chunk)``), so a prefill
            slows every sequence in the batch. 0 by default (a GPU's prefill chunk costs
            about one decode step); on a CPU engine prompt tokens are compute, measured on
            llama-server as about a quarter of a lone decode step each (profile
            ``"llama-cpp"``).
        context_ms_per_token: ``K``, what each token of context held by a sequence in the
            batch adds to an iteration: attention reads every cached token of every
            sequence, so an iteration lasts ``W + H*n + P*p + K*c`` with ``c`` the context
            of the batch (each sequence's prompt and the tokens it has produced so far).
            0 by default (a GPU's decode step barely grows with the context at these
            lengths); measured on llama-server's CPU decode (profile ``"llama-cpp"``).
        overhead_ms: Fixed per-request latency outside the batch (network, gateway), added to
            the observed first-token and completion times. 0 by default; 3294 ms is the
            intercept of the main paper's fit (profile ``"production-fit"``).
        timeout_s: A request not completed within this many seconds of its submission times
            out. 600 s is a modelling choice (a typical HTTP client read timeout).
    """

    slots: int = 32
    base_iter_ms: float = 17.3
    per_slot_ms: float = 1.4
    prefill_chunk: int = 512
    prefill_ms_per_token: float = 0.0
    context_ms_per_token: float = 0.0
    overhead_ms: float = 0.0
    timeout_s: float = 600.0

    def __post_init__(self) -> None:
        _check_int("slots", self.slots, 1)
        _check_number("base_iter_ms", self.base_iter_ms, positive=True)
        _check_number("per_slot_ms", self.per_slot_ms, positive=False)
        _check_int("prefill_chunk", self.prefill_chunk, 1)
        _check_number("prefill_ms_per_token", self.prefill_ms_per_token, positive=False)
        _check_number("context_ms_per_token", self.context_ms_per_token, positive=False)
        _check_number("overhead_ms", self.overhead_ms, positive=False)
        _check_number("timeout_s", self.timeout_s, positive=True)

    def iteration_ms(self, n_active: int) -> float:
        """Duration of one decode iteration with ``n_active`` sequences: ``W + H * n`` (a
        prefill adds ``prefill_ms_per_token`` per prompt token to its iterations, and the
        batch's context ``context_ms_per_token`` per token)."""
        return self.base_iter_ms + self.per_slot_ms * n_active

    def context_ms(self, prompt: Any, iterations: Any) -> Any:
        """What one sequence's context adds to the batch over its first ``iterations``
        iterations: ``K * (L_in * i + i^2 / 2)`` (it holds its prompt and grows a token an
        iteration; the fluid model's integral). Takes numbers or numpy arrays."""
        return self.context_ms_per_token * (prompt * iterations + iterations**2 / 2)

    def lone_decode_ms_per_token(self) -> float:
        """Decode cost per token of a request alone in the batch: ``W + H``."""
        return self.iteration_ms(1)

    def capacity_tokens_per_s(self) -> float:
        """Decode tokens per second with a full batch: ``slots / t_iter(slots) * 1000``."""
        return self.slots / self.iteration_ms(self.slots) * 1000.0


PROFILES: Mapping[str, PhysicsParams] = MappingProxyType(
    {
        "default": PhysicsParams(),
        "production-fit": PhysicsParams(overhead_ms=3294.0),
        # llama.cpp's llama-server (one thread) on this repository's 2-core CPU with its
        # random-weight Llama model, 8 slots: fitted by `python -m bench real-engine fit`,
        # which writes these values to docs/results/real-engine/fit.json (a test keeps the
        # two equal).
        "llama-cpp": PhysicsParams(
            slots=8,
            base_iter_ms=3.36,
            per_slot_ms=1.82,
            prefill_chunk=512,
            prefill_ms_per_token=1.213,
            context_ms_per_token=0.00271,
            overhead_ms=0.0,
        ),
    }
)


def profile(name: str) -> PhysicsParams:
    """Return the named parameter profile.

    Raises:
        ValueError: ``name`` is not in ``PROFILES``; the message lists the known names.
    """
    if name not in PROFILES:
        raise ValueError(f"unknown profile {name!r}; known profiles: {', '.join(sorted(PROFILES))}")
    return PROFILES[name]


class EventKind(enum.Enum):
    """What a client observes about one request."""

    FIRST_TOKEN = "first_token"
    COMPLETED = "completed"
    TIMED_OUT = "timed_out"


@dataclass(frozen=True, slots=True)
class ProviderEvent:
    """One client-observable event.

    Attributes:
        kind: What happened.
        request_id: The id given to ``submit``.
        time: When the client observes it (includes ``overhead_ms`` except for timeouts).
        submitted: Submission time.
        started: Slot admission time; ``None`` if the request timed out in the queue.
        input_tokens: Prompt tokens as submitted.
        output_tokens: Tokens generated: 1 for ``FIRST_TOKEN``, all for ``COMPLETED``, and for
            ``TIMED_OUT`` the whole decode iterations done in the batch by the end (floor).
    """

    kind: EventKind
    request_id: str
    time: float
    submitted: float
    started: float | None
    input_tokens: int
    output_tokens: int


@dataclass(frozen=True, slots=True)
class PhysicsStats:
    """Snapshot of the provider; event counters count events already returned by ``advance``."""

    active: int
    queued: int
    slots: int
    submitted: int
    completed: int
    timed_out: int
    cancelled: int
    iteration_ms: float
