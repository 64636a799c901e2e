"""The answers of the chat and legacy completion APIs: JSON bodies and SSE chunks (pure).

What it is: the bodies ``mockprovider.wire`` describes (its module docstring has the stream's
layout), built from a parsed `Job`: the filler text of an answer of
``n`` tokens, the ``chat.completion`` / ``text_completion`` body, the stream's chunks and the
SSE encoding. ``mockprovider.wire`` re-exports every name here; the Responses and Embeddings
APIs (``mockprovider.apis``) reuse the filler text and the SSE helpers.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Final

if TYPE_CHECKING:
    from mockprovider.wire import Job

__all__ = [
    "answer_text",
    "completion_body",
    "raw_headers",
    "sse",
    "stream_head",
    "stream_tail",
    "text_pieces",
]

_WORDS: Final = (
    *("lorem", "ipsum", "dolor", "sit", "amet", "consectetur", "adipiscing", "elit", "sed"),
    *("do", "eiusmod", "tempor", "incididunt", "ut", "labore", "et", "dolore", "magna", "aliqua"),
)
_STREAM_CONTENT_CHUNKS: Final = 4  # content chunks after the first one


def _words(n: int) -> list[str]:
    return [_WORDS[i % len(_WORDS)] for i in range(n)]


def answer_text(n: int) -> str:
    """The content of an answer of ``n`` tokens: ``n`` filler words."""
    return " ".join(_words(n))


def text_pieces(n: int) -> list[str]:
    """`answer_text` as a stream sends it: the first word (at the first token), then up
    to four groups with their leading spaces (at completion); none for ``n = 0``."""
    words = _words(n)
    rest = words[1:]
    pieces = min(_STREAM_CONTENT_CHUNKS, len(rest))
    groups = [rest[i * len(rest) // pieces : (i + 1) * len(rest) // pieces] for i in range(pieces)]
    return words[:1] + ["".join(" " + w for w in group) for group in groups]


def _usage(job: Job) -> dict[str, Any]:
    return {
        "prompt_tokens": job.input_tokens,
        "completion_tokens": job.output_tokens,
        "total_tokens": job.input_tokens + job.output_tokens,
        "prompt_tokens_details": {"cached_tokens": job.cached_tokens},
    }


def completion_body(job: Job, rid: str, created: int) -> dict[str, Any]:
    """The JSON answer (``chat.completion`` or ``text_completion``) with id ``rid``."""
    content = answer_text(job.output_tokens)
    if job.chat:
        choice: dict[str, Any] = {
            "index": 0,
            "message": {"role": "assistant", "content": content, "refusal": None},
            "logprobs": None,
            "finish_reason": job.finish_reason,
        }
        obj = "chat.completion"
    else:
        choice = {"text": content, "index": 0, "logprobs": None, "finish_reason": job.finish_reason}
        obj = "text_completion"
    return {
        "id": rid,
        "object": obj,
        "created": created,
        "model": job.model,
        "system_fingerprint": "mock",
        "choices": [choice],
        "usage": _usage(job),
    }


def _chunk(
    job: Job, rid: str, created: int, text: str | None, finish: str | None, *, role: bool = False
) -> dict[str, Any]:
    if job.chat:
        delta: dict[str, Any] = {}
        if role:
            delta["role"] = "assistant"
        if text is not None:
            delta["content"] = text
        choice: dict[str, Any] = {
            "index": 0,
            "delta": delta,
            "logprobs": None,
            "finish_reason": finish,
        }
    else:
        choice = {"text": text or "", "index": 0, "logprobs": None, "finish_reason": finish}
    chunk: dict[str, Any] = {
        "id": rid,
        "object": "chat.completion.chunk" if job.chat else "text_completion",
        "created": created,
        "model": job.model,
        "system_fingerprint": "mock",
        "choices": [choice],
    }
    if job.include_usage:
        chunk["usage"] = None
    return chunk


def sse(data: Mapping[str, Any] | str) -> bytes:
    """One SSE event: ``data: <compact JSON or text>`` and a blank line."""
    text = data if isinstance(data, str) else json.dumps(data, separators=(",", ":"))
    return f"data: {text}\n\n".encode()


def stream_head(job: Job, rid: str, created: int) -> bytes:
    """The first SSE event of a stream (sent at the first token): role and first word."""
    words = _words(min(job.output_tokens, 1))
    return sse(_chunk(job, rid, created, words[0] if words else "", None, role=True))


def stream_tail(job: Job, rid: str, created: int) -> list[bytes]:
    """The SSE events after the first (sent at completion), ending with ``data: [DONE]``."""
    out = [sse(_chunk(job, rid, created, p, None)) for p in text_pieces(job.output_tokens)[1:]]
    out.append(sse(_chunk(job, rid, created, None, job.finish_reason)))
    if job.include_usage:
        usage_chunk = _chunk(job, rid, created, None, None)
        usage_chunk["choices"] = []
        usage_chunk["usage"] = _usage(job)
        out.append(sse(usage_chunk))
    out.append(sse("[DONE]"))
    return out


def raw_headers(headers: Mapping[str, str], content_type: str) -> list[tuple[bytes, bytes]]:
    """ASGI response headers: ``content-type`` first, then ``headers`` (latin-1)."""
    out = [(b"content-type", content_type.encode("latin-1"))]
    out.extend((k.encode("latin-1"), v.encode("latin-1")) for k, v in headers.items())
    return out
