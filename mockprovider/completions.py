"""The chat and legacy completions requests, read into a `Job` (pure).

What it is: `parse_job`, the reader of ``POST /v1/chat/completions`` and
``POST /v1/completions``: their prompt (``messages``, whose string contents and text parts
count; or ``prompt``: a string, a list of strings read as one prompt, or token ids), their
``stream`` and ``stream_options.include_usage``, their ``n`` (only 1) and their output cap
(``max_completion_tokens``, else ``max_tokens``; legacy completions: ``max_tokens``), handed
to `shape_job` for the hints, the length rules and the context window (all in
``mockprovider.wire``'s docstring). The Responses and Embeddings requests are read in
``mockprovider.apis`` and ``mockprovider.embeddings`` over the same helpers.

Split from ``mockprovider.wire`` along that seam: the wire module holds what every API's
request shares, this one what only these two routes read. Nothing here touches Starlette, a
socket, a clock or the physics.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from mockprovider.wire import (
    DEFAULT_CONTEXT_TOKENS,
    BadRequest,
    Job,
    opt_int,
    request_body,
    shape_job,
)

if TYPE_CHECKING:
    from mockprovider.prefix_cache import PrefixCache

__all__ = ["parse_job"]


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _message_text(message: object, param: str, parts: list[str]) -> None:
    if not isinstance(message, dict):
        raise BadRequest(f"Invalid '{param}': expected an object.", param, "invalid_type")
    if not isinstance(message.get("role"), str):
        raise BadRequest(f"Invalid '{param}.role': expected a string.", f"{param}.role")
    content = message.get("content")
    if isinstance(content, str):
        parts.append(content)
    elif isinstance(content, list):
        for part in content:
            if not isinstance(part, dict):
                raise BadRequest(
                    f"Invalid '{param}.content': expected an array of objects.",
                    f"{param}.content",
                    "invalid_type",
                )
            text = part.get("text")
            if isinstance(text, str):
                parts.append(text)
    elif content is not None:
        raise BadRequest(
            f"Invalid '{param}.content': expected a string, an array or null.",
            f"{param}.content",
            "invalid_type",
        )


def _chat_prompt(body: Mapping[str, Any]) -> str:
    messages = body.get("messages")
    if messages is None:
        raise BadRequest("Missing required parameter: 'messages'.", "messages", "missing")
    if not isinstance(messages, list) or not messages:
        raise BadRequest("Invalid 'messages': expected a non-empty array.", "messages")
    parts: list[str] = []
    for i, message in enumerate(messages):
        _message_text(message, f"messages[{i}]", parts)
    return "\n".join(parts)


def _completion_prompt(body: Mapping[str, Any]) -> tuple[str, int]:
    """(text, extra tokens given as token ids)."""
    prompt = body.get("prompt")
    if prompt is None:
        raise BadRequest("Missing required parameter: 'prompt'.", "prompt", "missing")
    if isinstance(prompt, str):
        return prompt, 0
    bad = BadRequest(
        "Invalid 'prompt': expected a string, an array of strings or an array of token arrays.",
        "prompt",
        "invalid_type",
    )
    if not isinstance(prompt, list) or not prompt:
        raise bad
    if all(isinstance(p, str) for p in prompt):
        return "".join(prompt), 0
    if all(_is_int(p) for p in prompt):
        return "", len(prompt)
    if all(isinstance(p, list) and all(_is_int(x) for x in p) for p in prompt):
        return "", sum(len(p) for p in prompt)
    raise bad


def _include_usage(body: Mapping[str, Any]) -> bool:
    stream = body.get("stream")
    if stream is not None and not isinstance(stream, bool):
        raise BadRequest("Invalid 'stream': expected a boolean.", "stream", "invalid_type")
    options = body.get("stream_options")
    if options is None:
        return False
    if not isinstance(options, dict):
        raise BadRequest(
            "Invalid 'stream_options': expected an object.", "stream_options", "invalid_type"
        )
    if not stream:
        raise BadRequest(
            "The 'stream_options' parameter is only allowed when 'stream' is enabled.",
            "stream_options",
        )
    usage = options.get("include_usage")
    if usage is not None and not isinstance(usage, bool):
        raise BadRequest(
            "Invalid 'stream_options.include_usage': expected a boolean.",
            "stream_options.include_usage",
            "invalid_type",
        )
    return bool(usage)


def _cap(body: Mapping[str, Any], chat: bool) -> tuple[str, int | None]:
    """The output cap's name and value: ``max_completion_tokens``, else ``max_tokens``."""
    if chat:
        newer = opt_int(body, "max_completion_tokens")
        legacy = opt_int(body, "max_tokens")
        if newer is not None or legacy is None:
            return "max_completion_tokens", newer
        return "max_tokens", legacy
    return "max_tokens", opt_int(body, "max_tokens")


def parse_job(
    headers: Mapping[str, str],
    raw: bytes,
    *,
    chat: bool,
    default_output: int,
    context_tokens: int = DEFAULT_CONTEXT_TOKENS,
    cache: PrefixCache | None = None,
) -> Job:
    """Validate one completion request (see the module docstring for the length rules).

    Args:
        headers: The request headers, looked up by lower-case name (a case-insensitive
            mapping such as Starlette's ``Headers``, or a dict with lower-case keys).
        raw: The raw request body.
        chat: ``/v1/chat/completions`` (else ``/v1/completions``).
        default_output: Output length when neither a hint nor max tokens is given.
        context_tokens: The model's context window: prompt plus output tokens.
        cache: The prefix cache its cached tokens are looked up in, or ``None``.

    Raises:
        BadRequest: The request is not one the mock (or OpenAI) accepts.
    """
    body, model = request_body(raw)
    include_usage = _include_usage(body)
    n = body.get("n")
    if n is not None and (not _is_int(n) or n != 1):
        raise BadRequest("Invalid 'n': the mock provider supports only n=1.", "n")
    return shape_job(
        headers,
        body,
        api="chat.completions" if chat else "completions",
        model=model,
        prompt=(_chat_prompt(body), 0) if chat else _completion_prompt(body),
        cap=_cap(body, chat),
        default_output=default_output,
        context_tokens=context_tokens,
        include_usage=include_usage,
        cache=cache,
    )
