"""A batch's lines: the input file validated, and each line's answer in the output or error
file, in OpenAI's shapes (pure: no clock, no Starlette).

Input (JSONL, one request a line; whitespace-only lines are skipped):
``{"custom_id": "...", "method": "POST", "url": ENDPOINT, "body": {...}}``. The file fails
validation (the batch is ``failed``, its ``errors.data`` list the first
`MAX_REPORTED_ERRORS` problems, each ``{code, message, param, line}`` with 1-based
lines) when it is empty (``empty_file``), holds more than `MAX_LINES` requests
(``too_many_tasks``), or a line is not a JSON object (``invalid_json_line``), lacks a
non-empty string ``custom_id`` or an object ``body`` (``missing_required_parameter``), repeats
a ``custom_id`` (``duplicate_custom_id``), has a ``method`` other than ``POST``
(``invalid_method``) or a ``url`` other than the batch's endpoint (``invalid_url``).

A line whose body its endpoint refuses (the real-time route's 400: a missing ``model``, a
prompt beyond the context window, ``stream: true``, ...) does not fail the file: it is
answered in the error file with that 400. A body may hint its output length with
``"metadata": {"mock_output_tokens": "N"}`` (a file carries no headers; ``mockprovider.wire``).

Output file line: ``{"id": "batch_req_...", "custom_id", "response": {"status_code": 200,
"request_id": "req_...", "body": BODY}, "error": null}``, where ``BODY`` is what the
real-time route answers (``usage`` included). Error file line: the same with the error
status and an OpenAI error body (``response.body.error``) and ``"error": null``, or, for a
line never run (its batch expired or was cancelled first), ``"response": null`` and
``"error": {"code": "batch_expired" | "batch_cancelled", "message"}``.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final

from mockprovider.errors import error_body
from mockprovider.responses import Answer
from mockprovider.wire import Api, BadRequest, Job

__all__ = [
    "ENDPOINTS",
    "MAX_LINES",
    "MAX_REPORTED_ERRORS",
    "BatchLine",
    "LineError",
    "answered_line",
    "read_lines",
    "unrun_line",
]

#: The endpoints a batch may name, and the API each one is.
ENDPOINTS: Final[dict[str, Api]] = {
    "/v1/chat/completions": "chat.completions",
    "/v1/completions": "completions",
    "/v1/responses": "responses",
    "/v1/embeddings": "embeddings",
}
#: The most requests one input file may hold (OpenAI's limit).
MAX_LINES: Final = 50_000
#: The most validation errors a failed batch lists.
MAX_REPORTED_ERRORS: Final = 100

_UNRUN: Final = {
    "batch_expired": "This request could not be executed before the completion window expired.",
    "batch_cancelled": "This request was not executed: its batch was cancelled.",
}


@dataclass(frozen=True, slots=True)
class LineError:
    """One reason an input file failed validation (an entry of the batch's ``errors.data``)."""

    code: str
    message: str
    line: int | None = None
    param: str | None = None

    def to_object(self) -> dict[str, Any]:
        return {"code": self.code, "message": self.message, "param": self.param, "line": self.line}


@dataclass(frozen=True, slots=True)
class BatchLine:
    """One valid line: its request parsed (``job`` and ``answer``) or refused (``refusal``),
    and whether the seeded failure draw makes it a 500."""

    custom_id: str
    job: Job | None
    answer: Answer | None
    refusal: BadRequest | None
    fails: bool

    @property
    def ok(self) -> bool:
        """Whether the line is answered 200 (in the output file)."""
        return self.refusal is None and not self.fails


Parse = Callable[[bytes], tuple[Job, Answer]]
"""Parses one body for the batch's endpoint (the real-time route's parser)."""


def _line_error(number: int, obj: Any, endpoint: str, seen: set[str]) -> LineError | None:
    if not isinstance(obj, dict):
        message = "This line is not parseable as a JSON object."
        return LineError("invalid_json_line", message, number)
    custom_id, body = obj.get("custom_id"), obj.get("body")
    if not isinstance(custom_id, str) or not custom_id:
        message = "Missing required parameter: 'custom_id' (a non-empty string)."
        return LineError("missing_required_parameter", message, number, "custom_id")
    if custom_id in seen:
        message = f"The custom_id {custom_id!r} is not unique in the file."
        return LineError("duplicate_custom_id", message, number, "custom_id")
    seen.add(custom_id)
    if obj.get("method") != "POST":
        return LineError("invalid_method", "The method must be 'POST'.", number, "method")
    if obj.get("url") != endpoint:
        message = f"The URL provided for this request does not match the batch endpoint {endpoint}."
        return LineError("invalid_url", message, number, "url")
    if not isinstance(body, dict):
        message = "Missing required parameter: 'body' (a JSON object)."
        return LineError("missing_required_parameter", message, number, "body")
    return None


def _objects(data: bytes) -> tuple[list[tuple[int, Any]], list[LineError]]:
    """The file's non-blank lines as ``(line number, JSON value)``; undecodable ones as errors."""
    objects: list[tuple[int, Any]] = []
    errors: list[LineError] = []
    for number, raw in enumerate(data.split(b"\n"), 1):
        if not raw.strip():
            continue
        try:
            objects.append((number, json.loads(raw)))
        except (ValueError, RecursionError):
            errors.append(LineError("invalid_json_line", "This line is not valid JSON.", number))
    return objects, errors


def _parsed(
    body: dict[str, Any], parse: Parse
) -> tuple[Job | None, Answer | None, BadRequest | None]:
    try:
        job, answer = parse(json.dumps(body).encode())
    except BadRequest as exc:
        return None, None, exc
    if job.stream:
        refusal = BadRequest("Streaming is not supported in the Batch API.", "stream")
        return None, None, refusal
    return job, answer, None


def read_lines(
    data: bytes, endpoint: str, *, parse: Parse, fails: Callable[[], bool]
) -> tuple[list[BatchLine], list[LineError]]:
    """Validate an input file for ``endpoint``: its lines, or the errors that fail it.

    Args:
        data: The input file's bytes.
        endpoint: The batch's endpoint (each line's ``url`` must equal it).
        parse: Parses one body into its job and answer (refusals raise ``BadRequest``).
        fails: Draws whether the next line fails (one draw a valid line, in file order).

    Returns:
        ``(lines, [])`` for a valid file, else ``([], errors)``.
    """
    objects, errors = _objects(data)
    if not objects and not errors:
        return [], [LineError("empty_file", "The batch input file is empty.")]
    if len(objects) + len(errors) > MAX_LINES:
        return [], [LineError("too_many_tasks", f"The file holds more than {MAX_LINES} requests.")]
    seen: set[str] = set()
    for number, obj in objects:
        error = _line_error(number, obj, endpoint, seen)
        if error is not None:
            errors.append(error)
    if errors:
        errors.sort(key=lambda e: e.line or 0)
        return [], errors[:MAX_REPORTED_ERRORS]
    lines = []
    for _, obj in objects:
        job, answer, refusal = _parsed(obj["body"], parse)
        lines.append(BatchLine(obj["custom_id"], job, answer, refusal, fails()))
    return lines, []


def _line_id() -> str:
    return f"batch_req_{uuid.uuid4().hex}"


def answered_line(line: BatchLine, *, rid: str, created: int) -> dict[str, Any]:
    """The output or error file line of a line that ran (``rid``: its answer's id)."""
    if line.refusal is not None:
        exc = line.refusal
        status, body = 400, error_body(exc.message, exc.type, exc.param, exc.code)
    elif line.fails:
        message = "The server had an error while processing your request. Sorry about that!"
        status, body = 500, error_body(message, "server_error", None, None)
    else:
        assert line.answer is not None  # a line without a refusal was parsed
        status, body = 200, dict(line.answer.body(rid, created))
    response = {"status_code": status, "request_id": f"req_{uuid.uuid4().hex}", "body": body}
    return {"id": _line_id(), "custom_id": line.custom_id, "response": response, "error": None}


def unrun_line(line: BatchLine, code: str) -> dict[str, Any]:
    """The error file line of a line never run (``code``: ``batch_expired`` or
    ``batch_cancelled``)."""
    error = {"code": code, "message": _UNRUN[code]}
    return {"id": _line_id(), "custom_id": line.custom_id, "response": None, "error": error}
