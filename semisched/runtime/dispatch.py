"""Executing the engine's actions: the runtime's mechanism under [`Scheduler`][semisched.Scheduler].

A `Dispatcher` holds the requests callers are waiting for and does what
the core's actions say:

- `Send`: start one attempt as a task in the
  scheduler's task group, at the endpoint the core routed it to
  (`semisched.fleet.endpoints`; `semisched.runtime.provider` is the I/O seam);
- `Wake`: keep one timer and poll the engine then;
- `Retry`: count it; the engine re-queues the request
  and sends it again with a later ``Send``;
- `Reject`, `Expire`,
  `Fail`: resolve the caller with the outcome;
- `Defer`: nothing (the engine brings it back);
- `Pause`: hand it to the reservation layer, which keeps the
  endpoint off in every process sharing its state for as long as the engine does.

Every telemetry event of a request (submitted, sent, deferred or retried, decided,
first token, finished) goes to one sink (`EventSink`):
the dispatcher never asks who listens.

Each attempt goes to its endpoint's stack of layers around the provider seam
(`semisched.runtime.layers`: compression, shared-state reservation, observers,
usage learning, rate-limit headers) and comes back as a result the dispatcher
feeds to the engine: an answer (``completed``), a refusal by the shared state
(``refused``: nothing was sent), an exception (``failed`` with the kind from
`semisched.runtime.failures.classify_failure`) or its deadline (``expire``). What
an answer becomes (a response settled and handed over, a stream counted open
until it ends, an answer whose caller is gone closed unread) is `Answers`'
(`semisched.runtime.answers`). It resolves each caller exactly once and never
compares engine state before and after a call: what to do next is always in the
actions the engine returned.

Rules:

1. A request is resolved once: a response (or a stream), or an outcome from
   `semisched.errors`; a second resolution is a bug and raises.
2. The engine's ``now`` never goes backwards: `Dispatcher.now` never
   returns less than a time already given to it.
3. A failed attempt is reported to the engine before anything else happens to
   the request; the engine's verdict (retry, expire, fail) is executed at once.
4. The engine hears of a request from one owner at a time, and never after it
   is done. From its ``Send`` until that attempt reports how it ended, the
   attempt's task owns the request (``Pending.attempt``): a caller who gives up
   then only cancels the call, and the attempt reports. An answer that arrived
   anyway is accounted and closed, never handed over: its tokens are charged
   (``completed``; a stream is closed and reported as ``cancel``); an aborted,
   failed or refused attempt is reported as ``cancel``. Outside an attempt the
   caller's cancel is reported at once.
5. Every request's work is supervised (`semisched.runtime.supervise`): an
   unexpected exception in it ends that request alone with
   [`InternalError`][semisched.errors.InternalError]; one in the timer or a background
   task is logged and survived. Nothing but cancellation ends the task group.

What this module is not: it validates nothing, builds no request and picks no
prior (that is [`Scheduler`][semisched.Scheduler]'s intake, `semisched.runtime.intake`),
and it decides nothing.
"""

from __future__ import annotations

import logging
import math
import time
from typing import Any

import anyio
from anyio.abc import TaskGroup

from semisched.core.actions import Action, Defer, Expire, Fail, Pause, Reject, Retry, Send, Wake
from semisched.core.budget import ProviderLimits
from semisched.core.engine import Engine
from semisched.core.explain import Explanation
from semisched.core.lifecycle import FailureKind
from semisched.errors import InternalError, RequestError
from semisched.runtime.answers import Answers
from semisched.runtime.clock import Clock, loop_time
from semisched.runtime.failures import classify_failure, decided_outcome
from semisched.runtime.layers import Answer, Configured, Stacks
from semisched.runtime.pending import Pending
from semisched.runtime.seam import Declined
from semisched.runtime.stats import RuntimeTally
from semisched.runtime.streams import ScheduledStream
from semisched.runtime.supervise import Supervisor
from semisched.runtime.timer import Timer
from semisched.telemetry.events import EventSink
from semisched.telemetry.observe import Outcome

__all__ = ["Dispatcher"]

logger = logging.getLogger("semisched.runtime")

_OUTCOMES = {Reject: Outcome.REJECTED, Expire: Outcome.EXPIRED, Fail: Outcome.FAILED}


class Dispatcher:
    """Executes an `Engine`'s actions against its endpoints.

    Args:
        engine: The core.
        configured: What the run uses; each endpoint's stack of layers is
            built from it (`Stacks`).
        clock: Time source; the engine's ``now`` comes from it (rule 2).
        tally: The runtime's counters, updated in place.
        cancel_late: Abort an attempt still in flight at its deadline.
    """

    def __init__(
        self,
        engine: Engine,
        configured: Configured,
        clock: Clock,
        tally: RuntimeTally,
        *,
        cancel_late: bool,
    ) -> None:
        self.engine = engine
        self.events = EventSink(configured.observers)  # every telemetry event goes there
        self.clock = clock
        self.tally = tally
        self.supervisor = Supervisor(tally)
        self.cancel_late = cancel_late
        self.pending: dict[str, Pending] = {}
        self._last_now = -math.inf
        self._tg: TaskGroup | None = None
        self.timer = Timer(clock, self.now, self._poll, self.execute, engine.next_wakeup,
                           self.supervisor)  # fmt: skip
        self._idle = anyio.Event()
        self.stacks = Stacks(configured, engine, now=self.now, clock_per_wall=self._clock_per_wall,
                             spawn=self._spawn, execute=self.execute, tally=tally)  # fmt: skip
        self.answers = Answers(engine, self.stacks, self.events, tally, clock,
                               cancel_late=cancel_late, now=self.now, execute=self.execute,
                               resolve=self._resolve, finished=self._finished,
                               tell_cancel=self._tell_cancel, spawn=self._spawn,
                               crashed=self._crashed, check_idle=self._check_idle)  # fmt: skip

    def __repr__(self) -> str:
        return (f"<Dispatcher pending={len(self.pending)} streams={self.answers.open_streams} "
                f"wake_at={self.timer.at}>")  # fmt: skip

    # -- what the scheduler calls ------------------------------------------------------------

    def start(self, tg: TaskGroup) -> None:
        """Run attempts and the timer in ``tg`` (the scheduler's task group)."""
        self._tg = tg
        tg.start_soon(self.timer.run)
        self.stacks.start(lambda task, name: tg.start_soon(self.supervisor.guarded(task, name)))

    @property
    def rate_limits(self) -> ProviderLimits | None:
        """What the latest rate-limit headers said (any endpoint)."""
        return self.stacks.limits.latest

    @property
    def rate_limits_by_endpoint(self) -> dict[str, ProviderLimits]:
        """What each endpoint's latest rate-limit headers said."""
        return self.stacks.limits.by_endpoint

    def now(self) -> float:
        """The clock's now, never earlier than a time already given to the engine."""
        now = self.clock.now()
        if now < self._last_now:
            return self._last_now
        self._last_now = now
        return now

    async def run(self, pending: Pending) -> Any:
        """Submit ``pending`` to the engine and wait for its resolution.

        Returns:
            The response (or stream).

        Raises:
            RequestError: The request's outcome.
        """
        self.pending[pending.id] = pending
        try:
            self.events.submitted(pending.request)
            try:
                actions = self.engine.submit(pending.request, pending.request.arrival)
            except Exception as exc:  # rule 5
                self._crashed(pending, exc)
            else:
                self.execute(actions)
            await pending.done.wait()
        except BaseException:
            if not pending.resolved:  # the caller was cancelled
                self.tally.cancelled += 1
                self.abandon(pending, None)
            elif isinstance(pending.value, ScheduledStream):  # cancelled as its stream came
                self._spawn(pending.value.aclose)
            raise
        if pending.error is not None:
            raise pending.error
        return pending.value

    async def wait_idle(self) -> None:
        """Wait until no request is pending and no stream is open."""
        while self.pending or self.answers.open_streams:
            self._idle = anyio.Event()
            await self._idle.wait()

    def abandon(self, pending: Pending, error: RequestError | None) -> None:
        """Drop a request the caller no longer waits for (``error``: resolve it with that).

        An attempt in flight is cancelled and reports to the engine itself (rule 4).
        """
        if pending.scope is not None:
            pending.scope.cancel()
        was_pending = not pending.resolved
        if was_pending:
            self.tally.closed += error is not None
            self._resolve(pending, error=error)
        if pending.attempt is None and pending.id in self.engine:
            self._tell_cancel(pending)
        if was_pending:
            self._finished(pending, Outcome.CANCELLED)

    def _tell_cancel(self, pending: Pending) -> None:
        """Report ``pending`` cancelled to the engine and execute what follows."""
        try:
            actions = self.engine.cancel(pending.id, self.now())
        except Exception as exc:  # rule 5: the engine's own bug; nothing to resolve here
            self.supervisor.task_failed(f"cancelling request {pending.id}", exc)
            return
        self.execute(actions)

    def _poll(self, at: float) -> list[Action]:
        """The engine polled at ``at``, a time it asked for (the timer's)."""
        self._last_now = max(self._last_now, at)
        return self.engine.poll(self._last_now)

    def execute(self, actions: list[Action]) -> None:
        """Do what the engine's ``actions`` say (module docstring); each one supervised."""
        for action in actions:
            try:
                self._do(action)
            except Exception as exc:  # rule 5: that action's request fails alone
                request = getattr(action, "request", None)
                pending = None if request is None else self.pending.get(request.id)
                if pending is None:
                    self.supervisor.task_failed(f"executing {type(action).__name__}", exc)
                else:
                    self._crashed(pending, exc)

    def _do(self, action: Action) -> None:
        """Do what one of the engine's actions says."""
        if isinstance(action, Send):
            pending = self.pending.get(action.request.id)
            if pending is None:  # pragma: no cover - the core sends only what the runtime holds
                self.execute(self.engine.cancel(action.request.id, self._last_now))
                raise RuntimeError(f"core sent unknown request {action.request.id!r}")
            pending.attempts = action.attempt
            pending.endpoint = action.endpoint
            self.events.sent(action, self._last_now)  # the engine's now, just given
            assert self._tg is not None, "Dispatcher.start() was not called"
            pending.attempt = token = object()  # it owns the request now (rule 4)
            try:
                self._tg.start_soon(self._attempt, pending, token)
            except BaseException:
                pending.attempt = None
                raise
        elif isinstance(action, Wake):
            self.timer.arm(action.at)
        elif isinstance(action, Retry | Defer):
            if isinstance(action, Retry):
                self.tally.retries += 1
            self.events.deferred(action, self._last_now)
        elif isinstance(action, Pause):  # the reservation layer's to share (its state's)
            self.stacks.pause(action.endpoint, action.until - self._last_now)
        elif isinstance(action, Reject | Expire | Fail):
            self._decided(action)
        else:  # pragma: no cover
            raise TypeError(f"unknown action {action!r}")

    # -- outcomes ----------------------------------------------------------------------------

    def _decided(self, action: Reject | Expire | Fail) -> None:
        """Resolve a request with the outcome the engine decided; its explanation is logged
        and observed."""
        pending = self.pending[action.request.id]
        error, counter = decided_outcome(action, request_id=pending.id, attempts=pending.attempts,
                                         failure=pending.failure, declined=pending.declined)
        setattr(self.tally, counter, getattr(self.tally, counter) + 1)
        why = error.explanation
        self.events.decided(pending.request, why)
        self._resolve(pending, error=error)
        self._finished(pending, _OUTCOMES[type(action)], explanation=why)

    def _finished(
        self,
        pending: Pending,
        outcome: Outcome,
        *,
        prompt_tokens: int | None = None,
        output_tokens: int | None = None,
        explanation: Explanation | None = None,
    ) -> None:
        self.events.finished(pending.request, self._last_now, outcome, pending.attempts,
                             pending.endpoint, prompt_tokens=prompt_tokens,
                             output_tokens=output_tokens, explanation=explanation,
                             cost_usd=pending.cost_usd)  # fmt: skip

    def _resolve(
        self,
        pending: Pending,
        *,
        value: Any = None,
        error: RequestError | None = None,
        keep_inflight: bool = False,
    ) -> None:
        if pending.resolved:
            raise RuntimeError(f"request {pending.id!r} resolved twice")
        pending.resolved = True
        pending.value, pending.error = value, error
        self.pending.pop(pending.id, None)
        pending.done.set()
        if not keep_inflight:
            self._check_idle()

    def _check_idle(self) -> None:
        if not self.pending and not self.answers.open_streams:
            self._idle.set()

    # -- one attempt -------------------------------------------------------------------------

    def _spawn(self, func: Any, *args: Any) -> None:
        """Run ``func(*args)`` in the scheduler's task group (a layer's background work)."""
        if self._tg is not None:
            where = getattr(func, "__qualname__", "a background task")
            try:
                self._tg.start_soon(self.supervisor.guarded(func, where), *args)
            except RuntimeError:  # the scheduler has closed (a stream read past its close)
                logger.debug("%s not run: the scheduler has closed", where)

    async def _attempt(self, pending: Pending, token: object) -> None:
        """One attempt; it owns ``pending`` in the engine until it reports (rules 4, 5)."""
        try:
            if not pending.resolved:  # else abandoned before this task started: never sent
                await self._call(pending)
        except Exception as exc:
            self._crashed(pending, exc)
        finally:
            if pending.attempt is token:  # it never reported: the caller gave up, or closing
                pending.attempt = None
                if pending.id in self.engine:
                    self._tell_cancel(pending)

    async def _call(self, pending: Pending) -> None:
        deadline = pending.request.deadline
        with anyio.CancelScope() as scope:
            pending.scope = scope
            if deadline is not None and self.cancel_late:
                scope.deadline = loop_time() + self.clock.to_wall(deadline - self.now())
            try:
                result = await self.stacks[pending.endpoint].send(pending)
            except Exception as exc:
                pending.attempt = None
                if pending.resolved:  # the caller is gone: nobody waits for a retry
                    self._tell_cancel(pending)
                else:
                    self._failed(pending, exc)
                return
            finally:
                pending.scope = None
        pending.attempt = None  # it reports now, synchronously (rule 4)
        if scope.cancelled_caught and not pending.resolved:  # its deadline passed in flight
            self.execute(self.engine.expire(pending.id, self.now()))
        elif scope.cancelled_caught:  # the caller gave up: the call was aborted
            self._tell_cancel(pending)
        elif isinstance(result, Answer) and pending.resolved:
            self.answers.unread(pending, result.response)
        elif isinstance(result, Answer):
            self.answers.deliver(pending, result.response)
        elif pending.resolved:  # refused by the shared state, and nobody waits any more
            self._tell_cancel(pending)
        elif isinstance(result, Declined):  # a spend cap refused it: rejected, not sent
            pending.declined = result
            reset_s = max(0.0, result.reset_at - time.time()) * self._clock_per_wall()
            self.execute(self.engine.declined(pending.id, self.now(), result.reason, reset_s))
        else:  # refused by the shared state: back in its queue, not sent
            refused = self.engine.refused(
                pending.id, result.at, result.until, fleet_wide=result.fleet_wide
            )
            self.execute(refused)

    def _crashed(self, pending: Pending, exc: Exception) -> None:
        """An unexpected exception in ``pending``'s work: it alone ends (rule 5)."""
        if pending.attempt is None and pending.id in self.engine:
            self._tell_cancel(pending)  # else the attempt that owns it reports it (rule 4)
        if pending.resolved:
            self.supervisor.task_failed(f"request {pending.id}", exc)
            return
        self.supervisor.request_failed(pending.id, pending.request.klass, exc)
        error = InternalError(f"{type(exc).__name__} inside semisched; this request alone "
                              "failed", request_id=pending.id, klass=pending.request.klass)
        error.__cause__ = exc
        self._resolve(pending, error=error)
        self._finished(pending, Outcome.INTERNAL_ERROR)

    def _failed(self, pending: Pending, exc: Exception) -> None:
        """Classify a failed attempt and execute the core's verdict on it (rule 3)."""
        failure = classify_failure(exc)
        pending.failure = (failure, exc)
        if failure.kind is FailureKind.RATE_LIMITED:
            self.tally.throttled += 1
        hint = failure.retry_after_wall_s
        retry_after = None if hint is None else hint * self._clock_per_wall()
        self.execute(self.engine.failed(pending.id, self.now(), failure.kind, retry_after))

    def _clock_per_wall(self) -> float:
        """Clock seconds per wall second (header durations are wall seconds)."""
        return 1.0 / self.clock.to_wall(1.0)
