"""The simulator's door: what a send meets at each endpoint besides the physics.

Split from `semisched.sim.simulator` (the event loop), whose module docstring describes
the door: each endpoint's `mockprovider.gate.ProviderGate` (quota, RPM/TPM windows, seeded
faults, outages) in front of its `mockprovider.physics.ProviderPhysics` (`Backend`), a
send through it (`send`: served, or answered with a 429, a 5xx, a quota refusal, a hang
that ends in the client's timeout, or a connection dropped at completion), the shell
events it schedules on the simulator's shell heap (those answers, other traffic on the
key, a capacity loss: `shell_event`), and the rate-limit headers of each answer reaching
the engine (`observe`).

Its functions take the `Simulator` whose state they read and change, as
`semisched.sim.plain` does; they decide nothing and draw nothing (the gate draws its
faults from its own seed).
"""

from __future__ import annotations

import heapq
from typing import TYPE_CHECKING

from mockprovider.faults import Fault, capacity_slots
from mockprovider.gate import GateVerdict, ProviderGate
from mockprovider.physics import ProviderPhysics
from semisched.core.fleet.routing import sends_compressed
from semisched.core.lifecycle import FailureKind
from semisched.core.request import Request
from semisched.sim.model import SimEndpoint, gate_limits

if TYPE_CHECKING:
    from semisched.sim.simulator import Simulator

__all__ = [
    "Backend",
    "ShellEvent",
    "observe",
    "only_background_left",
    "schedule_provider_events",
    "send",
    "shell_event",
]


# Shell events: answers that are not the physics' (429s, 5xx, hang timeouts,
# dropped connections), other traffic on the key, capacity loss.
_FAIL, _OTHER, _CAPACITY = 0, 1, 2

#: (time, seq, kind, request id or backend name, failure kind, retry-after)
ShellEvent = tuple[float, int, int, str, FailureKind | None, float | None]


class Backend:
    """One endpoint's physics and door, and when its physics next has an event."""

    __slots__ = ("dirty", "gate", "model", "name", "open_door", "physics", "spec", "t_next")

    def __init__(self, endpoint: SimEndpoint) -> None:
        self.name = endpoint.spec.name
        self.spec = endpoint.spec
        self.physics = ProviderPhysics(endpoint.physics)
        self.model = endpoint.provider
        self.gate = ProviderGate(endpoint.provider.gate)
        g = endpoint.provider.gate
        # Nothing to check at the door: skip it (the paper's experiments, the hot path).
        self.open_door = (
            g.rpm is None
            and g.tpm is None
            and g.quota_tokens is None
            and not g.outages
            and g.error_rate == g.hang_rate == g.drop_rate == 0.0
        )
        self.dirty = True  # the next event time only changes when the physics is touched
        self.t_next = float("inf")

    def next_time(self) -> float:
        if self.dirty:
            nxt = self.physics.next_event_time()
            self.t_next = float("inf") if nxt is None else nxt
            self.dirty = False
        return self.t_next


def _push_shell(
    sim: Simulator,
    time: float,
    kind: int,
    rid: str = "",
    failure: FailureKind | None = None,
    retry_after: float | None = None,
) -> None:
    sim._seq += 1
    heapq.heappush(sim._shell, (time, sim._seq, kind, rid, failure, retry_after))


def schedule_provider_events(sim: Simulator) -> None:
    for backend in sim._backends:
        model = backend.model
        if model.capacity_loss is not None:
            _push_shell(sim, model.capacity_loss[0], _CAPACITY, backend.name)
        if model.other_traffic > 0.0 and sim._arrivals:
            _push_shell(sim, sim._arrivals[0].request.arrival, _OTHER, backend.name)


def only_background_left(sim: Simulator) -> bool:
    """Only other traffic is left to simulate: every job has its outcome."""
    return sim._terminal == len(sim._rows) and all(e[2] == _OTHER for e in sim._shell)


def shell_event(sim: Simulator, event: ShellEvent) -> None:
    time, _, kind, rid, failure, retry_after = event
    sim._now = time
    if kind == _FAIL:
        assert failure is not None
        observe(sim, rid, time)
        sim._failed(rid, time, failure, retry_after)
        return
    backend = sim._by_name[rid]
    if kind == _CAPACITY:
        assert backend.model.capacity_loss is not None
        physics = backend.physics
        slots = capacity_slots(physics.params.slots, backend.model.capacity_loss[1])
        physics.set_slots(time, slots)
        backend.dirty = True
    else:
        _other_traffic(sim, backend, time)


def _other_traffic(sim: Simulator, backend: Backend, time: float) -> None:
    """One request of the key's other clients, then the next one."""
    gate = backend.model.gate
    share = backend.model.other_traffic
    rate = share * (gate.rpm if gate.rpm is not None else 60.0) / gate.window_s
    tokens = 0 if gate.tpm is None or gate.rpm is None else round(gate.tpm / gate.rpm)
    backend.gate.limiter.acquire(time, tokens)  # refused or not, it is not ours
    _push_shell(sim, time + 1.0 / rate, _OTHER, backend.name)


def observe(sim: Simulator, rid: str, time: float) -> None:
    """The answer's rate-limit headers reach the engine, as the runtime reads them."""
    limits = sim._limits.pop(rid, None)
    if limits is None:
        return
    engine = sim.engine
    headroom = limits.headroom  # what the runtime reads from the same headers
    if headroom is not None:
        engine.observe_headroom(headroom, time, rid)
    engine.observe_limits(rid, time, limits)


def send(sim: Simulator, request: Request, now: float, endpoint: str) -> None:
    rid = request.id
    job = sim._jobs[rid]
    backend = sim._by_name[endpoint]
    tokens = job.input_tokens
    if job.compressed_input_tokens is not None:  # compress-and-route: which prompt goes
        row = sim._rows[rid]
        row.compressed = sends_compressed(request, backend.spec)
        tokens = row.input_tokens = job.compressed_input_tokens if row.compressed else tokens
    if backend.open_door:
        backend.physics.submit(now, rid, tokens, job.output_tokens)
        backend.dirty = True
        return
    out_cap = request.max_output_tokens
    charge = tokens + (out_cap if out_cap is not None else job.output_tokens)
    decision = backend.gate.admit(now, charge)
    verdict = decision.verdict
    if verdict is GateVerdict.UNAVAILABLE:  # an outage: a 503 at once, no headers
        _push_shell(sim, now, _FAIL, rid, FailureKind.SERVER_ERROR, None)
        return
    sim._limits[rid] = gate_limits(decision)
    if verdict is GateVerdict.ADMITTED and decision.fault is not Fault.ERROR:
        if decision.fault is Fault.HANG:  # never answered: the client's timeout ends it
            timeout = backend.physics.params.timeout_s
            _push_shell(sim, now + timeout, _FAIL, rid, FailureKind.TIMEOUT)
            return
        if decision.fault is Fault.DROP:
            sim._dropped.add(rid)
        backend.physics.submit(now, rid, tokens, job.output_tokens)
        backend.dirty = True
        return
    if verdict is GateVerdict.ADMITTED:  # an injected 5xx, answered at once
        failure, hint = FailureKind.SERVER_ERROR, None
    elif verdict is GateVerdict.QUOTA_EXHAUSTED:
        failure, hint = FailureKind.QUOTA_EXHAUSTED, None
    else:  # a 429 (with a retry-after unless the request can never fit)
        failure, hint = FailureKind.RATE_LIMITED, decision.retry_after_s
    _push_shell(sim, now, _FAIL, rid, failure, hint)
