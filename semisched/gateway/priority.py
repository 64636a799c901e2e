"""Priority a gateway user states, applied to each request: its class and its deadline.

The settings come from the gateway's file (`semisched.gateway.priority_config`:
``[[class]]``, ``[priority]``, ``[[tenant]]`` ``default_class``, ``key_classes``
and ``deadline_s``); `PriorityRules` applies them.

Rules:

1. A request's class is the first of: the header ``x-semisched-class``; a body
   ``priority`` string naming a class (`semisched.gateway.hints`); an
   integer body ``priority`` through ``[priority] levels`` (LiteLLM's
   convention: lower is more urgent, 0 is valid; the class of the first level
   whose bound is at least the priority; above every bound: ``above``, else
   400); the body's ``service_tier`` through ``[priority] service_tier``; the
   key's class (``key_classes``); the tenant's ``default_class`` (the core's
   [`class_for`][semisched.core.config.SchedulerConfig.class_for]); else the
   request's predicted size (the core, as without any of these).
2. With ``levels``, a ``priority`` that is neither an integer (JSON ``true``
   and ``1.5`` are not) nor a class name is a 400 ``invalid_hint``, whatever
   else names the class. Without them ``priority`` is read only as a class
   name, as before. It is never forwarded (it is not an OpenAI field);
   ``service_tier`` is forwarded by its own rules
   (`semisched.gateway.params`), whatever class it maps to.
3. A request without ``x-semisched-deadline`` gets the smaller of its tenant's
   ``deadline_s`` and ``max_request_s``; the scheduler then holds any request to
   its class's ``deadline_s`` when that is sooner
   ([`deadline_for`][semisched.core.config.SchedulerConfig.deadline_for]), whichever way its
   class was chosen, its size included.
4. When a class's or tenant's ``deadline_s`` passes while the request is still
   queued (never sent), the answer is a 429 ``deadline_shed`` with
   ``Retry-After`` (the scheduler's hint when it gives one, else its estimate of
   how long its queue takes to drain, at least ``retry_after_s``), naming that deadline
   (`deadline_shed`): the gateway shed it, as
   its operator asked, and trying again later may succeed. Past it in flight,
   or past the caller's own deadline or ``max_request_s`` when that came first,
   the answer stays a 504 ``deadline_exceeded``. A stream is answered the same
   before its first byte.

What this module is not: it parses no file and schedules nothing (the tiers and
the starvation guard are the core's [`ClassSpec`][semisched.core.config.ClassSpec]).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, Counter
from starlette.responses import Response

from semisched.errors import DeadlineExceeded, RequestError
from semisched.gateway.answers import deadline_shed
from semisched.gateway.hints import BadHint
from semisched.gateway.keys import bearer_key, key_hash
from semisched.gateway.params import quote

if TYPE_CHECKING:
    from semisched.gateway.config import GatewayConfig

__all__ = ["DeadlinePlan", "Defaulted", "PriorityRules"]


@dataclass(frozen=True, slots=True)
class Defaulted:
    """A deadline the gateway gave a request that named none: a class's or a tenant's."""

    source: str  # "class" or "tenant"
    name: str
    seconds: float

    def describe(self) -> str:
        """For a message: ``the class 'batch''s deadline_s=30``."""
        return f"the {self.source} {self.name!r}'s deadline_s={self.seconds:g}"


@dataclass(frozen=True, slots=True)
class DeadlinePlan:
    """One request's deadline and what chose it (rule 3).

    Attributes:
        seconds: The deadline the scheduler is given, from arrival (its class's
            ``deadline_s`` may still shorten it there).
        defaulted: The tenant's ``deadline_s`` when it is that one.
    """

    seconds: float
    defaulted: Defaulted | None = None


class PriorityRules:
    """The module rules for one configuration.

    Args:
        config: The gateway's configuration.
        registry: Where ``semisched_gateway_shed_total{source,name}`` is counted.
    """

    def __init__(self, config: GatewayConfig, registry: CollectorRegistry) -> None:
        settings = config.priority
        self.settings = settings
        scheduler = config.scheduler_config()
        self._names = tuple(c.name for c in scheduler.classes)
        self._max_request_s = config.max_request_s
        self._retry_after_s = config.retry_after_s
        self._shed = Counter("semisched_gateway_shed", "Requests shed at a class's or tenant's "
                             "deadline_s while queued (429 deadline_shed)", ("source", "name"),
                             registry=registry)  # fmt: skip

    def __repr__(self) -> str:
        s = self.settings
        return (
            f"<PriorityRules levels={list(s.levels)} service_tier={dict(s.service_tiers)} "
            f"key_classes={len(s.key_classes)} deadlines={dict(s.class_deadlines)}>"
        )

    def klass(
        self, hinted: str | None, priority: object, tier: object, authorization: str | None
    ) -> str | None:
        """The class of a request (rules 1 and 2); ``None``: the core chooses.

        Args:
            hinted: The class of its header or string ``priority`` (`read_hints`).
            priority: Its body's ``priority``, before it was stripped.
            tier: Its body's ``service_tier`` (``None`` where the route has none).
            authorization: Its ``Authorization`` header (for ``key_classes``).

        Raises:
            BadHint: A ``priority`` that is not an integer or a class name, or one
                above every level without ``above`` (400 ``invalid_hint``).
        """
        s = self.settings
        level = self._integer(priority) if s.levels else None
        if hinted is not None:
            return hinted
        if level is not None:
            return self._level(level)
        if isinstance(tier, str) and tier in s.service_tiers:
            return s.service_tiers[tier]
        if s.key_classes:
            key = bearer_key(authorization)
            if key is not None:
                return s.key_classes.get(key_hash(key))
        return None

    def _integer(self, priority: object) -> int | None:
        """An integer ``priority`` (``None``: absent, or a class name); else 400 (rule 2)."""
        if priority is None or (isinstance(priority, str) and priority in self._names):
            return None
        if type(priority) is not int:
            raise BadHint(f"priority: {quote(priority)} must be an integer (lower is more "
                          f"urgent) or one of the classes {list(self._names)}", status=400,
                          param="priority", code="invalid_hint")  # fmt: skip
        return priority

    def _level(self, priority: int) -> str:
        """The class of an integer ``priority`` through ``levels`` (rule 1)."""
        for bound, klass in self.settings.levels:
            if priority <= bound:
                return klass
        if self.settings.above is None:
            raise BadHint(f"priority: {quote(priority)} is above every level this gateway "
                          f"maps (at most {self.settings.levels[-1][0]})", status=400,
                          param="priority", code="invalid_hint")  # fmt: skip
        return self.settings.above

    def deadline(self, asked: float | None, tenant: str) -> DeadlinePlan:
        """The deadline of a request (rule 3), ``asked`` its ``x-semisched-deadline``."""
        if asked is not None:
            return DeadlinePlan(asked)
        seconds = self.settings.tenant_deadlines.get(tenant)
        if seconds is not None and seconds <= self._max_request_s:
            return DeadlinePlan(seconds, Defaulted("tenant", tenant, seconds))
        return DeadlinePlan(self._max_request_s)

    def shed_answer(
        self, plan: DeadlinePlan, error: RequestError, drain_s: Callable[[], float]
    ) -> Response | None:
        """The 429 of a request shed while queued (rule 4), else ``None``.

        Args:
            plan: The request's deadline plan.
            error: The scheduler's error for it.
            drain_s: The scheduler's estimate of how long its queue takes to drain,
                read only for a shed: its ``Retry-After`` when the error carries no
                hint (at least ``retry_after_s``).
        """
        if not (isinstance(error, DeadlineExceeded) and error.phase == "queued"):
            return None
        by = plan.defaulted
        seconds = self.settings.class_deadlines.get(error.klass)
        if seconds is not None and seconds < plan.seconds:  # the class's came first
            by = Defaulted("class", error.klass, seconds)
        if by is None:
            return None
        why = getattr(error, "explanation", None)
        hint = why.retry_after if why is not None else None
        if hint is None:
            hint = max(self._retry_after_s, drain_s())
        self._shed.labels(by.source, by.name).inc()
        return deadline_shed(by.describe(), hint)
