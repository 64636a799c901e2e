"""The mock provider's wire format: OpenAI request parsing and response bodies (pure).

What it is: everything the mock says or reads on the wire, as plain functions over bytes,
header mappings and dictionaries: request validation into a `Job`, completion and
chunk bodies, SSE encoding (the bodies live in ``mockprovider.bodies`` and are re-exported
here; what a refusal says is in ``mockprovider.errors``; what only the chat and legacy
completions requests read, their prompt, ``stream_options``, ``n`` and cap, is in
``mockprovider.completions``, whose `parse_job` applies the rules below). Nothing here
touches Starlette, a socket, a clock or the physics; ``mockprovider.app`` and
``mockprovider.responses`` send what these functions build.

Per-request hints (headers, for benchmarks and tests): ``x-mock-output-tokens`` (output
length), ``x-mock-input-tokens`` (prompt length) and ``x-mock-fault``
(``none|error|hang|drop``: force that fault for this request; the seeded fault draw is consumed
anyway). Requests that cannot set headers (a Batch API file) may hint the output length in the
body instead: ``"metadata": {"mock_output_tokens": "250"}`` (the header wins when both are
given).

Output length: the ``x-mock-output-tokens`` hint, else ``max_completion_tokens``/``max_tokens``,
else the default output length; always capped by the max tokens when given, else by the room
the context window leaves beside the prompt. ``finish_reason`` is ``"length"`` when that cap
cut the wanted length, else ``"stop"``. The context window (``context_tokens``, default
`DEFAULT_CONTEXT_TOKENS`) holds prompt plus output, as on vLLM: a prompt that fills it,
or a max tokens that does not fit beside the prompt, is refused with vLLM's 400
(``mockprovider.errors``), whatever the hints say. Prompt tokens: the hint,
else UTF-8 bytes of the prompt text / 4 (rounded up, at least 1); the part of them a prefix
cache already held is the usage's cached tokens (``mockprovider.prefix_cache``). The content is
filler words, one word per token. ``n`` other than 1 is refused; a list ``prompt`` counts as
one prompt. A request's token charge (for the TPM window) is its prompt tokens plus its max
tokens (or its output length without one).

A streamed answer is the first word with the role, then up to four content chunks, the finish
chunk, the usage chunk when ``stream_options.include_usage`` asks for it, and ``data: [DONE]``.

The chat and legacy completions requests (``mockprovider.completions``) and the Responses
and Embeddings APIs (``mockprovider.apis``) read their requests with the same helpers:
`request_body`, and `shape_job` for the length rules above.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final, Literal

from mockprovider.bodies import (
    answer_text,
    completion_body,
    raw_headers,
    sse,
    stream_head,
    stream_tail,
    text_pieces,
)
from mockprovider.errors import cap_too_large_message, prompt_too_long_message
from mockprovider.faults import Fault

if TYPE_CHECKING:
    from mockprovider.prefix_cache import PrefixCache

__all__ = [
    "DEFAULT_CONTEXT_TOKENS",
    "Api",
    "BadRequest",
    "Job",
    "answer_text",
    "completion_body",
    "estimate_tokens",
    "forced_fault",
    "header_int",
    "opt_int",
    "raw_headers",
    "request_body",
    "shape_job",
    "sse",
    "stream_head",
    "stream_tail",
    "text_pieces",
]

Api = Literal["chat.completions", "completions", "responses", "embeddings"]
"""The OpenAI API a request came to (``/v1/chat/completions``, ``/v1/completions``, ...)."""

#: The context window (prompt plus output tokens) of a mock model unless configured:
#: 128Ki, the window of the Llama 3.1 family (GPT-4o's is 128,000).
DEFAULT_CONTEXT_TOKENS: Final = 131_072


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


class BadRequest(Exception):
    """A request the mock refuses with 400 (``invalid_request_error`` unless told otherwise).

    Attributes:
        message: The OpenAI-style message.
        param: The offending parameter (or header), or ``None``.
        code: The error code, or ``None``.
        type: The error type (vLLM's context-window refusal says ``"BadRequestError"``).
    """

    def __init__(
        self,
        message: str,
        param: str | None,
        code: str | int | None = None,
        type_: str = "invalid_request_error",
    ) -> None:
        super().__init__(message)
        self.message, self.param, self.code, self.type = message, param, code, type_


@dataclass(frozen=True, slots=True, kw_only=True)
class Job:
    """One valid completion request, as the mock will answer it.

    Attributes:
        chat: ``/v1/chat/completions`` (else legacy ``/v1/completions``).
        model: The model the request named (echoed back).
        stream: Answer as SSE.
        include_usage: Send the usage chunk at the end of a stream.
        input_tokens: Prompt tokens (hint or estimate).
        output_tokens: Completion tokens the answer will have.
        finish_reason: ``"stop"`` or ``"length"``.
        charge: Token charge for the TPM window.
        forced_fault: The ``x-mock-fault`` header, or ``None``.
        api: The API the request came to (``chat`` is true for ``"chat.completions"`` only).
        cached_tokens: Prompt tokens the prefix cache already held
            (``mockprovider.prefix_cache``), reported in the answer's usage.
        prompt_text: The text the prompt tokens were counted from (what the cache keeps).
    """

    chat: bool
    model: str
    stream: bool
    include_usage: bool
    input_tokens: int
    output_tokens: int
    finish_reason: str
    charge: int
    forced_fault: Fault | None
    api: Api = "chat.completions"
    cached_tokens: int = 0
    prompt_text: str = field(default="", repr=False)


# -- request parsing -----------------------------------------------------------------------


def header_int(headers: Mapping[str, str], name: str) -> int | None:
    """A hint header's integer (>= 0), or ``None`` when absent."""
    raw = headers.get(name)
    if raw is None:
        return None
    try:
        value = int(raw.strip())
    except ValueError:
        raise BadRequest(f"Header {name} must be an integer >= 0.", name) from None
    if value < 0:
        raise BadRequest(f"Header {name} must be an integer >= 0.", name)
    return value


def _metadata_int(body: Mapping[str, Any], name: str) -> int | None:
    """An output-length hint in ``body.metadata`` (strings, as OpenAI's ``metadata`` is):
    batch files carry no headers, so they hint the mock this way."""
    metadata = body.get("metadata")
    if not isinstance(metadata, dict) or name not in metadata:
        return None
    raw = metadata[name]
    try:
        value = int(str(raw))
    except ValueError:
        raise BadRequest(
            f"Invalid 'metadata.{name}': expected an integer string.", "metadata"
        ) from None
    if value < 0:
        raise BadRequest(f"Invalid 'metadata.{name}': must be >= 0.", "metadata")
    return value


def opt_int(body: Mapping[str, Any], name: str) -> int | None:
    """``body[name]`` as an integer >= 1, or ``None`` when absent or null."""
    value = body.get(name)
    if value is None:
        return None
    if not _is_int(value) or value < 1:
        raise BadRequest(f"Invalid '{name}': expected an integer >= 1.", name, "invalid_type")
    return int(value)


def estimate_tokens(text: str) -> int:
    """A text's token estimate: UTF-8 bytes / 4, rounded up, at least 1."""
    return max(1, math.ceil(len(text.encode("utf-8")) / 4))


def _json_object(raw: bytes) -> dict[str, Any]:
    try:
        body = json.loads(raw)
    except (ValueError, RecursionError):
        raise BadRequest(
            "We could not parse the JSON body of your request. (The body must be valid JSON.)",
            None,
            "invalid_json",
        ) from None
    if not isinstance(body, dict):
        raise BadRequest("The request body must be a JSON object.", None, "invalid_type")
    return body


def forced_fault(headers: Mapping[str, str]) -> Fault | None:
    """The ``x-mock-fault`` header's fault, or ``None`` when absent."""
    raw = headers.get("x-mock-fault")
    if raw is None:
        return None
    try:
        return Fault(raw.strip().lower())
    except ValueError:
        raise BadRequest(
            "Header x-mock-fault must be one of none, error, hang, drop.", "x-mock-fault"
        ) from None


def _check_context(
    input_tokens: int, cap_name: str, cap: int | None, *, context: int, param: str
) -> int:
    """The room for output in a context window of ``context`` tokens (vLLM's 400s otherwise)."""
    if input_tokens >= context:
        raise BadRequest(
            prompt_too_long_message(context, input_tokens), param, 400, "BadRequestError"
        )
    room = context - input_tokens
    if cap is not None and cap > room:
        raise BadRequest(
            cap_too_large_message(cap, context, input_tokens), cap_name, 400, "BadRequestError"
        )
    return room


def request_body(raw: bytes) -> tuple[dict[str, Any], str]:
    """A request's JSON object and the model it names.

    Raises:
        BadRequest: The body is not a JSON object, or its ``model`` is missing or not a string.
    """
    body = _json_object(raw)
    model = body.get("model")
    if model is None:
        raise BadRequest("Missing required parameter: 'model'.", "model", "missing")
    if not isinstance(model, str) or not model:
        raise BadRequest("Invalid 'model': expected a non-empty string.", "model", "invalid_type")
    return body, model


_PROMPT_PARAM: Final[dict[str, str]] = {
    "chat.completions": "messages",
    "completions": "prompt",
    "responses": "input",
    "embeddings": "input",
}


def shape_job(
    headers: Mapping[str, str],
    body: Mapping[str, Any],
    *,
    api: Api,
    model: str,
    prompt: tuple[str, int],
    cap: tuple[str, int | None],
    default_output: int,
    context_tokens: int,
    include_usage: bool = False,
    cache: PrefixCache | None = None,
) -> Job:
    """The `Job` of a request under the length rules of the module docstring.

    Args:
        headers: The request headers (the hints and ``x-mock-fault``).
        body: The request's JSON object (``stream``, ``metadata.mock_output_tokens``).
        api: The API the request came to.
        model: The model it named.
        prompt: Its prompt text and the tokens it gave as token ids.
        cap: The output cap's parameter name and value (``None``: no cap).
        default_output: Output length when neither a hint nor a cap is given.
        context_tokens: The model's context window: prompt plus output tokens.
        include_usage: Send the usage chunk at the end of a chat stream.
        cache: The prefix cache its cached tokens are looked up in (read only), or ``None``.

    Raises:
        BadRequest: A bad hint or ``stream``, or a request beyond the context window.
    """
    stream = body.get("stream")
    if stream is not None and not isinstance(stream, bool):
        raise BadRequest("Invalid 'stream': expected a boolean.", "stream", "invalid_type")
    (text, extra), (cap_name, max_tokens) = prompt, cap
    input_tokens = header_int(headers, "x-mock-input-tokens")
    if input_tokens is None:
        input_tokens = (estimate_tokens(text) if text else 0) + extra or 1
    param = _PROMPT_PARAM[api]
    room = _check_context(input_tokens, cap_name, max_tokens, context=context_tokens, param=param)
    hinted_out = header_int(headers, "x-mock-output-tokens")
    if hinted_out is None:
        hinted_out = _metadata_int(body, "mock_output_tokens")
    wanted = next(w for w in (hinted_out, max_tokens, default_output) if w is not None)
    limit = room if max_tokens is None else max_tokens
    output_tokens = min(wanted, limit)
    cached = cache.cached_tokens(text, input_tokens) if cache is not None and text else 0
    return Job(
        chat=api == "chat.completions",
        model=model,
        stream=bool(stream),
        include_usage=include_usage,
        input_tokens=input_tokens,
        output_tokens=output_tokens,
        finish_reason="length" if wanted > limit else "stop",
        charge=input_tokens + (max_tokens if max_tokens is not None else output_tokens),
        forced_fault=forced_fault(headers),
        api=api,
        cached_tokens=cached,
        prompt_text=text,
    )
