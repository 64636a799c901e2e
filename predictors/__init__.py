"""Output-length priors for semisched: the prior interface and the information-ladder sources.

The learned transformer predictor lives in :mod:`predictors.length_model` and
needs the ``ml`` extra; nothing here imports torch.
"""

from predictors.base import Prior, PriorQuery, PriorSource
from predictors.priors import (
    ClassOnly,
    Coarse,
    NoInformation,
    Noisy,
    Oracle,
    information_source,
)

__all__ = [
    "ClassOnly",
    "Coarse",
    "NoInformation",
    "Noisy",
    "Oracle",
    "Prior",
    "PriorQuery",
    "PriorSource",
    "information_source",
]
