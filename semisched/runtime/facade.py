"""The drop-in facade: ``scheduler.client`` looks like an ``AsyncOpenAI`` client.

Existing code that calls ``client.chat.completions.create(...)`` or
``client.completions.create(...)`` changes one line: use ``scheduler.client``
in its place. Every call goes through :meth:`semisched.Scheduler.submit`, so it
also accepts the scheduling hints of :class:`semisched.runtime.calls.CallArgs`.

What this module is not: no other part of the OpenAI client (files, batches,
embeddings, ``with_raw_response``) is wrapped.
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
    """Drop-in facade: ``scheduler.client.chat.completions.create(...)`` is scheduled."""

    def __init__(self, scheduler: Scheduler) -> None:
        self.chat = _Chat(scheduler)
        self.completions = _ScheduledCompletions(scheduler, "completions")

    def __repr__(self) -> str:
        return f"<ScheduledClient of {self.chat.completions._scheduler!r}>"
