"""The ``semisched batch`` run's clients: built from the environment, and timed per attempt.

`make_client` builds the ``AsyncOpenAI`` a one-endpoint run
(``--base-url``) sends through; `make_endpoints` builds a fleet's
endpoints (``--endpoint``, ``--fleet``), one client each
(`semisched.fleet.fleetfile.build_endpoints`). API keys come from the
environment variables the options name and go nowhere else; a missing one
is a `BatchError` naming the variable, never showing a key.
`TimedClient` wraps a client the way the scheduler calls it, to time
each successful attempt (see the note below).

What this module is not: it schedules and retries nothing.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from semisched.batch.input import BatchError
from semisched.fleet.fleetfile import FleetFileError, build_endpoints
from semisched.runtime.apis import APIS
from semisched.runtime.clock import Clock

if TYPE_CHECKING:
    from semisched.batch.options import BatchOptions
    from semisched.fleet.endpoints import Endpoint

__all__ = [
    "ClientFactory",
    "TimedClient",
    "connect",
    "make_client",
    "make_endpoints",
    "openai_factory",
]

#: ``factory(base_url, api_key)`` -> an OpenAI-compatible async client.
ClientFactory = Callable[[str, str], Any]


def make_client(options: BatchOptions, *, factory: ClientFactory | None = None) -> Any:
    """The client of a one-endpoint job (``base_url``); the key comes from the environment only.

    Args:
        options: A job with ``base_url``.
        factory: Makes the client from the base URL and key (default:
            ``AsyncOpenAI`` with the job's timeout, no retries of its own).

    Raises:
        BatchError: The API key variable is not set.
    """
    key = os.environ.get(options.api_key_env)
    if not key:
        raise BatchError(
            f"the API key variable {options.api_key_env} is not set (set it, or name another "
            "variable with --api-key-env)"
        )
    assert options.base_url is not None, "a fleet's clients come from make_endpoints"
    make = openai_factory(options) if factory is None else factory
    return make(options.base_url, key)


def openai_factory(options: BatchOptions) -> ClientFactory:
    """``AsyncOpenAI`` clients with the job's timeout and no retries of their own."""
    import openai

    timeout = options.request_timeout_s / options.time_scale

    def make(base_url: str, api_key: str) -> Any:
        return openai.AsyncOpenAI(
            base_url=base_url, api_key=api_key, max_retries=0, timeout=timeout
        )

    return make


def make_endpoints(
    options: BatchOptions,
    *,
    wrap: Callable[[Any], Any] | None = None,
    factory: ClientFactory | None = None,
) -> list[Endpoint]:
    """The fleet's endpoints, each with its own client; keys from the environment only.

    Args:
        options: A job with ``endpoints``.
        wrap: Applied to each endpoint's client (the run's `TimedClient`).
        factory: Makes each client from its base URL and key (default:
            ``AsyncOpenAI`` with the job's timeout, no retries of its own).

    Raises:
        BatchError: An endpoint's key variable is not set (naming the endpoint
            and the variable, every one that is missing).
    """
    make = openai_factory(options) if factory is None else factory

    def client(base_url: str, api_key: str) -> Any:
        made = make(base_url, api_key)
        return made if wrap is None else wrap(made)

    try:
        return build_endpoints(
            options.endpoints, default_key_env=options.api_key_env, make_client=client
        )
    except FleetFileError as exc:
        raise BatchError(
            f"{exc} (set the variable, or name another: key-env=VAR in --endpoint, key_env in "
            "the fleet file, or --api-key-env for every endpoint without one)"
        ) from None


def connect(
    options: BatchOptions,
    *,
    clock: Clock,
    sink: list[float],
    client: Any | None = None,
    factory: ClientFactory | None = None,
) -> Any | list[Endpoint]:
    """What a run sends through, each client a `TimedClient` into ``sink``: the one
    client of a ``base_url`` job (``client``, else made), or a fleet's endpoints.

    Raises:
        BatchError: An API key variable is not set.
    """

    def timed(made: Any) -> TimedClient:
        return TimedClient(made, clock, sink)

    if options.fleet:
        return make_endpoints(options, wrap=timed, factory=factory)
    return timed(client if client is not None else make_client(options, factory=factory))


# -- call latency -------------------------------------------------------------------------
#
# The summary and ``python -m bench batch`` report call latency (send -> response
# of each successful attempt, the fixed-rate baseline's definition), not the time
# a request waited in the scheduler. The runtime measures exactly that for its
# own signals (the engine's ``completed`` minus the request's latest send) but
# hands callers only the provider's response and aggregate statistics, so the
# batch times the attempt at the client it wraps.


#: Where the first failed connection to each URL is said at once (WARNING: without a
#: logging set-up, Python prints it on stderr), while the scheduler retries; the summary
#: repeats it as a hint when the requests end failed.
LOG = logging.getLogger("semisched.batch")
_SAID: set[str] = set()  # the URLs already said, once per process


def _say_unreachable(exc: BaseException) -> None:
    import openai

    from semisched.core.lifecycle import FailureKind
    from semisched.runtime.failures import failure_hint

    if not isinstance(exc, openai.APIConnectionError) or isinstance(exc, openai.APITimeoutError):
        return
    hint = failure_hint(exc, FailureKind.CONNECTION, None)
    if hint is not None and hint not in _SAID:
        _SAID.add(hint)
        LOG.warning("hint: %s (is the server running?); retrying", hint)


class _TimedRaw:
    def __init__(self, raw: Any, clock: Clock, sink: list[float]) -> None:
        self._raw = raw
        self._clock = clock
        self._sink = sink

    async def create(self, **params: Any) -> Any:
        start = self._clock.now()
        try:
            result = await self._raw.create(**params)
        except Exception as exc:
            _say_unreachable(exc)
            raise
        self._sink.append(self._clock.now() - start)
        return result


class _TimedCompletions:
    def __init__(self, target: Any, clock: Clock, sink: list[float]) -> None:
        self.create = target.create  # the scheduler reads the accepted names off its signature
        self.with_raw_response = _TimedRaw(target.with_raw_response, clock, sink)


class _Namespace:
    """A step on the way to a resource (``chat`` of ``chat.completions``)."""


class TimedClient:
    """An ``AsyncOpenAI`` as the scheduler calls it (``with_raw_response.create``),
    timing each successful attempt (send -> response, clock seconds) into ``sink``:
    the resource of every scheduled API the client has (`APIS`).

    The wrapped client's own retries are turned off here: the wrapper hides
    ``with_options``, through which the scheduler would do it.
    """

    def __init__(self, client: Any, clock: Clock, sink: list[float]) -> None:
        with_options = getattr(client, "with_options", None)
        client = with_options(max_retries=0) if callable(with_options) else client
        for spec in APIS.values():
            target = spec.target(client)
            if target is None:  # an openai too old for it: the scheduler says so if asked
                continue
            parent: Any = self
            for name in spec.resource[:-1]:
                if not hasattr(parent, name):
                    setattr(parent, name, _Namespace())
                parent = getattr(parent, name)
            setattr(parent, spec.resource[-1], _TimedCompletions(target, clock, sink))
