"""Batch jobs through the scheduler: OpenAI Batch API files in and out, crash-safe.

``semisched batch INPUT.jsonl -o OUTPUT.jsonl --base-url URL`` (see
`semisched.batch.cli`) is a thin shell over `BatchRun`:

1. **Read and validate everything first** (`semisched.batch.input`).
   Every line must be an OpenAI Batch API input object (``custom_id``,
   ``method: POST``, a supported ``url``, a ``body`` the SDK accepts).
   Problems carry their line number; unless ``skip_invalid``,
   `InvalidInput` is raised before anything is sent. With
   ``skip_invalid`` each bad line is written to the output as an error record
   (its ``id`` is ``batch_req_invalid_line_<N>``). A body's
   ``metadata.tenant`` names the line's tenant among those the job declares
   (`semisched.batch.tenants`); the provider never sees it.
2. **Resume** (`semisched.batch.output`). The output file is read first:
   ``custom_id``s already answered (successes and errors alike) are
   skipped, and a torn last line left by a killed run is cut off.
   ``retry_failed`` rewrites the file without its error records (atomically)
   so those requests are sent again.
3. **Plan** (`semisched.batch.forecast`). The prior source is loaded
   once and every request to send is built as the scheduler will see it;
   their makespan floor (`semisched.core.makespan_floor`) starts the
   progress ETA and ends in the summary as makespan / floor.
   `BatchRun.dry_run` (``--dry-run``) stops here: nothing is sent and
   no file is changed.
4. **Send through** [`semisched.Scheduler`][semisched.Scheduler] (`semisched.batch.sending`),
   within the concurrency cap and the ``rpm`` / ``tpm`` rate budget.
5. **Append and flush each result as it completes**: after ``kill -9`` every
   finished result is on disk, and a rerun sends only what has no result.
   Requests in flight at the kill have no result and are sent again; none is
   lost and none appears twice.
6. **Stop on request.** `BatchRun.stop` (Ctrl-C in the CLI) pauses
   dispatching, waits up to ``grace_s`` for calls in flight, records what
   finished and returns with ``interrupted`` set.

What a run did is `BatchSummary` (`semisched.batch.summary`).
Only the CLI and the benchmarks import this package; the SDK does not.
"""

from semisched.batch.forecast import BatchForecast, PriorsChoice, eta_s
from semisched.batch.input import (
    SUPPORTED_URLS,
    BatchError,
    BatchLine,
    InvalidInput,
    InvalidLine,
    check_body,
    load_body,
    read_input,
)
from semisched.batch.options import BatchOptions
from semisched.batch.output import (
    Answered,
    ErrorCode,
    ResultWriter,
    drop_errors,
    read_answered,
)
from semisched.batch.run import BatchPlan, BatchRun, run_batch
from semisched.batch.summary import BatchFailures, BatchProgress, BatchSummary

__all__ = [
    "SUPPORTED_URLS",
    "Answered",
    "BatchError",
    "BatchFailures",
    "BatchForecast",
    "BatchLine",
    "BatchOptions",
    "BatchPlan",
    "BatchProgress",
    "BatchRun",
    "BatchSummary",
    "ErrorCode",
    "InvalidInput",
    "InvalidLine",
    "PriorsChoice",
    "ResultWriter",
    "check_body",
    "drop_errors",
    "eta_s",
    "load_body",
    "read_answered",
    "read_input",
    "run_batch",
]
