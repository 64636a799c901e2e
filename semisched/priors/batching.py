"""Priors for the runtime: ask the configured source, fall back when it is slow or fails.

A plain [`PriorSource`][semisched.priors.sources.PriorSource] (a heuristic, a table) is
called inline. A model-backed [`BatchPriorSource`][semisched.priors.sources.BatchPriorSource] is
blocking, so it never runs on the event loop: queries are micro-batched (up
to ``max_batch``, waiting at most ``max_wait_s`` for companions) and each
batch runs in one worker thread at a time. A caller waits at most
``timeout_s`` (event-loop seconds) for its answer; on timeout or on an error
of the source the fallback source answers, and the caller is told so it can
count it.

What this module is not: it does not pick a class or build a request, and a
slow model never stalls scheduling (a timed-out batch still finishes in its
thread; its answers are dropped).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import anyio
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

from semisched.core.request import Prior
from semisched.priors.sources import BatchPriorSource, PriorQuery, PriorSource

__all__ = ["PriorResolver"]

_Slot = list[Prior | BaseException]
_Query = tuple[PriorQuery, _Slot, anyio.Event]


class PriorResolver:
    """Answers prior queries from ``source``, or from ``fallback`` on timeout or error.

    With a batch source, the owner calls `open`, runs `run` in
    its task group and ends it with `close` (the scheduler does).
    """

    def __init__(
        self,
        source: PriorSource,
        fallback: PriorSource,
        *,
        timeout_s: float,
        max_batch: int = 32,
        max_wait_s: float = 0.002,
    ) -> None:
        if not (math.isfinite(timeout_s) and timeout_s > 0):
            raise ValueError(f"timeout_s={timeout_s!r} must be a finite number > 0")
        self.source = source
        self.fallback = fallback
        self.timeout_s = timeout_s
        self.max_batch = max_batch
        self.max_wait_s = max_wait_s
        self.batched = isinstance(source, BatchPriorSource)
        self._send: MemoryObjectSendStream[_Query] | None = None
        self._receive: MemoryObjectReceiveStream[_Query] | None = None
        self._limiter = anyio.CapacityLimiter(1)

    def with_source(self, source: PriorSource) -> PriorResolver:
        """A resolver like this one over ``source`` (before `open`)."""
        if self._send is not None:
            raise RuntimeError("the PriorResolver is already open")
        return PriorResolver(
            source,
            self.fallback,
            timeout_s=self.timeout_s,
            max_batch=self.max_batch,
            max_wait_s=self.max_wait_s,
        )

    def __repr__(self) -> str:
        mode = "batched" if self.batched else "inline"
        return f"<PriorResolver {self.source.name} {mode} fallback={self.fallback.name}>"

    async def resolve(self, query: PriorQuery) -> tuple[Prior, bool]:
        """The prior for ``query`` and whether the fallback gave it."""
        if not self.batched:
            try:
                return self.source.prior(query), False
            except Exception:  # a broken source falls back; it never fails the call
                return self.fallback.prior(query), True
        slot: _Slot = []
        event = anyio.Event()
        try:
            if self._send is None:
                raise anyio.ClosedResourceError
            await self._send.send((query, slot, event))
        except anyio.ClosedResourceError:  # not open (yet, or any more)
            return self.fallback.prior(query), True
        with anyio.move_on_after(self.timeout_s):
            await event.wait()
        if slot and isinstance(slot[0], Prior):
            return slot[0], False
        return self.fallback.prior(query), True

    def open(self) -> None:
        """Start taking queries (a batch source only); `run` serves them."""
        if self._send is not None:
            raise RuntimeError("the PriorResolver is already open")
        self._send, self._receive = anyio.create_memory_object_stream[_Query](math.inf)

    async def run(self) -> None:
        """Serve batches until `close` (a batch source, after `open`)."""
        source, receive = self.source, self._receive
        assert isinstance(source, BatchPriorSource) and receive is not None, "call open() first"
        async with receive:
            async for first in receive:
                batch = [first]
                with anyio.move_on_after(self.max_wait_s):
                    while len(batch) < self.max_batch:
                        batch.append(await receive.receive())
                queries = [q for q, _, _ in batch]
                try:
                    priors: Sequence[Prior | BaseException] = await anyio.to_thread.run_sync(
                        source.prior_batch, queries, limiter=self._limiter
                    )
                    if len(priors) != len(queries):
                        raise ValueError("prior_batch returned a wrong number of priors")
                except Exception as exc:  # the callers fall back; never kill the runtime
                    priors = [exc] * len(queries)
                for (_, slot, event), prior in zip(batch, priors, strict=True):
                    slot.append(prior)
                    event.set()

    def close(self) -> None:
        """Stop taking queries; `run` returns once the queue is drained."""
        if self._send is not None:
            self._send.close()
