"""Discrete-event simulator: the real core against the mock provider's physics.

The simulator is a shell, like the async runtime: it owns a virtual clock and
an event heap, feeds the *same* :class:`semisched.core.Engine` that
production code uses, and executes the engine's actions against
:class:`mockprovider.physics.ProviderPhysics`. Benchmarks therefore measure
the policy code itself, not a re-implementation. It decides nothing.

Kernel (after SimPy): a heap of engine wake-ups ``(time, seq)`` and the
arrivals in time order (sorted once, so a queue rather than heap entries). At
each step the earliest of the provider's next event, the next arrival and the
heap top runs; at equal times provider events go first (they free send
opportunities), then arrivals, then engine wake-ups. Nothing is random here:
the same jobs and configs give a byte-identical trace
(:meth:`SimResult.trace_csv`).

What a hosted API does to a client besides serving it (:class:`ProviderModel`)
is the mock provider's own door, :class:`mockprovider.gate.ProviderGate`:
quota, RPM/TPM windows answering 429 with a retry-after, and seeded faults
(5xx at once, hangs that end in the client's timeout, connections dropped at
completion), plus a capacity loss at a time and other traffic on the same key.
Every failed attempt goes to ``Engine.failed`` as a
:class:`~semisched.core.FailureKind`, so retries are decided by the same core
code as in the async runtime; the rate-limit state of each answer reaches the
engine as the ``x-ratelimit-*`` headers would (``observe_limits``).

Every job ends in exactly one terminal outcome: ``completed``, ``rejected``,
``expired`` or ``failed``. :meth:`Simulator.run` checks this before returning
and raises ``RuntimeError`` if any job was lost or finished twice.
"""

from __future__ import annotations

import dataclasses
import heapq
import io
import math
import random
from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, fields

from mockprovider.faults import Fault, WindowState, capacity_slots
from mockprovider.gate import GateConfig, GateDecision, GateVerdict, ProviderGate
from mockprovider.physics import EventKind, PhysicsParams, ProviderPhysics
from semisched.calibration import Calibrated, LengthCalibration
from semisched.core.actions import Defer, Expire, Fail, Reject, Retry, Send, Wake
from semisched.core.buckets import bucket_for_tokens
from semisched.core.budget import ProviderLimits
from semisched.core.config import SchedulerConfig
from semisched.core.engine import Engine
from semisched.core.lifecycle import FailureKind
from semisched.core.request import Request
from semisched.core.stats import EngineStats

__all__ = [
    "Outcome",
    "ProviderModel",
    "SimJob",
    "SimResult",
    "Simulator",
    "TraceRow",
    "simulate",
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
    """

    request: Request
    output_tokens: int
    input_tokens: int


@dataclass(slots=True)
class TraceRow:
    """Per-request record of one simulated job (times in seconds)."""

    id: str
    klass: str
    bucket: str
    routing_bucket: str
    arrival: float
    deadline: float | None
    output_tokens: int
    outcome: str = ""
    first_send: float | None = None
    first_token: float | None = None
    end: float | None = None
    defers: int = 0
    attempts: int = 0
    throttled: int = 0
    failures: int = 0

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


# Shell events: answers that are not the physics' (429s, 5xx, hang timeouts,
# dropped connections), other traffic on the key, capacity loss.
_FAIL, _OTHER, _CAPACITY = 0, 1, 2


class Simulator:
    """Runs jobs through an :class:`Engine` against :class:`ProviderPhysics`
    behind the mock's :class:`ProviderGate` (see the module docstring).

    With ``calibration`` (a :class:`~semisched.calibration.LengthCalibration`),
    each arriving request's prior is corrected as the async runtime corrects it
    (its class follows the corrected prior unless the workload named another),
    and each completion teaches it the real length.
    """

    def __init__(
        self,
        config: SchedulerConfig,
        physics: PhysicsParams,
        provider: ProviderModel = PLAIN,
        calibration: LengthCalibration | None = None,
    ) -> None:
        self.engine = Engine(config, jitter=random.Random(provider.seed).random)
        # As the runtime: corrects each prior on arrival, learns from each completion.
        self.calibration = calibration
        self._calibrated: dict[str, Calibrated] = {}
        self.provider = ProviderPhysics(physics)
        self.model = provider
        self.gate = ProviderGate(provider.gate)
        g = provider.gate
        # Nothing to check at the door: skip it (the paper's experiments, the hot path).
        self._open_door = (
            g.rpm is None
            and g.tpm is None
            and g.quota_tokens is None
            and g.error_rate == g.hang_rate == g.drop_rate == 0.0
        )
        self._heap: list[tuple[float, int]] = []  # engine wake-ups (time, seq)
        # (time, seq, kind, request id, failure kind, retry-after)
        self._shell: list[tuple[float, int, int, str, FailureKind | None, float | None]] = []
        self._arrivals: deque[SimJob] = deque()  # by (arrival, id)
        self._seq = 0
        self._rows: dict[str, TraceRow] = {}
        self._jobs: dict[str, SimJob] = {}
        self._limits: dict[str, ProviderLimits] = {}  # what the answer's headers will say
        self._dropped: set[str] = set()  # served, but the connection drops at completion
        self._terminal = 0
        self._events = 0
        self._now = 0.0
        # The provider's next event time only changes when the provider is touched.
        self._provider_dirty = True
        self._t_prov = float("inf")

    def __repr__(self) -> str:
        return (
            f"<Simulator now={self._now:.3f} pending={len(self._heap) + len(self._arrivals)} "
            f"terminal={self._terminal}/{len(self._rows)} {self.engine!r}>"
        )

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
        heap, shell, arrivals, provider, engine = (
            self._heap,
            self._shell,
            self._arrivals,
            self.provider,
            self.engine,
        )
        inf = float("inf")
        events = 0
        while True:
            t_arrival = arrivals[0].request.arrival if arrivals else inf
            t_wake = heap[0][0] if heap else inf
            t_shell = shell[0][0] if shell else inf
            if self._provider_dirty:
                nxt = provider.next_event_time()
                self._t_prov = inf if nxt is None else nxt
                self._provider_dirty = False
            t_prov = self._t_prov
            if t_prov <= t_shell and t_prov <= t_arrival and t_prov <= t_wake:
                if t_prov == inf:
                    break  # nothing is pending anywhere
                events += 1
                self._physics_events(t_prov)
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
        if self._terminal != len(self._rows) or len(engine):
            lost = [r.id for r in self._rows.values() if not r.outcome]
            raise RuntimeError(f"jobs without a terminal outcome: {lost[:10]}")
        return SimResult(
            rows=tuple(self._rows.values()),
            engine=engine.statistics(),
            end_time=self._now,
            events=self._events,
        )

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
                klass = config.class_for(job.request.bucket)
                job = dataclasses.replace(
                    job, request=dataclasses.replace(job.request, klass=klass)
                )
            self._jobs[rid] = job
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
        if klass == config.class_for(request.bucket):
            klass = config.class_for(calibrated.prior.routing_bucket)
        request = dataclasses.replace(request, prior=calibrated.prior, klass=klass)
        row = self._rows[request.id]
        row.klass, row.routing_bucket = klass, str(request.bucket)
        return request

    def _schedule_provider_events(self) -> None:
        model = self.model
        if model.capacity_loss is not None:
            self._push_shell(model.capacity_loss[0], _CAPACITY)
        if model.other_traffic > 0.0 and self._arrivals:
            self._push_shell(self._arrivals[0].request.arrival, _OTHER)

    def _only_background_left(self) -> bool:
        """Only other traffic is left to simulate: every job has its outcome."""
        return self._terminal == len(self._rows) and all(e[2] == _OTHER for e in self._shell)

    def _physics_events(self, t: float) -> None:
        self._now = t
        self._provider_dirty = True
        rows, engine = self._rows, self.engine
        for ev in self.provider.advance(t):
            rid = ev.request_id
            row = rows[rid]
            if ev.kind is EventKind.FIRST_TOKEN:
                if rid not in self._dropped:
                    row.first_token = ev.time
                continue
            self._observe(rid, ev.time)
            if ev.kind is EventKind.COMPLETED and rid not in self._dropped:
                self.gate.bill(ev.input_tokens + ev.output_tokens)
                if rid in self._calibrated:
                    self.calibration.observe(self._calibrated.pop(rid), ev.output_tokens)  # type: ignore[union-attr]
                self._end(row, Outcome.COMPLETED, ev.time)
                self._apply(engine.completed(rid, ev.time, output_tokens=ev.output_tokens))
            else:  # the provider timed out (504), or the connection dropped at the end
                self._dropped.discard(rid)
                dropped = ev.kind is EventKind.COMPLETED
                kind = FailureKind.CONNECTION if dropped else FailureKind.TIMEOUT
                self._failed(rid, ev.time, kind, None)

    def _shell_event(
        self, event: tuple[float, int, int, str, FailureKind | None, float | None]
    ) -> None:
        time, _, kind, rid, failure, retry_after = event
        self._now = time
        if kind == _FAIL:
            assert failure is not None
            self._observe(rid, time)
            self._failed(rid, time, failure, retry_after)
        elif kind == _CAPACITY:
            assert self.model.capacity_loss is not None
            slots = capacity_slots(self.provider.params.slots, self.model.capacity_loss[1])
            self.provider.set_slots(time, slots)
            self._provider_dirty = True
        else:
            self._other_traffic(time)

    def _other_traffic(self, time: float) -> None:
        """One request of the key's other clients, then the next one."""
        gate = self.model.gate
        share = self.model.other_traffic
        rate = share * (gate.rpm if gate.rpm is not None else 60.0) / gate.window_s
        tokens = 0 if gate.tpm is None or gate.rpm is None else round(gate.tpm / gate.rpm)
        self.gate.limiter.acquire(time, tokens)  # refused or not, it is not ours
        self._push_shell(time + 1.0 / rate, _OTHER)

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
            engine.observe_headroom(min(fractions), time)
        engine.observe_limits(rid, time, limits)

    def _send(self, request: Request, now: float) -> None:
        rid = request.id
        job = self._jobs[rid]
        if self._open_door:
            self.provider.submit(now, rid, job.input_tokens, job.output_tokens)
            self._provider_dirty = True
            return
        out_cap = request.max_output_tokens
        charge = job.input_tokens + (out_cap if out_cap is not None else job.output_tokens)
        decision = self.gate.admit(now, charge)
        self._limits[rid] = _limits(decision)
        verdict = decision.verdict
        if verdict is GateVerdict.ADMITTED and decision.fault is not Fault.ERROR:
            if decision.fault is Fault.HANG:  # never answered: the client's timeout ends it
                timeout = self.provider.params.timeout_s
                self._push_shell(now + timeout, _FAIL, rid, FailureKind.TIMEOUT)
                return
            if decision.fault is Fault.DROP:
                self._dropped.add(rid)
            self.provider.submit(now, rid, job.input_tokens, job.output_tokens)
            self._provider_dirty = True
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
                self._send(action.request, now)
            elif isinstance(action, Wake):
                self._push_wake(action.at)
            elif isinstance(action, Defer):
                self._rows[action.request.id].defers += 1
            elif isinstance(action, Retry):
                continue  # the engine sends it again at its time
            elif isinstance(action, Reject):
                self._end(self._rows[action.request.id], Outcome.REJECTED, now)
            elif isinstance(action, Expire):
                self._end(self._rows[action.request.id], Outcome.EXPIRED, now)
            elif isinstance(action, Fail):
                self._end(self._rows[action.request.id], Outcome.FAILED, now)
            else:  # pragma: no cover - the engine has no other actions
                raise TypeError(f"unknown action {action!r}")


def _limits(decision: GateDecision) -> ProviderLimits:
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


def simulate(
    jobs: Sequence[SimJob],
    config: SchedulerConfig,
    physics: PhysicsParams,
    provider: ProviderModel = PLAIN,
    calibration: LengthCalibration | None = None,
) -> SimResult:
    """Run ``jobs`` through a fresh simulator (``calibration``: see :class:`Simulator`)."""
    return Simulator(config, physics, provider, calibration).run(jobs)
