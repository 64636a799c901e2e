"""What a ``semisched batch`` run did: frozen snapshots with named fields.

`BatchProgress` is what the progress display reads after each result
(with the makespan floor found at the start, and the ETA of
`semisched.batch.forecast.eta_s`); `BatchSummary` adds what only
the end of a run knows (call latencies, the prior source, bytes cut from a
torn output, the makespan over the floor) and the human-readable summary.
`BatchFailures` counts requests that ended in an error record, one
field per `ErrorCode`.

Values only: nothing here reads files, sends requests or reads a clock.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from typing import TYPE_CHECKING, Any

import numpy as np

from semisched.batch.forecast import eta_s
from semisched.batch.ledger import TierTally
from semisched.batch.output import ErrorCode
from semisched.batch.tenants import tenant_lines
from semisched.core.stats import EndpointStats, EngineStats, TenantStats
from semisched.runtime.apis import ApiUsage

if TYPE_CHECKING:
    from semisched.compress.runtime import CompressionStats
    from semisched.runtime.stats import SchedulerStats

__all__ = ["BatchFailures", "BatchProgress", "BatchSummary", "engine_parts"]


@dataclass(frozen=True, slots=True, kw_only=True)
class BatchFailures:
    """Requests of this run that ended in an error record, by the record's error code.

    Attributes:
        provider_error: The provider failed and the scheduler's retries were spent.
        rate_limited: 429 ``rate_limit_exceeded`` with no retry left.
        insufficient_quota: 429 ``insufficient_quota`` (never retried).
        deadline_exceeded: The job deadline passed (before sending, or in flight).
        rejected: Overload control refused the request.
        queue_full: The scheduler's queue limit was reached.
        scheduler_closed: The scheduler closed with the request pending.
        scheduler_error: Any other scheduling outcome.
        input_changed: The input line changed between validation and sending.
    """

    provider_error: int = 0
    rate_limited: int = 0
    insufficient_quota: int = 0
    deadline_exceeded: int = 0
    rejected: int = 0
    queue_full: int = 0
    scheduler_closed: int = 0
    scheduler_error: int = 0
    input_changed: int = 0

    def of(self, code: ErrorCode) -> int:
        """The count of ``code``."""
        value: int = getattr(self, _FIELD[code])
        return value

    def plus(self, code: ErrorCode) -> BatchFailures:
        """These counts with one more ``code``."""
        name = _FIELD[code]
        return replace(self, **{name: getattr(self, name) + 1})

    @property
    def total(self) -> int:
        """All failed requests."""
        return sum(getattr(self, f.name) for f in fields(self))

    def counts(self) -> list[tuple[ErrorCode, int]]:
        """The codes that occurred, with their counts, in the order of their names."""
        return sorted(
            ((code, self.of(code)) for code in _FIELD if self.of(code)),
            key=lambda pair: pair[0].value,
        )


#: Error code -> field of `BatchFailures` (invalid lines are counted apart).
_FIELD: Mapping[ErrorCode, str] = {
    code: code.name.lower() for code in ErrorCode if code is not ErrorCode.INVALID_LINE
}


@dataclass(frozen=True, slots=True, kw_only=True)
class BatchProgress:
    """Where a run stands (counts are this run's, except ``already_done``).

    Attributes:
        total: Lines in the input (valid and invalid).
        already_done: Valid lines the output already answered.
        invalid: Invalid lines (recorded as errors with ``skip_invalid``).
        to_send: Valid lines this run sends.
        succeeded: Requests answered with a response.
        failed: Requests answered with an error record.
        prompt_tokens: Prompt tokens of the responses (their ``usage``).
        completion_tokens: Completion tokens of the responses.
        rate_limited: 429 rate-limit answers seen (retried or not).
        retries: Failed attempts the scheduler sent again.
        elapsed_s: Clock seconds since sending started.
        interrupted: The run was stopped before every request was answered.
        auth_status: The status (401 or 403) of the answers that stopped the run:
            the API key was refused (`semisched.batch.auth`); else ``None``.
        auth_refused: Requests sent and refused with that status; like those
            never sent, they have no record, so a rerun sends them.
        floor_s: The makespan floor of the requests to send, found before sending
            (`semisched.core.makespan_floor`; ``None``: nothing to send).
        floor_binding: Its binding bound: ``requests``, ``tokens`` or ``serving``.
        window_s: The rate budget's window (seconds): a rate-bound run spends the
            first one's budget at once.
        unsent: Requests not sent yet (not submitted, or queued in the scheduler).
        latency_s: Mean send -> answer time of the last answers (``None``: none yet).
        tiers: Lines, spend and deadlines by tier (`semisched.batch.ledger`).
    """

    total: int
    already_done: int
    invalid: int
    to_send: int
    succeeded: int = 0
    failed: BatchFailures = BatchFailures()
    prompt_tokens: int = 0
    completion_tokens: int = 0
    rate_limited: int = 0
    retries: int = 0
    elapsed_s: float = 0.0
    interrupted: bool = False
    auth_status: int | None = None
    auth_refused: int = 0
    floor_s: float | None = None
    floor_binding: str | None = None
    window_s: float = 60.0
    unsent: int = 0
    latency_s: float | None = None
    tiers: TierTally = field(default_factory=TierTally)

    def synced(
        self, stats: SchedulerStats, elapsed_s: float, latencies: Sequence[float]
    ) -> BatchProgress:
        """This progress with the scheduler's counts and ``elapsed_s`` read now; the latency
        is the mean of the last 50 ``latencies`` (send -> answer, clock seconds)."""
        recent = latencies[-50:]
        return replace(
            self,
            rate_limited=stats.counters.throttled,
            retries=stats.counters.retries,
            elapsed_s=elapsed_s,
            unsent=self.to_send - stats.counters.submitted + sum(stats.queued.values()),
            latency_s=sum(recent) / len(recent) if recent else None,
        )

    def counted(
        self,
        *,
        tier: str,
        cost: float | None = None,
        met: bool | None = None,
        usage: ApiUsage | None = None,
        code: ErrorCode | None = None,
    ) -> BatchProgress:
        """This progress with one more record of ``tier``: an answer with ``usage``
        costing ``cost``, or an error of ``code``; ``met``: whether it met its deadline
        (``None``: it had none)."""
        tiers = self.tiers.plus(tier, cost, met)
        if code is not None:
            return replace(self, failed=self.failed.plus(code), tiers=tiers)
        prompt, output = (0, 0) if usage is None else (usage.prompt_tokens, usage.output_tokens)
        return replace(
            self,
            succeeded=self.succeeded + 1,
            prompt_tokens=self.prompt_tokens + prompt,
            completion_tokens=self.completion_tokens + output,
            tiers=tiers,
        )

    @property
    def finished(self) -> int:
        """Requests answered in this run (success or error)."""
        return self.succeeded + self.failed.total

    @property
    def tokens_per_s(self) -> float:
        """Prompt and completion tokens per clock second."""
        tokens = self.prompt_tokens + self.completion_tokens
        return tokens / self.elapsed_s if self.elapsed_s > 0 else 0.0

    @property
    def eta_s(self) -> float | None:
        """Clock seconds until the run ends (``None``: unknown yet); see
        `semisched.batch.forecast.eta_s`."""
        return eta_s(
            to_send=self.to_send,
            done=self.finished,
            elapsed_s=self.elapsed_s,
            floor_s=self.floor_s,
            binding=self.floor_binding,
            window_s=self.window_s,
            unsent=self.unsent,
            latency_s=self.latency_s,
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class BatchSummary(BatchProgress):
    """What a run did: its final `BatchProgress` and what only the end knows.

    Attributes:
        latencies_s: Send -> response of each successful call, clock seconds.
        priors: The output-length prior source used.
        cut_bytes: Bytes of a torn last output line cut before the run.
        endpoints: Per endpoint of a fleet job, the scheduler's counts
            (``()`` for a one-endpoint job).
        tenants: Per declared tenant, the scheduler's counts, share and
            entitlement (``()`` unless the job declares several tenants).
        compression: What compress-and-route did (``None``: off).
        hints: What to check, once each, from the failures that point at a setting
            (`semisched.errors.ProviderError.hint`: a base URL without ``/v1``
            answering 404, the URL a connection failed at).
    """

    latencies_s: tuple[float, ...] = ()
    priors: str = "heuristic"
    cut_bytes: int = 0
    endpoints: tuple[EndpointStats, ...] = ()
    tenants: tuple[TenantStats, ...] = ()
    compression: CompressionStats | None = None
    hints: tuple[str, ...] = ()

    @classmethod
    def from_progress(cls, progress: BatchProgress, **extra: Any) -> BatchSummary:
        """``progress`` with the end-of-run fields in ``extra``."""
        known = {f.name: getattr(progress, f.name) for f in fields(BatchProgress)}
        return cls(**known, **extra)

    @property
    def floor_ratio(self) -> float | None:
        """The makespan over its floor, ``elapsed_s / floor_s`` (``None``: no floor)."""
        if self.floor_s is None or self.floor_s <= 0:
            return None
        return self.elapsed_s / self.floor_s

    def latency_percentile(self, q: float) -> float | None:
        """Percentile of successful call latency (send -> response), clock seconds."""
        if not self.latencies_s:
            return None
        return float(np.percentile(self.latencies_s, q))

    def lines(self) -> list[str]:
        """A human-readable summary."""
        p50, p95 = self.latency_percentile(50), self.latency_percentile(95)
        fails = ", ".join(f"{code.value} {n}" for code, n in self.failed.counts()) or "none"
        if self.auth_status is not None:
            how = f"stopped on an authentication error ({self.auth_status}: the key was refused)"
        else:
            how = "interrupted" if self.interrupted else "done"
        out = [
            f"{how} in {self.elapsed_s:.1f} s: "
            f"{self.succeeded} succeeded, {self.failed.total} failed, {self.invalid} invalid "
            f"lines ({self.to_send} to send, {self.already_done} already in the output)",
            f"  failed: {fails}",
            *(f"  hint: {hint}" for hint in self.hints),
            f"  tokens: {self.prompt_tokens} prompt + {self.completion_tokens} completion "
            f"({self.tokens_per_s:.0f}/s); 429s {self.rate_limited}; retries {self.retries}",
        ]
        ratio = self.floor_ratio
        if ratio is not None and not self.interrupted:
            out.append(
                f"  makespan {self.elapsed_s:.1f} s = {ratio:.2f} x the steady-rate floor "
                f"{self.floor_s:.1f} s ({self.floor_binding} bound{_burst(self)})"
            )
        if p50 is not None and p95 is not None:
            out.append(f"  call latency p50 {p50:.2f} s, p95 {p95:.2f} s; priors: {self.priors}")
        out.extend(self.tiers.lines())
        out.extend(_endpoint_line(e) for e in self.endpoints)
        out.extend(tenant_lines(self.tenants))
        c = self.compression
        if c is not None and c.sent_compressed:
            out.append(f"  compress-and-route: {c.sent_compressed} sent compressed "
                       f"({c.tokens_removed} prompt tokens removed), {c.spilled} spilled "
                       f"whole, {c.not_fitting} too long to compress")  # fmt: skip
        return out


def _burst(summary: BatchSummary) -> str:
    """What a rate-bound run that beat the steady-rate floor owes that to: the first
    window's budget, spent at once (the floor counts every window at the steady rate)."""
    beaten = summary.floor_s is not None and summary.elapsed_s < summary.floor_s
    if not beaten or summary.floor_binding not in ("requests", "tokens"):
        return ""
    return f"; the first {summary.window_s:g} s window's budget went at once"


def engine_parts(engine: EngineStats | None, *, fleet: bool) -> dict[str, Any]:
    """The summary's share of the scheduler's statistics: per endpoint of a ``fleet``,
    per tenant when several are declared (``engine``: ``None`` before sending)."""
    if engine is None:
        return {}
    tenants = engine.tenants if len(engine.tenants) > 1 else ()
    return {"endpoints": engine.endpoints if fleet else (), "tenants": tenants}


def _endpoint_line(e: EndpointStats) -> str:
    """One endpoint's counts; its state and circuit when not the usual ones."""
    health = "" if e.state == "active" and e.circuit == "closed" else f"; {e.state}, {e.circuit}"
    return (
        f"  endpoint {e.name}: sent {e.sent}, completed {e.completed}, failed attempts "
        f"{e.failed_attempts} (429s {e.throttled}), failovers {e.failovers}{health}"
    )
