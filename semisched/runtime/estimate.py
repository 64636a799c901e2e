"""Prompt-token estimation without a tokenizer ("Token-Budget-Aware Pool Routing", §2.1).

The runtime must know a request's prompt size before sending it, without a
model-specific tokenizer. Token-Budget-Aware Pool Routing estimates ``tokens = ceil(bytes / c_k)``
with a per-category bytes-per-token ratio ``c_k`` learned online from the
exact ``usage.prompt_tokens`` every response carries:

    c_obs = bytes / usage.prompt_tokens
    c_k   <- beta * c_k + (1 - beta) * c_obs            (beta = 0.95)
    s_k   <- beta * s_k + (1 - beta) * |c_obs - c_k|    (EMA deviation)
    c_k*  =  c_k - gamma * s_k                          (gamma = 1.0, used to estimate)

starting from ``c0 = 4.0`` (English prose). We let a category's first exact
observation replace ``c0`` (the paper starts the EMA at ``c0``; one measured
ratio is better information than the prose average, and with beta = 0.95 the
EMA would need dozens of responses to forget a wrong start). Subtracting the deviation makes the
ratio smaller and the token estimate larger: errors lean towards
over-estimating cost, which is the safe side for admission and budgets. We
update the deviation against the *previous* mean (the paper's line 24 is
ambiguous between before and after; before is the usual EWMVar order) and
floor the routed ratio at ``min_ratio`` so a noisy start cannot explode
estimates.

Categories: the paper keys on content category; we use
``(model, content kind)`` with kinds ``prose``, ``code`` and ``cjk`` found by
cheap character statistics, since different models tokenize differently.

Pure and synchronous: no clock, no I/O.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

__all__ = [
    "CategoryRatio",
    "CategoryStats",
    "EstimatorStats",
    "TokenEstimator",
    "content_kind",
    "prompt_bytes",
]

_CODE_MARKERS = ("```", "def ", "class ", "import ", "function ", "{\n", "};", "#include")


def content_kind(text: str) -> str:
    """Classify text as ``cjk``, ``code`` or ``prose`` from character statistics."""
    if not text:
        return "prose"
    sample = text[:4000]
    cjk = sum(
        1
        for ch in sample
        if "\u3040" <= ch <= "\u30ff" or "\u3400" <= ch <= "\u9fff" or "\uac00" <= ch <= "\ud7af"
    )
    if cjk > 0.2 * len(sample):
        return "cjk"
    symbols = sum(ch in "{}[]();=<>" for ch in sample)
    if any(m in sample for m in _CODE_MARKERS) or symbols > 0.05 * len(sample):
        return "code"
    return "prose"


def _message_text(messages: Iterable[Mapping[str, Any]]) -> str:
    parts: list[str] = []
    for message in messages:
        content = message.get("content")
        if isinstance(content, str):
            parts.append(content)
        elif isinstance(content, list):
            for part in content:
                if isinstance(part, Mapping) and isinstance(part.get("text"), str):
                    parts.append(part["text"])
        elif content is not None:
            parts.append(json.dumps(content, default=str))
    return "\n".join(parts)


def prompt_bytes(
    *, messages: Iterable[Mapping[str, Any]] | None = None, prompt: object = None
) -> tuple[int, str]:
    """UTF-8 byte length and content kind of a chat or completion prompt."""
    if messages is not None:
        text = _message_text(messages)
    elif isinstance(prompt, str):
        text = prompt
    elif isinstance(prompt, list):
        text = "\n".join(p if isinstance(p, str) else json.dumps(p) for p in prompt)
    else:
        text = ""
    return len(text.encode()), content_kind(text)


@dataclass(slots=True)
class CategoryRatio:
    """EMA state of one category's bytes-per-token ratio."""

    mean: float
    deviation: float = 0.0
    observations: int = 0


@dataclass(frozen=True, slots=True, kw_only=True)
class CategoryStats:
    """One category's calibration, frozen.

    Attributes:
        model: The provider model name.
        kind: The content kind (``prose``, ``code``, ``cjk``).
        mean: EMA of the observed bytes per token (``c_k``).
        deviation: EMA of the absolute deviation (``s_k``).
        observations: Responses folded in.
        ratio: The conservative ratio estimates use (``c_k - gamma * s_k``, floored).
    """

    model: str
    kind: str
    mean: float
    deviation: float
    observations: int
    ratio: float


@dataclass(frozen=True, slots=True)
class EstimatorStats:
    """A frozen snapshot of a `TokenEstimator`: its calibrated categories.

    Attributes:
        categories: One entry per ``(model, kind)`` seen, sorted.
        initial_ratio: The ratio used for a category not seen yet.
    """

    categories: tuple[CategoryStats, ...]
    initial_ratio: float

    def get(self, model: str, kind: str) -> CategoryStats | None:
        """The category of ``model`` and ``kind``, if it was calibrated."""
        for category in self.categories:
            if category.model == model and category.kind == kind:
                return category
        return None


class TokenEstimator:
    """Per-category bytes-per-token EMA with a conservative bias (token-budget routing, §2.1)."""

    def __init__(
        self,
        *,
        initial_ratio: float = 4.0,
        beta: float = 0.95,
        gamma: float = 1.0,
        min_ratio: float = 1.0,
    ) -> None:
        for name, value, low in (
            ("initial_ratio", initial_ratio, 0.0),
            ("min_ratio", min_ratio, 0.0),
        ):
            if not (math.isfinite(value) and value > low):
                raise ValueError(f"{name}={value!r} must be a finite number > {low}")
        if not (math.isfinite(beta) and 0.0 <= beta < 1.0):
            raise ValueError(f"beta={beta!r} must be in [0, 1)")
        if not (math.isfinite(gamma) and gamma >= 0.0):
            raise ValueError(f"gamma={gamma!r} must be a finite number >= 0")
        self.initial_ratio = initial_ratio
        self.beta = beta
        self.gamma = gamma
        self.min_ratio = min_ratio
        self._state: dict[tuple[str, str], CategoryRatio] = {}

    def __repr__(self) -> str:
        cats = ", ".join(
            f"{m}/{k}={s.mean:.2f}±{s.deviation:.2f}" for (m, k), s in sorted(self._state.items())
        )
        return f"<TokenEstimator {cats or 'uncalibrated'}>"

    def ratio(self, model: str, kind: str) -> float:
        """The conservative (routed) bytes-per-token ratio ``c_k - gamma * s_k``."""
        state = self._state.get((model, kind))
        if state is None:
            return self.initial_ratio
        return max(self.min_ratio, state.mean - self.gamma * state.deviation)

    def estimate(self, model: str, kind: str, nbytes: int) -> int:
        """Estimated prompt tokens for ``nbytes`` of ``kind`` content sent to ``model``."""
        if nbytes <= 0:
            return 1
        return math.ceil(nbytes / self.ratio(model, kind))

    def observe(self, model: str, kind: str, nbytes: int, prompt_tokens: int) -> None:
        """Fold one response's exact ``usage.prompt_tokens`` into the category's EMA."""
        if nbytes <= 0 or prompt_tokens <= 0:
            return
        observed = nbytes / prompt_tokens
        state = self._state.get((model, kind))
        if state is None:
            self._state[(model, kind)] = CategoryRatio(mean=observed, observations=1)
            return
        beta = self.beta
        state.deviation = beta * state.deviation + (1.0 - beta) * abs(observed - state.mean)
        state.mean = beta * state.mean + (1.0 - beta) * observed
        state.observations += 1

    def statistics(self) -> EstimatorStats:
        """A frozen snapshot of every calibrated category."""
        return EstimatorStats(
            categories=tuple(
                CategoryStats(
                    model=model,
                    kind=kind,
                    mean=state.mean,
                    deviation=state.deviation,
                    observations=state.observations,
                    ratio=self.ratio(model, kind),
                )
                for (model, kind), state in sorted(self._state.items())
            ),
            initial_ratio=self.initial_ratio,
        )
