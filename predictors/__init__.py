"""Output-length priors for semisched: the prior interface and the information-ladder sources.

The learned transformer predictor lives in `predictors.length_model` and
needs the ``ml`` extra; nothing here imports torch.
"""

from predictors.base import BatchPriorSource, Prior, PriorQuery, PriorSource
from predictors.learned import LearnedPrior
from predictors.priors import (
    ClassOnly,
    Coarse,
    NoInformation,
    Noisy,
    Oracle,
    information_source,
)


def load_default() -> LearnedPrior:
    """The shipped learned prior source (needs the ``ml`` extra; see `predictors.learned`)."""
    from predictors.learned import load_default as _load

    return _load()


__all__ = [
    "BatchPriorSource",
    "ClassOnly",
    "Coarse",
    "LearnedPrior",
    "NoInformation",
    "Noisy",
    "Oracle",
    "Prior",
    "PriorQuery",
    "PriorSource",
    "information_source",
    "load_default",
]
