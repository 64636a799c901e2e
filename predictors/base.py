"""The prior interface, re-exported from :mod:`semisched.priors` (its home).

``predictors`` implements the SDK's prior protocols; these names stay importable
from here for existing code.
"""

from semisched.priors import BatchPriorSource, Prior, PriorQuery, PriorSource

__all__ = ["BatchPriorSource", "Prior", "PriorQuery", "PriorSource"]
