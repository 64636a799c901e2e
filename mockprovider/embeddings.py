"""The mock's Embeddings API (``POST /v1/embeddings``): the request and its answer (pure).

Request: ``model``, ``input`` (a string, a list of strings, a list of token ids or a list of
token-id lists, at most `MAX_EMBEDDING_INPUTS`; each is one embedding), optional
``encoding_format`` and ``dimensions``; other fields are ignored. Tokens: a string is counted
as the chat route counts text, a token list by its length; the ``x-mock-input-tokens`` hint
replaces the total. An input longer than the context window gets vLLM's 400. Token charge
(TPM): the input tokens.

Answer: ``{"object": "list", "data": [{"object": "embedding", "index": i, "embedding": ...}],
"model", "usage": {"prompt_tokens", "total_tokens"}}``, never streamed. Vectors are unit
length, `DEFAULT_DIMENSIONS` wide unless ``dimensions`` says otherwise, and seeded by
the input's hash (the same input gives the same vector). ``encoding_format: "base64"`` sends
each vector as its little-endian float32 bytes in base64, as OpenAI does: they decode to the
floats that ``"float"`` sends, exactly.

Physics: an embedding is a prompt with no output token (``ProviderPhysics.submit`` with
``output_tokens=0``): it waits for a slot like any request, holds it for the
``ceil(tokens / prefill_chunk)`` iterations of its prefill (at least one), emits no first
token and completes at the prefill's end. Gate, faults, timeouts and counters are the chat
route's (``mockprovider.app``, ``mockprovider.responses``).
"""

from __future__ import annotations

import base64
import hashlib
import math
import random
import struct
from collections.abc import Mapping
from typing import Any, Final

from mockprovider.bodies import sse
from mockprovider.errors import prompt_too_long_message
from mockprovider.wire import (
    BadRequest,
    Job,
    estimate_tokens,
    forced_fault,
    header_int,
    opt_int,
    request_body,
)

__all__ = [
    "DEFAULT_DIMENSIONS",
    "MAX_DIMENSIONS",
    "MAX_EMBEDDING_INPUTS",
    "EmbeddingsAnswer",
    "parse_embeddings",
]

#: Width of an embedding unless the request's ``dimensions`` asks otherwise (small on purpose).
DEFAULT_DIMENSIONS: Final = 256
#: The widest embedding a request may ask for (``text-embedding-3-large``'s width).
MAX_DIMENSIONS: Final = 3072
#: The most inputs one embeddings request may carry (OpenAI's limit).
MAX_EMBEDDING_INPUTS: Final = 2048


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _invalid(param: str, expected: str) -> BadRequest:
    return BadRequest(f"Invalid '{param}': expected {expected}.", param, "invalid_type")


def _embedding_inputs(body: Mapping[str, Any]) -> list[str | list[int]]:
    raw = body.get("input")
    if raw is None:
        raise BadRequest("Missing required parameter: 'input'.", "input", "missing")
    bad = _invalid(
        "input",
        "a non-empty string, an array of non-empty strings, an array of token ids "
        "or an array of non-empty token arrays",
    )
    inputs: list[str | list[int]]
    if isinstance(raw, str):
        inputs = [raw]
    elif not isinstance(raw, list) or not raw:
        raise bad
    elif all(isinstance(x, str) for x in raw):
        inputs = list(raw)
    elif all(_is_int(x) for x in raw):
        inputs = [raw]
    elif all(isinstance(x, list) and all(_is_int(t) for t in x) for x in raw):
        inputs = list(raw)
    else:
        raise bad
    if not all(inputs):  # an empty string or token array
        raise bad
    if len(inputs) > MAX_EMBEDDING_INPUTS:
        raise BadRequest(
            f"Invalid 'input': at most {MAX_EMBEDDING_INPUTS} inputs per request.", "input"
        )
    return inputs


def _embedding_format(body: Mapping[str, Any]) -> tuple[int, bool]:
    """``(dimensions, base64)`` of the answer."""
    dims = opt_int(body, "dimensions")
    if dims is not None and dims > MAX_DIMENSIONS:
        raise BadRequest(
            f"Invalid 'dimensions': at most {MAX_DIMENSIONS}.", "dimensions", "invalid_value"
        )
    encoding = body.get("encoding_format")
    if encoding not in (None, "float", "base64"):
        raise BadRequest(
            "Invalid 'encoding_format': expected 'float' or 'base64'.",
            "encoding_format",
            "invalid_value",
        )
    return DEFAULT_DIMENSIONS if dims is None else dims, encoding == "base64"


def _vector(item: str | list[int], dims: int) -> bytes:
    """A unit vector seeded by ``item``'s hash, as little-endian float32 bytes."""
    key = f"s:{item}" if isinstance(item, str) else "t:" + ",".join(map(str, item))
    rng = random.Random(hashlib.blake2b(key.encode("utf-8"), digest_size=16).digest())
    raw = [rng.gauss(0.0, 1.0) for _ in range(dims)]
    scale = 1.0 / math.sqrt(math.fsum(x * x for x in raw))
    return struct.pack(f"<{dims}f", *(x * scale for x in raw))


class EmbeddingsAnswer:
    """The answer of ``/v1/embeddings``: one vector per input (never streamed).

    Args:
        job: The parsed request.
        inputs: Its inputs, strings or token-id lists.
        dimensions: The vectors' width.
        base64: Send each vector as base64 of its little-endian float32 bytes.
    """

    __slots__ = ("_base64", "_dims", "_inputs", "job")

    def __init__(
        self, job: Job, inputs: list[str | list[int]], dimensions: int, *, base64: bool
    ) -> None:
        self.job = job
        self._inputs, self._dims, self._base64 = inputs, dimensions, base64

    def body(self, rid: str, created: int) -> dict[str, Any]:
        data = []
        for i, item in enumerate(self._inputs):
            raw = _vector(item, self._dims)
            vector: str | list[float] = (
                base64.b64encode(raw).decode("ascii")
                if self._base64
                else list(struct.unpack(f"<{self._dims}f", raw))
            )
            data.append({"object": "embedding", "index": i, "embedding": vector})
        tokens = self.job.input_tokens
        usage = {"prompt_tokens": tokens, "total_tokens": tokens}
        return {"object": "list", "data": data, "model": self.job.model, "usage": usage}

    def head(self, rid: str, created: int) -> bytes:
        raise TypeError("an embeddings answer is never streamed")

    def tail(self, rid: str, created: int) -> list[bytes]:
        raise TypeError("an embeddings answer is never streamed")

    def failed(self, error: Mapping[str, Any]) -> bytes:
        return sse(error)


def parse_embeddings(
    headers: Mapping[str, str], raw: bytes, *, context_tokens: int
) -> tuple[Job, EmbeddingsAnswer]:
    """Validate one embeddings request into its job and answer (see the module docstring).

    Raises:
        BadRequest: The request is not one the mock (or OpenAI) accepts.
    """
    body, model = request_body(raw)
    inputs = _embedding_inputs(body)
    dims, as_base64 = _embedding_format(body)
    hinted = header_int(headers, "x-mock-input-tokens")
    sizes = [estimate_tokens(x) if isinstance(x, str) else len(x) for x in inputs]
    longest = max(sizes) if hinted is None else hinted
    if longest > context_tokens:
        raise BadRequest(
            prompt_too_long_message(context_tokens, longest), "input", 400, "BadRequestError"
        )
    tokens = sum(sizes) if hinted is None else hinted
    job = Job(
        chat=False,
        model=model,
        stream=False,
        include_usage=False,
        input_tokens=tokens,
        output_tokens=0,
        finish_reason="stop",
        charge=tokens,
        forced_fault=forced_fault(headers),
        api="embeddings",
    )
    return job, EmbeddingsAnswer(job, inputs, dims, base64=as_base64)
