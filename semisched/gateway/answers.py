"""What the gateway answers for each outcome, in OpenAI's error shape.

Every error body is ``{"error": {"message", "type", "param", "code"}}``, as
OpenAI's own, so any OpenAI client reads it:

======================================  ======  =====================  =======================
outcome                                 status  code                   headers
======================================  ======  =====================  =======================
missing or unknown key                  401     ``invalid_api_key``
a hint naming another tenant            403     ``tenant_mismatch``
a service tier the tenant may not use   403     ``service_tier_not_allowed``
a model the gateway does not serve      404     ``model_not_found``
malformed body, field or hint           400     ``invalid_json`` /
                                                ``invalid_value`` /
                                                ``missing_required_parameter`` /
                                                ``invalid_hint`` /
                                                ``duplicate_header`` /
                                                ``invalid_request``
a request that is not valid HTTP/1.1    400     ``invalid_http``
an unknown path                         404     ``unknown_url``
a method the path does not take         405     ``method_not_allowed``  ``Allow``
rejected by overload control            429     ``request_rejected``   ``Retry-After``
a spend cap would be passed             429     ``spend_cap_exceeded`` ``Retry-After`` (its
                                                                       reset)
the gateway's queue is full             429     ``queue_full``         ``Retry-After``
shed at a class/tenant ``deadline_s``   429     ``deadline_shed``      ``Retry-After``
deadline passed (queued or in flight)   504     ``deadline_exceeded``  ``x-should-retry: false``
shutting down (queued or arriving)      503     ``shutting_down``      ``Retry-After``
the upstream failed (after retries)     its     its own error, or      ``Retry-After`` if any
                                                ``upstream_error``
the upstream timed out (after retries)  504     ``timeout``
the upstream cannot be reached          502     ``upstream_unreachable``
the upstream refused the gateway's key  502     ``upstream_auth_failed``
a failure of the gateway itself         500     ``internal_error``
======================================  ======  =====================  =======================

An upstream's own error body is passed on only when it is OpenAI's shape (a
JSON object with an ``error`` object); anything else (an HTML page from a proxy,
which may name internal hosts) is replaced by an ``upstream_error`` naming the
endpoint. A 401 or 403 from the upstream refuses the gateway's own key, not the
caller's: it is a 502 ``upstream_auth_failed``, and the upstream's body (which
may quote a masked form of that key) is never passed on. A 2xx answer that is
not a JSON object counts as the upstream's 502, retried like one. A stream that
fails mid-way ends with an ``error`` event carrying the same code as the table's
answer would (`stream_error`), then ``[DONE]``.

Refusals before anything is sent (`BadRequest`,
from `hints` and `params`) are
answered by `refused`; Starlette's own 404 and 405 (and any failure of a
route it serves) by `EXCEPTION_HANDLERS`, so no route answers plain text.

A rejection's message is the decision's explanation (the overload rule's
sentence, with its severity). ``Retry-After`` is whole seconds, at least 1.
OpenAI clients retry 429 and 503 by themselves, honouring ``Retry-After``; a
deadline that passed is not worth retrying, so its 504 says
``x-should-retry: false``, which the official clients obey.

What this module is not: it decides nothing; the scheduler's outcome is given.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any, Final

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response

from semisched.core.lifecycle import FailureKind
from semisched.core.spend import usd
from semisched.errors import (
    DeadlineExceeded,
    ProviderError,
    QueueFull,
    RequestError,
    RequestRejected,
    SchedulerClosed,
    SpendCapExceeded,
)
from semisched.gateway.hints import BadRequest

__all__ = ["EXCEPTION_HANDLERS", "deadline_shed", "error_body", "error_response",
           "outcome_response", "refused", "retry_after", "stream_error"]  # fmt: skip

#: The longest error message answered, in characters (`error_body`).
MAX_MESSAGE_CHARS: Final = 1000

#: Upstream headers an error answer passes on (rate-limit hints; never anything else).
_PASSED_HEADERS = ("retry-after", "retry-after-ms", "x-request-id")


def error_body(message: str, type_: str, code: str | None, param: str | None = None) -> bytes:
    """OpenAI's error shape as JSON bytes; a message is cut at `MAX_MESSAGE_CHARS`
    (values are quoted short where they are named; this is the last line of defence)."""
    if len(message) > MAX_MESSAGE_CHARS:
        message = message[:MAX_MESSAGE_CHARS] + "..."
    error = {"message": message, "type": type_, "param": param, "code": code}
    return json.dumps({"error": error}).encode("utf-8")


def retry_after(seconds: float | None) -> str:
    """A ``Retry-After`` value: whole seconds, at least 1."""
    if seconds is None or not math.isfinite(seconds):
        return "1"
    return str(max(1, math.ceil(seconds)))


def error_response(
    status: int,
    message: str,
    type_: str,
    code: str | None,
    *,
    param: str | None = None,
    headers: Mapping[str, str] | None = None,
) -> Response:
    """An error answer in OpenAI's shape."""
    body = error_body(message, type_, code, param)
    return Response(body, status, headers=dict(headers or {}), media_type="application/json")


def refused(error: BadRequest) -> Response:
    """The answer for a request refused before anything was sent (its status, param, code)."""
    return error_response(error.status, str(error), "invalid_request_error", error.code,
                          param=error.param)  # fmt: skip


_HTTP_CODES: Final = {404: "unknown_url", 405: "method_not_allowed"}


async def _http_error(request: Request, exc: Exception) -> Response:
    """Starlette's ``HTTPException`` (unknown path: 404, wrong method: 405) in OpenAI's shape."""
    assert isinstance(exc, HTTPException)
    path = request.url.path
    shown = path if len(path) <= 100 else path[:100] + "..."
    message = f"Invalid URL ({request.method} {shown})"
    if exc.status_code == 405:
        message = f"Method {request.method} is not allowed on {shown}"
    elif path.endswith("/") and len(path) > 1:
        message += f": no route ends with '/' (did you mean {shown.rstrip('/')}?)"
    return error_response(exc.status_code, message, "invalid_request_error",
                          _HTTP_CODES.get(exc.status_code, "http_error"),
                          headers=exc.headers)  # fmt: skip


async def _server_error(request: Request, exc: Exception) -> Response:
    """A failure of a route Starlette serves: a 500 in OpenAI's shape (logged by Starlette)."""
    return error_response(500, "the gateway failed to answer this request", "server_error",
                          "internal_error")  # fmt: skip


#: Starlette's ``exception_handlers=``: every error it answers is in OpenAI's shape.
EXCEPTION_HANDLERS: Final[Mapping[Any, Any]] = {
    HTTPException: _http_error,
    Exception: _server_error,
}


def _upstream(error: ProviderError) -> Response:
    """An upstream failure, passed on with its status and body; one without an answer
    is a 504 (timed out) or a 502, naming the endpoint, never its URL."""
    why = error.explanation
    name = f" {why.endpoint!r}" if why is not None and why.endpoint else ""
    tries = f"{error.attempts} attempt{'s' if error.attempts != 1 else ''}"
    response = getattr(error.__cause__, "response", None)
    if error.status_code is None or response is None:
        if error.kind is FailureKind.TIMEOUT:
            return error_response(504, f"the upstream{name} did not answer in time ({tries})",
                                  "timeout_error", "timeout")  # fmt: skip
        return error_response(502, f"the upstream{name} could not be reached ({tries}, "
                              f"{error.kind.value})", "server_error",
                              "upstream_unreachable")  # fmt: skip
    if error.kind is FailureKind.AUTH:  # the gateway's key, not the caller's: never its body
        return error_response(502, f"the upstream{name} refused the gateway's key for it "
                              f"({tries})", "server_error", "upstream_auth_failed")  # fmt: skip
    headers = {k: response.headers[k] for k in _PASSED_HEADERS if k in response.headers}
    content = response.content
    if not _openai_error(content):  # an HTML page, say: it may name internal hosts
        content = error_body(f"the upstream{name} answered {error.status_code} ({tries})",
                             "server_error", "upstream_error")  # fmt: skip
    return Response(content, error.status_code, headers=headers, media_type="application/json")


def _openai_error(content: bytes) -> bool:
    """Whether ``content`` is an error body in OpenAI's shape (an object with an object
    ``error``)."""
    try:
        body = json.loads(content)
    except ValueError:
        return False
    return isinstance(body, dict) and isinstance(body.get("error"), dict)


def stream_error(exc: Exception) -> bytes:
    """The ``data`` of the ``error`` event that ends a stream failed mid-way: the code
    the module table gives the outcome (a deadline: ``deadline_exceeded``; an upstream
    timeout: ``timeout``), else ``upstream_error``."""
    if isinstance(exc, RequestError):
        return bytes(outcome_response(exc, drain_retry_after_s=1.0).body)
    return error_body(f"the upstream stream failed: {type(exc).__name__}", "server_error",
                      "upstream_error")  # fmt: skip


def outcome_response(error: RequestError, *, drain_retry_after_s: float) -> Response:
    """The answer for a request the scheduler did not answer with a response (module table)."""
    why = error.explanation
    if isinstance(error, SpendCapExceeded):
        reset = datetime.fromtimestamp(error.reset_at, UTC).isoformat().replace("+00:00", "Z")
        message = (f"spend cap exceeded: {error.cap} ({usd(error.spent_usd)} spent or "
                   f"reserved); it resets at {reset}")  # fmt: skip
        wait = max(error.reset_at - time.time(), 1.0)
        return error_response(429, message, "rate_limit_error", "spend_cap_exceeded",
                              headers={"retry-after": retry_after(wait),
                                       "x-semisched-spend-cap-reset": reset})  # fmt: skip
    if isinstance(error, RequestRejected):
        message = why.reason if why is not None else error.reason
        return error_response(429, message, "rate_limit_error", "request_rejected",
                              headers={"retry-after": retry_after(error.retry_after)})  # fmt: skip
    if isinstance(error, QueueFull):
        return error_response(429, str(error), "rate_limit_error", "queue_full",
                              headers={"retry-after": retry_after(error.retry_after)})  # fmt: skip
    if isinstance(error, DeadlineExceeded):
        message = str(error) if why is None else f"deadline exceeded ({error.phase}): {why.reason}"
        return error_response(504, message,
                              "timeout_error", "deadline_exceeded",
                              headers={"x-should-retry": "false"})  # fmt: skip
    if isinstance(error, SchedulerClosed):
        return shutting_down(drain_retry_after_s)
    if isinstance(error, ProviderError):
        return _upstream(error)
    return error_response(500, str(error), "server_error", "internal_error")  # InternalError


def deadline_shed(deadline: str, retry_after_s: float) -> Response:
    """429 for a request shed at a deadline the gateway gave it (``deadline``: which,
    e.g. ``the class 'batch''s deadline_s=30``) while it was still queued: never sent,
    it may be sent again later (`semisched.gateway.priority`, rule 4)."""
    return error_response(429, f"shed: the request was still queued when {deadline} passed "
                          "(it was not sent); try again later, or give it a deadline of its "
                          "own (x-semisched-deadline)", "rate_limit_error", "deadline_shed",
                          headers={"retry-after": retry_after(retry_after_s)})  # fmt: skip


def shutting_down(retry_after_s: float) -> Response:
    """503 while the gateway drains: the request was not sent; try again (another replica)."""
    return error_response(503, "the gateway is shutting down; the request was not sent",
                          "server_error", "shutting_down",
                          headers={"retry-after": retry_after(retry_after_s)})  # fmt: skip


def unauthorized() -> Response:
    """401 for a missing or unknown key, as OpenAI answers it."""
    return error_response(401, "Incorrect API key provided. Pass a gateway key as "
                          "'Authorization: Bearer KEY'.", "invalid_request_error",
                          "invalid_api_key")  # fmt: skip
