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

Every job ends in exactly one terminal outcome: ``completed``, ``rejected``,
``expired`` or ``failed`` (provider timeout). :meth:`Simulator.run` checks
this before returning and raises ``RuntimeError`` if any job was lost or
finished twice.
"""

from __future__ import annotations

import dataclasses
import heapq
import io
from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, fields

from mockprovider.physics import EventKind, PhysicsParams, ProviderPhysics
from semisched.core.buckets import bucket_for_tokens
from semisched.core.config import SchedulerConfig
from semisched.core.engine import Defer, Engine, EngineStats, Expire, Reject, Send, Wake
from semisched.core.request import Request

__all__ = ["Outcome", "SimJob", "SimResult", "Simulator", "TraceRow", "simulate"]


class Outcome:
    """Terminal outcomes of a simulated job."""

    COMPLETED = "completed"
    REJECTED = "rejected"
    EXPIRED = "expired"
    FAILED = "failed"


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


class Simulator:
    """Runs jobs through an :class:`Engine` against :class:`ProviderPhysics`."""

    def __init__(self, config: SchedulerConfig, physics: PhysicsParams) -> None:
        self.engine = Engine(config)
        self.provider = ProviderPhysics(physics)
        self._heap: list[tuple[float, int]] = []  # engine wake-ups (time, seq)
        self._arrivals: deque[SimJob] = deque()  # by (arrival, id)
        self._seq = 0
        self._rows: dict[str, TraceRow] = {}
        self._jobs: dict[str, SimJob] = {}
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

    def run(self, jobs: Iterable[SimJob]) -> SimResult:
        """Simulate ``jobs`` to completion and return the trace.

        Raises:
            ValueError: On duplicate job ids.
            RuntimeError: If a job ended in no terminal outcome or in several.
        """
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
        heap, arrivals, provider, engine = self._heap, self._arrivals, self.provider, self.engine
        rows = self._rows
        inf = float("inf")
        # Hoisted: attribute access on an Enum class is slow, and this loop runs per event.
        first_token, completion = EventKind.FIRST_TOKEN, EventKind.COMPLETED
        events = 0
        while True:
            t_arrival = arrivals[0].request.arrival if arrivals else inf
            t_wake = heap[0][0] if heap else inf
            if self._provider_dirty:
                nxt = provider.next_event_time()
                self._t_prov = inf if nxt is None else nxt
                self._provider_dirty = False
            t_prov = self._t_prov
            if t_prov <= t_arrival and t_prov <= t_wake:
                if t_prov == inf:
                    break  # nothing is pending anywhere
                events += 1
                self._now = t_prov
                self._provider_dirty = True
                for ev in provider.advance(t_prov):
                    row = rows[ev.request_id]
                    if ev.kind is first_token:
                        row.first_token = ev.time
                    elif ev.kind is completion:
                        self._end(row, Outcome.COMPLETED, ev.time)
                        self._apply(
                            engine.completed(ev.request_id, ev.time, output_tokens=ev.output_tokens)
                        )
                    else:  # TIMED_OUT: the provider gave up; no retry in the simulator
                        self._end(row, Outcome.FAILED, ev.time)
                        self._apply(engine.failed(ev.request_id, ev.time))
                continue
            events += 1
            if t_arrival <= t_wake:
                self._now = t_arrival
                self._apply(engine.submit(arrivals.popleft().request, t_arrival))
            else:
                heapq.heappop(heap)
                self._now = t_wake
                self._apply(engine.poll(t_wake))
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
                job = self._jobs[rid]
                if row.first_send is None:
                    row.first_send = now
                row.attempts += 1
                self.provider.submit(now, rid, job.input_tokens, job.output_tokens)
                self._provider_dirty = True
            elif isinstance(action, Wake):
                self._push_wake(action.at)
            elif isinstance(action, Defer):
                self._rows[action.request.id].defers += 1
            elif isinstance(action, Reject):
                self._end(self._rows[action.request.id], Outcome.REJECTED, now)
            elif isinstance(action, Expire):
                self._end(self._rows[action.request.id], Outcome.EXPIRED, now)
            else:  # pragma: no cover - the engine has no other actions
                raise TypeError(f"unknown action {action!r}")


def simulate(jobs: Sequence[SimJob], config: SchedulerConfig, physics: PhysicsParams) -> SimResult:
    """Run ``jobs`` through a fresh simulator."""
    return Simulator(config, physics).run(jobs)
