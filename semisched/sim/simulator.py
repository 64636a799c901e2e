"""Discrete-event simulator: the real core against the mock provider's physics.

The simulator is a shell, like the async runtime: it owns a virtual clock and
an event heap, feeds the *same* `semisched.core.Engine` that
production code uses, and executes the engine's actions against
`mockprovider.physics.ProviderPhysics`. Benchmarks therefore measure
the policy code itself, not a re-implementation. It decides nothing.

Kernel (after SimPy): a heap of engine wake-ups ``(time, seq)`` and the
arrivals in time order (sorted once, so a queue rather than heap entries). At
each step the earliest of the provider's next event, the next arrival and the
heap top runs; at equal times provider events go first (they free send
opportunities), then arrivals, then engine wake-ups. Nothing is random here:
the same jobs and configs give a byte-identical trace
(`SimResult.trace_csv`).

What a hosted API does to a client besides serving it (`ProviderModel`)
is the mock provider's own door, `mockprovider.gate.ProviderGate`:
quota, RPM/TPM windows answering 429 with a retry-after, and seeded faults
(5xx at once, hangs that end in the client's timeout, connections dropped at
completion), plus a capacity loss at a time and other traffic on the same key.
Every failed attempt goes to ``Engine.failed`` as a
[`FailureKind`][semisched.core.FailureKind], so retries are decided by the same core
code as in the async runtime; the rate-limit state of each answer reaches the
engine as the ``x-ratelimit-*`` headers would (``observe_limits``).

A *fleet* (``Simulator(..., fleet=[SimEndpoint(...), ...])``) runs one
physics and one gate per endpoint, each with its own limits, faults, outage
windows and capacity loss; the engine's routing layer picks the endpoint of
every send, exactly as in the async runtime. Without ``fleet`` the one
``physics``/``provider`` pair is the endpoint ``"default"``. Compress-and-route:
a job with ``compressed_input_tokens`` (its request's ``compressed_tokens`` the
client's estimate of them) is prefilled with those tokens when the core's
`sends_compressed` holds for the endpoint of its
send, as the runtime would send its compressed prompt there (``TraceRow.compressed``).

Every job ends in exactly one terminal outcome: ``completed``, ``rejected``,
``expired`` or ``failed``. `Simulator.run` checks this before returning
and raises ``RuntimeError`` if any job was lost or finished twice.
"""

from __future__ import annotations

import dataclasses
import heapq
import random
from collections import deque
from collections.abc import Iterable, Sequence

from mockprovider.faults import Fault, capacity_slots
from mockprovider.gate import GateVerdict, ProviderGate
from mockprovider.physics import COMPLETED, FIRST_TOKEN, PhysicsParams, ProviderPhysics
from semisched.core.actions import Defer, Expire, Fail, Pause, Reject, Retry, Send, Wake
from semisched.core.buckets import bucket_for_tokens
from semisched.core.budget import ProviderLimits
from semisched.core.config import SchedulerConfig
from semisched.core.engine import Engine
from semisched.core.fleet.fleet import DEFAULT_ENDPOINT
from semisched.core.fleet.routing import sends_compressed
from semisched.core.lifecycle import FailureKind
from semisched.core.request import Request
from semisched.priors.calibration import Calibrated, LengthCalibration
from semisched.sim.model import (
    PLAIN,
    Outcome,
    ProviderModel,
    SimEndpoint,
    SimJob,
    SimResult,
    TraceRow,
    check_fleet,
    gate_limits,
)
from semisched.sim.plain import is_plain, run_plain

__all__ = [
    "Outcome",
    "ProviderModel",
    "SimEndpoint",
    "SimJob",
    "SimResult",
    "Simulator",
    "TraceRow",
    "simulate",
]


# Shell events: answers that are not the physics' (429s, 5xx, hang timeouts,
# dropped connections), other traffic on the key, capacity loss.
_FAIL, _OTHER, _CAPACITY = 0, 1, 2


class _Backend:
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


class Simulator:
    """Runs jobs through an `Engine` against `ProviderPhysics`
    behind the mock's `ProviderGate` (see the module docstring).

    With ``calibration`` (a [`LengthCalibration`][semisched.priors.calibration.LengthCalibration]),
    each arriving request's prior is corrected as the async runtime corrects it
    (its class follows the corrected prior unless the workload named another),
    and each completion teaches it the real length.

    With ``fleet``, ``physics`` and ``provider`` are unused: each
    `SimEndpoint` brings its own.
    """

    def __init__(
        self,
        config: SchedulerConfig,
        physics: PhysicsParams | None = None,
        provider: ProviderModel = PLAIN,
        calibration: LengthCalibration | None = None,
        fleet: Sequence[SimEndpoint] | None = None,
    ) -> None:
        if fleet is None:
            if physics is None:
                raise ValueError("physics=None needs a fleet=[SimEndpoint(...), ...]")
            fleet = (SimEndpoint(spec=DEFAULT_ENDPOINT, physics=physics, provider=provider),)
        check_fleet(fleet)
        self.engine = Engine(
            config,
            jitter=random.Random(fleet[0].provider.seed).random,
            endpoints=[e.spec for e in fleet],
        )
        # As the runtime: corrects each prior on arrival, learns from each completion.
        self.calibration = calibration
        self._calibrated: dict[str, Calibrated] = {}
        self._backends = [_Backend(e) for e in fleet]
        self._by_name = {b.name: b for b in self._backends}
        first = self._backends[0]
        self.provider = first.physics  # the one-endpoint case's names
        self.model = first.model
        self.gate = first.gate
        self._heap: list[tuple[float, int]] = []  # engine wake-ups (time, seq)
        # (time, seq, kind, request id or backend name, failure kind, retry-after)
        self._shell: list[tuple[float, int, int, str, FailureKind | None, float | None]] = []
        self._arrivals: deque[SimJob] = deque()  # by (arrival, id)
        self._seq = 0
        self._rows: dict[str, TraceRow] = {}
        self._jobs: dict[str, SimJob] = {}
        self._limits: dict[str, ProviderLimits] = {}  # what the answer's headers will say
        self._dropped: set[str] = set()  # served, but the connection drops at completion
        self._compressed = False  # some job has a compressed prompt (compress-and-route)
        self._terminal = 0
        self._events = 0
        self._now = 0.0

    def __repr__(self) -> str:
        return (
            f"<Simulator now={self._now:.3f} pending={len(self._heap) + len(self._arrivals)} "
            f"terminal={self._terminal}/{len(self._rows)} endpoints={list(self._by_name)} "
            f"{self.engine!r}>"
        )

    def physics(self, name: str) -> ProviderPhysics:
        """The physics of endpoint ``name`` (its statistics: utilisation, tokens served)."""
        return self._by_name[name].physics

    def gate_of(self, name: str) -> ProviderGate:
        """The door of endpoint ``name`` (its counters: 429s, outage refusals)."""
        return self._by_name[name].gate

    def _push_wake(self, time: float) -> None:
        self._seq += 1
        heapq.heappush(self._heap, (time, self._seq))

    def _push_shell(
        self,
        time: float,
        kind: int,
        rid: str = "",
        failure: FailureKind | None = None,
        retry_after: float | None = None,
    ) -> None:
        self._seq += 1
        heapq.heappush(self._shell, (time, self._seq, kind, rid, failure, retry_after))

    def run(self, jobs: Iterable[SimJob]) -> SimResult:
        """Simulate ``jobs`` to completion and return the trace.

        Raises:
            ValueError: On duplicate job ids.
            RuntimeError: If a job ended in no terminal outcome or in several.
        """
        self._load(jobs)
        self._schedule_provider_events()
        if is_plain(self):
            run_plain(self)
        else:
            self._run_general()
        engine = self.engine
        if self._terminal != len(self._rows) or len(engine):
            lost = [r.id for r in self._rows.values() if not r.outcome]
            raise RuntimeError(f"jobs without a terminal outcome: {lost[:10]}")
        return SimResult(
            rows=tuple(self._rows.values()),
            engine=engine.statistics(),
            end_time=self._now,
            events=self._events,
        )

    def _run_general(self) -> None:
        heap, shell, arrivals, engine = self._heap, self._shell, self._arrivals, self.engine
        backends = self._backends
        single = backends[0] if len(backends) == 1 else None
        inf = float("inf")
        events = 0
        while True:
            t_arrival = arrivals[0].request.arrival if arrivals else inf
            t_wake = heap[0][0] if heap else inf
            t_shell = shell[0][0] if shell else inf
            if single is not None:
                backend = single
                t_prov = single.next_time()
            else:
                backend = min(backends, key=_Backend.next_time)
                t_prov = backend.t_next
            if t_prov <= t_shell and t_prov <= t_arrival and t_prov <= t_wake:
                if t_prov == inf:
                    break  # nothing is pending anywhere
                events += 1
                self._physics_events(backend, t_prov)
                continue
            events += 1
            if t_shell <= t_arrival and t_shell <= t_wake:
                self._shell_event(heapq.heappop(shell))
            elif t_arrival <= t_wake:
                self._now = t_arrival
                self._apply(engine.submit(self._arriving(arrivals.popleft()), t_arrival))
            else:
                heapq.heappop(heap)
                self._now = t_wake
                self._apply(engine.poll(t_wake))
            if not arrivals and not heap and self._only_background_left():
                break
        self._events += events

    def _load(self, jobs: Iterable[SimJob]) -> None:
        config = self.engine.config
        names = {spec.name for spec in config.classes}
        for job in sorted(jobs, key=lambda j: (j.request.arrival, j.request.id)):
            rid = job.request.id
            if rid in self._rows:
                raise ValueError(f"duplicate job id {rid!r}")
            if job.request.klass not in names:
                # A two-lane workload against a config with other classes (the one-class
                # batch preset): route it as a caller naming no class would be routed.
                klass = config.class_for(job.request.bucket, job.request.tenant)
                job = dataclasses.replace(
                    job, request=dataclasses.replace(job.request, klass=klass)
                )
            self._jobs[rid] = job
            if job.compressed_input_tokens is not None:
                self._compressed = True
            request = job.request
            # Positional, in field order: keywords make this dataclass call ~40% dearer.
            self._rows[rid] = TraceRow(
                rid,  # id
                request.klass,
                str(bucket_for_tokens(job.output_tokens)),  # bucket
                str(request.bucket),  # routing_bucket
                request.arrival,
                request.deadline,
                job.output_tokens,
                job.input_tokens,
            )
            self._arrivals.append(job)

    def _arriving(self, job: SimJob) -> Request:
        """The request the engine gets: with calibration, its corrected prior and, when
        its class was the routed default, the class the corrected prior routes to."""
        request = job.request
        if self.calibration is None:
            return request
        calibrated = self.calibration.adjust(
            request.prior, source="sim", model="sim", cap=request.max_output_tokens
        )
        self._calibrated[request.id] = calibrated
        config = self.engine.config
        klass = request.klass
        if klass == config.class_for(request.bucket, request.tenant):
            klass = config.class_for(calibrated.prior.routing_bucket, request.tenant)
        request = dataclasses.replace(request, prior=calibrated.prior, klass=klass)
        row = self._rows[request.id]
        row.klass, row.routing_bucket = klass, str(request.bucket)
        return request

    def _schedule_provider_events(self) -> None:
        for backend in self._backends:
            model = backend.model
            if model.capacity_loss is not None:
                self._push_shell(model.capacity_loss[0], _CAPACITY, backend.name)
            if model.other_traffic > 0.0 and self._arrivals:
                self._push_shell(self._arrivals[0].request.arrival, _OTHER, backend.name)

    def _only_background_left(self) -> bool:
        """Only other traffic is left to simulate: every job has its outcome."""
        return self._terminal == len(self._rows) and all(e[2] == _OTHER for e in self._shell)

    def _physics_events(self, backend: _Backend, t: float) -> None:
        self._now = t
        backend.dirty = True
        rows, engine, dropped = self._rows, self.engine, self._dropped
        for code, rid, time, input_tokens, output_tokens in backend.physics.drain(t):
            row = rows[rid]
            if code == FIRST_TOKEN:
                if rid not in dropped:
                    row.first_token = time
                    engine.first_token(rid, time)
                continue
            self._observe(rid, time)
            if code == COMPLETED and rid not in dropped:
                backend.gate.bill(input_tokens + output_tokens)
                if rid in self._calibrated:
                    self.calibration.observe(self._calibrated.pop(rid), output_tokens)  # type: ignore[union-attr]
                self._end(row, Outcome.COMPLETED, time)
                self._apply(engine.completed(rid, time, output_tokens=output_tokens))
            else:  # the provider timed out (504), or the connection dropped at the end
                dropped.discard(rid)
                kind = FailureKind.CONNECTION if code == COMPLETED else FailureKind.TIMEOUT
                self._failed(rid, time, kind, None)

    def _shell_event(
        self, event: tuple[float, int, int, str, FailureKind | None, float | None]
    ) -> None:
        time, _, kind, rid, failure, retry_after = event
        self._now = time
        if kind == _FAIL:
            assert failure is not None
            self._observe(rid, time)
            self._failed(rid, time, failure, retry_after)
            return
        backend = self._by_name[rid]
        if kind == _CAPACITY:
            assert backend.model.capacity_loss is not None
            physics = backend.physics
            slots = capacity_slots(physics.params.slots, backend.model.capacity_loss[1])
            physics.set_slots(time, slots)
            backend.dirty = True
        else:
            self._other_traffic(backend, time)

    def _other_traffic(self, backend: _Backend, time: float) -> None:
        """One request of the key's other clients, then the next one."""
        gate = backend.model.gate
        share = backend.model.other_traffic
        rate = share * (gate.rpm if gate.rpm is not None else 60.0) / gate.window_s
        tokens = 0 if gate.tpm is None or gate.rpm is None else round(gate.tpm / gate.rpm)
        backend.gate.limiter.acquire(time, tokens)  # refused or not, it is not ours
        self._push_shell(time + 1.0 / rate, _OTHER, backend.name)

    def _failed(self, rid: str, time: float, kind: FailureKind, retry_after: float | None) -> None:
        row = self._rows[rid]
        row.failures += 1
        if kind is FailureKind.RATE_LIMITED:
            row.throttled += 1
        self._apply(self.engine.failed(rid, time, kind, retry_after=retry_after))

    def _observe(self, rid: str, time: float) -> None:
        """The answer's rate-limit headers reach the engine, as the runtime reads them."""
        limits = self._limits.pop(rid, None)
        if limits is None:
            return
        engine = self.engine
        fractions = [
            remaining / limit
            for limit, remaining in (
                (limits.limit_requests, limits.remaining_requests),
                (limits.limit_tokens, limits.remaining_tokens),
            )
            if limit and remaining is not None
        ]
        if fractions:
            engine.observe_headroom(min(fractions), time, rid)
        engine.observe_limits(rid, time, limits)

    def _send(self, request: Request, now: float, endpoint: str) -> None:
        rid = request.id
        job = self._jobs[rid]
        backend = self._by_name[endpoint]
        tokens = job.input_tokens
        if job.compressed_input_tokens is not None:  # compress-and-route: which prompt goes
            row = self._rows[rid]
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
            self._push_shell(now, _FAIL, rid, FailureKind.SERVER_ERROR, None)
            return
        self._limits[rid] = gate_limits(decision)
        if verdict is GateVerdict.ADMITTED and decision.fault is not Fault.ERROR:
            if decision.fault is Fault.HANG:  # never answered: the client's timeout ends it
                timeout = backend.physics.params.timeout_s
                self._push_shell(now + timeout, _FAIL, rid, FailureKind.TIMEOUT)
                return
            if decision.fault is Fault.DROP:
                self._dropped.add(rid)
            backend.physics.submit(now, rid, tokens, job.output_tokens)
            backend.dirty = True
            return
        if verdict is GateVerdict.ADMITTED:  # an injected 5xx, answered at once
            failure, hint = FailureKind.SERVER_ERROR, None
        elif verdict is GateVerdict.QUOTA_EXHAUSTED:
            failure, hint = FailureKind.QUOTA_EXHAUSTED, None
        else:  # a 429 (with a retry-after unless the request can never fit)
            failure, hint = FailureKind.RATE_LIMITED, decision.retry_after_s
        self._push_shell(now, _FAIL, rid, failure, hint)

    def _end(self, row: TraceRow, outcome: str, time: float) -> None:
        if row.outcome:
            raise RuntimeError(f"job {row.id!r} ended twice ({row.outcome}, then {outcome})")
        row.outcome = outcome
        row.end = time
        self._terminal += 1

    def _apply(self, actions: Sequence[object]) -> None:
        now = self._now
        for action in actions:
            if isinstance(action, Send):
                rid = action.request.id
                row = self._rows[rid]
                if row.first_send is None:
                    row.first_send = now
                row.attempts += 1
                row.endpoint = action.endpoint
                self._send(action.request, now, action.endpoint)
            elif isinstance(action, Wake):
                self._push_wake(action.at)
            else:
                self._apply_one(action, now)

    def _apply_one(self, action: object, now: float) -> None:
        """Every action but a send or a wake-up."""
        if isinstance(action, Defer):
            self._rows[action.request.id].defers += 1
        elif isinstance(action, Retry | Pause):
            return  # the engine sends it again at its time; one process, nothing to share
        elif isinstance(action, Reject):
            self._end(self._rows[action.request.id], Outcome.REJECTED, now)
        elif isinstance(action, Expire):
            self._end(self._rows[action.request.id], Outcome.EXPIRED, now)
        elif isinstance(action, Fail):
            self._end(self._rows[action.request.id], Outcome.FAILED, now)
        else:  # pragma: no cover - the engine has no other actions
            raise TypeError(f"unknown action {action!r}")


def simulate(
    jobs: Sequence[SimJob],
    config: SchedulerConfig,
    physics: PhysicsParams | None = None,
    provider: ProviderModel = PLAIN,
    calibration: LengthCalibration | None = None,
    fleet: Sequence[SimEndpoint] | None = None,
) -> SimResult:
    """Run ``jobs`` through a fresh simulator (``calibration``, ``fleet``: `Simulator`)."""
    return Simulator(config, physics, provider, calibration, fleet).run(jobs)
