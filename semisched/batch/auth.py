"""A wrong API key stops a batch job instead of failing every line.

A 401 or 403 says the key (or its access) is wrong, and every other line would
get the same answer. So `AuthGuard` holds the error records of such
answers back, and:

1. a success in between releases them: the key works, so they are ordinary
   failures of their lines (a model the key may not use) and are recorded;
2. ``limit`` of them in a row with no success in between trip the guard: the
   job stops sending, the held records are dropped and so is every later
   401/403, and the command exits 2 ("authentication failed"). Nothing of them
   is recorded, so a rerun with the right key sends those lines and the rest.
3. at the end of a run that did not trip, what is still held is recorded.

Other failures neither count towards ``limit`` nor break a run of 401/403s.

Over a fleet the scheduler acts first: an endpoint whose key is refused is taken
out (its circuit opens for the reason ``auth``, `semisched.core.fleet.endpoint`
rule 5) and the refused attempt fails over to another endpoint, so its lines are
answered there and no 401/403 reaches the guard. What reaches it is a refusal
with nowhere else to go: every key of the fleet refused (or a one-endpoint
fleet's), which is what stops the job.
"""

from __future__ import annotations

from typing import Any

from semisched.batch.output import ErrorCode

__all__ = ["AUTH_FAILURES", "AUTH_STATUSES", "AuthGuard"]

#: The statuses that say the key, not the request, is wrong.
AUTH_STATUSES = frozenset({401, 403})
#: 401/403 answers in a row, with no success, that stop a job.
AUTH_FAILURES = 3

Held = tuple[dict[str, Any], ErrorCode]


class AuthGuard:
    """Rules 1-3 of the module docstring.

    Args:
        limit: 401/403 answers in a row, with no success, that trip it.
    """

    def __init__(self, limit: int = AUTH_FAILURES) -> None:
        self.limit = limit
        self.tripped = False
        self.status: int | None = None  # the last 401/403 seen
        self.dropped = 0  # 401/403 answers left without a record: the limit and later ones
        self._held: list[Held] = []

    def hold(self, record: dict[str, Any], code: ErrorCode, status: int | None) -> bool:
        """Whether ``record`` (an error of ``status``) is held back instead of written
        now; ``True`` for every 401/403. Returns with `tripped` set when this one
        is the ``limit``-th in a row."""
        if status not in AUTH_STATUSES:
            return False
        self.status = status
        if not self.tripped:
            self._held.append((record, code))
            if len(self._held) >= self.limit:
                self.tripped = True
                self.dropped = len(self._held)
                self._held.clear()
        else:
            self.dropped += 1
        return True

    def release(self) -> list[Held]:
        """A success (or the end of a run that did not trip): the held records, to write."""
        held, self._held = self._held, []
        return held
