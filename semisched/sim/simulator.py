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
engine as the ``x-ratelimit-*`` headers would (``observe_limits``). That side of the
shell, each endpoint's door, a send through it and the events it schedules, is
`semisched.sim.door`.

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

from mockprovider.gate import ProviderGate
from mockprovider.physics import COMPLETED, FIRST_TOKEN, PhysicsParams, ProviderPhysics
from semisched.core.actions import Defer, Expire, Fail, Pause, Reject, Retry, Send, Wake
from semisched.core.buckets import bucket_for_tokens
from semisched.core.budget import ProviderLimits
from semisched.core.config import SchedulerConfig
from semisched.core.engine import Engine
from semisched.core.fleet.fleet import DEFAULT_ENDPOINT
from semisched.core.lifecycle import FailureKind
from semisched.core.request import Request
from semisched.priors.calibration import Calibrated, LengthCalibration
from semisched.sim.door import (
    Backend,
    ShellEvent,
    observe,
    only_background_left,
    schedule_provider_events,
    send,
    shell_event,
)
from semisched.sim.model import (
    PLAIN,
    Outcome,
    ProviderModel,
    SimEndpoint,
    SimJob,
    SimResult,
    TraceRow,
    check_fleet,
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
        self._backends = [Backend(e) for e in fleet]
        self._by_name = {b.name: b for b in self._backends}
        first = self._backends[0]
        self.provider = first.physics  # the one-endpoint case's names
        self.model = first.model
        self.gate = first.gate
        self._heap: list[tuple[float, int]] = []  # engine wake-ups (time, seq)
        # (time, seq, kind, request id or backend name, failure kind, retry-after)
        self._shell: list[ShellEvent] = []
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

    def run(self, jobs: Iterable[SimJob]) -> SimResult:
        """Simulate ``jobs`` to completion and return the trace.

        Raises:
            ValueError: On duplicate job ids.
            RuntimeError: If a job ended in no terminal outcome or in several.
        """
        self._load(jobs)
        schedule_provider_events(self)
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
                backend = min(backends, key=Backend.next_time)
                t_prov = backend.t_next
            if t_prov <= t_shell and t_prov <= t_arrival and t_prov <= t_wake:
                if t_prov == inf:
                    break  # nothing is pending anywhere
                events += 1
                self._physics_events(backend, t_prov)
                continue
            events += 1
            if t_shell <= t_arrival and t_shell <= t_wake:
                shell_event(self, heapq.heappop(shell))
            elif t_arrival <= t_wake:
                self._now = t_arrival
                self._apply(engine.submit(self._arriving(arrivals.popleft()), t_arrival))
            else:
                heapq.heappop(heap)
                self._now = t_wake
                self._apply(engine.poll(t_wake))
            if not arrivals and not heap and only_background_left(self):
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

    def _physics_events(self, backend: Backend, t: float) -> None:
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
            observe(self, rid, time)
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

    def _failed(self, rid: str, time: float, kind: FailureKind, retry_after: float | None) -> None:
        row = self._rows[rid]
        row.failures += 1
        if kind is FailureKind.RATE_LIMITED:
            row.throttled += 1
        self._apply(self.engine.failed(rid, time, kind, retry_after=retry_after))

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
                send(self, action.request, now, action.endpoint)
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
