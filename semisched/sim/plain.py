"""The simulator's plain run: one endpoint with an open door and nothing else to model.

Split from `semisched.sim.simulator` (`Simulator` decides
once per run, `is_plain`). The paper's experiments and ``bench sim-speed`` are such runs:
no gate to ask (no quota, rate windows, faults or outages), no shell events (capacity
loss, other traffic), no calibration and no compressed prompt. `run_plain` is the
simulator's general loop with the branches such a run never takes removed: the same
events in the same order, the same engine calls with the same times, so the trace is
byte-identical to the general loop's.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from mockprovider.physics import COMPLETED, FIRST_TOKEN
from semisched.core.actions import Defer, Send, Wake
from semisched.core.lifecycle import FailureKind
from semisched.sim.model import Outcome

if TYPE_CHECKING:
    from semisched.sim.simulator import Simulator

__all__ = ["is_plain", "run_plain"]


def is_plain(sim: Simulator) -> bool:
    """Whether ``sim``'s run (its jobs loaded) can take `run_plain`."""
    backends = sim._backends
    if len(backends) != 1 or sim.calibration is not None or sim._compressed:
        return False
    backend = backends[0]
    model = backend.model
    return backend.open_door and model.capacity_loss is None and not model.other_traffic > 0.0


def run_plain(sim: Simulator) -> None:
    """``Simulator._run_general`` for a plain run (the shell heap stays empty)."""
    heap, arrivals, engine, rows = sim._heap, sim._arrivals, sim.engine, sim._rows
    backend = sim._backends[0]
    next_event_time, drain = backend.physics.next_event_time, backend.physics.drain
    quota, apply, end, failed = backend.gate.quota, _sender(sim), sim._end, sim._failed
    submit, poll, completed = engine.submit, engine.poll, engine.completed
    first_token = engine.first_token
    done, timeout, n_rows = Outcome.COMPLETED, FailureKind.TIMEOUT, len(rows)
    inf = float("inf")
    events = 0
    while True:
        t_arrival = arrivals[0].request.arrival if arrivals else inf
        t_wake = heap[0][0] if heap else inf
        t_prov = next_event_time()
        if t_prov is None:
            t_prov = inf
        if t_prov <= t_arrival and t_prov <= t_wake:
            if t_prov == inf:
                break  # nothing is pending anywhere
            events += 1
            sim._now = t_prov
            for code, rid, time, input_tokens, output_tokens in drain(t_prov):
                if code == FIRST_TOKEN:
                    rows[rid].first_token = time
                    first_token(rid, time)
                elif code == COMPLETED:
                    quota.used += input_tokens + output_tokens  # the gate's bill (no quota)
                    end(rows[rid], done, time)
                    apply(completed(rid, time, output_tokens=output_tokens), t_prov)
                else:  # the provider timed out (504)
                    failed(rid, time, timeout, None)
            continue
        events += 1
        if t_arrival <= t_wake:
            sim._now = t_arrival
            apply(submit(arrivals.popleft().request, t_arrival), t_arrival)
        else:
            heapq.heappop(heap)
            sim._now = t_wake
            apply(poll(t_wake), t_wake)
        if not arrivals and not heap and sim._terminal == n_rows:
            break  # every job has its outcome
    sim._events += events


def _sender(sim: Simulator) -> Callable[[Sequence[object], float], None]:
    """``Simulator._apply`` for a plain run: a send goes straight to the physics."""
    rows, jobs, heap, apply_one = sim._rows, sim._jobs, sim._heap, sim._apply_one
    physics_submit, push = sim.provider.submit, heapq.heappush

    def apply(actions: Sequence[object], now: float) -> None:
        for action in actions:
            cls = type(action)
            if cls is Send:
                rid = action.request.id  # type: ignore[attr-defined]
                row = rows[rid]
                if row.first_send is None:
                    row.first_send = now
                row.attempts += 1
                row.endpoint = action.endpoint  # type: ignore[attr-defined]
                job = jobs[rid]
                physics_submit(now, rid, job.input_tokens, job.output_tokens)
            elif cls is Wake:
                sim._seq += 1
                push(heap, (action.at, sim._seq))  # type: ignore[attr-defined]
            elif cls is Defer:  # overload control's most common verdict
                rows[action.request.id].defers += 1  # type: ignore[attr-defined]
            else:
                apply_one(action, now)

    return apply
