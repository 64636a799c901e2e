"""Endpoint profiles: what one unit of capacity is, for the capacity planner.

A *unit* is one replica you pay for: a self-hosted vLLM instance on its GPUs,
or one unit of provisioned throughput. FleetOpt §3.1 models it by
its iteration time under continuous batching, ``t_iter = W + H * n_active``
(eq. 3), the prompt chunk it prefills per iteration (``C_chunk``, eq. 4), and
how many sequences it holds at once. Slots are bounded by KV-cache memory: a
unit holds ``slots`` sequences of up to ``context_tokens`` tokens each, so the
same hardware configured for a shorter context ``B`` holds
``slots * context_tokens // B`` of them (FleetOpt §6, "candidate set"),
capped at ``max_slots`` (the engine's own limit, vLLM's ``max_num_seqs``).

Profiles are named (the mock provider's physics profiles, with a context
limit and a cost added) or fitted from observations (`semisched.plan.fit`
writes one as JSON; `load_profile` reads it).

Pure: no clock, no I/O except `load_profile` reading the file it is given.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, fields, replace
from typing import Any, TypedDict

from semisched.core.checks import check_int, check_number, check_str

__all__ = [
    "DEFAULT_CONTEXT_TOKENS",
    "DEFAULT_MAX_SLOTS",
    "NAMED_UNITS",
    "UnitPhysics",
    "UnitProfile",
    "load_profile",
    "named_profile",
    "profile_from_dict",
    "profile_names",
]

#: The context a mock unit's ``slots`` are sized for when a profile does not say.
DEFAULT_CONTEXT_TOKENS = 8192
#: vLLM's default ``max_num_seqs``: the most sequences one engine batches.
DEFAULT_MAX_SLOTS = 256


class UnitPhysics(TypedDict):
    """One unit's batching physics as plain data: the fields of the mock provider's
    ``PhysicsParams`` that a plan fixes (the planner takes physics as data, never the mock)."""

    slots: int
    base_iter_ms: float
    per_slot_ms: float
    prefill_chunk: int
    overhead_ms: float


@dataclass(frozen=True, slots=True, kw_only=True)
class UnitProfile:
    """One unit of serving capacity.

    Attributes:
        name: A label for tables and files.
        base_iter_ms: ``W``, the fixed cost of one batch iteration (ms).
        per_slot_ms: ``H``, the extra iteration cost per active sequence (ms).
        slots: Sequences one unit holds at ``context_tokens`` each.
        context_tokens: The context (prompt + output tokens) each slot is sized for;
            also the longest request the unit accepts.
        prefill_chunk: Prompt tokens prefilled per iteration (``C_chunk``).
        overhead_ms: Fixed latency outside the batch (network, gateway), added to
            every first token and completion.
        cost_per_hour: What one unit costs per hour (any currency; the planner only
            adds and compares).
        max_slots: The most sequences one unit batches, whatever the context.
    """

    name: str = "custom"
    base_iter_ms: float
    per_slot_ms: float
    slots: int
    context_tokens: int = DEFAULT_CONTEXT_TOKENS
    prefill_chunk: int = 512
    overhead_ms: float = 0.0
    cost_per_hour: float = 1.0
    max_slots: int = DEFAULT_MAX_SLOTS

    def __post_init__(self) -> None:
        check_str("name", self.name)
        check_number("base_iter_ms", self.base_iter_ms, minimum=0.0, strict_min=True)
        check_number("per_slot_ms", self.per_slot_ms, minimum=0.0)
        check_int("slots", self.slots, minimum=1)
        check_int("context_tokens", self.context_tokens, minimum=1)
        check_int("prefill_chunk", self.prefill_chunk, minimum=1)
        check_number("overhead_ms", self.overhead_ms, minimum=0.0)
        check_number("cost_per_hour", self.cost_per_hour, minimum=0.0, strict_min=True)
        check_int("max_slots", self.max_slots, minimum=self.slots)

    def slots_for(self, context_tokens: int) -> int:
        """Slots of one unit configured for ``context_tokens`` per sequence.

        The KV budget is fixed (``slots * self.context_tokens`` tokens): a shorter
        context holds proportionally more sequences, up to ``max_slots``; a longer
        one than the profile's is not offered (``ValueError``).
        """
        check_int("context_tokens", context_tokens, minimum=1, maximum=self.context_tokens)
        return min(self.max_slots, self.slots * self.context_tokens // context_tokens)

    def physics(self, context_tokens: int | None = None) -> UnitPhysics:
        """One unit's batching physics as data: the fields of the mock provider's
        ``PhysicsParams`` (``mockprovider.physics``), for simulating a plan."""
        slots = self.slots if context_tokens is None else self.slots_for(context_tokens)
        return {
            "slots": slots,
            "base_iter_ms": self.base_iter_ms,
            "per_slot_ms": self.per_slot_ms,
            "prefill_chunk": self.prefill_chunk,
            "overhead_ms": self.overhead_ms,
        }

    def iteration_ms(self, n_active: int) -> float:
        """One batch iteration with ``n_active`` sequences: ``W + H * n``."""
        return self.base_iter_ms + self.per_slot_ms * n_active

    def lone_decode_ms_per_token(self) -> float:
        """Decode cost per token of a request alone in the batch: ``W + H``."""
        return self.iteration_ms(1)

    def capacity_tokens_per_s(self) -> float:
        """Decode tokens per second with a full batch: ``slots / t_iter(slots) * 1000``."""
        return self.slots / self.iteration_ms(self.slots) * 1000.0

    def with_(self, **changes: Any) -> UnitProfile:
        """A copy with fields replaced (checked again)."""
        return replace(self, **changes)

    def to_json(self) -> str:
        """The profile as a JSON object (what `load_profile` reads)."""
        return json.dumps(asdict(self), indent=2) + "\n"


#: The named units: the mock provider's physics profiles, as data (the planner does not
#: import the mock; a test keeps the two tables equal). W and H are FleetOpt's fit scaled
#: to a lone-request decode of 18.7 ms/token; "production-fit" adds the main paper's intercept.
NAMED_UNITS: dict[str, UnitPhysics] = {
    "default": {"slots": 32, "base_iter_ms": 17.3, "per_slot_ms": 1.4, "prefill_chunk": 512,
                "overhead_ms": 0.0},
    "production-fit": {"slots": 32, "base_iter_ms": 17.3, "per_slot_ms": 1.4,
                       "prefill_chunk": 512, "overhead_ms": 3294.0},
    # llama-server on a 2-core CPU (docs/results/real-engine/fit.json). The mock's profile
    # also charges each prompt token 1.213 ms and each token of the batch's context
    # 0.00271 ms of every sequence's time, which the planner's queueing model does not:
    # its plans for this unit leave prefill and context out.
    "llama-cpp": {"slots": 8, "base_iter_ms": 3.36, "per_slot_ms": 1.82, "prefill_chunk": 512,
                  "overhead_ms": 0.0},
}  # fmt: skip


def profile_names() -> tuple[str, ...]:
    """The named profiles: the mock provider's physics profiles."""
    return tuple(sorted(NAMED_UNITS))


def named_profile(name: str) -> UnitProfile:
    """The mock provider's physics profile ``name`` as a unit.

    Its slots are taken to be sized for `DEFAULT_CONTEXT_TOKENS` tokens each
    (the mock has no memory model) and it costs 1 per hour.

    Raises:
        ValueError: ``name`` is not a profile; the message lists the names.
    """
    if name not in NAMED_UNITS:
        raise ValueError(f"profile={name!r} must be one of {', '.join(profile_names())}")
    unit = NAMED_UNITS[name]
    return UnitProfile(
        name=name,
        base_iter_ms=unit["base_iter_ms"],
        per_slot_ms=unit["per_slot_ms"],
        slots=unit["slots"],
        prefill_chunk=unit["prefill_chunk"],
        overhead_ms=unit["overhead_ms"],
    )


_FIELDS = tuple(f.name for f in fields(UnitProfile))


def profile_from_dict(data: dict[str, Any], *, where: str = "profile") -> UnitProfile:
    """A profile from a mapping of its fields (unknown keys are errors)."""
    unknown = sorted(set(data) - set(_FIELDS))
    if unknown:
        known = ", ".join(_FIELDS)
        raise ValueError(f"{where}: unknown field(s) {', '.join(unknown)}; known: {known}")
    try:
        return UnitProfile(**data)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{where}: {exc}") from None


def load_profile(path: str | os.PathLike[str]) -> UnitProfile:
    """Read a profile JSON file, as `UnitProfile.to_json` and ``semisched plan fit`` write."""
    try:
        with open(path, encoding="utf-8") as handle:
            data = json.load(handle)
    except OSError as exc:
        raise ValueError(f"{os.fspath(path)}: cannot read the profile: {exc.strerror}") from None
    except json.JSONDecodeError as exc:
        raise ValueError(f"{os.fspath(path)}: not JSON: {exc}") from None
    if not isinstance(data, dict):
        raise ValueError(f"{os.fspath(path)}: a profile is a JSON object of its fields")
    return profile_from_dict(data, where=os.fspath(path))
