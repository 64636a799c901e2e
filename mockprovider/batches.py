"""The mock's Batch API: OpenAI's ``/v1/batches`` over the Files API, on the virtual clock.

Routes (each behind the app's API-key check, ``mockprovider.auth``):

* ``POST /v1/batches``: ``{"input_file_id", "endpoint", "completion_window": "24h",
  "metadata"?}``, ``endpoint`` one of `ENDPOINTS`; the input
  file must exist (else 404) and have purpose ``batch``; ``metadata`` at most 16 string
  pairs. Answers the Batch object, ``validating``.
* ``GET /v1/batches/{id}``, ``POST /v1/batches/{id}/cancel`` (while ``validating`` or
  ``in_progress``; again while ``cancelling`` or ``cancelled``: the batch as it is; else 400),
  ``GET /v1/batches`` (newest first, ``limit`` 1 to 100, default 20, cursor ``after``:
  ``{"object": "list", "data", "first_id", "last_id", "has_more"}``).

The Batch object has OpenAI's fields: ``id`` (``batch_...``), ``object`` (``"batch"``),
``endpoint``, ``errors`` (``{"object": "list", "data": [{code, message, param, line}]}``
for a failed one, else ``null``), ``input_file_id``, ``completion_window``, ``status``,
``output_file_id``, ``error_file_id``, ``created_at``, ``in_progress_at``, ``expires_at``,
``finalizing_at``, ``completed_at``, ``failed_at``, ``expired_at``, ``cancelling_at``,
``cancelled_at`` (Unix seconds on the virtual clock, ``null`` until reached: ``completed_at -
created_at`` is the virtual turnaround), ``request_counts`` (``total``, ``completed``,
``failed``), ``metadata``, ``model`` (the first line's) and ``usage`` (the tokens of the
lines answered 200).

Progress is computed from the clock when a batch is read (``mockprovider.batch_state``: the
schedule, expiry and cancel); the output and error files are written at the first read after
its end (``batch_{id}_output.jsonl`` and ``batch_{id}_error.jsonl``, purpose
``batch_output``; lines as ``mockprovider.batch_lines`` says). A line's body is what the
real-time route answers, built by the same parser and body builders, but a batch line uses
no physics slot, no rate window, no quota and draws no real-time fault: its failures are
the ``batch_failure_rate`` draws. Its prompt enters the prefix cache when the batch is
created (``mockprovider.prefix_cache``), so lines that repeat a long prefix report cached
tokens. ``GET /v1/mock/stats`` counts batches and lines (``MockStats.batches``).
"""

from __future__ import annotations

import json
import random
import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Final

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from mockprovider.apis import parse_request
from mockprovider.auth import BearerAuth
from mockprovider.batch_lines import ENDPOINTS, read_lines
from mockprovider.batch_state import TERMINAL, BatchSettings, MockBatch, Schedule
from mockprovider.errors import error_body
from mockprovider.files import FileStore, VirtualDates, file_routes
from mockprovider.prefix_cache import PrefixCache
from mockprovider.responses import Answer
from mockprovider.stats import BatchStats
from mockprovider.wire import Api, BadRequest, Job

if TYPE_CHECKING:
    from mockprovider.app import MockConfig

__all__ = ["BatchService"]

_WINDOWS: Final = ("24h",)
_MAX_METADATA: Final = 16
_LIST_LIMIT: Final = (20, 100)  # default, most


class _NotFound(Exception):
    """A 404: ``message`` names what is missing."""

    def __init__(self, message: str, param: str | None) -> None:
        super().__init__(message)
        self.message, self.param = message, param


def _error(status: int, message: str, param: str | None = None, code: Any = None) -> Response:
    return JSONResponse(error_body(message, "invalid_request_error", param, code), status)


def _metadata(value: object) -> dict[str, str] | None:
    if value is None:
        return None
    bad = BadRequest(
        f"Invalid 'metadata': expected at most {_MAX_METADATA} pairs of strings "
        "(keys up to 64 characters, values up to 512).",
        "metadata",
        "invalid_type",
    )
    if not isinstance(value, dict) or len(value) > _MAX_METADATA:
        raise bad
    for k, v in value.items():
        if not isinstance(v, str) or len(k) > 64 or len(v) > 512:
            raise bad
    return dict(value)


def _create_request(raw: bytes) -> dict[str, Any]:
    """The fields of a ``POST /v1/batches`` body, checked."""
    try:
        body = json.loads(raw)
    except (ValueError, RecursionError):
        raise BadRequest("We could not parse the JSON body of your request.", None) from None
    if not isinstance(body, dict):
        raise BadRequest("The request body must be a JSON object.", None, "invalid_type")
    for name in ("input_file_id", "endpoint", "completion_window"):
        if name not in body:
            raise BadRequest(f"Missing required parameter: '{name}'.", name, "missing")
    if not isinstance(body["input_file_id"], str):
        raise BadRequest("Invalid 'input_file_id': expected a string.", "input_file_id")
    if body["endpoint"] not in ENDPOINTS:
        supported = ", ".join(ENDPOINTS)
        message = f"Invalid 'endpoint': {body['endpoint']!r}; supported: {supported}."
        raise BadRequest(message, "endpoint", "invalid_value")
    if body["completion_window"] not in _WINDOWS:
        message = "Invalid 'completion_window': only '24h' is supported."
        raise BadRequest(message, "completion_window", "invalid_value")
    return {
        "endpoint": body["endpoint"],
        "input_file_id": body["input_file_id"],
        "completion_window": body["completion_window"],
        "metadata": _metadata(body.get("metadata")),
    }


class BatchService:
    """The files and batches of one app, and the routes that serve them (see the module
    docstring).

    Args:
        config: The app's settings (``batch_*``, ``seed``, ``default_output_tokens``,
            ``context_tokens``).
        now: The app's virtual now (``PhysicsDriver.now``).
        cache: The app's prefix cache (lines are looked up in it and enter it at creation).
        new_id: A fresh answer id for a job (``chatcmpl-...``, ``resp_...``, ...).

    Attributes:
        settings: Turnaround, spread, failure and expiry rates, completion window.
        files: The app's files (input files read, output and error files written).
        dates: The app's virtual clock, in virtual and in Unix seconds.
    """

    def __init__(
        self,
        config: MockConfig,
        *,
        now: Callable[[], float],
        cache: PrefixCache,
        new_id: Callable[[Job], str],
    ) -> None:
        self.settings = BatchSettings.of(config)
        self.files, self.dates, self.cache = FileStore(), VirtualDates(now), cache
        self._rng = random.Random(f"mockprovider.batches:{config.seed}")
        self._new_id = new_id
        self._default_output = config.default_output_tokens
        self._context_tokens = config.context_tokens
        self._batches: dict[str, MockBatch] = {}

    def __repr__(self) -> str:
        return f"<BatchService batches={len(self._batches)}>"

    def _parse(self, api: Api, raw: bytes) -> tuple[Job, Answer]:
        job, answer = parse_request(
            api,
            {},
            raw,
            default_output=self._default_output,
            context_tokens=self._context_tokens,
            cache=self.cache,
        )
        self.cache.remember(job.prompt_text)
        return job, answer

    def create(self, raw: bytes) -> MockBatch:
        """Create a batch from a ``POST /v1/batches`` body.

        Raises:
            BadRequest: A bad body, or an input file without purpose ``batch``.
            _NotFound: No such input file.
        """
        request = _create_request(raw)
        stored = self.files.get(request["input_file_id"])
        if stored is None:
            message = f"No such File object: {request['input_file_id']}"
            raise _NotFound(message, "input_file_id")
        if stored.purpose != "batch":
            message = "The input file must have been uploaded with purpose 'batch'."
            raise BadRequest(message, "input_file_id", "invalid_value")
        schedule = Schedule.draw(self.dates.now(), self.settings, self._rng)
        api, rate = ENDPOINTS[request["endpoint"]], self.settings.failure_rate
        lines, errors = read_lines(
            stored.data,
            request["endpoint"],
            parse=lambda raw: self._parse(api, raw),
            fails=lambda: self._rng.random() < rate,
        )
        batch = MockBatch(f"batch_{uuid.uuid4().hex}", request, schedule, lines, errors)
        self._batches[batch.id] = batch
        return batch

    def _write(self, batch: MockBatch, now: float) -> None:
        """Write the output and error files of a batch that has ended."""
        output, errors = batch.file_lines(now, self._new_id, self.dates.unix)
        created = self.dates.unix(batch.end())
        for kind, lines in (("output", output), ("error", errors)):
            if not lines:
                continue
            data = "".join(json.dumps(x, separators=(",", ":")) + "\n" for x in lines).encode()
            name = f"batch_{batch.id.removeprefix('batch_')}_{kind}.jsonl"
            stored = self.files.add(data, filename=name, purpose="batch_output", created_at=created)
            if kind == "output":
                batch.output_file_id = stored.id
            else:
                batch.error_file_id = stored.id
        batch.written = True

    def to_object(self, batch: MockBatch) -> dict[str, Any]:
        """The Batch object of ``batch`` now (writing its files first if it has just ended)."""
        now = self.dates.now()
        status = batch.status(now)
        if status in TERMINAL and status != "failed" and not batch.written:
            self._write(batch, now)
        stamps = {
            k: None if t is None else self.dates.unix(t) for k, t in batch.stamps(now).items()
        }
        errors = [e.to_object() for e in batch.errors] if status == "failed" else None
        model = next((line.job.model for line in batch.lines if line.job), None)
        return {
            "id": batch.id,
            "object": "batch",
            **batch.request,
            "errors": None if errors is None else {"object": "list", "data": errors},
            "status": status,
            "output_file_id": batch.output_file_id,
            "error_file_id": batch.error_file_id,
            **stamps,
            "request_counts": batch.request_counts(now),
            "model": model,
            "usage": batch.usage(now),
        }

    def stats(self) -> BatchStats:
        """The batches and their lines now."""
        now = self.dates.now() if self._batches else 0.0
        statuses = [b.status(now) for b in self._batches.values()]
        counts = [b.request_counts(now) for b in self._batches.values()]
        return BatchStats(
            batches=len(statuses),
            completed=statuses.count("completed"),
            failed=statuses.count("failed"),
            expired=statuses.count("expired"),
            cancelled=statuses.count("cancelled"),
            lines=sum(c["total"] for c in counts),
            lines_completed=sum(c["completed"] for c in counts),
            lines_failed=sum(c["failed"] for c in counts),
        )

    def routes(self, auth: BearerAuth) -> list[Route]:
        """The Files API's routes (``mockprovider.files``) and the Batch API's."""
        api = _BatchesApi(self, auth)
        return [
            *file_routes(self.files, auth, self.dates),
            Route("/v1/batches", api.create, methods=["POST"]),
            Route("/v1/batches", api.listing, methods=["GET"]),
            Route("/v1/batches/{batch_id}", api.retrieve, methods=["GET"]),
            Route("/v1/batches/{batch_id}/cancel", api.cancel, methods=["POST"]),
        ]

    def get(self, batch_id: str) -> MockBatch | None:
        """The batch ``batch_id``, or ``None``."""
        return self._batches.get(batch_id)

    def newest_first(self) -> list[MockBatch]:
        """Every batch, the newest first."""
        return list(reversed(self._batches.values()))


class _BatchesApi:
    """The handlers of the routes."""

    def __init__(self, service: BatchService, auth: BearerAuth) -> None:
        self.service, self.auth = service, auth

    async def create(self, request: Request) -> Response:
        denied = self.auth.check(request.headers)
        if denied is not None:
            return denied
        try:
            batch = self.service.create(await request.body())
        except BadRequest as exc:
            return _error(400, exc.message, exc.param, exc.code)
        except _NotFound as exc:
            return _error(404, exc.message, exc.param)
        return JSONResponse(self.service.to_object(batch))

    def _found(self, request: Request) -> MockBatch | Response:
        denied = self.auth.check(request.headers)
        if denied is not None:
            return denied
        batch_id = request.path_params["batch_id"]
        batch = self.service.get(batch_id)
        return _error(404, f"No batch found with id '{batch_id}'.") if batch is None else batch

    async def retrieve(self, request: Request) -> Response:
        found = self._found(request)
        return found if isinstance(found, Response) else JSONResponse(self.service.to_object(found))

    async def cancel(self, request: Request) -> Response:
        found = self._found(request)
        if isinstance(found, Response):
            return found
        status = found.status(self.service.dates.now())
        if status in ("validating", "in_progress"):
            found.cancel(self.service.dates.now())
        elif status not in ("cancelling", "cancelled"):
            return _error(400, f"Cannot cancel a batch with status '{status}'.", None)
        return JSONResponse(self.service.to_object(found))

    async def listing(self, request: Request) -> Response:
        denied = self.auth.check(request.headers)
        if denied is not None:
            return denied
        batches = self.service.newest_first()
        after = request.query_params.get("after")
        if after is not None:
            ids = [b.id for b in batches]
            batches = batches[ids.index(after) + 1 :] if after in ids else []
        limit = request.query_params.get("limit", str(_LIST_LIMIT[0]))
        if not limit.isdigit() or not 1 <= int(limit) <= _LIST_LIMIT[1]:
            return _error(400, f"Invalid 'limit': expected 1 to {_LIST_LIMIT[1]}.", "limit")
        page = batches[: int(limit)]
        return JSONResponse(
            {
                "object": "list",
                "data": [self.service.to_object(b) for b in page],
                "first_id": page[0].id if page else None,
                "last_id": page[-1].id if page else None,
                "has_more": len(batches) > len(page),
            }
        )
