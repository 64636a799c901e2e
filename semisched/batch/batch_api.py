"""The provider's Files and Batch APIs, as ``semisched batch`` uses them (``openai``'s client).

* `submit_batch`: journal the upload, upload the input file
  (``client.files.create(purpose="batch")``), journal its id, create the batch
  (``client.batches.create``, ``completion_window="24h"``, the upload's id in
  ``metadata``), journal its id (`semisched.batch.journal`'s order).
* `find_batch`: the batch made of an upload whose batch id was never journaled
  (``client.batches.list``, matched by ``metadata``).
* `read_lines`: an output or error file's lines (``client.files.content``).
* `line_outcome`: what one of those lines means: answered, failed for good, or not
  run (sent real-time instead).

What this module is not: it decides nothing about tiers (`semisched.batch.tier`) and
writes no output record (`semisched.batch.tiered`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, Final

from semisched.batch.input import BatchError
from semisched.batch.journal import Journal

__all__ = [
    "TERMINAL",
    "UPLOAD_KEY",
    "find_batch",
    "line_outcome",
    "read_lines",
    "submit_batch",
]

#: The ``metadata`` key of a batch that holds its upload's id.
UPLOAD_KEY: Final = "semisched_upload"
#: The statuses a batch never leaves.
TERMINAL: Final = frozenset({"completed", "failed", "expired", "cancelled"})
#: How many of the newest batches `find_batch` looks through.
FIND_LIMIT: Final = 1000


def _status(exc: BaseException) -> int | None:
    status = getattr(exc, "status_code", None)
    return status if isinstance(status, int) else None


async def submit_batch(
    client: Any, journal: Journal, upload: str, url: str, custom_ids: list[str], data: bytes
) -> Any | None:
    """Upload ``data`` (a Batch API input file of ``custom_ids`` to ``url``) and create its
    batch, journaling each step first; the Batch object, or ``None`` when the provider
    refused the upload or the batch (nothing billed: the upload is abandoned).

    Raises:
        BatchError: The provider could not be reached to create the batch, nor to find
            whether it was made (the upload stays open: a rerun finds out).
    """
    journal.upload(upload, url, custom_ids)
    try:
        stored = await client.files.create(file=(f"{upload}.jsonl", data), purpose="batch")
    except Exception:  # no file, or one no batch was made of: nothing billed
        journal.abandoned(upload)
        return None
    journal.file(upload, stored.id)
    try:
        batch = await client.batches.create(
            input_file_id=stored.id,
            endpoint=url,
            completion_window="24h",
            metadata={UPLOAD_KEY: upload},
        )
    except Exception as exc:
        status = _status(exc)
        if status is not None and 400 <= status < 500 and status not in (408, 409, 429):
            journal.abandoned(upload)  # refused: no batch
            return None
        batch = await find_batch(client, upload)  # it may have been made all the same
        if batch is None:
            journal.abandoned(upload)
            return None
    journal.batch(upload, batch.id)
    return batch


async def find_batch(client: Any, upload: str) -> Any | None:
    """The batch whose ``metadata`` names ``upload`` among the newest `FIND_LIMIT`
    (``None``: none).

    Raises:
        BatchError: The provider's batches cannot be listed.
    """
    seen = 0
    try:
        page = await client.batches.list(limit=100)  # pages by hand: no generator left open
        while True:
            for batch in page.data:
                metadata = getattr(batch, "metadata", None) or {}
                if isinstance(metadata, Mapping) and metadata.get(UPLOAD_KEY) == upload:
                    return batch
                seen += 1
            if seen >= FIND_LIMIT or not page.has_next_page():
                return None
            page = await page.get_next_page()
    except Exception as exc:
        raise BatchError(
            f"cannot list the provider's batches to find upload {upload}: {exc}; rerun the "
            "same command to resume"
        ) from None


async def read_lines(client: Any, file_id: str | None) -> list[dict[str, Any]]:
    """The JSON lines of an output or error file (``None``: no file, no lines)."""
    if file_id is None:
        return []
    content = await client.files.content(file_id)
    text = content.text if hasattr(content, "text") else bytes(content).decode()
    out = []
    for raw in text.splitlines():
        if raw.strip():
            line = json.loads(raw)
            if isinstance(line, dict) and isinstance(line.get("custom_id"), str):
                out.append(line)
    return out


def line_outcome(line: Mapping[str, Any]) -> str:
    """``"answered"`` (status 200), ``"failed"`` (an error a resend would meet again: a
    4xx other than 408, 409 and 429) or ``"unrun"`` (not run, expired, cancelled, or a
    server error: sent real-time instead)."""
    response = line.get("response")
    status = response.get("status_code") if isinstance(response, Mapping) else None
    if status == 200 and line.get("error") is None:
        return "answered"
    if isinstance(status, int) and 400 <= status < 500 and status not in (408, 409, 429):
        return "failed"
    return "unrun"
