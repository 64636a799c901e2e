"""The root of every exception semisched raises on its own.

It lives in the pure core so that the core can raise members of the tree; the
whole tree is drawn in :mod:`semisched.errors`, which re-exports the root.
"""

from __future__ import annotations

__all__ = ["SemischedError"]


class SemischedError(Exception):
    """Base of every exception semisched raises on its own (the tree: :mod:`semisched.errors`).

    Misuse (a bad argument) is not in the tree: it raises ``ValueError`` or
    ``TypeError`` before anything happens.
    """
