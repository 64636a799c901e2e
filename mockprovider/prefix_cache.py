"""The mock's prompt cache: how many of a prompt's tokens it reports as cached (pure).

What it is: a deterministic stand-in for a provider's prefix cache, for the usage fields
``prompt_tokens_details.cached_tokens`` (chat and legacy completions) and
``input_tokens_details.cached_tokens`` (Responses). It only *reports*: the physics still
prefills the whole prompt.

The rule. A prompt's text (the text the mock counts its tokens from: the messages joined,
``prompt``, or ``instructions`` and ``input``) is cut into blocks of `BLOCK_TOKENS`
tokens at the mock's own estimate of 4 UTF-8 bytes a token, so 512 bytes a block; a last
partial block never counts. The cached tokens of a prompt are ``BLOCK_TOKENS`` times the
number of its leading blocks that some earlier prompt began with (the longest prefix seen
before, in whole blocks), reported only from `MIN_CACHED_TOKENS` on (OpenAI caches
prompts of 1024 tokens or more, in steps of 128) and never more than the prompt's tokens.
A prompt given as token ids, and an embeddings input, is never cached; an
``x-mock-input-tokens`` hint changes the prompt's tokens, not its blocks.

When a prompt enters the cache: a real-time request when the gate admits it to the physics
(``mockprovider.app``; a refused request, or one answered by an injected 500 or a hang,
leaves nothing), a batch line when its batch is created, in file order
(``mockprovider.batches``). The cache keeps the `MAX_BLOCKS` most recently used blocks.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from typing import Final

__all__ = ["BLOCK_TOKENS", "MAX_BLOCKS", "MIN_CACHED_TOKENS", "PrefixCache"]

#: Tokens in one cache block (OpenAI's cache hits come in steps of 128 tokens).
BLOCK_TOKENS: Final = 128
#: The fewest cached tokens reported; a shorter match reports 0 (OpenAI's minimum).
MIN_CACHED_TOKENS: Final = 1024
#: The most blocks kept; the least recently used goes first.
MAX_BLOCKS: Final = 262_144

_BLOCK_BYTES: Final = 4 * BLOCK_TOKENS  # the mock's estimate: 4 UTF-8 bytes a token


def _chain(text: str) -> Iterator[bytes]:
    """The key of each whole leading block of ``text``: a hash of the whole prefix it ends."""
    raw = text.encode("utf-8")
    key = b""
    for end in range(_BLOCK_BYTES, len(raw) + 1, _BLOCK_BYTES):
        key = hashlib.blake2b(key + raw[end - _BLOCK_BYTES : end], digest_size=16).digest()
        yield key


class PrefixCache:
    """The prompts seen so far, as chained block keys (see the module docstring)."""

    __slots__ = ("_blocks",)

    def __init__(self) -> None:
        self._blocks: dict[bytes, None] = {}  # insertion order: least recently used first

    def __repr__(self) -> str:
        return f"<PrefixCache blocks={len(self._blocks)}>"

    def __len__(self) -> int:
        return len(self._blocks)

    def cached_tokens(self, text: str, input_tokens: int) -> int:
        """The tokens of a prompt of ``text`` (``input_tokens`` in all) already cached."""
        matched = 0
        for key in _chain(text):
            if key not in self._blocks:
                break
            matched += 1
        cached = matched * BLOCK_TOKENS
        return min(cached, input_tokens) if cached >= MIN_CACHED_TOKENS else 0

    def remember(self, text: str) -> None:
        """Put every whole leading block of ``text`` in the cache (most recently used)."""
        blocks = self._blocks
        for key in _chain(text):
            blocks.pop(key, None)
            blocks[key] = None
        while len(blocks) > MAX_BLOCKS:
            del blocks[next(iter(blocks))]
