"""Virtual time for openai clients: the platform lookup made on the loop.

On its first request an ``openai`` client looks up the platform it runs on
(``get_platform``, for its ``X-Stainless-*`` headers) in a worker thread, and so does
every copy of it (``with_options``: the scheduler sends through
``with_options(max_retries=0)``, so each endpoint's copy looks up once more). Under
trio's autojumping ``MockClock`` the loop is idle while that thread runs, so the clock
jumps to the next timer: arrivals, back-offs and deadlines pass in virtual time for as
long as the thread takes in real time, and what a virtual-time run prints depends on how
busy the machine is. A warm-up request before the measured traffic removes most of it,
but not the jumps of the scheduler's own timers during the warm-up, nor a copy that the
warm-up did not reach.

`inline_platform_lookup` runs that lookup on the loop instead, for the duration: it reads
a few files under ``/etc`` and ``/proc`` at most once per client, so blocking the loop for
it costs nothing a virtual-time run can see. Every example and benchmark that runs openai
clients against the mock in virtual time wraps its run in it::

    with inline_platform_lookup():
        anyio.run(main, backend="trio", backend_options={"clock": MockClock(autojump_threshold=0)})

Real-time runs need none of this. Where the installed openai has no such lookup (its
``_base_client.asyncify``), the context manager changes nothing.
"""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

__all__ = ["inline_platform_lookup"]


def _inline(function: Callable[..., Any]) -> Callable[..., Awaitable[Any]]:
    """``asyncify`` that calls ``function`` on the loop (no worker thread)."""

    async def call(*args: Any, **kwargs: Any) -> Any:
        return function(*args, **kwargs)

    return call


@contextlib.contextmanager
def inline_platform_lookup() -> Iterator[None]:
    """Run openai's platform lookup on the loop, not in a worker thread, for the duration."""
    from openai import _base_client

    saved = getattr(_base_client, "asyncify", None)
    if saved is None:  # an openai without the threaded lookup: nothing to change
        yield
        return
    _base_client.asyncify = _inline  # type: ignore[attr-defined]
    try:
        yield
    finally:
        _base_client.asyncify = saved  # type: ignore[attr-defined]
