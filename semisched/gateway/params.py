"""What the gateway checks in a scheduled request's body before anything is sent upstream.

A body the upstream would refuse, or that would cost what nobody meant to pay,
is answered here, before ``Scheduler.submit``: nothing is queued, charged or
sent. Every refusal is a `BadRequest`, answered in OpenAI's error shape
(`semisched.gateway.answers.refused`) with ``param`` naming the field.

Rules:

1. The body is UTF-8 JSON holding one object (`parse_body`). ``NaN``,
   ``Infinity`` and numbers too large for a double are refused (the upstream
   would get invalid JSON or ``inf``), and so is a key given twice in one
   object (which value was meant is not ours to guess): 400 ``invalid_json``.
   Its nesting is `semisched.gateway.limits.parse_json`'s rule and answer.
2. Each forwarded OpenAI field is checked against its row of the route's
   table (`semisched.gateway.field_rules`: `API_RULES`, one per scheduled API:
   `CHAT_RULES`, `COMPLETION_RULES`, `RESPONSES_RULES`, `EMBEDDING_RULES`):
   its type and the range OpenAI's API reference documents (``n`` 1-128,
   ``temperature`` 0-2, ``top_p`` 0-1, penalties -2..2, ``logit_bias`` values
   -100..100, ``stop`` at most 4 strings, ``top_logprobs`` 0-20, ``logprobs``
   0-5 and ``best_of`` 0-20 for completions, ``seed`` a 64-bit integer,
   ``encoding_format`` ``float`` or ``base64`` and ``dimensions`` an integer
   >= 1 for embeddings). An output cap (``max_tokens``,
   ``max_completion_tokens``, ``max_output_tokens``) is an integer from 1 to
   `MAX_OUTPUT_TOKENS` (there too). ``null`` is accepted where OpenAI accepts it
   (every optional field but ``stream``). Fields that refer to earlier calls
   (``previous_response_id``, ``conversation``, ``store``) are checked for their
   type only and passed on unchanged. A bad field: 400 ``invalid_value``;
   ``model``, and the API's prompt field (``messages``, ``prompt`` or ``input``),
   missing: 400 ``missing_required_parameter``. ``stream`` other than ``false``
   on an API that never streams (embeddings): 400 ``invalid_value``
   (`refuse_stream`, before the field is stripped). The message quotes at
   most `QUOTE_CHARS` characters of the value.
3. When the configuration declares its models (``[gateway] models``, or a
   ``model_map`` on every endpoint), a model outside them is a 404
   ``model_not_found``. When it declares none (an endpoint serves any model),
   the model is forwarded and the upstream decides.
4. ``service_tier`` other than ``auto`` or ``default`` (which cost nothing
   extra) goes upstream only when the caller's tenant lists it in its
   ``service_tiers``; otherwise 403 ``service_tier_not_allowed``.

What this module is not: it checks no field's value against a model's own
limits (its context, which tools it takes: the upstream's 400), nothing the
gateway strips (`semisched.gateway.hints`), nor headers, and it answers
nothing itself.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Final

from semisched.core.checks import QUOTE_CHARS
from semisched.gateway.field_rules import API_RULES
from semisched.gateway.hints import BadRequest
from semisched.gateway.limits import json_depth_exceeds, parse_json

if TYPE_CHECKING:
    from semisched.gateway.config import GatewayConfig
    from semisched.runtime.apis import ApiSpec

__all__ = [
    "FREE_SERVICE_TIERS",
    "QUOTE_CHARS",
    "BadRequest",
    "RequestChecks",
    "declared_models",
    "parse_body",
    "quote",
    "refuse_stream",
]

#: Service tiers every tenant may ask for: they cost no more than omitting the field.
FREE_SERVICE_TIERS: Final = frozenset({"auto", "default"})


# -- rule 1: the body's JSON ------------------------------------------------------------


class _Refused(ValueError):
    """Raised inside the decoder's hooks; `parse_body` turns it into a `BadRequest`."""


def _object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """The decoder's ``object_pairs_hook``: an object, unless a key is given twice."""
    obj = dict(pairs)
    if len(obj) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise _Refused(f"the key {quote(key)} is given twice in one JSON object")
            seen.add(key)
    return obj


def _constant(name: str) -> float:
    raise _Refused(f"{name} is not a JSON number")


def _float(text: str) -> float:
    value = float(text)
    if math.isinf(value):
        raise _Refused(f"the number {quote(text)} is too large")
    return value


# Built once: json.loads builds a decoder per call when given hooks. The pairs hook is
# the cost of rule 1 (measured against json.loads: +0.5 us on a typical 3-object body,
# +0.35 us per further JSON object, e.g. +18 us for 50 messages); parse_constant and
# parse_float cost nothing on bodies without NaN or floats. A cheaper exact way was not
# found: counting keys in the raw text and in the parsed tree costs more than the hook.
_DECODER: Final = json.JSONDecoder(
    object_pairs_hook=_object, parse_constant=_constant, parse_float=_float
)


def parse_body(raw: bytes, max_depth: int) -> dict[str, Any]:
    """The request body as a JSON object (rule 1).

    Args:
        raw: The body's bytes (UTF-8, an optional byte-order mark ignored).
        max_depth: ``max_json_depth``: deeper is `parse_json`'s
            refusal (asked only then, so its rule and answer stay the one).

    Raises:
        BadRequest: Not UTF-8 JSON, not an object, ``NaN``/``Infinity``, or a
            key given twice (400 ``invalid_json``).
        semisched.gateway.limits.Refused: Nested deeper than ``max_depth`` (400).
    """
    try:
        text = raw.decode("utf-8")  # RFC 8259: JSON between systems is UTF-8
        body = _DECODER.decode(text[1:] if text.startswith("\ufeff") else text)
    except _Refused as exc:
        raise BadRequest(f"the request body is refused: {exc}", code="invalid_json") from None
    except json.JSONDecodeError as exc:
        raise BadRequest(f"the request body is not valid JSON: {exc.msg} (line {exc.lineno}, "
                         f"column {exc.colno})", code="invalid_json") from None  # fmt: skip
    except RecursionError:
        parse_json(raw, max_depth)  # raises Refused: too deep for the parser
        raise  # pragma: no cover (it always raises)
    except UnicodeDecodeError:
        raise BadRequest("the request body is not UTF-8", code="invalid_json") from None
    except ValueError:  # an integer of more than 4300 digits (Python's int limit)
        raise BadRequest("the request body holds an integer too long to read",
                         code="invalid_json") from None  # fmt: skip
    if raw.count(b"[") + raw.count(b"{") > max_depth and json_depth_exceeds(body, max_depth):
        parse_json(raw, max_depth)  # raises Refused: too deep
    if type(body) is not dict:
        raise BadRequest("the request body must be a JSON object", code="invalid_json")
    return body


# -- rule 2: the fields' checks (their tables: semisched.gateway.field_rules) -----------


def quote(value: object) -> str:
    """``value`` for a message, as JSON shows it (`short_repr`
    is the Python-side twin): a short prefix of a string or number, a container's size."""
    kind = type(value)
    if kind is str:
        text: str = value  # type: ignore[assignment]
        return repr(text[:QUOTE_CHARS]) + ("..." if len(text) > QUOTE_CHARS else "")
    if value is None or kind is bool:
        return json.dumps(value)  # as the caller wrote it: null, true, false
    if kind is int or kind is float:
        text = repr(value)
        return text[:QUOTE_CHARS] + ("..." if len(text) > QUOTE_CHARS else "")
    if kind is list:
        return f"an array of {len(value)} items"  # type: ignore[arg-type]
    if kind is dict:
        return f"an object of {len(value)} keys"  # type: ignore[arg-type]
    return kind.__name__  # pragma: no cover (JSON has no other kinds)




def refuse_stream(body: Mapping[str, Any], api: ApiSpec) -> None:
    """Rule 2's ``stream`` on an API that never streams: anything but ``false`` (or
    ``null``) is refused, before the field is stripped as a foreign one.

    Raises:
        BadRequest: 400 ``invalid_value`` naming ``stream``.
    """
    value = body.get("stream")
    if not api.streams and value is not None and value is not False:
        raise BadRequest(f"stream: {quote(value)} is not accepted: POST {api.path} never "
                         "streams (send false or leave it out)", param="stream",
                         code="invalid_value")  # fmt: skip


# -- rules 3 and 4: the configuration's models and tiers ---------------------------------


def declared_models(config: GatewayConfig) -> frozenset[str] | None:
    """The models the gateway serves (rule 3); ``None``: any (the upstream decides)."""
    maps = [d.model_map for d in config.fleet.endpoints]
    if not config.models and not all(maps):
        return None
    return frozenset(config.models).union(*(m for m in maps if m))


class RequestChecks:
    """The module rules 2-4 for one configuration.

    Args:
        models: The declared models (`declared_models`), or ``None``: any.
        service_tiers: ``{tenant: tiers it may use}`` beyond `FREE_SERVICE_TIERS`.
    """

    __slots__ = ("models", "service_tiers")

    def __init__(
        self,
        *,
        models: frozenset[str] | None = None,
        service_tiers: Mapping[str, frozenset[str]] | None = None,
    ) -> None:
        self.models = models
        self.service_tiers = dict(service_tiers or {})

    @classmethod
    def of(cls, config: GatewayConfig) -> RequestChecks:
        """The checks ``config`` asks for."""
        tiers = {tenant: frozenset(t) for tenant, t in config.service_tiers.items()}
        return cls(models=declared_models(config), service_tiers=tiers)

    def __repr__(self) -> str:
        models = "any" if self.models is None else sorted(self.models)
        return f"<RequestChecks models={models} service_tiers={self.service_tiers}>"

    def check(self, body: Mapping[str, Any], *, api: ApiSpec, tenant: str) -> None:
        """Check ``body`` (already stripped to ``api``'s fields) for ``tenant`` (rules 2-4).

        Args:
            body: The parsed body, holding only the route's forwarded fields.
            api: The route's scheduled API: its table in `API_RULES`, and its
                prompt field, required with ``model``.
            tenant: The caller's tenant.

        Raises:
            BadRequest: 400 for a missing or bad field, 404 for an undeclared
                model, 403 for a service tier the tenant may not use.
        """
        for name in ("model", api.prompt_field):
            if name not in body:
                raise BadRequest(f"{name} is required", param=name,
                                 code="missing_required_parameter")  # fmt: skip
        rules = API_RULES[api.name]
        for name, value in body.items():
            rule = rules.get(name)
            if rule is not None:
                why = rule(value)
                if why is not None:
                    raise BadRequest(f"{name}: {quote(value)} {why}", param=name,
                                     code="invalid_value")  # fmt: skip
        model = body["model"]
        if self.models is not None and model not in self.models:
            raise BadRequest(f"The model {quote(model)} does not exist or is not served by "
                             "this gateway (GET /v1/models lists them)", status=404,
                             param="model", code="model_not_found")  # fmt: skip
        tier = body.get("service_tier")
        if (tier is not None and tier not in FREE_SERVICE_TIERS
                and tier not in self.service_tiers.get(tenant, ())):  # fmt: skip
            raise BadRequest(f"service_tier: {quote(tier)} is not allowed for this API key's "
                             "tenant (ask the gateway's operator)", status=403,
                             param="service_tier", code="service_tier_not_allowed")  # fmt: skip
