"""The learned prior source: the shipped length model behind the ``PriorSource`` protocol.

`LearnedPrior` is a `BatchPriorSource`: the async
runtime micro-batches queries and runs `LearnedPrior.prior_batch` in a
worker thread with a bounded wait and a fallback prior, so a slow model never
stalls scheduling. The text the model sees is the last user message (or the
completion prompt); the previous answer's length comes from
``PriorQuery.previous_output_tokens`` or, failing that, from the last assistant
message in ``messages`` (counted with ``o200k_base``).

``load_default()`` loads the weights shipped in ``predictors/weights/default``
over the packaged MiniLM backbone. Without torch/transformers installed,
importing this module still works and loading says what to install.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from predictors.base import PriorQuery
from semisched.core.request import Prior

__all__ = ["DEFAULT_WEIGHTS", "LearnedPrior", "load_default"]

DEFAULT_WEIGHTS = Path(__file__).with_name("weights") / "default"

_INSTALL = "the learned predictor needs the ml extra: pip install 'semisched[ml]'"


def _predictor_class() -> Any:
    try:
        from predictors.length_model import LengthPredictor
    except ImportError as exc:  # torch / transformers / safetensors missing
        raise ImportError(f"{_INSTALL} ({exc})") from exc
    return LengthPredictor


def _text(query: PriorQuery) -> str:
    if query.messages:
        for message in reversed(query.messages):
            if message.get("role") == "user" and isinstance(message.get("content"), str):
                return str(message["content"])
    return query.prompt or ""


def _previous(query: PriorQuery) -> int | None:
    if query.previous_output_tokens is not None:
        return query.previous_output_tokens
    if not query.messages:
        return None
    answers = [m.get("content") for m in query.messages if m.get("role") == "assistant"]
    if not answers or not isinstance(answers[-1], str):
        return None
    try:
        from predictors.data import count_tokens

        return int(count_tokens([answers[-1]])[0])
    except ImportError:
        return max(1, len(answers[-1]) // 4)


def _capped(p50: float, p90: float, cap: int | None) -> Prior:
    """The model's p50/p90, clipped to the call's output cap (a provider never exceeds it)."""
    if cap is not None and cap > 0:
        p50, p90 = min(p50, float(cap)), min(p90, float(cap))
    return Prior(p50=p50, p90=p90)


class LearnedPrior:
    """Priors from the trained length model (p50/p90 output tokens)."""

    name = "learned"

    def __init__(self, predictor: Any) -> None:
        self.predictor = predictor

    @classmethod
    def from_dir(cls, path: str | Path) -> LearnedPrior:
        """Load a model folder written by ``python -m predictors.train``."""
        return cls(_predictor_class().from_dir(path))

    def prior(self, query: PriorQuery) -> Prior:
        return self.prior_batch([query])[0]

    def prior_batch(self, queries: Sequence[PriorQuery]) -> list[Prior]:
        texts = [_text(q) for q in queries]
        previous = [_previous(q) for q in queries]
        predictions = self.predictor.predict(texts, previous)
        return [
            _capped(float(p50), float(max(p50, p90)), q.max_tokens)
            for (p50, p90), q in zip(predictions, queries, strict=True)
        ]


def load_default() -> LearnedPrior:
    """The shipped model over the packaged MiniLM backbone.

    Raises:
        ImportError: Without the ``ml`` extra, naming what to install.
        FileNotFoundError: If the shipped weights are missing.
    """
    if not (DEFAULT_WEIGHTS / "trainable.safetensors").exists():
        raise FileNotFoundError(f"no shipped weights under {DEFAULT_WEIGHTS}")
    return LearnedPrior.from_dir(DEFAULT_WEIGHTS)
