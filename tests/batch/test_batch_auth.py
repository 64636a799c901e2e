"""The auth guard's rules (semisched.batch.auth): 401/403s held back, released by a
success, dropped once enough come in a row."""

from __future__ import annotations

from semisched.batch.auth import AuthGuard
from semisched.batch.output import ErrorCode

E = ErrorCode.PROVIDER_ERROR


def test_other_failures_are_written_at_once_and_do_not_count() -> None:
    guard = AuthGuard(limit=2)
    assert not guard.hold({"id": 1}, E, 500) and not guard.hold({"id": 2}, E, None)
    assert not guard.tripped and guard.release() == []


def test_a_success_releases_what_was_held_and_starts_the_count_again() -> None:
    guard = AuthGuard(limit=2)
    assert guard.hold({"id": 1}, E, 403)
    assert guard.release() == [({"id": 1}, E)]  # the key works: an ordinary failure
    assert guard.hold({"id": 2}, E, 401) and not guard.tripped


def test_limit_refusals_in_a_row_trip_it_and_nothing_of_them_is_kept() -> None:
    guard = AuthGuard(limit=3)
    for i in range(3):
        assert guard.hold({"id": i}, E, 401)
    assert guard.tripped and guard.status == 401
    assert guard.hold({"id": 9}, E, 401) and guard.release() == []
