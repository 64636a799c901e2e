"""What the mock provider says when it refuses a request: error bodies and messages (pure).

Each refusal is worded the way a real server words it, so that a client's error handling
meets the mock as it would meet production: OpenAI's body shape
``{"error": {"message", "type", "param", "code"}}`` and OpenAI's 429 and quota messages;
for a request beyond the model's context window, vLLM's 400 (its words, ``type``
``"BadRequestError"`` and the status as ``code``), as an OpenAI-compatible server answers it:

* an output cap that does not fit beside the prompt: "'max_tokens' or
  'max_completion_tokens' is too large: 8000. This model's maximum context length is 4096
  tokens and your request has 2778 input tokens (8000 > 4096 - 2778)." (``param``: the cap's
  name);
* a prompt that alone fills the window: "This model's maximum context length is 4096 tokens.
  However, your request has 5000 input tokens. Please reduce the length of the input
  messages." (``param``: ``messages`` or ``prompt``).

What this module is not: it parses nothing (``mockprovider.wire``) and sends nothing
(``mockprovider.app``, ``mockprovider.responses``).
"""

from __future__ import annotations

from typing import Any, Literal

from mockprovider.faults import WindowState

__all__ = [
    "cap_too_large_message",
    "error_body",
    "prompt_too_long_message",
    "quota_message",
    "rate_limit_message",
    "timeout_body",
    "too_large_message",
    "unavailable_message",
]


def error_body(
    message: str, type_: str, param: str | None, code: str | int | None
) -> dict[str, Any]:
    """An OpenAI error body: ``{"error": {"message", "type", "param", "code"}}``."""
    return {"error": {"message": message, "type": type_, "param": param, "code": code}}


def timeout_body() -> dict[str, Any]:
    """The body of a physics timeout (504, or an SSE error event mid-stream)."""
    return error_body(
        "The server had an error processing your request: the request timed out.",
        "server_error",
        None,
        "timeout",
    )


def quota_message() -> str:
    """The message of 429 ``insufficient_quota``."""
    return "You exceeded your current quota, please check your plan and billing details."


def unavailable_message() -> str:
    """The message of the 503 answered during an outage window (the endpoint is down)."""
    return (
        "The endpoint is unavailable: it is down (mock outage window). "
        "New requests are refused until the window ends; please try again later."
    )


def too_large_message(model: str, limit: int, charge: int) -> str:
    """The message of a 429 for a token charge above the whole token window's ``limit``."""
    return (
        f"Request too large for {model}: Limit {limit}, "
        f"Requested {charge}. The input or output tokens must be reduced."
    )


def rate_limit_message(
    model: str,
    kind: Literal["requests", "tokens"],
    window: WindowState | None,
    charge: int,
    retry_after_ms: str,
) -> str:
    """The message of 429 ``rate_limit_exceeded`` (OpenAI's wording).

    Args:
        model: The model the request named.
        kind: The window that refused it.
        window: That window's state after the refusal.
        charge: The request's token charge.
        retry_after_ms: The ``retry-after-ms`` header.
    """
    limit = window.limit if window else 0
    used = (window.limit - window.remaining) if window else 0
    return (
        f"Rate limit reached for {model} on {kind} per min: "
        f"Limit {limit}, Used {used}, "
        f"Requested {1 if kind == 'requests' else charge}. "
        f"Please try again in {retry_after_ms}ms."
    )


def cap_too_large_message(cap: int, context_tokens: int, input_tokens: int) -> str:
    """vLLM's message for an output cap that does not fit beside the prompt."""
    return (
        f"'max_tokens' or 'max_completion_tokens' is too large: {cap}. This model's maximum "
        f"context length is {context_tokens} tokens and your request has {input_tokens} input "
        f"tokens ({cap} > {context_tokens} - {input_tokens})."
    )


def prompt_too_long_message(context_tokens: int, input_tokens: int) -> str:
    """vLLM's message for a prompt that alone fills the context window."""
    return (
        f"This model's maximum context length is {context_tokens} tokens. However, your "
        f"request has {input_tokens} input tokens. Please reduce the length of the input "
        "messages."
    )
