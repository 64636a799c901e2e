"""What the gateway answers for each outcome, in OpenAI's error shape.

Every error body is ``{"error": {"message", "type", "param", "code"}}``, as
OpenAI's own, so any OpenAI client reads it:

======================================  ======  =====================  =======================
outcome                                 status  code                   headers
======================================  ======  =====================  =======================
missing or unknown key                  401     ``invalid_api_key``
a hint naming another tenant            403     ``tenant_mismatch``
malformed body or hint                  400     ``invalid_request`` /
                                                ``invalid_hint``
rejected by overload control            429     ``request_rejected``   ``Retry-After``
the gateway's queue is full             429     ``queue_full``         ``Retry-After``
deadline passed (queued or in flight)   504     ``deadline_exceeded``  ``x-should-retry: false``
shutting down (queued or arriving)      503     ``shutting_down``      ``Retry-After``
the upstream failed (after retries)     its     its own body           ``Retry-After`` if any
the upstream cannot be reached          502     ``upstream_unreachable``
======================================  ======  =====================  =======================

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
from collections.abc import Mapping

from starlette.responses import Response

from semisched.errors import (
    DeadlineExceeded,
    ProviderError,
    QueueFull,
    RequestError,
    RequestRejected,
    SchedulerClosed,
)

__all__ = ["error_body", "error_response", "outcome_response", "retry_after"]

#: Upstream headers an error answer passes on (rate-limit hints; never anything else).
_PASSED_HEADERS = ("retry-after", "retry-after-ms", "x-request-id")


def error_body(message: str, type_: str, code: str | None, param: str | None = None) -> bytes:
    """OpenAI's error shape as JSON bytes."""
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


def _upstream(error: ProviderError) -> Response:
    """An upstream failure, passed on with its status and body."""
    response = getattr(error.__cause__, "response", None)
    if error.status_code is None or response is None:
        return error_response(502, f"the upstream could not be reached: {error}", "server_error",
                              "upstream_unreachable")  # fmt: skip
    headers = {k: response.headers[k] for k in _PASSED_HEADERS if k in response.headers}
    content = response.content
    if not content:
        content = error_body(str(error), "server_error", "upstream_error")
    media = response.headers.get("content-type", "application/json")
    return Response(content, error.status_code, headers=headers, media_type=media)


def outcome_response(error: RequestError, *, drain_retry_after_s: float) -> Response:
    """The answer for a request the scheduler did not answer with a response (module table)."""
    why = error.explanation
    if isinstance(error, RequestRejected):
        message = why.reason if why is not None else error.reason
        return error_response(429, message, "rate_limit_error", "request_rejected",
                              headers={"retry-after": retry_after(error.retry_after)})  # fmt: skip
    if isinstance(error, QueueFull):
        return error_response(429, str(error), "rate_limit_error", "queue_full",
                              headers={"retry-after": retry_after(error.retry_after)})  # fmt: skip
    if isinstance(error, DeadlineExceeded):
        message = why.reason if why is not None else str(error)
        return error_response(504, f"deadline exceeded ({error.phase}): {message}",
                              "timeout_error", "deadline_exceeded",
                              headers={"x-should-retry": "false"})  # fmt: skip
    if isinstance(error, SchedulerClosed):
        return shutting_down(drain_retry_after_s)
    if isinstance(error, ProviderError):
        return _upstream(error)
    return error_response(500, str(error), "server_error", "internal_error")  # pragma: no cover


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
