"""One call's shape: its arguments as a caller writes them, and as validated.

`CallArgs` is the one definition of the per-call signature: ``Scheduler.submit``,
``Scheduler.check``, the facade's ``create`` and
`semisched.runtime.calls.prepare_call` take exactly its fields, plus provider
``**params``; `call_signature` gives a ``**call`` method that signature.
`PreparedCall` is what `prepare_call` returns: a validated call, its provider
arguments split from the scheduler's, before it becomes a core request.

What this module is not: it validates nothing (`semisched.runtime.calls` does, by
its rules), reads no clock and asks no prior source.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, fields
from typing import Any, Final, TypeVar

from semisched.core.request import Prior
from semisched.priors.sources import PriorQuery
from semisched.runtime.apis import APIS, ApiSpec
from semisched.runtime.estimate import TokenEstimator

__all__ = [
    "NAMED_ARGS",
    "SCHEDULER_ARGS",
    "Api",
    "CallArgs",
    "PreparedCall",
    "call_signature",
]


R = TypeVar("R")

#: Which scheduled API a call uses: a name in `APIS`.
Api = str


@dataclass(frozen=True, slots=True, kw_only=True)
class PreparedCall:
    """A validated call, before it becomes a core request.

    Attributes:
        api: The scheduled API's name (`APIS`):
            ``"chat"`` (``messages``), ``"completions"`` (``prompt``),
            ``"responses"`` or ``"embeddings"`` (``input``).
        params: Exactly what goes to the provider's ``create``: the caller's
            provider arguments plus ``model`` and ``messages``/``prompt``, and
            ``stream_options.include_usage`` when semisched added it (read-only).
        klass: The requested scheduling class, or ``None`` (chosen from the prior).
        deadline_s: Seconds from submission, or ``None``.
        prior: The caller's own prior, or ``None`` (a prior source answers).
        added_usage: semisched asked for ``include_usage`` on a stream; the
            usage-only final chunk is hidden from the caller.
        prompt_nbytes: UTF-8 bytes of the prompt text (for the token estimate).
        prompt_kind: Content kind of the prompt (``prose``, ``code``, ``cjk``).
        output_cap: The call's output cap (`semisched.runtime.calls` rule 3), or
            ``None``.
        tenant: The tenant it is sent for: the declared tenant it names, or
            the default tenant when it names none; when no tenants were
            given to check it against, the name as given (``""``: none).
        prompt_tokens: The prompt's exact tokens when it is given as token ids
            (embeddings), else ``None`` (estimated from its bytes).
    """

    api: Api
    params: Mapping[str, Any]
    klass: str | None
    deadline_s: float | None
    prior: Prior | None
    added_usage: bool
    prompt_nbytes: int
    prompt_kind: str
    output_cap: int | None
    tenant: str = ""
    prompt_tokens: int | None = None

    @property
    def spec(self) -> ApiSpec:
        """The scheduled API it calls."""
        return APIS[self.api]

    def input_tokens(self, estimator: TokenEstimator) -> float:
        """Its prompt's tokens: counted when given as token ids, else ``estimator``'s
        estimate from its bytes."""
        if self.prompt_tokens is not None:
            return float(self.prompt_tokens)
        return estimator.estimate(self.model, self.prompt_kind, self.prompt_nbytes)

    @property
    def model(self) -> str:
        """The provider model name."""
        model: str = self.params["model"]
        return model

    @property
    def stream(self) -> bool:
        """Whether the caller asked for a streamed response."""
        return bool(self.params.get("stream", False))

    def prior_query(self, request_id: str) -> PriorQuery:
        """What a prior source sees for this call: its messages (chat messages, or a
        Responses input's items), else its text prompt."""
        value = self.params.get(self.spec.prompt_field)
        items = isinstance(value, list | tuple) and all(isinstance(v, Mapping) for v in value)
        return PriorQuery(
            request_id=request_id,
            messages=tuple(value) if items and value else None,
            prompt=value if isinstance(value, str) else None,
            max_tokens=self.output_cap,
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class CallArgs:
    """One call's arguments as a caller writes them: the one definition of the per-call
    signature (``Scheduler.submit``, ``Scheduler.check``, the facade's ``create`` and
    `prepare_call` all take exactly these, plus provider ``**params``).

    Adding a scheduling hint is adding a field here.

    Attributes:
        model: Provider model name.
        messages: Chat messages (chat completions).
        prompt: Prompt (completions).
        input: Input (the Responses API: a string or a list of input items;
            embeddings: a string, a list of strings or of token ids).
        api: The scheduled API (`APIS`); ``None``:
            the one the prompt argument names (``input``: the Responses API).
        klass: Scheduling class; default ``interactive`` for short priors, else
            the batch class.
        deadline: Seconds from now (on the scheduler's clock) after which the
            answer is useless: a finite number in ``(0, 1e8]``
            (`semisched.runtime.calls.MAX_DEADLINE_S`); ``None``: no deadline.
        prior: Output-length prior (a [`Prior`][semisched.core.Prior] or
            ``(p50, p90)`` output tokens, ``1 <= p50 <= p90 <= 10**8``:
            `semisched.runtime.calls.MAX_OUTPUT_TOKENS`); default from the
            scheduler's prior source.
        tenant: The declared tenant it is sent for (and charged to); ``None``:
            the default tenant. An undeclared name raises ``ValueError``.
        params: Passed to the provider unchanged (``max_completion_tokens``,
            ``max_tokens``, ``temperature``, ``stream``, ``extra_headers``, ...);
            an output cap is an int in ``[1, 10**8]``
            (`semisched.runtime.calls.MAX_OUTPUT_TOKENS`).
    """

    model: str
    messages: Sequence[Mapping[str, Any]] | None = None
    prompt: Any = None
    input: Any = None
    api: str | None = None
    klass: str | None = None
    deadline: float | None = None
    prior: Prior | tuple[float, float] | None = None
    tenant: str | None = None
    params: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def of(cls, kwargs: Mapping[str, Any]) -> CallArgs:
        """Split a call's keyword arguments into the named ones and the provider's.

        Raises:
            TypeError: ``model`` missing.
        """
        named = {k: v for k, v in kwargs.items() if k in NAMED_ARGS}
        params = {k: v for k, v in kwargs.items() if k not in NAMED_ARGS}
        if "model" not in named:
            raise TypeError("missing required keyword argument: 'model'")
        return cls(**named, params=params)


#: The fields of `CallArgs` a caller names (everything but ``params``).
NAMED_ARGS: Final = frozenset(f.name for f in fields(CallArgs)) - {"params"}
#: Keyword arguments that belong to the scheduler and never reach the provider.
SCHEDULER_ARGS: Final = NAMED_ARGS - {"model", "messages", "prompt", "input"}


def call_signature(func: Callable[..., R]) -> Callable[..., R]:
    """Give ``func(self, **call)`` the signature of `CallArgs` (for ``help()``
    and editors); the arguments themselves are read with `CallArgs.of`."""
    own = inspect.signature(func)
    keyword = inspect.Parameter.KEYWORD_ONLY
    params = [p for p in own.parameters.values() if p.kind is not p.VAR_KEYWORD]
    for f in fields(CallArgs):
        if f.name == "params":
            continue
        default = inspect.Parameter.empty if f.name == "model" else f.default
        params.append(inspect.Parameter(f.name, keyword, default=default, annotation=f.type))
    params.append(inspect.Parameter("params", inspect.Parameter.VAR_KEYWORD, annotation="Any"))
    func.__signature__ = own.replace(parameters=params)  # type: ignore[attr-defined]
    return func
