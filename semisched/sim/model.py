"""The simulator's values: workload jobs, what the provider does, traces and results.

Split from `semisched.sim.simulator` (the event loop), which re-exports every name.
Values only: nothing here runs a simulation.
"""

from __future__ import annotations

import io
import math
from collections.abc import Sequence
from dataclasses import dataclass, field, fields

from mockprovider.faults import WindowState
from mockprovider.gate import GateConfig, GateDecision
from mockprovider.physics import PhysicsParams
from semisched.core.budget import ProviderLimits
from semisched.core.fleet.endpoint import EndpointSpec
from semisched.core.request import Request
from semisched.core.stats import EngineStats

__all__ = [
    "PLAIN",
    "Outcome",
    "ProviderModel",
    "SimEndpoint",
    "SimJob",
    "SimResult",
    "TraceRow",
    "check_fleet",
    "gate_limits",
]


class Outcome:
    """Terminal outcomes of a simulated job."""

    COMPLETED = "completed"
    REJECTED = "rejected"
    EXPIRED = "expired"
    FAILED = "failed"


@dataclass(frozen=True, slots=True, kw_only=True)
class ProviderModel:
    """What the simulated provider does besides its physics.

    Attributes:
        gate: Quota, RPM/TPM windows and fault rates: the mock provider's own
            settings (``MockConfig.gate_config()`` gives the HTTP mock's).
        capacity_loss: ``(t, f)``: at virtual time ``t`` the provider keeps
            ``max(1, round(slots * f))`` slots (as the HTTP mock does).
        other_traffic: Fraction of the gate's RPM and TPM used by other
            clients on the same key, as a steady stream (the provider then
            grants this client only the rest; its headers show the full limit
            and the smaller remainder).
        seed: Seed of the engine's retry jitter (the gate's fault draws use
            ``gate.seed``).
    """

    gate: GateConfig = field(default_factory=GateConfig)
    capacity_loss: tuple[float, float] | None = None
    other_traffic: float = 0.0
    seed: int = 0

    def __post_init__(self) -> None:
        if not isinstance(self.gate, GateConfig):
            raise ValueError(f"gate={self.gate!r} must be a GateConfig")
        loss = self.capacity_loss
        if loss is not None and not (
            isinstance(loss, tuple)
            and len(loss) == 2
            and all(math.isfinite(v) for v in loss)
            and loss[0] >= 0
            and 0 <= loss[1] <= 1
        ):
            raise ValueError(f"capacity_loss={loss!r} must be (time >= 0, fraction in [0, 1])")
        if not (math.isfinite(self.other_traffic) and 0.0 <= self.other_traffic < 1.0):
            raise ValueError(f"other_traffic={self.other_traffic!r} must be in [0, 1)")
        if isinstance(self.seed, bool) or not isinstance(self.seed, int):
            raise ValueError(f"seed={self.seed!r} must be an int")


#: A provider that serves everything: no limits, no faults.
PLAIN = ProviderModel()


@dataclass(frozen=True, slots=True)
class SimJob:
    """One request of a workload, with the truth only the simulator knows.

    Attributes:
        request: What the client submits (its prior may be wrong).
        output_tokens: The length the provider will really generate.
        input_tokens: The real prompt length the provider prefills.
        compressed_input_tokens: The real prompt length after compress-and-route's
            compression (``None``: no compressed prompt); prefilled instead of
            ``input_tokens`` when the send goes compressed
            (`sends_compressed`). Its request carries
            the client's estimate of it, ``Request.compressed_tokens``.
    """

    request: Request
    output_tokens: int
    input_tokens: int
    compressed_input_tokens: int | None = None


@dataclass(slots=True)
class TraceRow:
    """Per-request record of one simulated job (times in seconds).

    ``output_tokens`` and ``input_tokens`` are the job's true lengths (what the
    provider generates and prefills), not the client's estimates; with
    ``first_send`` and ``end`` of a job sent once they are what
    ``semisched plan fit`` fits the endpoint's speed from. ``compressed``: its
    latest attempt went with the compressed prompt (``input_tokens`` is then
    the job's ``compressed_input_tokens``).
    """

    id: str
    klass: str
    bucket: str
    routing_bucket: str
    arrival: float
    deadline: float | None
    output_tokens: int
    input_tokens: int = 0
    outcome: str = ""
    first_send: float | None = None
    first_token: float | None = None
    end: float | None = None
    defers: int = 0
    attempts: int = 0
    throttled: int = 0
    failures: int = 0
    endpoint: str = ""
    compressed: bool = False

    @property
    def latency(self) -> float | None:
        """Arrival to completion, for completed jobs."""
        if self.outcome != Outcome.COMPLETED or self.end is None:
            return None
        return self.end - self.arrival

    @property
    def met_deadline(self) -> bool:
        """Completed at or before its deadline (no deadline counts as met)."""
        if self.outcome != Outcome.COMPLETED or self.end is None:
            return False
        return self.deadline is None or self.end <= self.deadline


_TRACE_FIELDS = [f.name for f in fields(TraceRow)]


@dataclass(frozen=True, slots=True)
class SimResult:
    """Outcome of one simulation run."""

    rows: tuple[TraceRow, ...]
    engine: EngineStats
    end_time: float
    events: int

    @property
    def compressed(self) -> int:
        """Jobs whose latest attempt went with the compressed prompt (compress-and-route)."""
        return sum(row.compressed for row in self.rows)

    def trace_csv(self) -> str:
        """The per-request trace as CSV with exact (``repr``) floats."""
        out = io.StringIO()
        out.write(",".join(_TRACE_FIELDS) + "\n")
        for row in self.rows:
            values = (getattr(row, name) for name in _TRACE_FIELDS)
            out.write(
                ",".join(
                    "" if v is None else repr(v) if isinstance(v, float) else str(v) for v in values
                )
            )
            out.write("\n")
        return out.getvalue()


@dataclass(frozen=True, slots=True, kw_only=True)
class SimEndpoint:
    """One endpoint of a simulated fleet: what the core knows and what it is.

    Attributes:
        spec: The core's description (name, models, limits, weight, pool).
        physics: Its serving physics (slots, speed).
        provider: Its door: limits, faults, outage windows, capacity loss.
    """

    spec: EndpointSpec
    physics: PhysicsParams
    provider: ProviderModel = field(default_factory=lambda: PLAIN)

    def __post_init__(self) -> None:
        if not isinstance(self.spec, EndpointSpec):
            raise ValueError(f"spec={self.spec!r} must be an EndpointSpec")
        if not isinstance(self.physics, PhysicsParams):
            raise ValueError(f"physics={self.physics!r} must be a PhysicsParams")
        if not isinstance(self.provider, ProviderModel):
            raise ValueError(f"provider={self.provider!r} must be a ProviderModel")


def check_fleet(fleet: Sequence[SimEndpoint]) -> None:
    """Raise ``ValueError`` for an empty fleet or duplicate names."""
    if not fleet:
        raise ValueError("fleet=() must name at least one SimEndpoint")
    names = [e.spec.name for e in fleet]
    if len(set(names)) != len(names):
        raise ValueError(f"fleet names {names!r} must be unique")


def gate_limits(decision: GateDecision) -> ProviderLimits:
    rate = decision.rate
    requests: WindowState | None = None if rate is None else rate.requests
    tokens: WindowState | None = None if rate is None else rate.tokens
    return ProviderLimits(
        limit_requests=None if requests is None else requests.limit,
        remaining_requests=None if requests is None else requests.remaining,
        reset_requests_s=None if requests is None else requests.reset_s,
        limit_tokens=None if tokens is None else tokens.limit,
        remaining_tokens=None if tokens is None else tokens.remaining,
        reset_tokens_s=None if tokens is None else tokens.reset_s,
    )
