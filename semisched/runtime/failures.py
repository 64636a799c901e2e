"""Failure mapping: the one place that reads the wrapped client's exceptions.

Two translations live here, and only here (httpx's rule: foreign exceptions
are mapped in exactly one place):

1. `classify_failure`: an exception from the wrapped client becomes a
   `ProviderFailure`, whose [`FailureKind`][semisched.core.FailureKind] is all
   the core needs to decide what happens next.

   ================================================  ==========================
   What the client raised                             Kind
   ================================================  ==========================
   429 with code ``insufficient_quota``               ``QUOTA_EXHAUSTED``
   any other 429                                      ``RATE_LIMITED``
   401, 403 (the key or its access is refused)        ``AUTH``
   408, 504                                           ``TIMEOUT``
   409, any other 5xx                                 ``SERVER_ERROR``
   any other 4xx                                      ``BAD_REQUEST``
   ``openai.APITimeoutError``                         ``TIMEOUT``
   ``openai.APIConnectionError``                      ``CONNECTION``
   anything else                                      ``UNKNOWN``
   ================================================  ==========================

   Two failures usually mean a wrong setting, not a bad request, and carry a
   ``hint`` (`failure_hint`): a 404 from a base URL whose path does not
   end in ``/v1`` (``http://host:8000`` instead of ``http://host:8000/v1``:
   every call answers 404), and a connection that could not be made (the
   hint names the URL; openai's own message is only "Connection error.").

2. `failure_outcome`: the core's terminal `Fail`
   becomes the caller's exception ([`QuotaExceeded`][semisched.errors.QuotaExceeded],
   [`RateLimited`][semisched.errors.RateLimited] or
   [`ProviderError`][semisched.errors.ProviderError]), chained to the original
   exception (``err.__cause__``). Its siblings `reject_outcome` and
   `expire_outcome` do the same for `Reject`
   and `Expire`. Each outcome carries the core's
   explanation (``err.explanation``).

3. `closed_unanswered`: whether a failed attempt's connection closed before any
   byte of its answer came (httpx's ``RemoteProtocolError`` "Server disconnected
   without sending a response", under ``openai.APIConnectionError``). HTTP/1.1
   lets either side close an idle kept-alive connection at any time; a server
   that closes one idle for its keep-alive timeout (llama.cpp's server: 5 s, as
   long as httpx's own pool expiry) can do so just as a request goes out on it.
   The provider seam sends such an attempt once more at once
   (`semisched.runtime.layers.ProviderSeam`), as openai-python's own retries
   (which the scheduler turns off) would have: it is no failure of the endpoint.

What this module is not: it decides nothing. Whether and when to retry is the
core's `semisched.core.lifecycle`; the runtime executes it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import openai

from semisched.core.actions import Expire, Fail, Reject
from semisched.core.lifecycle import FailureKind
from semisched.errors import (
    DeadlineExceeded,
    ProviderError,
    QuotaExceeded,
    RateLimited,
    RequestError,
    RequestRejected,
    SpendCapExceeded,
)
from semisched.runtime.headers import retry_after_seconds
from semisched.runtime.seam import Declined

__all__ = [
    "ProviderFailure",
    "classify_failure",
    "closed_unanswered",
    "expire_outcome",
    "failure_hint",
    "failure_outcome",
    "reject_outcome",
]


@dataclass(frozen=True, slots=True)
class ProviderFailure:
    """What one failed provider call means for scheduling.

    Attributes:
        kind: How it failed (see the module table).
        status_code: HTTP status, if there was a response.
        retry_after_wall_s: The provider's retry hint in wall seconds
            (``retry-after-ms``, ``retry-after``, else the ``x-ratelimit-reset-*``
            values); always ``None`` for an exhausted quota, where waiting
            does not help.
        headers: Response headers, if any (for rate-limit signals).
        message: Short description.
        hint: What to check when the failure points at a setting (see the module
            docstring), else ``None``.
    """

    kind: FailureKind
    status_code: int | None
    retry_after_wall_s: float | None
    headers: Mapping[str, str]
    message: str
    hint: str | None = None


#: The paths the client appends to a base URL (longest first).
_ROUTES = ("/chat/completions", "/completions", "/embeddings", "/responses", "/models")


def _request_url(exc: BaseException) -> str | None:
    request = getattr(exc, "request", None)
    url = getattr(request, "url", None)
    return None if url is None else str(url)


def failure_hint(exc: BaseException, kind: FailureKind, status: int | None) -> str | None:
    """What to check for ``exc``: the base URL of a 404 whose path lacks ``/v1``, the
    URL of a connection that failed; ``None`` for the rest."""
    url = _request_url(exc)
    if url is None:
        return None
    if kind is FailureKind.CONNECTION:
        return f"could not connect to {url}"
    if status != 404:
        return None
    parts = urlsplit(url)
    base_path = parts.path
    for route in _ROUTES:
        if base_path.endswith(route):
            base_path = base_path[: -len(route)]
            break
    if base_path.rstrip("/").endswith("/v1"):
        return None
    base = urlunsplit((parts.scheme, parts.netloc, base_path, "", ""))
    return (
        f"{url} answered 404 and the base URL {base or url} does not end in /v1: "
        "OpenAI-compatible servers answer under .../v1"
    )


def _status_kind(status: int, code: str | None) -> FailureKind:
    if status == 429:
        return (
            FailureKind.QUOTA_EXHAUSTED
            if code == "insufficient_quota"
            else FailureKind.RATE_LIMITED
        )
    if status in (401, 403):
        return FailureKind.AUTH
    if status in (408, 504):
        return FailureKind.TIMEOUT
    if status == 409 or 500 <= status <= 599:
        return FailureKind.SERVER_ERROR
    if 400 <= status <= 499:
        return FailureKind.BAD_REQUEST
    return FailureKind.UNKNOWN


def classify_failure(exc: BaseException) -> ProviderFailure:
    """Map an exception from the wrapped client to a `ProviderFailure` (module table)."""
    if isinstance(exc, openai.APIStatusError):
        headers: Mapping[str, str] = exc.response.headers
        status = exc.status_code
        code = exc.code or (exc.type if isinstance(exc.type, str) else None)
        kind = _status_kind(status, code)
        wait = None if kind is FailureKind.QUOTA_EXHAUSTED else retry_after_seconds(headers)
        return ProviderFailure(
            kind, status, wait, headers, exc.message, failure_hint(exc, kind, status)
        )
    # APITimeoutError subclasses APIConnectionError: test it first.
    if isinstance(exc, openai.APITimeoutError):
        kind = FailureKind.TIMEOUT
    elif isinstance(exc, openai.APIConnectionError):
        kind = FailureKind.CONNECTION
    else:
        kind = FailureKind.UNKNOWN
    hint = failure_hint(exc, kind, None)
    return ProviderFailure(kind, None, None, {}, f"{type(exc).__name__}: {exc}", hint)


#: httpcore's words (httpx's and httpx2's) for a connection that closed before any byte
#: of its answer came.
_UNANSWERED = "Server disconnected without sending a response"


def closed_unanswered(exc: BaseException) -> bool:
    """Whether ``exc`` is an attempt whose connection closed before any byte of its
    answer came (module item 3): an ``openai.APIConnectionError`` caused by httpx's
    ``RemoteProtocolError`` with httpcore's words for it."""
    if not isinstance(exc, openai.APIConnectionError) or isinstance(exc, openai.APITimeoutError):
        return False
    cause = exc.__cause__
    for _ in range(4):  # openai's error, from httpx's, from httpcore's
        if cause is None:
            return False
        if type(cause).__name__ == "RemoteProtocolError" and str(cause).startswith(_UNANSWERED):
            return True
        cause = cause.__cause__
    return False


def failure_outcome(
    fail: Fail, failure: ProviderFailure, cause: BaseException, *, request_id: str
) -> ProviderError:
    """The caller's exception for a request the core gave up on.

    Args:
        fail: The core's terminal action.
        failure: The last attempt's classified failure.
        cause: The wrapped client's exception (becomes ``__cause__``).
        request_id: The scheduler's id for the request.

    Returns:
        `QuotaExceeded` for an exhausted quota, `RateLimited`
        for a rate limit, else `ProviderError`; its ``retry_after`` is
        the provider's last hint in the scheduler's clock seconds.
    """
    cls: type[ProviderError] = ProviderError
    if fail.kind is FailureKind.QUOTA_EXHAUSTED:
        cls = QuotaExceeded
    elif fail.kind is FailureKind.RATE_LIMITED:
        cls = RateLimited
    hint = "" if failure.hint is None else f"; {failure.hint}"
    error = cls(
        f"{failure.message} ({fail.reason}){hint}",
        request_id=request_id,
        klass=fail.request.klass,
        status_code=failure.status_code,
        attempts=fail.attempts,
        retry_after=fail.retry_after,
        kind=fail.kind,
        reason=fail.reason,
        hint=failure.hint,
    )
    error.__cause__ = cause
    error.explanation = fail.explanation
    return error


def reject_outcome(
    reject: Reject, *, request_id: str, declined: Declined | None = None
) -> RequestRejected:
    """The caller's exception for the core's `Reject`: a `SpendCapExceeded` naming the
    cap when a spend cap refused it (``declined``), else a `RequestRejected`."""
    rejected: dict[str, Any] = {
        "request_id": request_id, "klass": reject.request.klass, "reason": reject.reason,
        "bucket": reject.request.bucket.value, "severity": reject.severity,
        "retry_after": reject.retry_after,
    }  # fmt: skip
    message = f"rejected: {reject.reason}"
    if declined is None:
        error = RequestRejected(message, **rejected)
    else:
        error = SpendCapExceeded(message, cap=declined.cap.describe(), limit_usd=declined.cap.usd,
                                 spent_usd=declined.spent_usd, reset_at=declined.reset_at,
                                 **rejected)  # fmt: skip
    error.explanation = reject.explanation
    return error


def expire_outcome(
    expire: Expire, *, request_id: str, attempts: int, cause: BaseException | None
) -> DeadlineExceeded:
    """The caller's exception for the core's `Expire`: its phase is
    ``in_flight`` (the call was aborted), ``retry`` (after ``attempts``, chained to the
    last failure ``cause``) or ``queued``."""
    why = expire.explanation
    if why is not None and why.rule == "deadline.in_flight":
        phase = "in_flight"
    else:
        phase = "retry" if attempts else "queued"
    error = DeadlineExceeded(
        f"deadline exceeded ({phase}): {expire.reason}",
        request_id=request_id,
        klass=expire.request.klass,
        phase=phase,
        deadline=expire.request.deadline,
    )
    if cause is not None and phase != "in_flight":
        error.__cause__ = cause
    error.explanation = why
    return error


#: The runtime counter ([`RuntimeCounters`][semisched.runtime.stats.RuntimeCounters]) of each
#: terminal failure kind; any other kind counts in ``provider_errors``.
_FAIL_COUNTERS = {
    FailureKind.QUOTA_EXHAUSTED: "quota_exceeded",
    FailureKind.RATE_LIMITED: "rate_limited",
}


def decided_outcome(
    action: Reject | Expire | Fail,
    *,
    request_id: str,
    attempts: int,
    failure: tuple[ProviderFailure, BaseException] | None,
    declined: Declined | None = None,
) -> tuple[RequestError, str]:
    """The caller's exception for a terminal action of the core, and the name of the
    runtime counter it counts in (``failure``: the last failed attempt, if any;
    ``declined``: the spend cap that refused it, if one did)."""
    if isinstance(action, Reject):
        return reject_outcome(action, request_id=request_id, declined=declined), "rejected"
    cause = None if failure is None else failure[1]
    if isinstance(action, Expire):
        error = expire_outcome(action, request_id=request_id, attempts=attempts, cause=cause)
        return error, "deadline_exceeded"
    assert failure is not None, "the core fails only a request that failed"
    counter = _FAIL_COUNTERS.get(action.kind, "provider_errors")
    return failure_outcome(action, failure[0], failure[1], request_id=request_id), counter
