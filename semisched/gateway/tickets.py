"""Each HTTP request's ticket: its tenant, class and phase, and how to cancel it.

A `Ticket` is made when a request arrives and bound to the scheduler's
request when ``submit`` hands it to the engine (`Tracker`, a
[`RequestObserver`][semisched.telemetry.observe.RequestObserver], reads the ticket of the
submitting task from a context variable). The tracker follows its phase,
``queued`` until the engine sends it, then ``in_flight``, which is what the
gateway needs to

- answer what is still queued with 503 when it shuts down, and let what is in
  flight finish (`Tracker.queued`),
- report queues by tenant and class on its status route (`Tracker.table`),
- write its access log line (`log_access`): one per request, on the logger
  ``semisched.gateway.access`` at INFO: route, tenant, class, status, the time
  queued and in all, and the scheduler's request id; never a key, a prompt or a
  parameter.

A disconnect or a drain cancels a ticket's scope, which cancels its
``submit``: the runtime removes a queued request from its queue (never sent)
and aborts one in flight; its metrics count it ``cancelled``.

What this module is not: it decides nothing and answers nothing.
"""

from __future__ import annotations

import logging
from contextvars import ContextVar
from typing import Literal

import anyio

from semisched.core.request import Request
from semisched.telemetry.observe import Finished, RequestObserver

__all__ = ["Ticket", "Tracker", "access_log", "current_ticket", "log_access"]

#: The access log (``semisched serve --access-log``): one INFO line per request.
access_log = logging.getLogger("semisched.gateway.access")

Phase = Literal["arriving", "queued", "in_flight", "done"]
Reason = Literal["", "disconnect", "drain"]

#: The ticket of the request the current task is submitting.
current_ticket: ContextVar[Ticket | None] = ContextVar("semisched_gateway_ticket", default=None)


class Ticket:
    """One HTTP request on its way through the scheduler."""

    __slots__ = ("cancelled_in", "klass", "phase", "reason", "request_id", "scope", "sent_at",
                 "tenant")  # fmt: skip

    def __init__(self, tenant: str) -> None:
        self.tenant = tenant
        self.klass = ""
        self.request_id = ""
        self.phase: Phase = "arriving"
        self.reason: Reason = ""
        self.scope: anyio.CancelScope | None = None
        self.cancelled_in: Phase = "arriving"  # the phase it was in when cancelled
        self.sent_at: float | None = None  # the scheduler's clock at its first send

    def __repr__(self) -> str:
        return f"<Ticket {self.request_id or '-'} {self.tenant}/{self.klass} {self.phase}>"

    def cancel(self, reason: Reason) -> None:
        """Cancel its ``submit`` (or its stream) for ``reason``; the first reason sticks."""
        if not self.reason:
            self.reason = reason
            self.cancelled_in = self.phase
        if self.scope is not None:
            self.scope.cancel()


class Tracker(RequestObserver):
    """Follows every ticket's phase from the scheduler's own events (module docstring)."""

    def __init__(self) -> None:
        self.live: dict[str, Ticket] = {}

    def __repr__(self) -> str:
        return f"<Tracker live={len(self.live)}>"

    def submitted(self, request: Request, now: float) -> None:
        ticket = current_ticket.get()
        if ticket is None:
            return
        ticket.request_id = request.id
        ticket.klass = request.klass
        ticket.phase = "queued"
        self.live[request.id] = ticket

    def sent(self, request: Request, attempt: int, endpoint: str, now: float) -> None:
        ticket = self.live.get(request.id)
        if ticket is not None:
            ticket.phase = "in_flight"
            if ticket.sent_at is None:
                ticket.sent_at = now

    def finished(self, request: Request, finished: Finished, now: float) -> None:
        ticket = self.live.pop(request.id, None)
        if ticket is not None:
            ticket.phase = "done"

    def queued(self) -> list[Ticket]:
        """The tickets not sent yet."""
        return [t for t in self.live.values() if t.phase == "queued"]

    def table(self) -> dict[str, dict[str, dict[str, int]]]:
        """``{tenant: {class: {"queued": n, "in_flight": m}}}`` of the live tickets."""
        out: dict[str, dict[str, dict[str, int]]] = {}
        for ticket in self.live.values():
            cell = out.setdefault(ticket.tenant or "default", {}).setdefault(
                ticket.klass, {"queued": 0, "in_flight": 0}
            )
            if ticket.phase in ("queued", "in_flight"):
                cell[ticket.phase] += 1
        return out


def log_access(route: str, ticket: Ticket, status: int, started: float, now: float) -> None:
    """One access-log line (module docstring); times are seconds since ``started``."""
    queued = "-" if ticket.sent_at is None else f"{max(0.0, ticket.sent_at - started):.3f}"
    access_log.info(
        "%s status=%d tenant=%s class=%s queued_s=%s total_s=%.3f request=%s%s",
        route, status, ticket.tenant or "default", ticket.klass or "-", queued, now - started,
        ticket.request_id or "-", f" cancelled={ticket.reason}" if ticket.reason else "",
    )  # fmt: skip
