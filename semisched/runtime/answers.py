"""What an attempt's answer becomes, once the provider has given it.

The `Dispatcher` runs each attempt; when the attempt comes back with an answer
(`semisched.runtime.seam.Answer`), `Answers` does the rest with it:

- a response is settled: its ``usage`` told to the endpoint's layers and to the
  engine (``completed``, with what the provider's token window charged), then
  handed to the caller;
- a stream is handed to the caller as a `ScheduledStream` and counted open until
  it ends: its first token goes to the engine and the observers, its end to the
  layers and to the engine (``completed``, or ``cancel`` when the caller stopped
  reading);
- an answer whose caller is gone is accounted and closed, never handed over (the
  dispatcher's rule 4): a response is settled, a stream is closed unread and
  reported as ``cancel``.

The rules cited here are the dispatcher's (`semisched.runtime.dispatch`).

What this module is not: it sends nothing, resolves a caller only through the
dispatcher, and decides nothing (what follows is in the engine's actions).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from semisched.core.actions import Action
from semisched.core.engine import Engine
from semisched.runtime.clock import Clock
from semisched.runtime.layers import Ended, Stacks
from semisched.runtime.pending import Pending
from semisched.runtime.provider import Usage, usage_of
from semisched.runtime.stats import RuntimeTally
from semisched.runtime.streams import ScheduledStream
from semisched.telemetry.events import EventSink
from semisched.telemetry.observe import Outcome

__all__ = ["Answers"]


class Answers:
    """What each answer becomes (module docstring), for one dispatcher.

    Args:
        engine: The core, told each answer's usage, a stream's first token and end.
        stacks: Each endpoint's stack of layers, told when an answer ends.
        events: The telemetry sink (a stream's first token).
        tally: The runtime's counters, updated in place.
        clock: The scheduler's clock (a stream's wall time to its deadline).
        cancel_late: A stream stops at its request's deadline, as a call in flight does.
        now: The dispatcher's now (never earlier than a time given to the engine).
        execute: Executes the engine's actions.
        resolve: Resolves a caller, once (the dispatcher's rule 1).
        finished: Tells the telemetry how a request ended.
        tell_cancel: Reports a request cancelled to the engine.
        spawn: Runs a coroutine function in the scheduler's task group.
        crashed: Ends a request whose work raised, alone (the dispatcher's rule 5).
        check_idle: Wakes whoever waits for no request pending and no stream open.

    Attributes:
        open_streams: Streams handed to callers and not yet ended.
    """

    def __init__(
        self,
        engine: Engine,
        stacks: Stacks,
        events: EventSink,
        tally: RuntimeTally,
        clock: Clock,
        *,
        cancel_late: bool,
        now: Callable[[], float],
        execute: Callable[[list[Action]], None],
        resolve: Callable[..., None],
        finished: Callable[..., None],
        tell_cancel: Callable[[Pending], None],
        spawn: Callable[..., None],
        crashed: Callable[[Pending, Exception], None],
        check_idle: Callable[[], None],
    ) -> None:
        self.engine = engine
        self.stacks = stacks
        self.events = events
        self.tally = tally
        self.clock = clock
        self.cancel_late = cancel_late
        self.now = now
        self.execute = execute
        self._resolve = resolve
        self._finished = finished
        self._tell_cancel = tell_cancel
        self._spawn = spawn
        self._crashed = crashed
        self._check_idle = check_idle
        self.open_streams = 0

    def __repr__(self) -> str:
        return f"<Answers open_streams={self.open_streams}>"

    def deliver(self, pending: Pending, response: Any) -> None:
        """Hand ``response`` to its caller: a response settled first, a stream counted
        open until it ends."""
        call = pending.call
        self.tally.succeeded += 1
        if call.stream:
            self.open_streams += 1
            request, events = pending.request, self.events

            def first() -> None:  # a learned concurrency limit reads its wait; observers see it
                now = self.now()
                self.engine.first_token(request.id, now)
                events.first_token(request, now)

            stream = ScheduledStream(
                response, api=call.spec,
                hide_usage=call.added_usage,
                on_end=lambda tokens, complete: self._stream_ended(pending, tokens, complete),
                on_first=first,
                request=pending.request,
                wall_left_s=None if pending.request.deadline is None or not self.cancel_late
                else self.clock.to_wall(pending.request.deadline - self.now()),
            )
            self._resolve(pending, value=stream, keep_inflight=True)
            return
        usage = self._settle(pending, response)
        self._resolve(pending, value=response)
        if usage.known:
            self._finished(pending, Outcome.COMPLETED, prompt_tokens=usage.prompt_tokens,
                           output_tokens=usage.output_tokens)  # fmt: skip
        else:
            self._finished(pending, Outcome.COMPLETED)

    def _settle(self, pending: Pending, response: Any) -> Usage:
        """An answer's usage, told to the endpoint's layers and the engine (``completed``)."""
        usage = usage_of(response, pending.call.api)
        charged = None
        if usage.known:  # what the provider's token window charged: prompt + the cap
            cap = pending.call.output_cap
            charged = usage.prompt_tokens + (cap if cap is not None else usage.output_tokens)
        output = usage.output_tokens if usage.known else None
        end = Ended(True, usage.prompt_tokens, output, charged, usage.cached_tokens)
        self.stacks[pending.endpoint].ended(pending, end)
        actions = self.engine.completed(
            pending.id, self.now(), output_tokens=usage.output_tokens, charged_tokens=charged
        )
        self.execute(actions)
        return usage

    def unread(self, pending: Pending, response: Any) -> None:
        """An answer for a request whose caller is gone: accounted, closed, never handed
        over (rule 4)."""
        if not pending.call.stream:
            self._settle(pending, response)
            return
        # Its tokens are unknown until read; closing it stops the provider generating more.
        self.stacks[pending.endpoint].ended(pending, Ended(False, 0, None))
        self._tell_cancel(pending)
        stream = ScheduledStream(response, hide_usage=True, on_end=lambda *_: None,
                                 api=pending.call.spec)  # fmt: skip
        self._spawn(stream.aclose)

    def _stream_ended(self, pending: Pending, tokens: int | None, complete: bool) -> None:
        self.open_streams -= 1
        try:
            end = Ended(complete, 0, tokens if complete else None)
            self.stacks[pending.endpoint].ended(pending, end)
            now = self.now()
            if pending.id not in self.engine:  # already told: a failure there (rule 5)
                return
            if complete:
                self.execute(self.engine.completed(pending.id, now, output_tokens=tokens or 0))
                self._finished(pending, Outcome.COMPLETED, output_tokens=tokens)
            else:
                self.execute(self.engine.cancel(pending.id, now))
                self._finished(pending, Outcome.CANCELLED)
        except Exception as exc:  # rule 5: the caller's stream is not the place to raise it
            self._crashed(pending, exc)
        finally:
            self._check_idle()
