"""The mock's four OpenAI APIs: each request parsed into a `Job` and
the `Answer` that says it in its API's shapes (pure).

What it is: `parse_request` for ``/v1/chat/completions`` and ``/v1/completions``
(``mockprovider.completions`` over ``mockprovider.wire``, ``mockprovider.bodies``),
``/v1/responses`` (here) and ``/v1/embeddings`` (``mockprovider.embeddings``). Every API goes
through the same gate, physics and statistics (``mockprovider.app``,
``mockprovider.responses``); only the parsing and the bodies differ. Nothing here touches
Starlette, a socket, a clock or the physics.

Responses (``POST /v1/responses``). Prompt tokens: ``instructions`` plus every text of
``input`` (a string, or input items whose ``content`` is a string or a list of parts with a
``text``; a tool call's ``output`` counts too), counted as the chat route counts its messages.
Output length: the chat rules (``mockprovider.wire``) with ``max_output_tokens`` as the cap;
a cut at the cap makes the response ``"incomplete"`` (``incomplete_details.reason``
``"max_output_tokens"``). Token charge: prompt plus ``max_output_tokens`` (or the output
length without one). The body is a ``response`` object with one assistant message. A stream is
the API's typed SSE events (``event: TYPE`` and ``data: {"type": TYPE, "sequence_number": N,
...}``), paced as the chat stream: ``response.created``, ``response.in_progress``,
``response.output_item.added``, ``response.content_part.added`` and the first
``response.output_text.delta`` at the first token; at completion up to four more deltas,
``response.output_text.done``, ``response.content_part.done``, ``response.output_item.done``
and ``response.completed`` (``response.incomplete`` when cut at the cap), carrying the whole
response with its ``usage``. No ``data: [DONE]``. A physics timeout mid-stream ends it with
``response.failed``. Unknown fields are ignored; ``previous_response_id``, ``store``,
``metadata``, ``instructions``, ``temperature`` and ``top_p`` are echoed (no state is kept).
Its usage reports the cached input tokens (``mockprovider.prefix_cache``), as the chat and
completion routes do theirs.

Embeddings (``POST /v1/embeddings``): see ``mockprovider.embeddings``; the physics serves one
as a prompt with no output token (it completes when its prefill does).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping
from typing import Any

from mockprovider.bodies import (
    answer_text,
    completion_body,
    sse,
    stream_head,
    stream_tail,
    text_pieces,
)
from mockprovider.completions import parse_job
from mockprovider.embeddings import EmbeddingsAnswer, parse_embeddings
from mockprovider.prefix_cache import PrefixCache
from mockprovider.wire import Api, BadRequest, Job, opt_int, request_body, shape_job

__all__ = ["CompletionAnswer", "ResponsesAnswer", "parse_request"]


def _is_real(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _invalid(param: str, expected: str) -> BadRequest:
    return BadRequest(f"Invalid '{param}': expected {expected}.", param, "invalid_type")


# -- chat and legacy completions ------------------------------------------------------------


class CompletionAnswer:
    """The answer of ``/v1/chat/completions`` or ``/v1/completions`` (``mockprovider.bodies``)."""

    __slots__ = ("job",)

    def __init__(self, job: Job) -> None:
        self.job = job

    def body(self, rid: str, created: int) -> dict[str, Any]:
        return completion_body(self.job, rid, created)

    def head(self, rid: str, created: int) -> bytes:
        return stream_head(self.job, rid, created)

    def tail(self, rid: str, created: int) -> list[bytes]:
        return stream_tail(self.job, rid, created)

    def failed(self, error: Mapping[str, Any]) -> bytes:
        return sse(error)


# -- responses ------------------------------------------------------------------------------


def _item_text(item: object, param: str, parts: list[str]) -> None:
    if not isinstance(item, dict):
        raise _invalid(param, "an object")
    if item.get("role") is not None and not isinstance(item["role"], str):
        raise _invalid(f"{param}.role", "a string")
    content = item.get("content")
    if isinstance(content, str):
        parts.append(content)
    elif isinstance(content, list):
        for part in content:
            if not isinstance(part, dict):
                raise _invalid(f"{param}.content", "an array of objects")
            if isinstance(part.get("text"), str):
                parts.append(part["text"])
    elif content is not None:
        raise _invalid(f"{param}.content", "a string or an array")
    elif isinstance(item.get("output"), str):  # a tool call's output
        parts.append(item["output"])


def _responses_prompt(body: Mapping[str, Any]) -> str:
    parts: list[str] = []
    instructions = body.get("instructions")
    if instructions is not None and not isinstance(instructions, str):
        raise _invalid("instructions", "a string")
    if instructions:
        parts.append(instructions)
    items = body.get("input")
    if isinstance(items, str):
        parts.append(items)
    elif isinstance(items, list):
        for i, item in enumerate(items):
            _item_text(item, f"input[{i}]", parts)
    elif items is not None:
        raise _invalid("input", "a string or an array of input items")
    return "\n".join(parts)


def _echo(body: Mapping[str, Any], cap: int | None) -> dict[str, Any]:
    """The request fields a response object repeats (the API keeps no state here)."""
    previous, store = body.get("previous_response_id"), body.get("store")
    if previous is not None and not isinstance(previous, str):
        raise _invalid("previous_response_id", "a string")
    if store is not None and not isinstance(store, bool):
        raise _invalid("store", "a boolean")
    metadata, reasoning = body.get("metadata"), body.get("reasoning")
    if not isinstance(reasoning, dict):
        reasoning = {"effort": None, "summary": None}
    temperature, top_p, user = body.get("temperature"), body.get("top_p"), body.get("user")
    return {
        "previous_response_id": previous,
        "store": True if store is None else store,
        "instructions": body.get("instructions"),
        "max_output_tokens": cap,
        "metadata": metadata if isinstance(metadata, dict) else {},
        "reasoning": reasoning,
        "temperature": temperature if _is_real(temperature) else 1.0,
        "top_p": top_p if _is_real(top_p) else 1.0,
        "user": user if isinstance(user, str) else None,
    }


def _text_part(text: str) -> dict[str, Any]:
    return {"type": "output_text", "text": text, "annotations": []}


class ResponsesAnswer:
    """The answer of ``/v1/responses``: a ``response`` object, or its typed SSE events.

    One per request: the stream's events are numbered in the order they are built
    (`head`, then `tail` or `failed`).

    Args:
        job: The parsed request.
        echo: The request fields the response repeats.
    """

    __slots__ = ("_created", "_echo", "_item", "_rid", "_seq", "job")

    def __init__(self, job: Job, echo: Mapping[str, Any]) -> None:
        self.job = job
        self._echo = dict(echo)
        self._item = f"msg_{uuid.uuid4().hex}"
        self._seq = 0
        self._rid, self._created = "", 0

    @property
    def status(self) -> str:
        """``"incomplete"`` when the output cap cut the answer, else ``"completed"``."""
        return "incomplete" if self.job.finish_reason == "length" else "completed"

    def body(self, rid: str, created: int) -> dict[str, Any]:
        return self._response(rid, created, self.status, [self._message(self.status)])

    def head(self, rid: str, created: int) -> bytes:
        self._rid, self._created = rid, created
        started = self._response(rid, created, "in_progress", [])
        events = [
            self._event("response.created", response=started),
            self._event("response.in_progress", response=started),
            self._event("response.output_item.added", output_index=0, item=self._message()),
            self._event("response.content_part.added", **self._where(), part=_text_part("")),
        ]
        events += [self._delta(p) for p in text_pieces(self.job.output_tokens)[:1]]
        return b"".join(events)

    def tail(self, rid: str, created: int) -> list[bytes]:
        text, status, where = answer_text(self.job.output_tokens), self.status, self._where()
        out = [self._delta(p) for p in text_pieces(self.job.output_tokens)[1:]]
        out.append(self._event("response.output_text.done", **where, text=text, logprobs=[]))
        out.append(self._event("response.content_part.done", **where, part=_text_part(text)))
        item = self._message(status)
        out.append(self._event("response.output_item.done", output_index=0, item=item))
        final = self._response(rid, created, status, [item])
        out.append(self._event(f"response.{status}", response=final))
        return out

    def failed(self, error: Mapping[str, Any]) -> bytes:
        message = str(error.get("error", {}).get("message", "The server had an error."))
        response = self._response(self._rid, self._created, "failed", [])
        response["error"] = {"code": "server_error", "message": message}
        return self._event("response.failed", response=response)

    def _response(
        self, rid: str, created: int, status: str, output: list[dict[str, Any]]
    ) -> dict[str, Any]:
        job, done = self.job, status in ("completed", "incomplete")
        n, m = job.input_tokens, job.output_tokens
        usage = {
            "input_tokens": n,
            "input_tokens_details": {"cached_tokens": job.cached_tokens},
            "output_tokens": m,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": n + m,
        }
        reason = {"reason": "max_output_tokens"} if status == "incomplete" else None
        return {
            "id": rid,
            "object": "response",
            "created_at": created,
            "status": status,
            "model": job.model,
            "output": output,
            "usage": usage if done else None,
            "incomplete_details": reason,
            **self._echo,
            "error": None,
            "background": False,
            "parallel_tool_calls": True,
            "service_tier": "default",
            "text": {"format": {"type": "text"}},
            "tool_choice": "auto",
            "tools": [],
            "truncation": "disabled",
        }

    def _message(self, status: str | None = None) -> dict[str, Any]:
        """The assistant message: in progress and empty, or ended with the whole text."""
        content = [] if status is None else [_text_part(answer_text(self.job.output_tokens))]
        return {
            "type": "message",
            "id": self._item,
            "status": status or "in_progress",
            "role": "assistant",
            "content": content,
        }

    def _where(self) -> dict[str, Any]:
        return {"item_id": self._item, "output_index": 0, "content_index": 0}

    def _delta(self, text: str) -> bytes:
        return self._event("response.output_text.delta", **self._where(), delta=text, logprobs=[])

    def _event(self, type_: str, **fields: Any) -> bytes:
        data = {"type": type_, "sequence_number": self._seq, **fields}
        self._seq += 1
        return f"event: {type_}\ndata: {json.dumps(data, separators=(',', ':'))}\n\n".encode()


def _parse_responses(
    headers: Mapping[str, str],
    raw: bytes,
    *,
    default_output: int,
    context_tokens: int,
    cache: PrefixCache | None,
) -> tuple[Job, ResponsesAnswer]:
    body, model = request_body(raw)
    text = _responses_prompt(body)
    cap = opt_int(body, "max_output_tokens")
    echo = _echo(body, cap)
    job = shape_job(
        headers,
        body,
        api="responses",
        model=model,
        prompt=(text, 0),
        cap=("max_output_tokens", cap),
        default_output=default_output,
        context_tokens=context_tokens,
        cache=cache,
    )
    return job, ResponsesAnswer(job, echo)


# -- all four -------------------------------------------------------------------------------


def parse_request(
    api: Api,
    headers: Mapping[str, str],
    raw: bytes,
    *,
    default_output: int,
    context_tokens: int,
    cache: PrefixCache | None = None,
) -> tuple[Job, CompletionAnswer | ResponsesAnswer | EmbeddingsAnswer]:
    """Validate one request to ``api`` into its job and the answer that will say it.

    Args:
        api: The API the request came to.
        headers: The request headers, looked up by lower-case name.
        raw: The raw request body.
        default_output: Output length when neither a hint nor a cap is given.
        context_tokens: The model's context window: prompt plus output tokens.
        cache: The prefix cache the prompt's cached tokens are looked up in (read, never
            written: the caller remembers the prompt when it serves it), or ``None``.

    Raises:
        BadRequest: The request is not one the mock (or OpenAI) accepts.
    """
    if api == "responses":
        return _parse_responses(
            headers, raw, default_output=default_output, context_tokens=context_tokens, cache=cache
        )
    if api == "embeddings":
        return parse_embeddings(headers, raw, context_tokens=context_tokens)
    job = parse_job(
        headers,
        raw,
        chat=api == "chat.completions",
        default_output=default_output,
        context_tokens=context_tokens,
        cache=cache,
    )
    return job, CompletionAnswer(job)
