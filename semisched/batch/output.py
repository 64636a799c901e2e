"""Writing a ``semisched batch`` output file crash-safely, and reading it back to resume.

The output is an OpenAI Batch API output file: one record per line, ``id``,
``custom_id``, ``response`` (``status_code``, ``request_id``, ``body``) and
``error``; a success record adds ``semisched``, when it was sent and answered
(`semisched.batch.timing`). `ResultWriter` appends each record as one ``write`` of a
whole line on an ``O_APPEND`` descriptor with no user-space buffer, so after
``kill -9`` every finished result is on disk. `read_answered` is the
resume state: which ``custom_id``s already have a record (a torn last line
left by a killed run is cut off first); `drop_errors` rewrites the file
without its error records (``--retry-failed``), atomically. A dry run reads
the same state without changing the file (``repair=False``,
``count_errors=False``) and checks the output could be written
(`check_writable`).

This module does not read the input (`semisched.batch.input`) and sends
nothing (`semisched.batch.run`); it maps outcomes to records, not to
decisions.
"""

from __future__ import annotations

import json
import os
import tempfile
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any

from semisched.batch.input import BatchError, InvalidLine
from semisched.errors import (
    DeadlineExceeded,
    ProviderError,
    QueueFull,
    QuotaExceeded,
    RateLimited,
    RequestError,
    RequestRejected,
    SchedulerClosed,
)

__all__ = [
    "INVALID_ID_PREFIX",
    "Answered",
    "ErrorCode",
    "ResultWriter",
    "check_writable",
    "drop_errors",
    "error_code",
    "error_record",
    "invalid_line_record",
    "read_answered",
    "success_record",
]

#: Record ``id`` prefix of an invalid input line's error record (the line number follows).
INVALID_ID_PREFIX = "batch_req_invalid_line_"


class ErrorCode(StrEnum):
    """The ``error.code`` of a record for a request that got no response.

    The scheduler's outcomes keep the names earlier output files carry
    (``QueueFull`` and ``SchedulerClosed`` are the exception names).
    """

    PROVIDER_ERROR = "provider_error"
    RATE_LIMITED = "rate_limited"
    INSUFFICIENT_QUOTA = "insufficient_quota"
    DEADLINE_EXCEEDED = "deadline_exceeded"
    REJECTED = "rejected"
    QUEUE_FULL = "QueueFull"
    SCHEDULER_CLOSED = "SchedulerClosed"
    SCHEDULER_ERROR = "SemischedError"
    INPUT_CHANGED = "input_changed"
    INVALID_LINE = "invalid_line"


@dataclass(frozen=True, slots=True, kw_only=True)
class Answered:
    """What an existing output file already holds (the resume state).

    Attributes:
        custom_ids: ``custom_id``s with a record (success or error); records
            of invalid input lines count by their ``id``, not their ``custom_id``.
        record_ids: Every record ``id``.
        cut_bytes: Bytes of a torn last line cut off before reading.
    """

    custom_ids: frozenset[str] = frozenset()
    record_ids: frozenset[str] = frozenset()
    cut_bytes: int = 0

    def has_invalid_line(self, line: int) -> bool:
        """Whether invalid input line ``line`` already has its error record."""
        return f"{INVALID_ID_PREFIX}{line}" in self.record_ids


def _cut_torn_line(file: Path, repair: bool) -> tuple[bytes, int]:
    """The file's whole lines, after cutting a last line without its newline
    (only from what is returned when not ``repair``)."""
    data = file.read_bytes()
    keep = data.rfind(b"\n") + 1
    cut = len(data) - keep
    if cut and repair:
        with open(file, "r+b") as handle:
            handle.truncate(keep)
    return data[:keep], cut


def read_answered(
    path: str | os.PathLike[str], *, repair: bool = True, count_errors: bool = True
) -> Answered:
    """What the output file at ``path`` already answers (nothing if it does not exist).

    A last line without its newline (a run killed mid-write) is cut off so the
    next append starts on a fresh line; that request is sent again.

    Args:
        path: The output file.
        repair: Cut a torn last line off the file; ``False`` (a dry run) only
            ignores it and leaves the file as it is.
        count_errors: Count error records as answered; ``False`` reads the
            file as `drop_errors` would leave it (``--retry-failed``
            without rewriting the file).

    Raises:
        BatchError: The file exists but cannot be read or repaired, or holds a
            line that is not a result record.
    """
    file = Path(path)
    if not file.exists():
        return Answered()
    try:
        data, cut = _cut_torn_line(file, repair)
    except OSError as exc:
        raise BatchError(f"cannot read output {os.fspath(path)!r}: {exc.strerror or exc}") from None
    answered: set[str] = set()
    ids: set[str] = set()
    for number, raw in enumerate(data.splitlines(), start=1):
        if not raw.strip():
            continue
        try:
            record = json.loads(raw)
            rid, cid = record.get("id"), record.get("custom_id")
        except (ValueError, AttributeError):
            raise BatchError(
                f"output {os.fspath(path)!r} line {number} is not a result record; "
                "is it the output of another tool? Use another -o path."
            ) from None
        if not count_errors and record.get("error") is not None:
            continue
        if isinstance(rid, str):
            ids.add(rid)
        if isinstance(cid, str) and not (
            isinstance(rid, str) and rid.startswith(INVALID_ID_PREFIX)
        ):
            answered.add(cid)
    return Answered(custom_ids=frozenset(answered), record_ids=frozenset(ids), cut_bytes=cut)


def drop_errors(path: str | os.PathLike[str]) -> int:
    """Rewrite the output without its error records (atomically); returns how many went."""
    file = Path(path)
    if not file.exists():
        return 0
    kept: list[bytes] = []
    dropped = 0
    for raw in file.read_bytes().splitlines(keepends=True):
        try:
            failed = json.loads(raw).get("error") is not None
        except (ValueError, AttributeError):
            failed = False
        if failed:
            dropped += 1
        else:
            kept.append(raw)
    fd, tmp = tempfile.mkstemp(dir=file.parent, prefix=file.name, suffix=".tmp")
    with os.fdopen(fd, "wb") as handle:
        handle.writelines(kept)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(tmp, file)
    return dropped


def check_writable(path: str | os.PathLike[str]) -> None:
    """Refuse an output `ResultWriter` could not open, without creating it (a dry run).

    Raises:
        BatchError: The file (or, when it does not exist, its folder) is not writable.
    """
    file = Path(path)
    problem = None
    if file.is_dir():
        problem = "Is a directory"
    elif not file.exists() and not file.parent.is_dir():
        problem = "No such file or directory"
    elif not os.access(file if file.exists() else file.parent, os.W_OK):
        problem = "Permission denied"
    if problem is not None:
        raise BatchError(f"cannot write output {os.fspath(path)!r}: {problem}")


class ResultWriter:
    """Appends one result record per line; each is on disk (page cache) when ``write`` returns."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        try:
            self._fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        except OSError as exc:
            raise BatchError(
                f"cannot write output {os.fspath(path)!r}: {exc.strerror or exc}"
            ) from None
        self.path = Path(path)

    def __repr__(self) -> str:
        return f"<ResultWriter {os.fspath(self.path)!r} {'open' if self._fd >= 0 else 'closed'}>"

    def write(self, record: Mapping[str, Any]) -> None:
        """Append ``record`` as one JSON line."""
        data = (json.dumps(record, ensure_ascii=False, separators=(",", ":")) + "\n").encode()
        view = memoryview(data)
        while view:  # a regular-file append is whole in practice; loop for the rare short write
            written = os.write(self._fd, view)
            view = view[written:]

    def close(self) -> None:
        """Flush to the device and close (idempotent)."""
        if self._fd >= 0:
            os.fsync(self._fd)
            os.close(self._fd)
            self._fd = -1


def _new_id() -> str:
    return f"batch_req_{uuid.uuid4().hex}"


def success_record(
    custom_id: str, response: Any, timing: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """A Batch API output record for a provider response; ``timing`` (when it was sent
    and answered, `semisched.batch.timing`) goes under the extra key ``semisched``."""
    dump = getattr(response, "model_dump", None)
    body = dump(mode="json") if callable(dump) else response
    record: dict[str, Any] = {
        "id": _new_id(),
        "custom_id": custom_id,
        "response": {
            "status_code": 200,
            "request_id": getattr(response, "_request_id", None),
            "body": body,
        },
        "error": None,
    }
    if timing is not None:
        record["semisched"] = dict(timing)
    return record


def error_record(
    custom_id: str | None,
    code: ErrorCode,
    message: str,
    status_code: int | None = None,
    rid: str | None = None,
) -> dict[str, Any]:
    """A Batch API output record for a request that produced no response."""
    response = None
    if status_code is not None:
        response = {
            "status_code": status_code,
            "request_id": None,
            "body": {"error": {"message": message, "type": code.value, "code": code.value}},
        }
    return {
        "id": rid or _new_id(),
        "custom_id": custom_id,
        "response": response,
        "error": {"code": code.value, "message": message},
    }


def invalid_line_record(problem: InvalidLine) -> dict[str, Any]:
    """The error record of an invalid input line (its ``id`` names the line)."""
    return error_record(
        problem.custom_id,
        ErrorCode.INVALID_LINE,
        str(problem),
        rid=f"{INVALID_ID_PREFIX}{problem.line}",
    )


def error_code(exc: RequestError) -> tuple[ErrorCode, int | None]:
    """The record's error ``code`` and HTTP status for a scheduler outcome."""
    if isinstance(exc, QuotaExceeded):
        return ErrorCode.INSUFFICIENT_QUOTA, exc.status_code
    if isinstance(exc, RateLimited):
        return ErrorCode.RATE_LIMITED, exc.status_code
    if isinstance(exc, ProviderError):
        return ErrorCode.PROVIDER_ERROR, exc.status_code
    if isinstance(exc, DeadlineExceeded):
        return ErrorCode.DEADLINE_EXCEEDED, None
    if isinstance(exc, RequestRejected):
        return ErrorCode.REJECTED, None
    if isinstance(exc, QueueFull):
        return ErrorCode.QUEUE_FULL, None
    if isinstance(exc, SchedulerClosed):
        return ErrorCode.SCHEDULER_CLOSED, None
    return ErrorCode.SCHEDULER_ERROR, None
