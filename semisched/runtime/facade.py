"""The drop-in facade: ``scheduler.client`` looks like an ``AsyncOpenAI`` client.

Existing code that calls ``client.chat.completions.create(...)`` or
``client.completions.create(...)`` changes one line: use ``scheduler.client``
in its place. Every call goes through :meth:`semisched.Scheduler.submit`, so it
also accepts the scheduling hints of :class:`semisched.runtime.calls.CallArgs`.

Every other part of the wrapped client (``embeddings``, ``models``,
``responses``, ``files``, ``batches``, ...) is passed through unscheduled:
``scheduler.client.models.list()`` is the wrapped client's own call, with its
own retries, outside the scheduler's budgets and statistics. A scheduler over
several endpoints (``Scheduler(endpoints=[...])``) has no one client to pass
to: there those names raise ``AttributeError`` saying to call an endpoint's
own client.

What this module is not: it schedules only the two completion routes.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from semisched.runtime.calls import call_signature

if TYPE_CHECKING:
    from semisched.runtime.scheduler import Scheduler

__all__ = ["ScheduledClient"]


class _ScheduledCompletions:
    def __init__(self, scheduler: Scheduler, endpoint: str) -> None:
        self._scheduler = scheduler
        self._endpoint = endpoint

    @call_signature
    async def create(self, **kwargs: Any) -> Any:
        """Scheduled ``create``: same arguments, plus the scheduling hints of
        :class:`~semisched.runtime.calls.CallArgs` (``klass``, ``deadline``, ``prior``,
        ``tenant``)."""
        if self._endpoint == "chat" and "messages" not in kwargs:
            raise TypeError("chat.completions.create() needs messages=")
        if self._endpoint == "completions" and "prompt" not in kwargs:
            raise TypeError("completions.create() needs prompt=")
        return await self._scheduler.submit(**kwargs)


class _Chat:
    def __init__(self, scheduler: Scheduler) -> None:
        self.completions = _ScheduledCompletions(scheduler, "chat")


class ScheduledClient:
    """Drop-in facade: ``scheduler.client.chat.completions.create(...)`` is scheduled; any
    other attribute is the wrapped client's, unscheduled (module docstring).

    Args:
        scheduler: The scheduler the completion calls go through.
        wrapped: The client ``Scheduler(client)`` was given (``None`` for a fleet).
    """

    def __init__(self, scheduler: Scheduler, wrapped: Any = None) -> None:
        self.chat = _Chat(scheduler)
        self.completions = _ScheduledCompletions(scheduler, "completions")
        self._wrapped = wrapped

    def __getattr__(self, name: str) -> Any:
        # Only names the instance lacks get here: chat and completions never do.
        if name.startswith("_"):
            raise AttributeError(name)
        if self._wrapped is None:
            raise AttributeError(
                f"scheduler.client.{name}: a scheduler over several endpoints has no one "
                f"client to pass {name!r} to (unscheduled); call an endpoint's own client"
            )
        return getattr(self._wrapped, name)

    def __repr__(self) -> str:
        return f"<ScheduledClient of {self.chat.completions._scheduler!r}>"
