"""The mock's Files API: uploads kept in memory, as OpenAI's ``/v1/files`` serves them.

Routes (each behind the app's API-key check, ``mockprovider.auth``):

* ``POST /v1/files``: a ``multipart/form-data`` body with a ``file`` part (its filename kept)
  and a ``purpose`` field, one of `PURPOSES`; answers the File object
  ``{"id": "file-...", "object": "file", "bytes", "created_at", "filename", "purpose",
  "status": "processed", "status_details": null, "expires_at": null}``. The body is parsed
  with the standard library (no ``python-multipart``); the app's body limit (32 MiB) applies.
* ``GET /v1/files`` (``purpose`` filter, newest first, ``limit`` up to 10,000, cursor
  ``after``), ``GET /v1/files/{id}``, ``GET /v1/files/{id}/content`` (the raw bytes) and
  ``DELETE /v1/files/{id}`` (``{"id", "object": "file", "deleted": true}``).

An unknown id gets 404 ``{"error": {"message": "No such File object: ID", "type":
"invalid_request_error", "param": "id", "code": null}}``; a bad upload gets 400
``invalid_request_error`` naming the parameter. The Batch API (``mockprovider.batches``)
reads its input files here and writes its output and error files here (purpose
``batch_output``). Timestamps are Unix seconds on the mock's virtual clock
(`VirtualDates`).
"""

from __future__ import annotations

import math
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from email.message import Message
from email.parser import HeaderParser
from typing import Any, Final

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from mockprovider.auth import BearerAuth
from mockprovider.errors import error_body
from mockprovider.wire import BadRequest

__all__ = ["PURPOSES", "FileStore", "StoredFile", "VirtualDates", "file_routes", "parse_form"]

#: The purposes an upload may name (OpenAI's).
PURPOSES: Final = frozenset({"assistants", "batch", "fine-tune", "vision", "user_data", "evals"})
_MAX_LIST: Final = 10_000


class VirtualDates:
    """Unix seconds on the mock's virtual clock: virtual time ``t`` is the whole Unix second
    of the first reading plus ``t`` minus the virtual time then, so virtual spans show
    unscaled (``unix(t1) - unix(t0)`` is ``t1 - t0`` give or take the rounding).

    Args:
        now: The app's virtual now (``PhysicsDriver.now``).
    """

    __slots__ = ("_anchor", "_now")

    def __init__(self, now: Callable[[], float]) -> None:
        self._now = now
        self._anchor: float | None = None

    def now(self) -> float:
        """Virtual seconds now."""
        return self._now()

    def unix(self, virtual: float) -> int:
        """Virtual time ``virtual`` as whole Unix seconds."""
        if self._anchor is None:
            self._anchor = math.floor(time.time() - self._now())
        return int(self._anchor + virtual)


@dataclass(frozen=True, slots=True)
class StoredFile:
    """One file the mock holds."""

    id: str
    filename: str
    purpose: str
    created_at: int
    data: bytes

    def to_object(self) -> dict[str, Any]:
        """The File object OpenAI answers for it."""
        return {
            "id": self.id,
            "object": "file",
            "bytes": len(self.data),
            "created_at": self.created_at,
            "filename": self.filename,
            "purpose": self.purpose,
            "status": "processed",
            "status_details": None,
            "expires_at": None,
        }


class FileStore:
    """The files of one app, by id (insertion order: oldest first)."""

    __slots__ = ("_files",)

    def __init__(self) -> None:
        self._files: dict[str, StoredFile] = {}

    def __repr__(self) -> str:
        return f"<FileStore files={len(self._files)}>"

    def add(self, data: bytes, *, filename: str, purpose: str, created_at: int) -> StoredFile:
        """Keep ``data`` as a new file and return it."""
        stored = StoredFile(f"file-{uuid.uuid4().hex[:24]}", filename, purpose, created_at, data)
        self._files[stored.id] = stored
        return stored

    def get(self, file_id: str) -> StoredFile | None:
        """The file ``file_id``, or ``None``."""
        return self._files.get(file_id)

    def delete(self, file_id: str) -> bool:
        """Forget ``file_id``; whether it existed."""
        return self._files.pop(file_id, None) is not None

    def newest_first(self) -> list[StoredFile]:
        """Every file, the newest first."""
        return list(reversed(self._files.values()))


def _form_error(message: str, param: str | None = None) -> BadRequest:
    return BadRequest(message, param, "invalid_value" if param else None)


def parse_form(content_type: str, body: bytes) -> dict[str, tuple[str | None, bytes]]:
    """A ``multipart/form-data`` body as ``{name: (filename or None, bytes)}`` (exact bytes).

    Raises:
        BadRequest: Not a multipart form, or a part without a ``name``.
    """
    header = Message()
    header["content-type"] = content_type
    boundary = header.get_param("boundary")
    if header.get_content_type() != "multipart/form-data" or not isinstance(boundary, str):
        raise _form_error("The body must be multipart/form-data with a boundary.")
    delimiter = b"\r\n--" + boundary.encode("latin-1")
    form: dict[str, tuple[str | None, bytes]] = {}
    for chunk in (b"\r\n" + body).split(delimiter)[1:]:
        if chunk.startswith(b"--"):  # the closing delimiter
            break
        head, sep, data = chunk[2:].partition(b"\r\n\r\n")
        if not chunk.startswith(b"\r\n") or not sep:
            raise _form_error("The multipart body is malformed.")
        part = HeaderParser().parsestr(head.decode("utf-8", "replace"))
        name = part.get_param("name", header="content-disposition")
        if not isinstance(name, str):
            raise _form_error("A multipart part has no name.")
        form[name] = (part.get_filename(), data)
    return form


def _error(
    status: int, message: str, param: str | None = None, code: str | None = None
) -> Response:
    return JSONResponse(error_body(message, "invalid_request_error", param, code), status)


def _not_found(file_id: str) -> Response:
    return _error(404, f"No such File object: {file_id}", "id")


def _upload(form: dict[str, tuple[str | None, bytes]]) -> tuple[bytes, str, str]:
    """``(data, filename, purpose)`` of an upload form."""
    if "file" not in form:
        raise BadRequest("Missing required parameter: 'file'.", "file", "missing")
    if "purpose" not in form:
        raise BadRequest("Missing required parameter: 'purpose'.", "purpose", "missing")
    filename, data = form["file"]
    purpose = form["purpose"][1].decode("utf-8", "replace").strip()
    if purpose not in PURPOSES:
        raise _form_error(
            f"Invalid 'purpose': {purpose!r}; expected one of {', '.join(sorted(PURPOSES))}.",
            "purpose",
        )
    return data, filename or "upload", purpose


class _FilesApi:
    """The handlers of the routes (see the module docstring)."""

    def __init__(self, store: FileStore, auth: BearerAuth, dates: VirtualDates) -> None:
        self.store, self.auth, self.dates = store, auth, dates

    async def upload(self, request: Request) -> Response:
        denied = self.auth.check(request.headers)
        if denied is not None:
            return denied
        try:
            form = parse_form(request.headers.get("content-type", ""), await request.body())
            data, filename, purpose = _upload(form)
        except BadRequest as exc:
            return _error(400, exc.message, exc.param, None if exc.code is None else str(exc.code))
        created = self.dates.unix(self.dates.now())
        stored = self.store.add(data, filename=filename, purpose=purpose, created_at=created)
        return JSONResponse(stored.to_object())

    async def listing(self, request: Request) -> Response:
        denied = self.auth.check(request.headers)
        if denied is not None:
            return denied
        query = request.query_params
        files = self.store.newest_first()
        if "purpose" in query:
            files = [f for f in files if f.purpose == query["purpose"]]
        after = query.get("after")
        if after is not None:
            ids = [f.id for f in files]
            files = files[ids.index(after) + 1 :] if after in ids else []
        limit = query.get("limit", str(_MAX_LIST))
        if not limit.isdigit() or not 1 <= int(limit) <= _MAX_LIST:
            return _error(400, f"Invalid 'limit': expected 1 to {_MAX_LIST}.", "limit")
        page = files[: int(limit)]
        data = [f.to_object() for f in page]
        return JSONResponse(
            {
                "object": "list",
                "data": data,
                "first_id": page[0].id if page else None,
                "last_id": page[-1].id if page else None,
                "has_more": len(files) > len(page),
            }
        )

    def _found(self, request: Request) -> StoredFile | Response:
        denied = self.auth.check(request.headers)
        if denied is not None:
            return denied
        file_id = request.path_params["file_id"]
        stored = self.store.get(file_id)
        return _not_found(file_id) if stored is None else stored

    async def retrieve(self, request: Request) -> Response:
        found = self._found(request)
        return found if isinstance(found, Response) else JSONResponse(found.to_object())

    async def content(self, request: Request) -> Response:
        found = self._found(request)
        if isinstance(found, Response):
            return found
        return Response(found.data, media_type="application/octet-stream")

    async def delete(self, request: Request) -> Response:
        found = self._found(request)
        if isinstance(found, Response):
            return found
        self.store.delete(found.id)
        return JSONResponse({"id": found.id, "object": "file", "deleted": True})


def file_routes(store: FileStore, auth: BearerAuth, dates: VirtualDates) -> list[Route]:
    """The Files API's routes over ``store`` (see the module docstring)."""
    api = _FilesApi(store, auth, dates)
    return [
        Route("/v1/files", api.upload, methods=["POST"]),
        Route("/v1/files", api.listing, methods=["GET"]),
        Route("/v1/files/{file_id}", api.retrieve, methods=["GET"]),
        Route("/v1/files/{file_id}", api.delete, methods=["DELETE"]),
        Route("/v1/files/{file_id}/content", api.content, methods=["GET"]),
    ]
