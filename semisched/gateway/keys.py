"""Gateway keys: which tenant a caller's ``Authorization: Bearer KEY`` belongs to.

The gateway's configuration holds SHA-256 hashes of its keys, never the keys
(``printf %s "$KEY" | sha256sum`` makes one; `key_hash` is the same in
Python). A presented key is hashed and compared against every stored hash with
`hmac.compare_digest`, all of them, so neither the comparison nor the
number of comparisons depends on how much of a hash matched or where it is.

What this module is not: it answers no request (a missing or unknown key is a
401 in `semisched.gateway.answers`) and reads no file.
"""

from __future__ import annotations

import hashlib
import hmac
import re
from collections.abc import Mapping
from typing import Final

__all__ = ["KeyTable", "bearer_key", "check_hash", "key_hash"]

_HEX64: Final = re.compile(r"[0-9a-f]{64}")


def key_hash(key: str) -> str:
    """The SHA-256 of ``key`` (UTF-8) as 64 lowercase hex digits: what a config stores."""
    return hashlib.sha256(key.encode("utf-8")).hexdigest()


def check_hash(value: object, where: str) -> str:
    """``value`` as a stored key hash (lowercased).

    Raises:
        ValueError: Not 64 hex digits; the message starts with ``where`` and never
            repeats the value (it may be a key pasted by mistake).
    """
    if not isinstance(value, str) or not _HEX64.fullmatch(value.lower()):
        raise ValueError(
            f"{where}: a key hash must be 64 hex digits (the SHA-256 of the key, e.g. "
            '`printf %s "$KEY" | sha256sum`), not the key itself'
        )
    return value.lower()


def bearer_key(authorization: str | None) -> str | None:
    """The key of an ``Authorization: Bearer KEY`` header (``None``: absent or another scheme)."""
    if not authorization:
        return None
    scheme, _, key = authorization.partition(" ")
    key = key.strip()
    if scheme.lower() != "bearer" or not key:
        return None
    return key


class KeyTable:
    """Key hashes and the tenant each belongs to.

    Args:
        hashes: ``{sha256 hex: tenant}``.

    Raises:
        ValueError: A hash that is not 64 hex digits.
    """

    __slots__ = ("_entries",)

    def __init__(self, hashes: Mapping[str, str]) -> None:
        self._entries = tuple(
            (bytes.fromhex(check_hash(h, "key table")), tenant) for h, tenant in hashes.items()
        )

    def __len__(self) -> int:
        return len(self._entries)

    def __repr__(self) -> str:
        tenants = sorted({tenant for _, tenant in self._entries})
        return f"<KeyTable keys={len(self._entries)} tenants={tenants}>"

    def tenant_for(self, key: str | None) -> str | None:
        """The tenant of ``key`` (``None``: missing or unknown), in constant time per entry."""
        if not key:
            return None
        digest = hashlib.sha256(key.encode("utf-8")).digest()
        found: str | None = None
        for stored, tenant in self._entries:  # every entry, no early exit
            if hmac.compare_digest(digest, stored):
                found = tenant
        return found
