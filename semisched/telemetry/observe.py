"""Watching requests: the runtime's hooks for metrics, traces and decision logs.

A `RequestObserver` hears what happens to each request the
`Dispatcher` runs, in order: ``submitted``; for each
attempt ``sent`` (and the provider call runs inside ``attempt``'s context: tracing
runs it in the caller's context); ``decided`` for each
non-terminal decision (a deferral, a retry, a failover, with its
[`Explanation`][semisched.core.explain.Explanation]); ``first_token`` once for a
stream; ``finished`` once, with the `Outcome`. The Prometheus metrics
(`semisched.telemetry.prometheus`) and the OpenTelemetry spans
(`semisched.telemetry.tracing`) are observers; so is anything a user
passes to ``Scheduler(observers=...)``.

Rules:

1. Observers see the core's [`Request`][semisched.core.Request] (id, class,
   tenant, model, bucket, prior, prompt estimate) and counts: never the
   prompt, the call's parameters or a key.
2. Times are the scheduler's clock (``Scheduler(clock=)``; wall seconds by
   default), the same ``now`` the core is given.
3. An observer that raises does not disturb scheduling: the error is logged
   (``semisched.observe``, WARNING, once per observer and method) and the
   observer keeps being called.

Decisions also go to the ``logging`` module, always (`log_decision`):
logger ``semisched.decisions``, DEBUG, the explanation's fields in the record's
``semisched`` attribute (``extra``), nothing of the request's content.
"""

from __future__ import annotations

import contextlib
import enum
import logging
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from semisched.core.explain import Explanation
from semisched.core.request import Request
from semisched.extras import needs

__all__ = [
    "DECISION_LOGGER",
    "Finished",
    "Observers",
    "Outcome",
    "RequestObserver",
    "build_observers",
    "log_decision",
]

#: The logger explained decisions go to (DEBUG).
if TYPE_CHECKING:
    from opentelemetry.trace import TracerProvider
    from prometheus_client import CollectorRegistry

DECISION_LOGGER = logging.getLogger("semisched.decisions")
_log = logging.getLogger("semisched.observe")


class Outcome(enum.Enum):
    """How a request ended (each request ends exactly once)."""

    COMPLETED = "completed"
    REJECTED = "rejected"
    EXPIRED = "expired"
    FAILED = "failed"
    CANCELLED = "cancelled"
    INTERNAL_ERROR = "internal_error"


@dataclass(frozen=True, slots=True)
class Finished:
    """How one request ended (``RequestObserver.finished``).

    Attributes:
        outcome: The outcome.
        attempts: Attempts sent (0: it never left the queue).
        endpoint: Where its last attempt went (``""``: none).
        prompt_tokens: The provider's prompt count of a completed call, if it gave one.
        output_tokens: Output tokens of a completed call (its usage, else its stream's
            content chunks), if known.
        explanation: Why, for a rejected, expired or failed request the core decided on.
        cost_usd: What it cost at its endpoint's price (``None``: not priced, or no answer).
    """

    outcome: Outcome
    attempts: int
    endpoint: str
    prompt_tokens: int | None = None
    output_tokens: int | None = None
    explanation: Explanation | None = None
    cost_usd: float | None = None


class RequestObserver:
    """Hears each request's life (module docstring); override what you need (no-ops here)."""

    def submitted(self, request: Request, now: float) -> None:
        """``request`` entered the scheduler at ``now``."""

    def sent(self, request: Request, attempt: int, endpoint: str, now: float) -> None:
        """Attempt ``attempt`` (from 1) of ``request`` goes to ``endpoint`` at ``now``."""

    def attempt(
        self, request: Request, attempt: int, endpoint: str
    ) -> AbstractContextManager[object]:
        """A context the provider call of this attempt runs in (a trace's span, say)."""
        return contextlib.nullcontext()

    def decided(self, request: Request, explanation: Explanation, now: float) -> None:
        """A non-terminal decision about ``request``: deferred, retried or failed over."""

    def first_token(self, request: Request, now: float) -> None:
        """A streamed ``request``'s first content arrived at ``now``."""

    def finished(self, request: Request, finished: Finished, now: float) -> None:
        """``request`` ended at ``now`` (once)."""


class Observers:
    """Calls every observer in order; one that raises is logged, not propagated (rule 3)."""

    __slots__ = ("_complained", "_contexts", "items")

    def __init__(self, items: Sequence[RequestObserver]) -> None:
        for item in items:
            if not isinstance(item, RequestObserver):
                raise TypeError(f"observers: {item!r} must be a semisched.RequestObserver")
        self.items = tuple(items)
        # Only the observers that give a provider call a context of their own are asked
        # for one (the base class's is a no-op).
        self._contexts = tuple(item for item in self.items
                               if getattr(item.attempt, "__func__", None)
                               is not RequestObserver.attempt)  # fmt: skip
        self._complained: set[tuple[int, str]] = set()

    def __bool__(self) -> bool:
        return bool(self.items)

    @property
    def give_context(self) -> bool:
        """Whether any observer runs provider calls in a context of its own (``attempt``)."""
        return bool(self._contexts)

    def _failed(self, item: RequestObserver, method: str) -> None:
        key = (id(item), method)
        if key not in self._complained:
            self._complained.add(key)
            _log.warning("observer %r failed in %s", item, method, exc_info=True)

    def submitted(self, request: Request, now: float) -> None:
        for item in self.items:
            try:
                item.submitted(request, now)
            except Exception:
                self._failed(item, "submitted")

    def sent(self, request: Request, attempt: int, endpoint: str, now: float) -> None:
        for item in self.items:
            try:
                item.sent(request, attempt, endpoint, now)
            except Exception:
                self._failed(item, "sent")

    def attempt(
        self, request: Request, attempt: int, endpoint: str
    ) -> AbstractContextManager[object]:
        if len(self._contexts) == 1:  # the common case, without an ExitStack
            try:
                return self._contexts[0].attempt(request, attempt, endpoint)
            except Exception:
                self._failed(self._contexts[0], "attempt")
                return contextlib.nullcontext()
        if not self._contexts:
            return contextlib.nullcontext()
        return self._attempts(request, attempt, endpoint)

    @contextlib.contextmanager
    def _attempts(self, request: Request, attempt: int, endpoint: str) -> Iterator[None]:
        with contextlib.ExitStack() as stack:
            for item in self._contexts:
                try:
                    stack.enter_context(item.attempt(request, attempt, endpoint))
                except Exception:
                    self._failed(item, "attempt")
            yield

    def decided(self, request: Request, explanation: Explanation, now: float) -> None:
        for item in self.items:
            try:
                item.decided(request, explanation, now)
            except Exception:
                self._failed(item, "decided")

    def first_token(self, request: Request, now: float) -> None:
        for item in self.items:
            try:
                item.first_token(request, now)
            except Exception:
                self._failed(item, "first_token")

    def finished(self, request: Request, finished: Finished, now: float) -> None:
        for item in self.items:
            try:
                item.finished(request, finished, now)
            except Exception:
                self._failed(item, "finished")


def log_decision(request: Request, explanation: Explanation) -> None:
    """Log one explained decision (DEBUG on `DECISION_LOGGER`; module docstring)."""
    if not DECISION_LOGGER.isEnabledFor(logging.DEBUG):
        return
    fields = explanation.as_dict()
    fields.update(request_id=request.id, klass=request.klass, model=request.model)
    DECISION_LOGGER.debug(
        "%s %s: %s [%s]",
        explanation.decision.value,
        request.id,
        explanation.reason,
        explanation.rule,
        extra={"semisched": fields},
    )


def build_observers(
    extra: Sequence[RequestObserver],
    *,
    metrics: CollectorRegistry | bool,
    tracing: TracerProvider | bool,
    statistics: Callable[[], Any],
) -> Observers:
    """``Scheduler``'s observers: its Prometheus metrics and OpenTelemetry spans when
    asked for (each imported only then), then ``extra``.

    Args:
        extra: The caller's own observers.
        metrics: ``True`` (the default registry), a registry, or ``False``.
        tracing: ``True`` (the global tracer provider), a provider, or ``False``.
        statistics: The scheduler's ``statistics()`` (the metrics' gauges read it).

    Raises:
        TypeError: An observer that is not a `RequestObserver`.
        MissingDependency: ``metrics`` without ``prometheus-client`` installed, or
            ``tracing`` without ``opentelemetry-api`` (the message says what to install).
    """
    items: list[RequestObserver] = []
    if metrics is not False:
        with needs("Scheduler(metrics=...)"):
            from semisched.telemetry.prometheus import PrometheusMetrics

        registry = None if metrics is True else metrics
        items.append(PrometheusMetrics(statistics, registry=registry))
    if tracing is not False:
        with needs("Scheduler(tracing=...) (pass tracing=False to go without)"):
            from semisched.telemetry.tracing import RequestTracing

        items.append(RequestTracing(None if tracing is True else tracing))
    return Observers([*items, *extra])
