"""The root of the package's exceptions.

`SemischedError` is what every error semisched raises on its own
account derives from (outcomes such as a rejection, and bugs in us such as
`IllegalTransition`); misuse of an API raises
the built-in ``ValueError`` or ``TypeError`` instead. Pure: no I/O.
"""

from __future__ import annotations

__all__ = ["SemischedError"]


class SemischedError(Exception):
    """The base class of semisched's own exceptions."""
