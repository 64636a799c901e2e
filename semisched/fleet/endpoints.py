"""Endpoints: the deployments a [`Scheduler`][semisched.Scheduler] can send to.

A production client rarely has one endpoint: several deployments of a model
(regions, Azure deployments, keys with their own limits, a self-hosted vLLM
beside a hosted API). `Endpoint` names one of them: its client, the
deployment name of each logical model it serves, and its own limits.
``Scheduler(endpoints=[...])`` routes every send to one of them (the core's
routing layer, `semisched.core.fleet.routing`); ``Scheduler(client)`` is the
one-endpoint case of the same code.

`Deployments` is the runtime's side of a fleet: one
`Provider` per endpoint, the call arguments every
endpoint accepts, and the check that some endpoint serves a call's model.

What this module is not: it chooses no endpoint (the core does) and reads no
environment (API keys stay where the caller put them: in its clients).
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import fields
from types import MappingProxyType
from typing import Any, Final, get_args, get_type_hints

from semisched.core.checks import check_bool, check_int, check_str
from semisched.core.config import BudgetConfig
from semisched.core.fleet.endpoint import EndpointSpec
from semisched.runtime.apis import APIS
from semisched.runtime.provider import Provider

__all__ = [
    "ENDPOINT_OPTIONS",
    "Deployments",
    "Endpoint",
    "endpoint_option_types",
    "endpoint_spec",
]

#: The core's per-endpoint settings an endpoint passes on unchanged
#: (`EndpointSpec`'s fields but its name, models and budget).
_SPEC_OPTIONS: Final = tuple(
    f.name for f in fields(EndpointSpec) if f.name not in ("name", "models", "budget")
)
#: Its own limits ([`BudgetConfig`][semisched.core.config.BudgetConfig]'s fields an endpoint sets).
_LIMITS: Final = ("rpm", "tpm")
#: Every keyword option of `Endpoint` (and of a fleet file's ``[[endpoint]]``
#: table), in order: the one list of an endpoint's settings.
ENDPOINT_OPTIONS: Final = ("model_map", *_LIMITS, "learn_limits", *_SPEC_OPTIONS)


def endpoint_option_types() -> dict[str, type]:
    """Each scalar option's type (``model_map`` and ``price``, tables, left out), read from
    the core's dataclasses."""
    hints = {**get_type_hints(BudgetConfig), **get_type_hints(EndpointSpec), "learn_limits": bool}
    types: dict[str, type] = {}
    for name in ENDPOINT_OPTIONS[1:]:
        if name == "price":
            continue
        hint = hints[name]
        args = [a for a in get_args(hint) if a is not type(None)]
        types[name] = args[0] if args else hint
    return types


def endpoint_spec(
    name: str,
    *,
    model_map: Mapping[str, str] | None = None,
    rpm: int | None = None,
    tpm: int | None = None,
    learn_limits: bool = True,
    in_file: bool = False,
    **spec_options: Any,
) -> EndpointSpec:
    """What the core knows of an endpoint: its options (`ENDPOINT_OPTIONS`), checked.

    A budget is kept when it has ``rpm`` or ``tpm``, or ``learn_limits``; with
    ``learn_limits`` it adopts the limits the endpoint's ``x-ratelimit-*`` headers
    advertise (per minute), without it only ``rpm``/``tpm`` count.
    ``in_file``: messages in a fleet file's words (a ``model_map`` is a table there).

    Raises:
        ValueError: A bad value, naming it.
        TypeError: An unknown option.
    """
    unknown = sorted(set(spec_options) - set(_SPEC_OPTIONS))
    if unknown:
        raise TypeError(f"unknown endpoint option(s) {unknown} (known: {list(ENDPOINT_OPTIONS)})")
    models: frozenset[str] | None = None
    if model_map is not None:
        if not isinstance(model_map, Mapping) or not model_map:
            raise ValueError(
                f"model_map={model_map!r} must be a non-empty table of "
                "logical model -> deployment name"
                if in_file
                else f"model_map={model_map!r} of endpoint {name!r} must be a non-empty "
                "mapping of logical model -> deployment name, or None"
            )
        for logical, deployed in model_map.items():
            check_str(f"model_map key {logical!r}", logical)
            check_str(f"model_map[{logical!r}]", deployed)
        models = frozenset(model_map)
    check_int("rpm", rpm, minimum=1, optional=True)
    check_int("tpm", tpm, minimum=1, optional=True)
    check_bool("learn_limits", learn_limits)
    unlimited = rpm is None and tpm is None
    budget = (
        None if unlimited and not learn_limits
        else BudgetConfig(rpm=rpm, tpm=tpm, adapt=learn_limits)
    )
    return EndpointSpec(name=name, models=models, budget=budget, **spec_options)


class Endpoint:
    """One deployment a scheduler can send to.

    Args:
        name: Unique in the fleet; statistics and the core's decisions use it.
        client: ``openai.AsyncOpenAI`` (or any OpenAI-compatible async client)
            for this deployment; its own retries are turned off.
        learn_limits: Keep a rate budget for it even without ``rpm``/``tpm``,
            adopting the limits its ``x-ratelimit-*`` headers advertise (so a
            tight limit nobody told the scheduler about is learned from the
            first answers, not from a storm of 429s). ``False``: only its
            ``rpm``/``tpm`` count, for a server whose headers do not count per
            minute or whose limits a fleet budget already keeps.
            ``Scheduler(client)``'s one endpoint does not learn: there
            ``config.budget`` governs, as before.
        **options: Its settings (`ENDPOINT_OPTIONS`):

            - ``model_map``: logical model -> this deployment's model name (an
              Azure deployment name, a vLLM served name). With a map the
              endpoint serves only the models it names; ``None`` serves any
              model under its own name.
            - ``rpm``, ``tpm``: its own requests- and tokens-per-minute limits
              (a key or deployment limit).
            - the core's `EndpointSpec` fields:
              ``max_concurrency`` (most requests in flight here at once),
              ``weight`` (relative share for weighted routing), ``pool``
              (``"short"`` or ``"long"`` under ``token_budget`` routing;
              ``None`` serves both), ``context_tokens`` (largest prompt plus
              output it serves), ``price`` (what it bills: a [`Price`][semisched.Price]
              for every model, or a mapping of model -> price with ``"*"`` for the
              others; the ``cost`` routing policy and the spend statistics read it).

    Raises:
        ValueError: A bad value, naming the argument.
        TypeError: ``client`` has no ``chat.completions`` or is openai's
            synchronous ``OpenAI`` (give ``AsyncOpenAI``), or an unknown option.
    """

    def __init__(
        self, name: str, client: Any, *, learn_limits: bool = True, **options: Any
    ) -> None:
        check_str("name", name)
        if getattr(getattr(client, "chat", None), "completions", None) is None:
            raise TypeError(
                f"client={client!r} of endpoint {name!r} must be an OpenAI-compatible client "
                "(with chat.completions)"
            )
        sync_client = getattr(sys.modules.get("openai"), "OpenAI", None)  # imported if in use
        if sync_client is not None and isinstance(client, sync_client):
            raise TypeError(
                f"client={client!r} of endpoint {name!r} is openai's synchronous client, whose "
                "calls cannot be awaited: pass openai.AsyncOpenAI (or AsyncAzureOpenAI)"
            )
        self.spec = endpoint_spec(name, learn_limits=learn_limits, **options)
        model_map = options.get("model_map")
        self.name = name
        self.client = client
        self.model_map: Mapping[str, str] | None = (
            None if model_map is None else MappingProxyType(dict(model_map))
        )

    def __repr__(self) -> str:
        models = "any model" if self.model_map is None else sorted(self.model_map)
        return f"<Endpoint {self.name!r} serves={models}>"

    def deployment(self, model: str) -> str:
        """This endpoint's name for the logical ``model``."""
        return model if self.model_map is None else self.model_map.get(model, model)


class Deployments:
    """The runtime's fleet: a `Provider` per endpoint, by name.

    Raises:
        ValueError: No endpoints, or two with one name.
        TypeError: An item that is not an `Endpoint`.
    """

    def __init__(self, endpoints: Iterable[Endpoint]) -> None:
        self._endpoints: dict[str, Endpoint] = {}
        self._providers: dict[str, Provider] = {}
        self._maps: dict[str, Mapping[str, str] | None] = {}  # kept after removal, like providers
        self._allowed: Mapping[str, frozenset[str] | None] | None = None  # computed on demand
        for endpoint in endpoints:
            self.add(endpoint)
        if not self._endpoints:
            raise ValueError("endpoints=[] must name at least one Endpoint")

    @classmethod
    def of(cls, client: Any, endpoints: Sequence[Endpoint] | None) -> Deployments:
        """``Scheduler(client)`` (one endpoint, ``"default"``, whose limits ``config.budget``
        keeps) or ``Scheduler(endpoints=[...])``.

        Raises:
            TypeError: Both or neither, or ``endpoints`` not a sequence of endpoints.
        """
        if (client is None) == (endpoints is None):
            raise TypeError("Scheduler() takes exactly one of client and endpoints=[...]")
        if endpoints is None:
            return cls([Endpoint("default", client, learn_limits=False)])
        if isinstance(endpoints, str | bytes | Endpoint) or not isinstance(endpoints, Sequence):
            raise TypeError(f"endpoints={endpoints!r} must be a sequence of semisched.Endpoint")
        return cls(endpoints)

    def __repr__(self) -> str:
        return f"<Deployments {list(self._endpoints)}>"

    def __len__(self) -> int:
        return len(self._endpoints)

    @property
    def names(self) -> tuple[str, ...]:
        """The endpoints' names, in fleet order."""
        return tuple(self._endpoints)

    def add(self, endpoint: Endpoint) -> None:
        """Add ``endpoint`` (its provider is built now)."""
        if not isinstance(endpoint, Endpoint):
            raise TypeError(f"endpoint={endpoint!r} must be a semisched.Endpoint")
        if endpoint.name in self._endpoints:
            raise ValueError(f"duplicate endpoint name {endpoint.name!r}: names must be unique")
        self._providers[endpoint.name] = Provider(endpoint.client)
        self._maps[endpoint.name] = endpoint.model_map
        self._endpoints[endpoint.name] = endpoint
        self._allowed = None

    def remove(self, name: str) -> None:
        """Forget ``name`` for new calls (attempts in flight keep their provider)."""
        self._endpoints.pop(name, None)
        self._allowed = None

    def endpoint(self, name: str) -> Endpoint:
        """The endpoint called ``name``."""
        return self._endpoints[name]

    def provider(self, name: str) -> Provider:
        """The provider of the endpoint called ``name`` (also after its removal)."""
        return self._providers[name]

    def params_for(self, name: str, params: Mapping[str, Any]) -> Mapping[str, Any]:
        """``params`` as endpoint ``name`` takes them: ``model`` renamed by its ``model_map``."""
        model_map = self._maps[name]
        if model_map is None:
            return params
        model = params.get("model")
        deployed = model_map.get(model, model) if isinstance(model, str) else model
        return params if deployed == model else {**params, "model": deployed}

    @property
    def allowed_params(self) -> Mapping[str, frozenset[str] | None]:
        """Per API, the argument names every endpoint accepts (``None``: any); an API
        some endpoint lacks is left out (`semisched.runtime.calls.prepare_call`'s shape)."""
        if self._allowed is None:
            self._allowed = self._allowed_params()
        return self._allowed

    def _allowed_params(self) -> Mapping[str, frozenset[str] | None]:
        providers = [self._providers[name] for name in self._endpoints]
        allowed: dict[str, frozenset[str] | None] = {}
        for api in APIS:
            if not all(api in p.allowed_params for p in providers):
                continue
            names: frozenset[str] | None = None
            for p in providers:
                accepted = p.allowed_params[api]
                if accepted is not None:
                    names = accepted if names is None else names & accepted
            allowed[api] = names
        return allowed

    def check_model(self, model: str) -> None:
        """Raise ``ValueError`` unless some endpoint serves ``model``."""
        if any(e.spec.serves(model) for e in self._endpoints.values()):
            return
        served = "; ".join(
            f"{e.name}: {', '.join(sorted(e.model_map or ()))}" for e in self._endpoints.values()
        )
        raise ValueError(f"model={model!r} is served by no endpoint ({served})")
