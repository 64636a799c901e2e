"""The batch journal: which lines went to which Batch API batch, kept beside the output.

With ``--tier batch`` or ``auto``, ``semisched batch`` keeps ``OUTPUT.batches.jsonl`` next
to ``OUTPUT``: one JSON object a line, appended and flushed to the device (``fsync``)
before the step it announces, so that after ``kill -9`` a rerun never pays twice for a
line. The entries, by ``event``:

* ``start``: ``{"started_unix"}``: when the job first started (its deadlines count from
  it, `semisched.batch.deadlines`); the journal's first line.
* ``upload``: ``{"upload", "url", "custom_ids"}``: written *before* the input file is
  uploaded. ``upload`` is a fresh id of the client's own (``semisched-<hex>``), which the
  batch carries in its ``metadata`` (``semisched_upload``).
* ``file``: ``{"upload", "file_id"}``: the input file was uploaded.
* ``batch``: ``{"upload", "batch_id"}``: the batch was created.
* ``closed``: ``{"upload"}``: the batch ended and every line it answered is in the output;
  the lines it did not answer are free again (sent real-time).
* ``abandoned``: ``{"upload"}``: no batch was made of the upload; its lines are free.

Resume rules (`JournalState`): a line of an upload that is neither closed nor
abandoned belongs to its batch: it is neither sent real-time nor uploaded again. The run
retrieves that batch and goes on with it; an upload whose batch id was never written is
looked for among the provider's batches (``GET /v1/batches``) by its ``metadata``: found,
the run goes on with it; not found, no batch was ever made of it (nothing was billed) and
its lines are free. A torn last line (a kill mid-write) is ignored: the step it announced
had not started.

What this module is not: it talks to no provider (`semisched.batch.batch_api`).
"""

from __future__ import annotations

import json
import os
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from semisched.batch.input import BatchError

__all__ = ["JOURNAL_SUFFIX", "Journal", "JournalState", "Upload", "journal_path", "new_upload_id"]

#: What the journal's name adds to the output's.
JOURNAL_SUFFIX: Final = ".batches.jsonl"


def journal_path(output: Path) -> Path:
    """The journal of the output file ``output``."""
    return output.with_name(output.name + JOURNAL_SUFFIX)


def new_upload_id() -> str:
    """A fresh client-chosen upload id."""
    return f"semisched-{uuid.uuid4().hex}"


@dataclass(slots=True)
class Upload:
    """One upload and what became of it."""

    upload: str
    url: str
    custom_ids: tuple[str, ...]
    file_id: str | None = None
    batch_id: str | None = None
    over: bool = False


@dataclass(slots=True)
class JournalState:
    """What a journal holds (the module's resume rules)."""

    started_unix: float | None = None
    uploads: dict[str, Upload] = field(default_factory=dict)

    def open_uploads(self) -> list[Upload]:
        """Uploads neither closed nor abandoned, in the order they were made."""
        return [u for u in self.uploads.values() if not u.over]

    def claimed(self) -> frozenset[str]:
        """``custom_id``\\ s that belong to an open upload's batch."""
        return frozenset(cid for u in self.open_uploads() for cid in u.custom_ids)

    def apply(self, entry: Mapping[str, Any]) -> None:
        """Add one entry."""
        event, key = entry.get("event"), str(entry.get("upload"))
        if event == "start":
            self.started_unix = float(entry["started_unix"])
        elif event == "upload":
            self.uploads[key] = Upload(key, entry["url"], tuple(entry["custom_ids"]))
        elif key in self.uploads:
            upload = self.uploads[key]
            if event == "file":
                upload.file_id = entry["file_id"]
            elif event == "batch":
                upload.batch_id = entry["batch_id"]
            elif event in ("closed", "abandoned"):
                upload.over = True


def read_journal(path: Path) -> JournalState:
    """The journal at ``path`` (empty when there is none).

    Raises:
        BatchError: It cannot be read, or holds a line that is not a journal entry.
    """
    state = JournalState()
    if not path.exists():
        return state
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise BatchError(f"cannot read {os.fspath(path)!r}: {exc.strerror or exc}") from None
    whole = data[: data.rfind(b"\n") + 1]  # a torn last line announced nothing that started
    for number, raw in enumerate(whole.splitlines(), start=1):
        if not raw.strip():
            continue
        try:
            entry = json.loads(raw)
            state.apply(entry)
        except (ValueError, KeyError, TypeError, AttributeError):
            raise BatchError(
                f"{os.fspath(path)!r} line {number} is not a batch journal entry"
            ) from None
    return state


class Journal:
    """The journal of one output: read on opening, appended to after (module docstring).

    Args:
        output: The output file (the journal is `journal_path` of it).
        wall: Unix seconds (the job's start, when the journal is new).

    Raises:
        BatchError: It cannot be read or written.
    """

    def __init__(self, output: Path, wall: float | None = None) -> None:
        self.path = journal_path(output)
        self.state = read_journal(self.path)
        try:
            self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        except OSError as exc:
            raise BatchError(
                f"cannot write {os.fspath(self.path)!r}: {exc.strerror or exc}"
            ) from None
        torn = _torn(self.path)
        if torn:  # cut once, so the next entry starts on a fresh line
            os.ftruncate(self._fd, os.fstat(self._fd).st_size - torn)
        if self.state.started_unix is None:
            self.write({"event": "start", "started_unix": time.time() if wall is None else wall})

    def __repr__(self) -> str:
        return f"<Journal {os.fspath(self.path)!r} uploads={len(self.state.uploads)}>"

    def write(self, entry: Mapping[str, Any]) -> None:
        """Append ``entry``, on the device when this returns."""
        data = (json.dumps(entry, separators=(",", ":")) + "\n").encode()
        view = memoryview(data)
        while view:
            view = view[os.write(self._fd, view) :]
        os.fsync(self._fd)
        self.state.apply(entry)

    def upload(self, upload: str, url: str, custom_ids: list[str]) -> None:
        self.write({"event": "upload", "upload": upload, "url": url, "custom_ids": custom_ids})

    def file(self, upload: str, file_id: str) -> None:
        self.write({"event": "file", "upload": upload, "file_id": file_id})

    def batch(self, upload: str, batch_id: str) -> None:
        self.write({"event": "batch", "upload": upload, "batch_id": batch_id})

    def closed(self, upload: str) -> None:
        self.write({"event": "closed", "upload": upload})

    def abandoned(self, upload: str) -> None:
        self.write({"event": "abandoned", "upload": upload})

    def close(self) -> None:
        """Close it (idempotent)."""
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


def _torn(path: Path) -> int:
    """Bytes after the journal's last newline (a torn entry)."""
    data = path.read_bytes()
    return len(data) - (data.rfind(b"\n") + 1)
