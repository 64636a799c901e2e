"""The Batch API tier of ``semisched batch``: its batches uploaded, polled, cancelled, read.

`BatchTier` holds the job's batches in progress (`semisched.batch.tier` says
which lines go there, `semisched.batch.batch_api` talks to the provider):

1. `BatchTier.submit` groups lines into batches (one per endpoint URL, within
   OpenAI's limits) and uploads each, journaled first (`semisched.batch.journal`). A
   refused upload's lines are sent real-time.
2. `BatchTier.resume` takes back the batches a killed run left open: each one's
   lines without a record stay with it; an upload whose batch is unknown is looked for by
   its ``metadata``, and its lines are free (returned) when no batch was made of it.
3. `BatchTier.run` polls every batch each ``poll_s`` on the job's clock. A batch that
   ended (completed, expired, cancelled, failed) has its output and error files read:
   each answered line's record is written (`TierHost.batch_answer`); a line it did
   not run, or answered with a server error, is sent real-time (`TierHost.resend`);
   then the journal closes it. A batch whose slack runs out
   (`must_cancel`) is cancelled, and read once the cancel
   completes (``--tier auto`` only: with ``--tier batch`` a batch runs to its end). A
   completed batch's turnaround (``completed_at - created_at``) updates the
   estimate; one unfinished after ``t`` seconds counts as at least ``t``.

Errors reaching the provider while polling are retried at the next poll.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from semisched.batch.batch_api import (
    TERMINAL,
    find_batch,
    line_outcome,
    read_lines,
    submit_batch,
)
from semisched.batch.deadlines import Deadlines
from semisched.batch.input import BatchLine
from semisched.batch.journal import Journal, Upload, new_upload_id
from semisched.batch.tier import Turnaround, group_lines, must_cancel
from semisched.runtime.clock import Clock

__all__ = ["BatchTier", "TierHost"]


class TierHost(Protocol):
    """What the batch tier needs of its run."""

    def batch_answer(self, line: BatchLine, answer: Mapping[str, Any], batch_id: str) -> None:
        """Record a line a batch answered (200, or an error a resend would meet again)."""

    def resend(self, lines: Sequence[BatchLine]) -> None:
        """Send ``lines`` real-time."""

    def body_of(self, line: BatchLine) -> dict[str, Any]:
        """``line``'s body as the provider takes it."""

    def need_s(self, lines: Sequence[BatchLine]) -> float:
        """The time ``lines`` need real-time (`realtime_need_s`)."""


@dataclass(slots=True)
class _Active:
    """A batch in progress and its lines without a record."""

    upload: str
    batch_id: str
    created: float
    lines: dict[str, BatchLine]
    cancelling: bool = False


class BatchTier:
    """The job's batches (module docstring).

    Args:
        client: The Batch API endpoint's ``AsyncOpenAI``.
        journal: The output's journal.
        clock: The job's clock.
        turnaround: The turnaround estimate, updated here.
        poll_s: Seconds between polls, on ``clock``.
        deadlines: The job's deadlines.
        host: The run.
        cancels: Whether a batch whose slack runs out is cancelled (``--tier auto``; with
            ``--tier batch`` every line stays with its batch).
    """

    def __init__(
        self,
        *,
        client: Any,
        journal: Journal,
        clock: Clock,
        turnaround: Turnaround,
        poll_s: float,
        deadlines: Deadlines,
        host: TierHost,
        cancels: bool = True,
    ) -> None:
        self.client, self.journal, self.clock = client, journal, clock
        self.turnaround, self.poll_s, self.deadlines, self.host = (
            turnaround, poll_s, deadlines, host
        )  # fmt: skip
        self.cancels = cancels
        self.active: list[_Active] = []
        self.created = 0
        self.cancelled = 0

    def __repr__(self) -> str:
        return f"<BatchTier active={len(self.active)} created={self.created}>"

    async def submit(self, lines: Sequence[BatchLine], **limits: int) -> None:
        """Upload ``lines`` as batches (``limits``: `group_lines`' ``max_lines``,
        ``max_bytes``)."""
        groups = group_lines(lines, url=lambda x: x.url, size=lambda x: x.size, **limits)
        for group in groups:
            data = b"".join(
                (json.dumps({"custom_id": x.custom_id, "method": "POST", "url": x.url,
                             "body": self.host.body_of(x)}, ensure_ascii=False) + "\n").encode()
                for x in group
            )  # fmt: skip
            upload = new_upload_id()
            ids = [x.custom_id for x in group]
            batch = await submit_batch(self.client, self.journal, upload, group[0].url, ids, data)
            if batch is None:
                self.host.resend(group)
                continue
            self.created += 1
            lines_by_id = {x.custom_id: x for x in group}
            self.active.append(_Active(upload, batch.id, self.clock.now(), lines_by_id))

    async def resume(
        self, uploads: Sequence[Upload], todo: Mapping[str, BatchLine]
    ) -> list[BatchLine]:
        """Take back the open ``uploads`` (their lines without a record are in ``todo``);
        return the lines of uploads no batch was made of (free again)."""
        free: list[BatchLine] = []
        for upload in uploads:
            lines = {cid: todo[cid] for cid in upload.custom_ids if cid in todo}
            batch_id = upload.batch_id
            if batch_id is None:
                found = await find_batch(self.client, upload.upload)
                if found is None:
                    self.journal.abandoned(upload.upload)
                    free.extend(lines.values())
                    continue
                batch_id = found.id
                self.journal.batch(upload.upload, batch_id)
            if not lines:
                self.journal.closed(upload.upload)
                continue
            self.active.append(_Active(upload.upload, batch_id, self.clock.now(), lines))
        return free

    async def run(self) -> None:
        """Poll until every batch has ended and been read."""
        while self.active:
            for job in list(self.active):
                try:
                    await self._poll(job)
                except Exception:  # the provider unreachable: try again at the next poll
                    continue
            if self.active:
                await self.clock.sleep(self.poll_s)

    def _earliest(self, job: _Active) -> float | None:
        due = [self.deadlines.of(x.deadline_s) for x in job.lines.values()]
        known = [d for d in due if d is not None]
        return min(known) if known else None

    async def _poll(self, job: _Active) -> None:
        batch = await self.client.batches.retrieve(job.batch_id)
        now = self.clock.now()
        if batch.status in TERMINAL:
            await self._finish(job, batch, now)
            return
        self.turnaround.at_least(now - job.created)
        if job.cancelling or not self.cancels:
            return
        need = self.host.need_s(list(job.lines.values()))
        if must_cancel(self._earliest(job), now, need, self.poll_s):
            job.cancelling = True
            self.cancelled += 1
            await self.client.batches.cancel(job.batch_id)

    async def _finish(self, job: _Active, batch: Any, now: float) -> None:
        answers = [
            *await read_lines(self.client, getattr(batch, "output_file_id", None)),
            *await read_lines(self.client, getattr(batch, "error_file_id", None)),
        ]
        unrun: list[BatchLine] = []
        for answer in answers:
            line = job.lines.pop(answer["custom_id"], None)
            if line is None:
                continue
            if line_outcome(answer) == "unrun":
                unrun.append(line)
            else:
                self.host.batch_answer(line, answer, job.batch_id)
        unrun.extend(job.lines.values())
        job.lines.clear()
        created = getattr(batch, "created_at", None)
        completed = getattr(batch, "completed_at", None)
        if batch.status == "completed" and created is not None and completed is not None:
            self.turnaround.observe(float(completed) - float(created))
        elif batch.status != "completed":
            self.turnaround.at_least(now - job.created)
        self.journal.closed(job.upload)
        self.active.remove(job)
        if unrun:
            self.host.resend(unrun)

