"""The ``semisched batch`` run's client: built from the environment, and timed per attempt.

:func:`make_client` builds the ``AsyncOpenAI`` a run sends through; the API
key comes from the environment variable the options name and goes nowhere
else. :class:`TimedClient` wraps a client the way the scheduler calls it, to
time each successful attempt (see the note below).

What this module is not: it schedules and retries nothing.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from semisched.batch.input import BatchError
from semisched.clock import Clock

if TYPE_CHECKING:
    from semisched.batch.options import BatchOptions

__all__ = ["TimedClient", "make_client"]


def make_client(options: BatchOptions) -> Any:
    """An ``AsyncOpenAI`` for the job; the key comes from the environment only.

    Raises:
        BatchError: The API key variable is not set.
    """
    import openai

    key = os.environ.get(options.api_key_env)
    if not key:
        raise BatchError(
            f"the API key variable {options.api_key_env} is not set (set it, or name another "
            "variable with --api-key-env)"
        )
    return openai.AsyncOpenAI(
        base_url=options.base_url,
        api_key=key,
        max_retries=0,
        timeout=options.request_timeout_s / options.time_scale,
    )


# -- call latency -------------------------------------------------------------------------
#
# The summary and ``python -m bench batch`` report call latency (send -> response
# of each successful attempt, the fixed-rate baseline's definition), not the time
# a request waited in the scheduler. The runtime measures exactly that for its
# own signals (the engine's ``completed`` minus the request's latest send) but
# hands callers only the provider's response and aggregate statistics, so the
# batch times the attempt at the client it wraps.


class _TimedRaw:
    def __init__(self, raw: Any, clock: Clock, sink: list[float]) -> None:
        self._raw = raw
        self._clock = clock
        self._sink = sink

    async def create(self, **params: Any) -> Any:
        start = self._clock.now()
        result = await self._raw.create(**params)
        self._sink.append(self._clock.now() - start)
        return result


class _TimedCompletions:
    def __init__(self, target: Any, clock: Clock, sink: list[float]) -> None:
        self.create = target.create  # the scheduler reads the accepted names off its signature
        self.with_raw_response = _TimedRaw(target.with_raw_response, clock, sink)


class _TimedChat:
    def __init__(self, completions: _TimedCompletions) -> None:
        self.completions = completions


class TimedClient:
    """An ``AsyncOpenAI`` as the scheduler calls it (``with_raw_response.create``),
    timing each successful attempt (send -> response, clock seconds) into ``sink``.

    The wrapped client's own retries are turned off here: the wrapper hides
    ``with_options``, through which the scheduler would do it.
    """

    def __init__(self, client: Any, clock: Clock, sink: list[float]) -> None:
        with_options = getattr(client, "with_options", None)
        client = with_options(max_retries=0) if callable(with_options) else client
        self.chat = _TimedChat(_TimedCompletions(client.chat.completions, clock, sink))
        self.completions = _TimedCompletions(client.completions, clock, sink)
