"""The prior interface, re-exported from `semisched.priors.sources` (its home).

``predictors`` implements the SDK's prior protocols; these names stay importable
from here for existing code.
"""

from semisched.priors.sources import BatchPriorSource, Prior, PriorQuery, PriorSource

__all__ = ["BatchPriorSource", "Prior", "PriorQuery", "PriorSource"]
