"""Named statistics of the mock provider: what ``GET /v1/mock/stats`` reports.

What it is: frozen dataclasses with one documented field per number the HTTP app keeps, and
the mutable tally the app counts into. ``app.state.mock_stats()`` returns a `MockStats`;
the endpoint serves ``dataclasses.asdict`` of it as JSON, and `MockStats.from_json`
turns that JSON back into the same dataclass for HTTP clients (the benchmarks, tests that run
the server in a subprocess). Nothing here serves HTTP or reads a clock. Pure and dependency
free beyond ``mockprovider.physics`` and ``mockprovider.faults``.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass, fields
from typing import Any, Literal, TypeVar, get_args

from mockprovider.faults import WindowState
from mockprovider.physics import PhysicsStats

__all__ = ["ApiRequests", "BatchStats", "CounterName", "MockCounters", "MockStats", "Tally"]

CounterName = Literal[
    "requests",
    "completed",
    "bad_requests",
    "unauthorized",
    "rate_limited_requests",
    "rate_limited_tokens",
    "insufficient_quota",
    "unavailable",
    "faults_error",
    "faults_hang",
    "faults_drop",
    "timeouts",
    "client_cancelled",
]
"""The name of one `MockCounters` field (what ``Tally.add`` takes)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class MockCounters:
    """What the app has answered so far (each a count of requests).

    Attributes:
        requests: Requests received on the served APIs (``/v1/chat/completions``,
            ``/v1/completions``, ``/v1/responses`` and ``/v1/embeddings``), whatever became
            of them (`ApiRequests` splits them by API).
        completed: Requests answered in full (JSON body sent or stream completed).
        bad_requests: 400 ``invalid_request_error`` (body, parameters or hint headers).
        unauthorized: 401 (missing or wrong API key), on any route.
        rate_limited_requests: 429 ``rate_limit_exceeded`` by the requests window.
        rate_limited_tokens: 429 by the tokens window (including "Request too large").
        insufficient_quota: 429 ``insufficient_quota``.
        unavailable: 503 ``server_error`` refusals during an outage window (the endpoint
            was down; see ``MockConfig.outages``).
        faults_error: Injected 500/503 answers.
        faults_hang: Injected hangs (never answered).
        faults_drop: Injected dropped connections.
        timeouts: Physics timeouts (504, or the SSE error event mid-stream).
        client_cancelled: Requests withdrawn from the physics because the client gave up
            (cancelled its call or disconnected) before their end.
    """

    requests: int = 0
    completed: int = 0
    bad_requests: int = 0
    unauthorized: int = 0
    rate_limited_requests: int = 0
    rate_limited_tokens: int = 0
    insufficient_quota: int = 0
    unavailable: int = 0
    faults_error: int = 0
    faults_hang: int = 0
    faults_drop: int = 0
    timeouts: int = 0
    client_cancelled: int = 0

    @property
    def rate_limited(self) -> int:
        """All 429 ``rate_limit_exceeded`` answers (requests and tokens windows)."""
        return self.rate_limited_requests + self.rate_limited_tokens


@dataclass(frozen=True, slots=True, kw_only=True)
class ApiRequests:
    """Requests received per API, whatever became of them (they add up to
    ``MockCounters.requests``).

    Attributes:
        chat_completions: ``POST /v1/chat/completions``.
        completions: ``POST /v1/completions``.
        responses: ``POST /v1/responses``.
        embeddings: ``POST /v1/embeddings``.
    """

    chat_completions: int = 0
    completions: int = 0
    responses: int = 0
    embeddings: int = 0


@dataclass(frozen=True, slots=True, kw_only=True)
class BatchStats:
    """The Batch API's batches and their lines (``mockprovider.batches``), at one virtual
    instant: a batch moves on with the clock, so these are counted when read. Batch lines
    are not requests: they count in no `MockCounters` field, no rate window and no
    quota.

    Attributes:
        batches: Batches created (``POST /v1/batches`` answered 200).
        completed: Batches ``completed`` now.
        failed: Batches ``failed`` now (their input file did not validate).
        expired: Batches ``expired`` now (the completion window ended first).
        cancelled: Batches ``cancelled`` now (``cancelling`` ones are not counted yet).
        lines: Lines of the batches whose input file validated (their ``total``).
        lines_completed: Lines answered 200 so far (in an output file, or to be).
        lines_failed: Lines answered in an error file so far (an error status, or never
            run because their batch expired or was cancelled).
    """

    batches: int = 0
    completed: int = 0
    failed: int = 0
    expired: int = 0
    cancelled: int = 0
    lines: int = 0
    lines_completed: int = 0
    lines_failed: int = 0


class Tally:
    """The app's mutable counters; `snapshot` freezes them into `MockCounters`,
    `apis` the requests per API into `ApiRequests`."""

    __slots__ = ("_apis", "_counts")

    def __init__(self) -> None:
        self._counts: dict[CounterName, int] = dict.fromkeys(get_args(CounterName), 0)
        self._apis: dict[str, int] = {f.name: 0 for f in fields(ApiRequests)}

    def __repr__(self) -> str:
        live = ", ".join(f"{k}={v}" for k, v in self._counts.items() if v)
        return f"<Tally {live or 'empty'}>"

    def add(self, name: CounterName) -> None:
        """Count one more ``name``."""
        self._counts[name] += 1

    def received(self, api: str) -> None:
        """Count one more request on ``api`` (``"chat.completions"``, ``"responses"``, ...)
        and one more ``requests``."""
        self._apis[api.replace(".", "_")] += 1
        self._counts["requests"] += 1

    def snapshot(self) -> MockCounters:
        """The counts now, frozen."""
        return MockCounters(**self._counts)

    def apis(self) -> ApiRequests:
        """The requests per API now, frozen."""
        return ApiRequests(**self._apis)


@dataclass(frozen=True, slots=True, kw_only=True)
class MockStats:
    """The mock provider at one virtual instant (``GET /v1/mock/stats``).

    Attributes:
        virtual_time: Virtual seconds since the app's first request.
        time_scale: Virtual seconds per wall second.
        physics: Occupancy and event counters of the physics (slots reflect a capacity loss).
        counters: What the app has answered (see `MockCounters`).
        requests_window: The requests-per-minute window now, or ``None`` without an RPM limit.
        tokens_window: The tokens-per-minute window now, or ``None`` without a TPM limit.
        quota_limit: The billing quota in tokens, or ``None`` without one.
        quota_used: Tokens billed so far (prompt + completion of completed requests).
        capacity_loss_applied_at: Virtual time the configured capacity loss took effect, or
            ``None`` (not configured, or not reached yet).
        requests_by_api: ``counters.requests`` split by API (all 0 when read from the JSON
            of an older mock, which lacks it).
        batches: The Batch API's batches and lines (all 0 when read from the JSON of an
            older mock, which lacks it).
    """

    virtual_time: float
    time_scale: float
    physics: PhysicsStats
    counters: MockCounters
    requests_window: WindowState | None
    tokens_window: WindowState | None
    quota_limit: int | None
    quota_used: int
    capacity_loss_applied_at: float | None
    requests_by_api: ApiRequests = ApiRequests()
    batches: BatchStats = BatchStats()

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> MockStats:
        """Rebuild the stats from their JSON form (``dataclasses.asdict`` of one).

        Raises:
            ValueError: ``obj`` lacks a field (other than ``requests_by_api`` and
                ``batches``, which an older mock did not send) or has one this version does
                not know.
        """
        flat = _fields_of(cls, obj, "stats", optional={"requests_by_api", "batches"})
        apis, batches = flat.get("requests_by_api"), flat.get("batches")
        by_api = ApiRequests() if apis is None else _build(ApiRequests, apis, "requests_by_api")
        nested = {
            "requests_by_api": by_api,
            "batches": BatchStats() if batches is None else _build(BatchStats, batches, "batches"),
            "physics": _build(PhysicsStats, flat["physics"], "physics"),
            "counters": _build(MockCounters, flat["counters"], "counters"),
            "requests_window": _window(flat["requests_window"], "requests_window"),
            "tokens_window": _window(flat["tokens_window"], "tokens_window"),
        }
        return cls(**{**flat, **nested})


_T = TypeVar("_T")


def _fields_of(
    cls: type[Any], obj: object, where: str, optional: Collection[str] = ()
) -> dict[str, Any]:
    if not isinstance(obj, Mapping):
        raise ValueError(f"{where}={obj!r} must be a JSON object")
    names = {f.name for f in fields(cls)}
    missing, unknown = names - obj.keys() - set(optional), obj.keys() - names
    if missing or unknown:
        raise ValueError(
            f"{where} does not match {cls.__name__}: "
            f"missing {sorted(missing)}, unknown {sorted(map(str, unknown))}"
        )
    return dict(obj)


def _build(cls: type[_T], obj: object, where: str) -> _T:
    return cls(**_fields_of(cls, obj, where))


def _window(obj: object, where: str) -> WindowState | None:
    return None if obj is None else _build(WindowState, obj, where)
