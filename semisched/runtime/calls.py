"""Preparing one call: validation and the split into provider and scheduler arguments.

`prepare_call` is a pure function: it needs no [`Scheduler`][semisched.Scheduler],
no client and no event loop, so the async runtime and the batch CLI validate a
call with the same code. It checks the arguments a caller passes to
``Scheduler.submit`` (or puts in a batch line), separates the scheduler-only
ones (``klass``, ``deadline``, ``prior``, ``tenant``) from what goes to the
provider, and returns a frozen `PreparedCall`. (The call as a caller writes
it, `CallArgs`, and as validated, `PreparedCall`, live in
`semisched.runtime.callargs`; `scheduler_config` and `with_tenants`, the
scheduler's configuration, live in `semisched.runtime.configure` and are
importable from here.)

Rules:

1. Exactly one of ``messages`` (chat completions), ``prompt`` (completions) or
   ``input`` (the Responses API, or embeddings with ``api="embeddings"``): the
   API is the one whose prompt field it is (`semisched.runtime.apis`;
   ``api=`` names it, and must agree). Scheduler-only arguments never reach the
   provider.
2. Unknown provider arguments are refused (``TypeError``) when the accepted
   names are known; ``allowed_params=None`` accepts any.
3. The output cap is one number, used both for the prior query and for the
   rate budget's charge: the API's cap field (``max_completion_tokens``, OpenAI's
   current name for chat, else ``max_tokens``; ``max_output_tokens`` for the
   Responses API). When both chat names are given they must be equal: different
   values raise ``ValueError`` naming both, since the provider would apply only
   one of them and which one is not ours to guess. An API that generates nothing
   (embeddings) has no cap and no prior: its cost is its input tokens.
4. A bool is never a number: ``max_tokens=True``, ``deadline=True`` or
   ``prior=(True, 2)`` raise ``TypeError``.
5. Misuse raises ``ValueError`` or ``TypeError`` naming the argument, before
   anything is queued.
6. A call's ``tenant`` must be declared (`TenantConfig.tenant_for`): an unknown name is a
   ``ValueError`` naming the declared tenants, never silently the default
   tenant, since a typo must not change who pays.
7. What can never succeed is refused here, not sent: an output cap outside
   ``[1, MAX_OUTPUT_TOKENS]`` (providers refuse 0; no model's context holds
   10**8 tokens), a ``prior`` outside ``1 <= p50 <= p90 <= MAX_OUTPUT_TOKENS``
   (an answer has one token or more, and no more than a cap allows), a
   ``deadline`` outside ``(0, MAX_DEADLINE_S]`` seconds (it counts from
   submission: 10**8 s is three years, ``time.time()`` is 1.7e9; no deadline
   is ``None``). A cap within the limit but beyond one model's context is the
   provider's to refuse (a 400, never retried).

What this module is not: it reads no clock, builds no core request (the
deadline stays relative; the runtime anchors it on its clock) and asks no
prior source.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Mapping, Sequence
from types import MappingProxyType
from typing import Any, Final

from semisched.core.checks import check_instance, short_repr
from semisched.core.request import Prior
from semisched.core.tenants.config import TenantConfig
from semisched.runtime.apis import APIS, ApiSpec, prompt_token_ids
from semisched.runtime.callargs import NAMED_ARGS, CallArgs, PreparedCall
from semisched.runtime.configure import scheduler_config, with_tenants

__all__ = [
    "MAX_DEADLINE_S",
    "MAX_OUTPUT_TOKENS",
    "accepted_params",
    "output_cap",
    "prepare_call",
    "scheduler_config",
    "with_tenants",
]


#: An API that generates nothing is asked for no prior: one token, its least.
_NO_OUTPUT = Prior(p50=1.0, p90=1.0)

#: The largest output cap, and prior p90, a call may give (module rule 7): ten
#: times the largest context window offered when this was written (10M tokens),
#: so no provider serves more; a model's own, smaller limit is the provider's 400.
MAX_OUTPUT_TOKENS: Final = 100_000_000
#: The longest ``deadline`` (seconds from submission; module rule 7): about three
#: years, far above any wait and far below an absolute timestamp (~1.7e9).
MAX_DEADLINE_S: Final = 1e8


def prepare_call(
    args: CallArgs | None = None,
    *,
    allowed_params: Mapping[str, frozenset[str] | None] | None = None,
    class_names: Sequence[str] | None = None,
    tenants: TenantConfig | None = None,
    **call: Any,
) -> PreparedCall:
    """Validate one call and split it into provider and scheduler arguments.

    Args:
        args: The call (`CallArgs`); or give its fields as keywords
            (``model=``, ``messages=``, ..., ``params=``).
        allowed_params: Per endpoint, the provider argument names its
            ``create`` accepts (``None`` as a value: any). An endpoint missing
            from the mapping is not available. ``None``: both endpoints, any names.
        class_names: The configured class names ``klass`` must be one of
            (``None``: not checked).
        tenants: The declared tenants ``tenant`` must be one of (module rule
            6; ``None``: only its type is checked).

    Returns:
        The frozen `PreparedCall`.

    Raises:
        ValueError, TypeError: Misuse, naming the argument (module rules).
    """
    a = args if args is not None else CallArgs(**call)
    params = dict(a.params or {})
    if not isinstance(a.model, str) or not a.model:
        raise ValueError(f"model={short_repr(a.model)} must be a non-empty string")
    spec = _api(a, allowed_params)
    _check_params(spec.name, params, allowed_params)
    if a.messages is not None:
        _check_messages(a.messages)
    if a.input is not None:
        _check_input(spec, a.input)
    _check_deadline(a.deadline)
    own_prior = _prior_of(spec, a.prior)
    if a.klass is not None and class_names is not None and a.klass not in class_names:
        raise ValueError(f"klass={short_repr(a.klass)} must be one of {list(class_names)}")
    check_instance("tenant", a.tenant, str, optional=True)
    tenant = a.tenant if tenants is None else tenants.tenant_for(a.tenant)  # rule 6
    stream = _check_stream(spec, params)
    cap = output_cap(params, spec.cap_fields) if spec.generates else 0  # embeddings: none
    sent = _sent(a, spec, params)
    nbytes, kind = spec.read_prompt(sent)
    return PreparedCall(
        api=spec.name,
        params=MappingProxyType(sent),
        klass=a.klass,
        deadline_s=None if a.deadline is None else float(a.deadline),
        prior=own_prior,
        added_usage=stream and spec.asks_usage and _ask_for_usage(sent),
        prompt_nbytes=nbytes,
        prompt_kind=kind,
        output_cap=cap,
        tenant=tenant or "",
        prompt_tokens=prompt_token_ids(spec, sent),
    )


def _sent(a: CallArgs, spec: ApiSpec, params: dict[str, Any]) -> dict[str, Any]:
    """What goes to the provider: ``params`` with the model and the prompt field."""
    sent = dict(params, model=a.model)
    value = getattr(a, spec.prompt_field)
    sent[spec.prompt_field] = list(value) if spec.prompt_field == "messages" else value
    return sent


def output_cap(
    params: Mapping[str, Any], names: Sequence[str] = APIS["chat"].cap_fields
) -> int | None:
    """The call's output cap by module rule 3 (``None``: no cap given), read from the
    fields ``names`` (an API's ``cap_fields``; default: chat completions').

    Raises:
        TypeError: A cap that is not an int (a bool is not).
        ValueError: A cap outside ``[1, MAX_OUTPUT_TOKENS]`` (module rule 7), or
            ``max_completion_tokens`` and ``max_tokens`` both given with
            different values.
    """
    caps: dict[str, int] = {}
    for name in names:
        value = params.get(name)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int):
            raise TypeError(f"{name}={short_repr(value)} must be an int")
        if value < 1:
            raise ValueError(f"{name}={value!r} must be an int >= 1 (providers refuse 0)")
        if value > MAX_OUTPUT_TOKENS:
            raise ValueError(
                f"{name}={short_repr(value)} must be at most {MAX_OUTPUT_TOKENS:_}: "
                "no model's context holds more"
            )
        caps[name] = value
    if len(caps) == 2 and caps["max_completion_tokens"] != caps["max_tokens"]:
        raise ValueError(
            f"max_completion_tokens={caps['max_completion_tokens']!r} and "
            f"max_tokens={caps['max_tokens']!r} disagree: pass one of them "
            "(max_completion_tokens is the current name)"
        )
    return next(iter(caps.values()), None)


def accepted_params(target: Any) -> frozenset[str] | None:
    """Provider argument names a client's ``create`` accepts (``None``: it takes ``**kwargs``).

    The names ``model``, ``messages``, ``prompt`` and the scheduler-only ones
    are left out: `prepare_call` handles them itself.
    """
    create = getattr(target, "create", None)
    if create is None:
        return frozenset()
    try:
        sig = inspect.signature(create)
    except (TypeError, ValueError):
        return None
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in sig.parameters.values()):
        return None
    return frozenset(sig.parameters) - NAMED_ARGS


def _api(a: CallArgs, allowed_params: Mapping[str, object] | None) -> ApiSpec:
    """The API a call names (module rule 1)."""
    given = [f for f in ("messages", "prompt", "input") if getattr(a, f) is not None]
    if len(given) != 1:
        raise ValueError(
            "pass exactly one of messages= (chat), prompt= (completions) or "
            "input= (responses, or embeddings with api='embeddings')"
        )
    field_ = given[0]
    if a.api is not None:
        if a.api not in APIS:
            raise ValueError(f"api={short_repr(a.api)} must be one of {list(APIS)}")
        spec = APIS[a.api]
        if spec.prompt_field != field_:
            raise ValueError(f"api={a.api!r} takes {spec.prompt_field}=, not {field_}=")
    else:
        spec = next(s for s in APIS.values() if s.prompt_field == field_)
    if allowed_params is not None and spec.name not in allowed_params:
        raise TypeError(f"the wrapped client has no {spec.call_name} for {spec.name} calls")
    return spec


def _check_params(
    endpoint: str, params: Mapping[str, Any], allowed_params: Mapping[str, object] | None
) -> None:
    overlap = sorted(NAMED_ARGS & set(params))
    if overlap:
        raise TypeError(f"params must not repeat the named argument(s) {overlap}")
    allowed = None if allowed_params is None else allowed_params[endpoint]
    if isinstance(allowed, frozenset):
        unknown = sorted(set(params) - allowed)
        if unknown:
            raise TypeError(f"unknown keyword argument(s) for {endpoint}: {unknown}")


def _check_messages(messages: object) -> None:
    if isinstance(messages, str | bytes) or not isinstance(messages, Sequence):
        raise TypeError(f"messages must be a list of message dicts, got {short_repr(messages)}")
    if not messages:
        raise ValueError("messages=[] must contain at least one message")
    for i, message in enumerate(messages):
        if not isinstance(message, Mapping) or not isinstance(message.get("role"), str):
            raise ValueError(f"messages[{i}]={short_repr(message)} must be a dict with a 'role'")


def _prior_of(spec: ApiSpec, prior: object) -> Prior | None:
    """The caller's prior, checked; an API that generates nothing has the least one
    (a prior given for it, e.g. a batch plan's, is checked and set aside)."""
    own = _check_prior(prior)
    return own if spec.generates else _NO_OUTPUT


def _check_stream(spec: ApiSpec, params: Mapping[str, Any]) -> bool:
    stream = params.get("stream", False)
    if not isinstance(stream, bool):
        raise TypeError(f"stream={short_repr(stream)} must be a bool")
    if stream and not spec.streams:
        raise ValueError(f"stream=True: {spec.call_name} does not stream")
    return stream


def _check_input(spec: ApiSpec, value: object) -> None:
    if isinstance(value, str):
        if not value and not spec.generates:
            raise ValueError(f"input='' must not be empty for {spec.call_name}")
        return
    if isinstance(value, bytes) or not isinstance(value, Sequence) or not value:
        raise TypeError(
            f"input={short_repr(value)} must be a string or a non-empty list for {spec.call_name}"
        )


def _check_deadline(deadline: object) -> None:
    if deadline is None:
        return
    if isinstance(deadline, bool) or not isinstance(deadline, int | float):
        raise TypeError(f"deadline={deadline!r} must be a number of seconds")
    if not math.isfinite(deadline) or deadline <= 0:
        raise ValueError(f"deadline={deadline!r} must be a finite number of seconds > 0")
    if deadline > MAX_DEADLINE_S:
        raise ValueError(
            f"deadline={deadline!r} must be at most {MAX_DEADLINE_S:.0e} seconds: it counts "
            "from submission (not a timestamp); pass deadline=None for no deadline"
        )


def _check_prior(prior: object) -> Prior | None:
    if prior is None:
        return None
    if isinstance(prior, Prior):
        own = prior
    elif not (isinstance(prior, tuple) and len(prior) == 2):
        raise TypeError(f"prior={prior!r} must be a Prior or a (p50, p90) tuple")
    elif any(isinstance(v, bool) or not isinstance(v, int | float) for v in prior):
        raise TypeError(f"prior={prior!r} must hold two numbers (p50, p90)")
    else:
        try:
            own = Prior(p50=float(prior[0]), p90=float(prior[1]))
        except ValueError as exc:
            raise ValueError(f"prior={prior!r}: {exc}") from None
    if not 1 <= own.p50 <= own.p90 <= MAX_OUTPUT_TOKENS:  # module rule 7
        raise ValueError(
            f"prior={prior!r} must have 1 <= p50 <= p90 <= {MAX_OUTPUT_TOKENS:_} output tokens"
        )
    return own


def _ask_for_usage(sent: dict[str, Any]) -> bool:
    """Ask a stream for its final usage chunk; ``True`` when semisched added the ask."""
    options = sent.get("stream_options")
    if options is not None and not isinstance(options, Mapping):
        raise TypeError(f"stream_options={options!r} must be a dict")
    if options and options.get("include_usage"):
        return False
    sent["stream_options"] = {**(options or {}), "include_usage": True}
    return True
