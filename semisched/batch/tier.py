"""Which tier answers each line of ``semisched batch``: real-time or the Batch API (pure).

``--tier realtime`` (the default) sends every line through the scheduler, as ever;
``--tier batch`` uploads every line to the provider's Batch API (``/v1/files``, then
``/v1/batches``) at its discount; ``--tier auto`` chooses per line:

1. **The tier rule** (`choose_tier`). A line goes through the Batch API when its
   deadline (`semisched.batch.deadlines`) leaves more slack than the batch
   turnaround estimate, or when it has no deadline; the rest go real-time, under the
   key's budgets, as a real-time job does.
2. **The turnaround estimate** (`Turnaround`) is ``safety`` times the typical
   turnaround. The typical turnaround starts at the prior (``--batch-turnaround``,
   default 3600 s) and moves towards the slowest turnaround this job has seen
   (``completed_at - created_at`` of each batch that completed; a batch still unfinished,
   or cancelled, after ``t`` seconds counts as at least ``t``): with ``n`` turnarounds
   seen, whose slowest is ``m``, the typical one is the larger of ``m`` and
   ``(2 * prior + n * m) / (2 + n)``. A slow batch is believed at once; a fast one
   only little by little (the prior weighs as two batches), so one lucky batch cannot
   send urgent lines to the Batch API. The safety factor (``--batch-safety``, default
   1.5) covers the spread of turnarounds around the typical one.
3. **The slack rule** (`must_cancel`). A batch's slack is the earliest deadline
   among its unanswered lines minus the time those lines would need real-time
   (`realtime_need_s`: twice their makespan floor under the key's budgets, plus a
   minute) and minus the time a cancel takes to complete (`CANCEL_SHARE` of the
   typical turnaround). When the slack is within one poll interval of now, the batch is
   cancelled: what it finished is kept (read from its output file once the cancel
   completes) and the rest is sent real-time.
4. **Grouping** (`group_lines`): one batch per endpoint URL
   (``/v1/chat/completions``, ``/v1/responses``, ``/v1/embeddings``, ...), each at most
   `MAX_BATCH_LINES` lines and `MAX_BATCH_BYTES` bytes (OpenAI's limits),
   in input order.

What this module is not: it sends, uploads and reads nothing (`semisched.batch.tiered`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Final, TypeVar

from semisched.core.checks import check_number

__all__ = [
    "CANCEL_SHARE",
    "MAX_BATCH_BYTES",
    "MAX_BATCH_LINES",
    "PRIOR_WEIGHT",
    "TIERS",
    "Turnaround",
    "choose_tier",
    "group_lines",
    "must_cancel",
    "realtime_need_s",
]

#: The tiers ``--tier`` takes.
TIERS: Final = ("realtime", "batch", "auto")
#: The most requests one Batch API input file may hold.
MAX_BATCH_LINES: Final = 50_000
#: The largest Batch API input file, in bytes.
MAX_BATCH_BYTES: Final = 200 * 1024 * 1024
#: How many batches the turnaround prior weighs as (rule 2).
PRIOR_WEIGHT: Final = 2.0
#: The real-time need: this many times the makespan floor, plus `NEED_MARGIN_S`.
NEED_FACTOR: Final = 2.0
NEED_MARGIN_S: Final = 60.0
#: How long a cancel takes to complete, as a share of the typical turnaround (rule 3).
CANCEL_SHARE: Final = 0.1


@dataclass(slots=True)
class Turnaround:
    """The batch turnaround estimate (rule 2).

    Args:
        prior_s: The typical turnaround before any batch is seen (seconds).
        safety: The estimate is this many times the typical turnaround (>= 1).
    """

    prior_s: float = 3600.0
    safety: float = 1.5
    seen: list[float] = field(default_factory=list)
    floor_s: float = 0.0

    def __post_init__(self) -> None:
        check_number("prior_s", self.prior_s, minimum=0, strict_min=True)
        check_number("safety", self.safety, minimum=1)

    def observe(self, seconds: float) -> None:
        """A batch completed ``seconds`` after it was created."""
        if seconds >= 0:
            self.seen.append(float(seconds))

    def at_least(self, seconds: float) -> None:
        """A batch has not completed ``seconds`` after it was created (or was cancelled
        then): the turnaround is at least that."""
        self.floor_s = max(self.floor_s, float(seconds))

    @property
    def typical_s(self) -> float:
        """The typical turnaround: the prior moved towards the slowest seen (rule 2)."""
        if not self.seen:
            return max(self.prior_s, self.floor_s)
        slowest, n = max(self.seen), len(self.seen)
        blended = (PRIOR_WEIGHT * self.prior_s + n * slowest) / (PRIOR_WEIGHT + n)
        return max(slowest, blended, self.floor_s)

    @property
    def estimate_s(self) -> float:
        """The turnaround the tier rule plans with: ``safety`` times the typical one."""
        return self.safety * self.typical_s


def choose_tier(tier: str, deadline: float | None, now: float, turnaround_s: float) -> str:
    """``"batch"`` or ``"realtime"`` for a line due at ``deadline`` (absolute, ``None``:
    none) at ``now``, under ``--tier tier`` (rule 1)."""
    if tier != "auto":
        return tier
    if deadline is None:
        return "batch"
    return "batch" if deadline - now > turnaround_s else "realtime"


def realtime_need_s(floor_s: float, typical_s: float = 0.0) -> float:
    """The time lines whose makespan floor is ``floor_s`` need real-time, once their
    batch's cancel completes (``typical_s``: the typical turnaround) (rule 3)."""
    return NEED_FACTOR * floor_s + NEED_MARGIN_S + CANCEL_SHARE * typical_s


def must_cancel(earliest: float | None, now: float, need_s: float, poll_s: float) -> bool:
    """Whether a batch whose unanswered lines are due at ``earliest`` at the soonest
    (``None``: no deadline) and need ``need_s`` real-time must be cancelled at ``now``,
    polled every ``poll_s`` (rule 3)."""
    return earliest is not None and earliest - need_s - now <= poll_s


_L = TypeVar("_L")


def group_lines(
    lines: Sequence[_L],
    *,
    url: Callable[[_L], str],
    size: Callable[[_L], int],
    max_lines: int = MAX_BATCH_LINES,
    max_bytes: int = MAX_BATCH_BYTES,
) -> list[list[_L]]:
    """``lines`` in batches (rule 4): by ``url(line)``, in input order, each at most
    ``max_lines`` lines and ``max_bytes`` bytes (``size(line)`` each)."""
    by_url: dict[str, list[list[_L]]] = {}
    used: dict[str, int] = {}
    for line in lines:
        groups = by_url.setdefault(url(line), [[]])
        n = size(line)
        if groups[-1] and (len(groups[-1]) >= max_lines or used[url(line)] + n > max_bytes):
            groups.append([])
            used[url(line)] = 0
        groups[-1].append(line)
        used[url(line)] = used.get(url(line), 0) + n
    return [group for groups in by_url.values() for group in groups]
