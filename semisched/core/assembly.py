"""The engine's parts: which ones a configuration builds, how they are wired, and the
one snapshot of them all.

`assemble` builds the parts `semisched.core.engine.Engine` drives, each with one job,
and hands each the narrow view it reads, never the engine: the flight book
(`semisched.core.book`), the fleet (`semisched.core.fleet.fleet`), the ordering policy
and its `Packing` view, the `Pressure` view the lanes and overload control read, the
tenant layer (`semisched.core.tenants.tenancy`), the explainer, the retry layer
(`semisched.core.retrying`), admission (`semisched.core.admission`) and the decider
(`semisched.core.decide`) that every event ends in. `snapshot` reads them all into one
frozen `EngineStats`.

Pure: no clock, no I/O.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from semisched.core.admission import AdmissionLayer
from semisched.core.book import Book
from semisched.core.config import SchedulerConfig
from semisched.core.decide import Decider
from semisched.core.explain import Explainer
from semisched.core.fleet.endpoint import EndpointSpec
from semisched.core.fleet.fleet import Fleet
from semisched.core.lifecycle import JitterSource
from semisched.core.ordering import OrderingPolicy, make_ordering
from semisched.core.overload import OverloadController
from semisched.core.retrying import Retrying
from semisched.core.stats import EngineStats, EngineTally
from semisched.core.tenants.tenancy import Tenancy
from semisched.core.views import Packing, Pressure

__all__ = ["Parts", "assemble", "snapshot"]


@dataclass(frozen=True, slots=True)
class Parts:
    """What an engine owns (module docstring), built and wired by `assemble`."""

    tally: EngineTally
    book: Book
    fleet: Fleet
    order: OrderingPolicy
    pressure: Pressure
    tenancy: Tenancy
    explain: Explainer
    retrying: Retrying
    admission: AdmissionLayer
    decide: Decider


def assemble(
    config: SchedulerConfig, endpoints: Sequence[EndpointSpec], jitter: JitterSource | None
) -> Parts:
    """Build the parts ``config`` asks for, over the fleet ``endpoints``, and wire them.

    Raises:
        ValueError: Duplicate endpoint names, or an empty fleet.
    """
    tally = EngineTally()
    book = Book(config.max_inflight, config.max_inflight_tokens)
    fleet = Fleet(config, endpoints, tally, jitter)
    order = make_ordering(config.ordering)
    order.attach(Packing(book, fleet))
    pressure = Pressure(config, book, fleet, order)
    tenancy = Tenancy(config, pressure, book)
    book.on_ready = tenancy.renew  # a lane's queue emptied or filled: the ready lanes
    explain = Explainer(pressure.snapshot)  # explained decisions, counted by rule
    retrying = Retrying(config, fleet, tally, jitter)
    admission = AdmissionLayer(OverloadController(config.overload), tenancy.policy, tenancy,
                               pressure.refresh, fleet.signals, explain)  # fmt: skip
    decide = Decider(book, tenancy, fleet, pressure, admission, explain, retrying, tally)
    return Parts(tally, book, fleet, order, pressure, tenancy, explain, retrying, admission,
                 decide)  # fmt: skip


def snapshot(parts: Parts, class_names: Sequence[str]) -> EngineStats:
    """Every part read at the book's time, as one frozen `EngineStats`."""
    book, tenancy, fleet, pressure, decide = (parts.book, parts.tenancy, parts.fleet,
                                              parts.pressure, parts.decide)  # fmt: skip
    lanes, now = tenancy.lanes, book.now
    return EngineStats(
        now=now,
        queued={n: sum(len(lane.queues[n]) for lane in lanes) for n in class_names},
        queued_tokens=book.queued_tokens,
        deferred=book.deferred,
        inflight=book.inflight,
        inflight_by_class={
            n: sum(lane.inflight_by_class[n] for lane in lanes) for n in class_names
        },
        inflight_tokens=book.inflight_tokens,
        signals=pressure.snapshot(),
        s_per_token=fleet.signals.s_per_token,
        counters=parts.tally.freeze(),
        failures=parts.retrying.counts(),
        rejects_by_bucket=decide.rejects(),
        defers_by_bucket=decide.defers(),
        allocation_state=tenancy.alloc.state(),
        request_tokens=pressure.request_cost(),
        budget=fleet.budgets.snapshot(now),
        held=decide.held,
        endpoints=fleet.statistics(now),
        tenants=tuple(tenancy.ledger.stats(lane, now) for lane in lanes),
        decisions=parts.explain.counts(),
        limit_changes=tuple(fleet.limits.changes),
    )
