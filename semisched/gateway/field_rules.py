"""Each scheduled API's table of field checks: rule 2 of `semisched.gateway.params`.

One table per scheduled API (`CHAT_RULES`, `COMPLETION_RULES`,
`RESPONSES_RULES`, `EMBEDDING_RULES`; `API_RULES` by the API's name), one row
per forwarded OpenAI field (the route's fields: `semisched.gateway.hints`): the
field's type and the range OpenAI's API reference documents, as a `Check` that
returns ``None`` for a good value, else what the value must be. ``null`` passes
where OpenAI accepts it (every optional field but ``stream``).

What this module is not: it reads no body and raises nothing;
`semisched.gateway.params` applies the tables (`RequestChecks`) and answers a
bad field with a `BadRequest`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Any, Final

__all__ = [
    "API_RULES",
    "CHAT_RULES",
    "COMPLETION_RULES",
    "EMBEDDING_RULES",
    "MAX_N",
    "MAX_OUTPUT_TOKENS",
    "RESPONSES_RULES",
]

#: The largest ``n`` (OpenAI's documented maximum).
MAX_N: Final = 128
#: The largest output cap the gateway forwards: 2**20 tokens, eight times the
#: largest output any model offered when this was written (~128k). The gateway
#: does not know the model's own limit; a cap within this one but beyond it is
#: the upstream's 400.
MAX_OUTPUT_TOKENS: Final = 1_048_576

_INT64: Final = 2**63

#: A field's check: ``None`` when the value is fine, else what it must be.
Check = Callable[[Any], str | None]


def _number(lo: float, hi: float) -> Check:
    want = f"must be a number from {lo:g} to {hi:g}"

    def check(value: Any) -> str | None:
        kind = type(value)
        if value is None or ((kind is int or kind is float) and lo <= value <= hi):
            return None
        return want

    return check


def _integer(lo: int, hi: int | None = None, *, optional: bool = True) -> Check:
    """An integer from ``lo`` to ``hi`` (``None``: a 64-bit integer from ``lo``)."""
    want = f"must be an integer >= {lo}" if hi is None else f"must be an integer from {lo} to {hi}"
    top = _INT64 - 1 if hi is None else hi

    def check(value: Any) -> str | None:
        if (value is None and optional) or (type(value) is int and lo <= value <= top):
            return None
        return want

    return check


def _kind(*kinds: type, name: str, optional: bool = True) -> Check:
    want = f"must be {name}"

    def check(value: Any) -> str | None:
        if (value is None and optional) or type(value) in kinds:
            return None
        return want

    return check


def _stop(value: Any) -> str | None:
    if value is None or type(value) is str:
        return None
    if type(value) is list and len(value) <= 4 and all(type(s) is str for s in value):
        return None
    return "must be a string or an array of at most 4 strings"


def _model(value: Any) -> str | None:
    return None if type(value) is str and value else "must be a non-empty string"


def _messages(value: Any) -> str | None:
    if type(value) is list and value:
        for message in value:
            if type(message) is not dict or type(message.get("role")) is not str:
                return "must be an array of message objects, each with a string 'role'"
        return None
    return "must be a non-empty array of message objects"


def _prompt(value: Any) -> str | None:
    return None if type(value) in (str, list) else "must be a string or an array"


def _input(value: Any) -> str | None:
    if type(value) is str or (type(value) is list and value):
        return None
    return "must be a string or a non-empty array"


def _embedding_input(value: Any) -> str | None:
    if type(value) in (str, list) and value:
        return None
    return "must be a non-empty string or a non-empty array"


def _one_of(*names: str) -> Check:
    want = "must be one of " + ", ".join(repr(n) for n in names)

    def check(value: Any) -> str | None:
        return None if value is None or value in names else want

    return check


def _logit_bias(value: Any) -> str | None:
    if value is None:
        return None
    if type(value) is dict:
        for token, bias in value.items():
            kind = type(bias)
            if not token.isdigit() or not ((kind is int or kind is float) and -100 <= bias <= 100):
                break
        else:
            return None
    return "must be an object mapping token ids to numbers from -100 to 100"


_BOOL: Final = _kind(bool, name="a boolean")
_STR: Final = _kind(str, name="a string")
_OBJECT: Final = _kind(dict, name="an object")
_ARRAY: Final = _kind(list, name="an array")
_STR_OR_OBJECT: Final = _kind(str, dict, name="a string or an object")
_PENALTY: Final = _number(-2, 2)
_CAP: Final = _integer(1, MAX_OUTPUT_TOKENS)

#: Rows shared by both routes: field -> check.
_COMMON: Final[dict[str, Check]] = {
    "model": _model,
    "frequency_penalty": _PENALTY,
    "logit_bias": _logit_bias,
    "max_tokens": _CAP,
    "n": _integer(1, MAX_N),
    "presence_penalty": _PENALTY,
    "seed": _integer(-_INT64, _INT64 - 1),
    "stop": _stop,
    "stream": _kind(bool, name="a boolean (true or false)", optional=False),
    "stream_options": _OBJECT,
    "temperature": _number(0, 2),
    "top_p": _number(0, 1),
    "user": _STR,
}
#: ``POST /v1/chat/completions``: one row per forwarded field (`CHAT_FIELDS`).
CHAT_RULES: Final[Mapping[str, Check]] = {
    **_COMMON,
    "messages": _messages,
    "audio": _OBJECT,
    "function_call": _STR_OR_OBJECT,
    "functions": _ARRAY,
    "logprobs": _BOOL,
    "max_completion_tokens": _CAP,
    "modalities": _ARRAY,
    "parallel_tool_calls": _BOOL,
    "prediction": _OBJECT,
    "prompt_cache_key": _STR,
    "reasoning_effort": _STR,
    "response_format": _OBJECT,
    "safety_identifier": _STR,
    "service_tier": _STR,  # which tiers a tenant may use: rule 4
    "store": _BOOL,
    "tool_choice": _STR_OR_OBJECT,
    "tools": _ARRAY,
    "top_logprobs": _integer(0, 20),
    "verbosity": _STR,
    "web_search_options": _OBJECT,
}
#: ``POST /v1/completions``: one row per forwarded field (`COMPLETION_FIELDS`).
COMPLETION_RULES: Final[Mapping[str, Check]] = {
    **_COMMON,
    "prompt": _prompt,
    "best_of": _integer(0, 20),
    "echo": _BOOL,
    "logprobs": _integer(0, 5),
    "suffix": _STR,
}
#: ``POST /v1/responses``: one row per forwarded field (`RESPONSES_FIELDS`).
RESPONSES_RULES: Final[Mapping[str, Check]] = {
    "model": _model,
    "input": _input,
    "background": _BOOL,
    "context_management": _ARRAY,
    "conversation": _STR_OR_OBJECT,  # state of earlier calls: passed on as given
    "include": _ARRAY,
    "instructions": _STR,
    "max_output_tokens": _CAP,
    "max_tool_calls": _integer(0),
    "metadata": _OBJECT,
    "parallel_tool_calls": _BOOL,
    "previous_response_id": _STR,  # state of earlier calls: passed on as given
    "prompt_cache_key": _STR,
    "prompt_cache_retention": _STR,
    "reasoning": _OBJECT,
    "safety_identifier": _STR,
    "service_tier": _STR,  # which tiers a tenant may use: rule 4
    "store": _BOOL,
    "stream": _COMMON["stream"],
    "stream_options": _OBJECT,
    "temperature": _COMMON["temperature"],
    "text": _OBJECT,
    "tool_choice": _STR_OR_OBJECT,
    "tools": _ARRAY,
    "top_logprobs": _integer(0, 20),
    "top_p": _COMMON["top_p"],
    "truncation": _STR,
    "user": _STR,
}
#: ``POST /v1/embeddings``: one row per forwarded field (`EMBEDDING_FIELDS`).
EMBEDDING_RULES: Final[Mapping[str, Check]] = {
    "model": _model,
    "input": _embedding_input,
    "dimensions": _integer(1),
    "encoding_format": _one_of("float", "base64"),
    "user": _STR,
}
#: Each scheduled API's table, by its name in `APIS` (rule 2).
API_RULES: Final[Mapping[str, Mapping[str, Check]]] = MappingProxyType({
    "chat": CHAT_RULES, "completions": COMPLETION_RULES, "responses": RESPONSES_RULES,
    "embeddings": EMBEDDING_RULES,
})  # fmt: skip
