"""What one attempt returns through an endpoint's stack (`semisched.runtime.layers`).

Values and the `Seam` protocol every layer implements; no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Protocol

from semisched.core.spend import SpendCap, usd

if TYPE_CHECKING:
    from semisched.runtime.pending import Pending

__all__ = ["Answer", "Declined", "Ended", "Refused", "Seam"]


@dataclass(frozen=True, slots=True)
class Answer:
    """The provider answered: its response (or stream) and headers (empty when unknown)."""

    response: Any
    headers: Mapping[str, str]


@dataclass(frozen=True, slots=True)
class Refused:
    """The shared state refused the attempt at ``at``: nothing was sent.

    Attributes:
        at: The engine's now when it was refused.
        until: When to try again.
        fleet_wide: A fleet-wide limit refused it (not only its endpoint's).
    """

    at: float
    until: float
    fleet_wide: bool


@dataclass(frozen=True, slots=True)
class Declined:
    """A spend cap refused the attempt: nothing was sent (`semisched.runtime.spending`).

    Attributes:
        cap: The cap that refused.
        spent_usd: What its period held then (settled plus reserved).
        reset_at: When its period ends (Unix seconds, UTC).
    """

    cap: SpendCap
    spent_usd: float
    reset_at: float

    @property
    def reason(self) -> str:
        """The refusal in a user's words."""
        when = datetime.fromtimestamp(self.reset_at, UTC).strftime("%Y-%m-%d %H:%M UTC")
        return (
            f"spend cap {self.cap.describe()} would be passed ({usd(self.spent_usd)} spent or "
            f"reserved this {self.cap.per}); it resets at {when}"
        )


@dataclass(frozen=True, slots=True)
class Ended:
    """How an answered attempt ended (``Seam.ended``).

    Attributes:
        completed: The answer was consumed whole (``False``: a stream closed early).
        prompt_tokens: The provider's prompt count (0: unknown).
        output_tokens: The provider's output count (``None``: unknown).
        charged: What the provider's token window charged (``None``: unknown).
        cached_tokens: Prompt tokens the provider read from its prompt cache.
    """

    completed: bool
    prompt_tokens: int = 0
    output_tokens: int | None = None
    charged: int | None = None
    cached_tokens: int = 0


class Seam(Protocol):
    """What the dispatcher calls for one attempt (the provider, or a layer around it)."""

    async def send(self, pending: Pending) -> Answer | Refused | Declined:
        """Run one attempt of ``pending`` (raises what the provider raised)."""
        ...

    def ended(self, pending: Pending, end: Ended) -> None:
        """The answer ``send`` returned was consumed."""
        ...
