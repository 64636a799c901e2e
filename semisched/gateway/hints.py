"""Scheduling hints of a gateway request, and the body the upstream is sent.

A caller passes hints in headers (case-insensitive):

=========================  ==============================================================
header                     meaning
=========================  ==============================================================
``x-semisched-deadline``   seconds from arrival after which the answer is useless (> 0)
``x-semisched-class``      the scheduling class (``interactive``, ``batch`` ...)
``x-semisched-prior``      the caller's output-length prior: ``P50,P90`` tokens
``x-semisched-tenant``     optional; may only name the tenant of the caller's key
=========================  ==============================================================

The answer says which body fields were stripped (rule 3) in
``x-semisched-stripped``.

Rules:

1. The tenant is the key's (`semisched.gateway.keys`). A header or a
   body's ``metadata.tenant`` naming another tenant is refused (403): a
   header cannot make someone else pay.
2. The body's ``priority``, when it is a string naming a class, is the class
   (the header wins); ``priority`` is always removed, and so is ``metadata``
   except on the Responses API, whose own field it is (forwarded as given, its
   ``tenant`` checked by rule 1 all the same). An integer ``priority``,
   ``service_tier`` and the key's or tenant's class are read after these
   (`semisched.gateway.priority`).
3. Only OpenAI's own fields of the route's API are forwarded (`API_FIELDS`,
   one table per scheduled API: `CHAT_FIELDS`, `COMPLETION_FIELDS`,
   `RESPONSES_FIELDS`, `EMBEDDING_FIELDS`); every other field is
   stripped, so the upstream never sees a field it would refuse. The stripped names are
   reported to the caller in the ``x-semisched-stripped`` response header,
   decided with the hints (before anything is sent): at most
   `MAX_STRIPPED_NAMES` names of ``[A-Za-z0-9_.-]`` (up to 64 each) in
   `MAX_STRIPPED_BYTES` bytes, then ``+N more`` counting the rest
   (other names included), so the header is always short, ASCII and valid.
4. ``Authorization`` and each ``x-semisched-*`` header may be given once
   (`request_headers`): two of them are a 400 ``duplicate_header``,
   never the last one winning silently.

What this module is not: it validates no OpenAI field's value
(`semisched.gateway.params` does) and answers nothing
(`semisched.gateway.answers`).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Final

from semisched.core.checks import short_repr

__all__ = [
    "API_FIELDS",
    "CHAT_FIELDS",
    "COMPLETION_FIELDS",
    "EMBEDDING_FIELDS",
    "HEADER_CLASS",
    "HEADER_DEADLINE",
    "HEADER_PRIOR",
    "HEADER_STRIPPED",
    "HEADER_TENANT",
    "MAX_STRIPPED_BYTES",
    "MAX_STRIPPED_NAMES",
    "RESPONSES_FIELDS",
    "BadHint",
    "BadRequest",
    "Hints",
    "read_hints",
    "request_headers",
    "stripped_header",
]

HEADER_DEADLINE: Final = "x-semisched-deadline"
HEADER_CLASS: Final = "x-semisched-class"
HEADER_PRIOR: Final = "x-semisched-prior"
HEADER_TENANT: Final = "x-semisched-tenant"
#: The response header naming the stripped body fields (rule 3).
HEADER_STRIPPED: Final = "x-semisched-stripped"
#: At most this many stripped names are listed (rule 3) ...
MAX_STRIPPED_NAMES: Final = 16
#: ... in at most this many bytes (then ``+N more``).
MAX_STRIPPED_BYTES: Final = 512
_SHOWN_NAME: Final = re.compile(r"[A-Za-z0-9_.\-]{1,64}")

#: The request fields of OpenAI's ``POST /v1/chat/completions`` the gateway forwards.
CHAT_FIELDS: Final = frozenset({
    "model", "messages", "audio", "frequency_penalty", "function_call", "functions",
    "logit_bias", "logprobs", "max_completion_tokens", "max_tokens", "modalities", "n",
    "parallel_tool_calls", "prediction", "presence_penalty", "prompt_cache_key",
    "reasoning_effort", "response_format", "safety_identifier", "seed", "service_tier",
    "stop", "store", "stream", "stream_options", "temperature", "tool_choice", "tools",
    "top_logprobs", "top_p", "user", "verbosity", "web_search_options",
})  # fmt: skip
#: The request fields of OpenAI's ``POST /v1/completions`` the gateway forwards.
COMPLETION_FIELDS: Final = frozenset({
    "model", "prompt", "best_of", "echo", "frequency_penalty", "logit_bias", "logprobs",
    "max_tokens", "n", "presence_penalty", "seed", "stop", "stream", "stream_options",
    "suffix", "temperature", "top_p", "user",
})  # fmt: skip
#: The request fields of OpenAI's ``POST /v1/responses`` the gateway forwards. Its
#: ``prompt`` (a stored prompt template) is not one: ``prompt`` is the scheduler's
#: completions prompt argument, so a call cannot carry both it and ``input``.
RESPONSES_FIELDS: Final = frozenset({
    "model", "input", "background", "context_management", "conversation", "include",
    "instructions", "max_output_tokens", "max_tool_calls", "metadata", "parallel_tool_calls",
    "previous_response_id", "prompt_cache_key", "prompt_cache_retention", "reasoning",
    "safety_identifier", "service_tier", "store", "stream", "stream_options", "temperature",
    "text", "tool_choice", "tools", "top_logprobs", "top_p", "truncation", "user",
})  # fmt: skip
#: The request fields of OpenAI's ``POST /v1/embeddings`` the gateway forwards.
EMBEDDING_FIELDS: Final = frozenset({"model", "input", "dimensions", "encoding_format", "user"})
#: Each scheduled API's forwarded fields, by its name in
#: `APIS` (the route's table, rule 3).
API_FIELDS: Final[Mapping[str, frozenset[str]]] = MappingProxyType({
    "chat": CHAT_FIELDS, "completions": COMPLETION_FIELDS, "responses": RESPONSES_FIELDS,
    "embeddings": EMBEDDING_FIELDS,
})  # fmt: skip


class BadRequest(ValueError):
    """A request the gateway refuses before sending anything (the caller's input).

    Answered in OpenAI's error shape by `semisched.gateway.answers.refused`.

    Attributes:
        status: The HTTP status it is answered with (400, 403, 404).
        param: The header or field at fault, or ``None``.
        code: The OpenAI-style error code.
    """

    def __init__(
        self, message: str, *, code: str, status: int = 400, param: str | None = None
    ) -> None:
        super().__init__(message)
        self.status = status
        self.param = param
        self.code = code


class BadHint(BadRequest):
    """A request's hint, header or tenant claim is unusable (400, or 403 for another tenant)."""

    def __init__(self, message: str, *, status: int, param: str, code: str) -> None:
        super().__init__(message, code=code, status=status, param=param)


@dataclass(frozen=True, slots=True)
class Hints:
    """What the scheduler is told besides the call.

    Attributes:
        klass: The scheduling class, or ``None`` (chosen from the prior).
        deadline_s: Seconds from arrival, or ``None``.
        prior: ``(p50, p90)`` output tokens, or ``None`` (the prior source answers).
        stripped: The body fields removed before forwarding, sorted.
        stripped_header: Their ``x-semisched-stripped`` value (rule 3), or
            ``""`` when none was.
    """

    klass: str | None = None
    deadline_s: float | None = None
    prior: tuple[float, float] | None = None
    stripped: tuple[str, ...] = ()
    stripped_header: str = ""

    def response_headers(self) -> dict[str, str]:
        """The headers the answer carries for these hints."""
        return {HEADER_STRIPPED: self.stripped_header} if self.stripped_header else {}


def request_headers(raw: Sequence[tuple[bytes, bytes]]) -> dict[str, str]:
    """An ASGI scope's headers as ``{lower-case name: value}`` (rule 4).

    Args:
        raw: ``scope["headers"]``: lower-case latin-1 names and values, as ASGI gives them.

    Raises:
        BadHint: ``authorization`` or an ``x-semisched-*`` header given twice (400).
    """
    headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in raw}
    if len(headers) != len(raw):  # a name came twice: only some may not
        seen: set[bytes] = set()
        for name, _ in raw:
            if name == b"authorization" or name.startswith(b"x-semisched-"):
                if name in seen:
                    where = name.decode("latin-1")
                    raise BadHint(f"the {where} header is given more than once",
                                  status=400, param=where, code="duplicate_header")  # fmt: skip
                seen.add(name)
    return headers


def stripped_header(names: Sequence[str]) -> str:
    """The ``x-semisched-stripped`` value for the stripped ``names`` (rule 3)."""
    shown: list[str] = []
    size = 0
    for name in names:
        if not _SHOWN_NAME.fullmatch(name):
            continue  # counted in the rest: never put in a header as it came
        if len(shown) == MAX_STRIPPED_NAMES or size + len(name) > MAX_STRIPPED_BYTES:
            break
        shown.append(name)
        size += len(name) + 1
    rest = len(names) - len(shown)
    if rest:
        shown.append(f"+{rest} more")
    return ",".join(shown)


def _deadline(text: str | None) -> float | None:
    if text is None:
        return None
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value <= 0:
        raise BadHint(f"{HEADER_DEADLINE}: {short_repr(text)} must be a number of seconds > 0",
                      status=400, param=HEADER_DEADLINE, code="invalid_hint")  # fmt: skip
    return value


def _prior(text: str | None) -> tuple[float, float] | None:
    if text is None:
        return None
    parts = text.split(",")
    try:
        p50, p90 = (float(p) for p in parts) if len(parts) == 2 else (math.nan, math.nan)
    except ValueError:
        p50 = p90 = math.nan
    if not (math.isfinite(p50) and math.isfinite(p90)) or not 0 < p50 <= p90:
        raise BadHint(f"{HEADER_PRIOR}: {short_repr(text)} must be P50,P90 output tokens "
                      "with 0 < P50 <= P90", status=400, param=HEADER_PRIOR,
                      code="invalid_hint")  # fmt: skip
    return p50, p90


def _claim(claimed: object, tenant: str, where: str) -> None:
    """Rule 1: ``claimed`` (a header or ``metadata.tenant``) must be ``tenant`` itself."""
    if claimed is None or claimed == "":
        return
    if claimed != tenant:
        raise BadHint(f"{where} names another tenant than the one of this API key",
                      status=403, param=where, code="tenant_mismatch")  # fmt: skip


def read_hints(
    headers: Mapping[str, str],
    body: dict[str, Any],
    *,
    tenant: str,
    allowed: frozenset[str],
    classes: tuple[str, ...],
) -> Hints:
    """Read the hints of one request and strip ``body`` in place (module rules).

    Args:
        headers: The request's headers (lower-case names, as Starlette gives them).
        body: The parsed JSON body; non-OpenAI fields are removed from it.
        tenant: The tenant of the caller's key.
        allowed: The route's forwarded fields (its table in `API_FIELDS`).
        classes: The configured class names.

    Raises:
        BadHint: A malformed hint (400), an unknown class (400) or a claim to
            another tenant (403).
    """
    _claim(headers.get(HEADER_TENANT), tenant, HEADER_TENANT)
    metadata = body.get("metadata")
    if isinstance(metadata, Mapping):
        _claim(metadata.get("tenant"), tenant, "metadata.tenant")
    klass = headers.get(HEADER_CLASS)
    priority = body.get("priority")
    if klass is None and isinstance(priority, str) and priority in classes:
        klass = priority
    if klass is not None and klass not in classes:
        raise BadHint(f"{HEADER_CLASS}: {short_repr(klass)} must be one of {list(classes)}",
                      status=400, param=HEADER_CLASS, code="invalid_hint")  # fmt: skip
    stripped = tuple(sorted(k for k in body if k not in allowed))
    for name in stripped:
        del body[name]
    return Hints(
        klass=klass,
        deadline_s=_deadline(headers.get(HEADER_DEADLINE)),
        prior=_prior(headers.get(HEADER_PRIOR)),
        stripped=stripped,
        stripped_header=stripped_header(stripped) if stripped else "",
    )
