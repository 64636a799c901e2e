"""What one ``semisched batch`` run is asked to do: its options, checked, and the scheduler
config they make.

What this module is not: it reads no file and sends nothing (:mod:`semisched.batch.run`).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

from semisched.core.checks import check_choice, check_int, check_number
from semisched.core.config import PRESETS, BudgetConfig, SchedulerConfig, preset

__all__ = ["BatchOptions"]


@dataclass(frozen=True, kw_only=True)
class BatchOptions:
    """What ``semisched batch`` was asked to do (see the CLI's ``--help``)."""

    input: Path
    output: Path
    base_url: str
    api_key_env: str = "OPENAI_API_KEY"
    model: str | None = None
    max_concurrency: int = 32
    rpm: int | None = None
    tpm: int | None = None
    deadline_s: float | None = None
    policy: str = "batch_packing"
    skip_invalid: bool = False
    retry_failed: bool = False
    priors: str = "auto"
    time_scale: float = 1.0
    grace_s: float = 10.0
    budget_margin_s: float | None = None
    max_attempts: int = 6
    window: int = 2000
    request_timeout_s: float = 600.0

    def __post_init__(self) -> None:
        check_choice("policy", self.policy, PRESETS)
        check_choice("priors", self.priors, ("auto", "learned", "heuristic"))
        for name in ("max_concurrency", "window", "max_attempts"):
            check_int(name, getattr(self, name), minimum=1)
        check_number("deadline_s", self.deadline_s, minimum=0, strict_min=True, optional=True)
        for name in ("time_scale", "request_timeout_s"):
            check_number(name, getattr(self, name), minimum=0, strict_min=True)
        check_number("grace_s", self.grace_s, minimum=0)
        self.scheduler_config()  # the budget's own checks (rpm, tpm, margin)

    @property
    def margin_s(self) -> float:
        """The rate budget's transit margin: 1 s, and never under 100 ms of wall time
        (compressed time against the mock shrinks real transit jitter's allowance)."""
        if self.budget_margin_s is not None:
            return self.budget_margin_s
        return max(1.0, 0.1 * self.time_scale)

    def scheduler_config(self) -> SchedulerConfig:
        """The policy preset with this job's concurrency and rate budget."""
        base = preset(self.policy)
        return replace(
            base,
            max_inflight=self.max_concurrency,
            budget=BudgetConfig(rpm=self.rpm, tpm=self.tpm, margin_s=self.margin_s),
        )
