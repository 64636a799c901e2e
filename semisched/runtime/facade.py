"""The drop-in facade: ``scheduler.client`` looks like an ``AsyncOpenAI`` client.

Existing code that calls ``client.chat.completions.create(...)``,
``client.completions.create(...)``, ``client.responses.create(...)`` or
``client.embeddings.create(...)`` changes one line: use ``scheduler.client`` in
its place. Every such call goes through `semisched.Scheduler.submit` (the
scheduled APIs are those of `semisched.runtime.apis.APIS`), so it also
accepts the scheduling hints of `semisched.runtime.callargs.CallArgs`.

Every other part of the wrapped client (``models``, ``files``, ``batches``,
``audio``, ``images``, ``chat.completions.parse``, ``responses.retrieve``, ...)
is passed through unscheduled: ``scheduler.client.models.list()`` is the
wrapped client's own call, with its own retries, outside the scheduler's order
and concurrency. A call of the ``openai`` client's resources that answers with a
``usage`` block still spends the key's tokens: those tokens are counted against
the scheduler's rate budgets (`semisched.Scheduler.spent`), so the budget
stays true, and the first such call of each name warns once, naming it. A
scheduler over several endpoints (``Scheduler(endpoints=[...])``) has no one
client to pass to: there those names raise ``AttributeError`` saying to call an
endpoint's own client.

What this module is not: it validates no argument and sends nothing itself.
"""

from __future__ import annotations

import functools
import inspect
import warnings
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from semisched.runtime.apis import APIS, ApiSpec
from semisched.runtime.callargs import call_signature

if TYPE_CHECKING:
    from semisched.runtime.scheduler import Scheduler

__all__ = ["ScheduledClient"]

#: Where each scheduled API's ``create`` lives on the facade.
_SCHEDULED: dict[tuple[str, ...], ApiSpec] = {spec.resource: spec for spec in APIS.values()}
#: Every path on the way to one (``("chat",)`` leads to ``chat.completions``).
_PREFIXES = {spec.resource[:i] for spec in APIS.values() for i in range(1, len(spec.resource))}


class _Create:
    """The scheduled ``create`` of one API."""

    def __init__(self, scheduler: Scheduler, spec: ApiSpec) -> None:
        self._scheduler = scheduler
        self._spec = spec

    @call_signature
    async def __call__(self, **kwargs: Any) -> Any:
        """Scheduled ``create``: the API's own arguments, plus the scheduling hints of
        `CallArgs` (``klass``, ``deadline``, ``prior``,
        ``tenant``)."""
        spec = self._spec
        if spec.prompt_field not in kwargs:
            raise TypeError(f"{spec.call_name}() needs {spec.prompt_field}=")
        return await self._scheduler.submit(api=spec.name, **kwargs)


class _Node:
    """One attribute path of the facade (``chat``, ``chat.completions``): the scheduled
    ``create`` where an API lives; any other name is the wrapped client's, counted."""

    def __init__(self, client: ScheduledClient, path: tuple[str, ...]) -> None:
        self._client = client
        self._path = path
        spec = _SCHEDULED.get(path)
        if spec is not None:
            self.create = _Create(client._scheduler, spec)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        child = self._client._child(self._path, name)
        if isinstance(child, _Node):
            setattr(self, name, child)  # on the way to a scheduled API: built once
        return child

    def __repr__(self) -> str:
        return f"<scheduler.client.{'.'.join(self._path)}>"


class ScheduledClient:
    """Drop-in facade: the ``create`` of every scheduled API is scheduled; any other
    attribute is the wrapped client's, unscheduled, its tokens counted (module docstring).

    Args:
        scheduler: The scheduler the scheduled calls go through.
        wrapped: The client ``Scheduler(client)`` was given (``None`` for a fleet).
    """

    def __init__(self, scheduler: Scheduler, wrapped: Any = None) -> None:
        self._scheduler = scheduler
        self._wrapped = wrapped
        self._warned: set[str] = set()
        for path in sorted(_PREFIXES | set(_SCHEDULED), key=len):
            if len(path) == 1:
                setattr(self, path[0], _Node(self, path))

    def __getattr__(self, name: str) -> Any:
        # Only names the instance lacks get here: the scheduled APIs' never do.
        if name.startswith("_"):
            raise AttributeError(name)
        return self._child((), name)

    def __repr__(self) -> str:
        return f"<ScheduledClient of {self._scheduler!r}>"

    def _child(self, path: tuple[str, ...], name: str) -> Any:
        """``name`` under ``path``: a facade node on the way to a scheduled API, else the
        wrapped client's own attribute (its calls counted: `_counted`)."""
        full = (*path, name)
        if full in _SCHEDULED or full in _PREFIXES:
            return _Node(self, full)
        if self._wrapped is None:
            raise AttributeError(
                f"scheduler.client.{'.'.join(full)}: a scheduler over several endpoints has "
                f"no one client to pass {name!r} to (unscheduled); call an endpoint's own client"
            )
        found: Any = self._wrapped
        for part in full:
            found = getattr(found, part)
        return self._counted(found, full)

    def _counted(self, value: Any, path: tuple[str, ...]) -> Any:
        """The wrapped client's ``value`` at ``path``: a resource of the ``openai`` client
        is wrapped so that its calls' usage is counted; anything else as it is."""
        if callable(value) and not isinstance(value, type):
            return self._counting(value, path)
        if type(value).__module__.startswith("openai.resources"):
            return _Passthrough(self, value, path)
        return value

    def _counting(self, call: Callable[..., Any], path: tuple[str, ...]) -> Callable[..., Any]:
        @functools.wraps(call)
        def counted(*args: Any, **kwargs: Any) -> Any:
            result = call(*args, **kwargs)
            if inspect.isawaitable(result):
                return self._settle_later(result, path)
            self._spent(result, path)
            return result

        return counted

    async def _settle_later(self, result: Any, path: tuple[str, ...]) -> Any:
        answer = await result
        self._spent(answer, path)
        return answer

    def _spent(self, answer: Any, path: tuple[str, ...]) -> None:
        tokens = _usage_tokens(answer)
        if tokens is None:
            return
        name = ".".join(path)
        if name not in self._warned:
            self._warned.add(name)
            warnings.warn(
                f"scheduler.client.{name}() is not scheduled: it is sent at once, and its "
                f"{tokens} tokens are counted against the rate budget from its usage",
                stacklevel=4,
            )
        self._scheduler.spent(tokens)


class _Passthrough:
    """A resource of the wrapped ``openai`` client, its calls counted."""

    def __init__(self, client: ScheduledClient, inner: Any, path: tuple[str, ...]) -> None:
        self._client = client
        self._inner = inner
        self._path = path

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        return self._client._counted(getattr(self._inner, name), (*self._path, name))

    def __repr__(self) -> str:
        return f"<scheduler.client.{'.'.join(self._path)} (unscheduled): {self._inner!r}>"


def _usage_tokens(answer: Any) -> int | None:
    """The tokens an answer's ``usage`` block counts (``None``: it has none)."""
    usage = getattr(answer, "usage", None)
    if usage is None:
        return None
    total = getattr(usage, "total_tokens", None)
    if isinstance(total, int) and not isinstance(total, bool):
        return total
    parts = [getattr(usage, name, None) for name in
             ("prompt_tokens", "completion_tokens", "input_tokens", "output_tokens")]  # fmt: skip
    counted = [p for p in parts if isinstance(p, int) and not isinstance(p, bool)]
    return sum(counted) if counted else None
