"""Extractive compression of chat prompts: the compressor behind Compress-and-Route.

What it is for: a request slightly over a short pool's context budget ``B`` can still be served
there if its prompt is cut to ``T_c = B - L_out`` tokens (FleetOpt §5.1, eq. 15).
`ExtractiveCompressor` makes that cut on OpenAI chat ``messages`` by dropping whole
sentences of user and assistant text, lowest score first; it never rewrites a word.
`ExtractiveCompressor.floor` tells in one pass whether a prompt could ever fit a budget.

What it is not: no LLM, no paraphrase, no I/O, no clock, no routing (the caller reads ``fits``),
and off unless a caller uses it. Token counts are ``count_tokens``'s; the default estimates.

Rules:

1. The input is never mutated; the result is a new list of new message dicts.
2. Kept verbatim, whole: messages of any role but ``user`` and ``assistant`` (``system``,
   ``developer``, ``tool``, ``function``), content parts other than text, and code: fenced
   blocks (``` or ~~~, to the same fence or the end) and indented blocks (4 spaces or a tab,
   after a blank line, as in CommonMark).
3. The rest is cut into sentences: after ``. ! ?`` (and closing quotes or brackets) before
   whitespace, after ``。！？``, and at every line break (list items and table rows are units).
   Abbreviations ("e.g.", "Dr."), initials ("J.") and list numbers ("1.") end no sentence.
4. Always kept: the first ``keep_first`` and last ``keep_last`` sentences of all that text in
   message order (primacy, recency), the last ``keep_last`` of the latest user message, and
   the first sentence of every message (no message is left empty: some providers refuse an
   empty ``content``).
5. Tokens are ``count_tokens`` of each text (string content or text part), summed; the chat
   format's per-message tokens and non-text parts are not counted.
6. Score (FleetOpt §5.2): 0.35 TF-IDF + 0.40 position + 0.20 TextRank + 0.05 novelty, each
   min-max normalised to [0, 1] first (a constant component counts 0). The lowest score drops
   first; a tie drops the earlier sentence. Deterministic.
7. Kept sentences keep their order and the whitespace between them; across a dropped stretch
   they are joined by the stretch's separator with the most line breaks, or one space.

Where this differs from the paper, which leaves these open: a line break always ends a unit
(chat text is markdown; list items and table rows have no full stop). Position is an asymmetric
U, ``0.5 (1 - p)^2 + p^2`` for a sentence at ``p`` in [0, 1]: the latest turns weigh double the
first, as the next answer depends most on them. TF-IDF of a sentence is the mean smoothed idf of
its words, ``ln((1 + n) / (1 + df)) + 1`` (length-neutral). TextRank is PageRank (damping 0.85)
on the TF-IDF cosine graph; beyond `GRAPH_CAP` sentences the n x n graph is skipped
(TextRank's weight goes to TF-IDF, novelty counts 0). The paper adds sentences by score up to
``T_c``; we drop from the bottom, then recount the joined text and drop more if BPE merges at
the joins cost a token. Code is found by syntax, not by the router's per-request category
estimate, and kept while the prose around it is cut rather than excluding the request.
"""

from __future__ import annotations

import itertools
import math
import re
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from semisched.core.checks import check_int

__all__ = ["BYTES_PER_TOKEN", "GRAPH_CAP", "WEIGHTS", "Compression", "ExtractiveCompressor"]
__all__ += ["estimate_tokens"]

#: Bytes per token of the default counter: the runtime's starting estimate for English prose
#: (``semisched.runtime.estimate``, Token-Budget-Aware Pool Routing §2.1, ``c0 = 4.0``).
#: Pass a real tokenizer when you have one.
BYTES_PER_TOKEN = 4.0
#: Component weights of a sentence's score (FleetOpt §5.2).
WEIGHTS = {"tfidf": 0.35, "position": 0.40, "textrank": 0.20, "novelty": 0.05}
#: Most sentences scored with the similarity graph (TextRank and novelty); beyond, TF-IDF alone.
GRAPH_CAP = 1500

_COMPRESSIBLE_ROLES = frozenset({"user", "assistant"})
_DAMPING, _RANK_ITERATIONS, _RANK_TOLERANCE = 0.85, 100, 1e-9
_FENCE = re.compile(r" {0,3}(`{3,}|~{3,})")
_INDENTED = re.compile(r"(?: {4}|\t)\s*\S")
_END = re.compile(r"[.!?]+[\"'’”»)\]]*(?=\s|$)|[。！？]+[」』”’）]*")
_ABBREVIATIONS = frozenset(
    {"e.g", "i.e", "etc", "vs", "cf", "al", "approx", "fig", "no", "mr", "mrs", "ms", "dr"}
    | {"prof", "st", "jr", "sr", "inc", "ltd", "co"}
)
_CJK = "\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff"
_TERM = re.compile(rf"[{_CJK}]|[^\W_{_CJK}]+")


def estimate_tokens(text: str) -> int:
    """The default counter: ``ceil(utf8_bytes / 4)`` (`BYTES_PER_TOKEN`)."""
    return math.ceil(len(text.encode("utf-8")) / BYTES_PER_TOKEN)


@dataclass(frozen=True, slots=True, kw_only=True)
class Compression:
    """What `ExtractiveCompressor.compress` did.

    Attributes:
        messages: The messages to send: new dicts, originals untouched.
        original_tokens: Tokens of the input (rule 5).
        tokens: Tokens of ``messages``.
        dropped_sentences: Sentences removed (0 when the input already fit).
        fits: ``tokens <= budget``.
        floor_tokens: The fewest tokens reachable (every droppable sentence dropped).
        code_blocks: Code blocks found in user and assistant text (kept verbatim).
    """

    messages: list[dict[str, Any]]
    original_tokens: int
    tokens: int
    dropped_sentences: int
    fits: bool
    floor_tokens: int
    code_blocks: int


@dataclass(slots=True)
class _Text:
    """One compressible text: where it lives, its units and the whitespace between them."""

    message: int
    part: int | None  # index in a content list; None for a string content
    text: str
    spans: list[tuple[int, int]]  # units, in order, as (start, end) offsets
    first: int  # global index of its first unit


class _Prompt:
    """Messages parsed once: fixed tokens, compressible texts, units and which may drop."""

    def __init__(self, messages: Sequence[Mapping[str, Any]], by: ExtractiveCompressor) -> None:
        if isinstance(messages, (str, bytes, Mapping)) or not isinstance(messages, Sequence):
            raise TypeError(f"messages must be a list of dicts, not {type(messages).__name__}")
        self.messages, self.count, self.fixed_tokens = messages, by.count_tokens, 0
        self.texts: list[_Text] = []
        self.units: list[str] = []
        self.code: list[bool] = []
        question: list[int] = []  # prose units of the most recent user message
        heads: list[int] = []  # each message's first prose unit: no message is emptied
        for i, message in enumerate(messages):
            if not isinstance(message, Mapping) or not isinstance(message.get("role"), str):
                raise TypeError(f"messages[{i}] must be a dict with a string 'role'")
            compressible = message["role"] in _COMPRESSIBLE_ROLES
            before = len(self.units)
            for part, text in _texts(message.get("content"), f"messages[{i}]"):
                if not compressible:
                    self.fixed_tokens += self.count(text)
                    continue
                spans, code = _segment(text)
                self.texts.append(_Text(i, part, text, spans, len(self.units)))
                self.units += [text[s:e] for s, e in spans]
                self.code += code
            own = [u for u in range(before, len(self.units)) if not self.code[u]]
            heads += own[:1]
            if message["role"] == "user" and own:
                question = own
        self.prose = [u for u, code in enumerate(self.code) if not code]
        self.droppable = np.zeros(len(self.units), dtype=bool)
        self.droppable[self.prose] = True
        first, last = by.keep_first, by.keep_last
        protected = self.prose[:first] + self.prose[len(self.prose) - last :]
        self.droppable[protected + question[len(question) - last :] + heads] = False
        self.text_tokens = [self.count(t.text) for t in self.texts]
        self.original_tokens = self.fixed_tokens + sum(self.text_tokens)

    def tokens(self, dropped: npt.NDArray[np.bool_]) -> tuple[int, list[str]]:
        """Exact tokens and rebuilt texts with the ``dropped`` units left out."""
        total, rebuilt = self.fixed_tokens, []
        for t, n in zip(self.texts, self.text_tokens, strict=True):
            gone = dropped[t.first : t.first + len(t.spans)]
            changed = bool(gone.any())
            rebuilt.append(_join(t.text, t.spans, gone) if changed else t.text)
            total += self.count(rebuilt[-1]) if changed else n
        return total, rebuilt

    def rebuild(self, texts: list[str]) -> list[dict[str, Any]]:
        out = [dict(m) for m in self.messages]
        for m in (m for m in out if isinstance(m.get("content"), list)):
            m["content"] = [dict(part) for part in m["content"]]  # parts are dicts: _texts
        for t, text in zip(self.texts, texts, strict=True):
            where = out[t.message] if t.part is None else out[t.message]["content"][t.part]
            where["content" if t.part is None else "text"] = text
        return out


def _texts(content: object, where: str) -> list[tuple[int | None, str]]:
    """The texts of a message's content: ``(part index or None, text)``; checks the shape."""
    if content is None:
        return []
    if isinstance(content, str):
        return [(None, content)]
    if not isinstance(content, list):
        raise TypeError(f"{where}['content'] must be a string, a list of parts or None")
    texts: list[tuple[int | None, str]] = []
    for j, part in enumerate(content):
        if not isinstance(part, Mapping):
            raise TypeError(f"{where}['content'][{j}] must be a dict (a content part)")
        if part.get("type") == "text":
            if not isinstance(part.get("text"), str):
                raise TypeError(f"{where}['content'][{j}]['text'] must be a string")
            texts.append((j, part["text"]))
    return texts


def _segment(text: str) -> tuple[list[tuple[int, int]], list[bool]]:
    """Units of ``text`` as (start, end) spans and whether each is a code block (rules 2, 3)."""
    spans: list[tuple[int, int]] = []
    code: list[bool] = []
    lines = text.splitlines(keepends=True)
    starts = list(itertools.accumulate((len(line) for line in lines), initial=0))
    i = 0
    while i < len(lines):
        line = lines[i].rstrip("\r\n")
        fence = _FENCE.match(line)
        if fence and fence.group(1)[0] == "`" and "`" in line[fence.end() :]:
            fence = None  # ```inline``` code, not a fence (CommonMark)
        after_blank = i == 0 or not lines[i - 1].strip()
        if fence or (after_blank and _INDENTED.match(line)):
            j = i + 1
            if fence:
                mark = fence.group(1)  # closed by a line of at least as many of its character
                close = re.compile(rf" {{0,3}}{mark[0]}{{{len(mark)},}}[ \t]*[\r\n]*")
                while j < len(lines) and not close.fullmatch(lines[j]):
                    j += 1
                j = min(j + 1, len(lines))
            else:  # trailing blank lines join the block; the rstrip below leaves them out
                while j < len(lines) and (not lines[j].strip() or _INDENTED.match(lines[j])):
                    j += 1
            spans.append((starts[i], starts[i] + len(("".join(lines[i:j])).rstrip("\r\n"))))
            code.append(True)
            i = j
            continue
        for s, e in _sentences(line):
            spans.append((starts[i] + s, starts[i] + e))
            code.append(False)
        i += 1
    return spans, code


def _sentences(line: str) -> list[tuple[int, int]]:
    """Sentence spans of one line, whitespace trimmed (rule 3)."""
    out: list[tuple[int, int]] = []
    start = 0
    for m in _END.finditer(line):
        if m.group() == ".":
            before = line[start : m.start()].split()
            word = before[-1].lstrip("([{\"'").lower() if before else ""
            listed = len(before) == 1 and word.isdigit()
            if word in _ABBREVIATIONS or (len(word) == 1 and word.isalpha()) or listed:
                continue
        out.append((start, m.end()))
        start = m.end()
    out.append((start, len(line)))
    pieces = [(s, line[s:e]) for s, e in out if line[s:e].strip()]
    return [(s + len(p) - len(p.lstrip()), s + len(p.rstrip())) for s, p in pieces]


def _join(text: str, spans: list[tuple[int, int]], gone: npt.NDArray[np.bool_]) -> str:
    """``text`` without the ``gone`` units (rule 7)."""
    kept = [u for u in range(len(spans)) if not gone[u]]
    if not kept:
        return ""
    out = [text[: spans[0][0]]]
    for prev, u in zip([None, *kept], kept, strict=False):
        if prev is not None:
            if u == prev + 1:
                out.append(text[spans[prev][1] : spans[u][0]])
            else:
                seps = [text[spans[k][1] : spans[k + 1][0]] for k in range(prev, u)]
                best = max(seps, key=lambda s: s.count("\n"))
                out.append(best if "\n" in best else " ")
        out.append(text[spans[u][0] : spans[u][1]])
    out.append(text[spans[-1][1] :])
    return "".join(out)


def _normalised(x: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
    low, high = float(x.min()), float(x.max())
    return (x - low) / (high - low) if high - low > 1e-12 else np.zeros_like(x)


def _scores(sentences: Sequence[str]) -> npt.NDArray[np.float64]:
    """Composite score of each sentence (rule 6); higher is kept longer."""
    n = len(sentences)  # >= 1: called only when something can drop
    bags = [Counter(_TERM.findall(s.lower())) for s in sentences]
    ids: dict[str, int] = {}  # the sentence x term matrix, flat: one entry per (row, col)
    cols = np.array([ids.setdefault(t, len(ids)) for b in bags for t in b], dtype=np.int64)
    rows = np.repeat(np.arange(n), [len(b) for b in bags])
    counts = np.array([c for b in bags for c in b.values()], dtype=np.float64)
    df = np.bincount(cols, minlength=len(ids))
    values = counts * (np.log((1 + n) / (1 + df)) + 1.0)[cols]
    words = np.maximum(np.bincount(rows, weights=counts, minlength=n), 1.0)
    tfidf = _normalised(np.bincount(rows, weights=values, minlength=n) / words)
    p = np.arange(n) / max(1, n - 1)
    position = 0.5 * (1 - p) ** 2 + p**2
    graph = _graph(n, rows, cols, values) if n <= GRAPH_CAP else (tfidf, np.zeros(n))
    return (
        WEIGHTS["tfidf"] * tfidf
        + WEIGHTS["position"] * _normalised(position)
        + WEIGHTS["textrank"] * _normalised(graph[0])
        + WEIGHTS["novelty"] * _normalised(graph[1])
    )


def _graph(
    n: int, rows: npt.NDArray[np.int64], cols: npt.NDArray[np.int64], values: npt.NDArray[Any]
) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]]:
    """TextRank and novelty from the cosine similarities of the sentences' TF-IDF vectors."""
    norms = np.sqrt(np.bincount(rows, weights=values**2, minlength=n))
    # Only words in two or more sentences link sentences; the rest only count in the norms.
    shared = np.bincount(cols) > 1
    link = shared[cols]
    x = np.zeros((n, int(shared.sum())))
    x[rows[link], (np.cumsum(shared) - 1)[cols[link]]] = values[link] / norms[rows[link]]
    sim = x @ x.T
    np.fill_diagonal(sim, 0.0)
    novelty = 1.0 - np.tril(sim, -1).max(axis=1, initial=0.0)
    totals = sim.sum(axis=1)
    walk = np.where(totals[:, None] > 0, sim / np.where(totals > 0, totals, 1.0)[:, None], 1 / n)
    rank = np.full(n, 1.0 / n)
    for _ in range(_RANK_ITERATIONS):
        rank, old = (1 - _DAMPING) / n + _DAMPING * (walk.T @ rank), rank
        if float(np.abs(rank - old).sum()) < _RANK_TOLERANCE:
            break
    return rank, novelty


class ExtractiveCompressor:
    """Drops the least useful sentences of a chat prompt until it fits a token budget.

    Args:
        count_tokens: Tokens of one text; default `estimate_tokens` (4 UTF-8 bytes a
            token). Pass the serving model's tokenizer for exact budgets, e.g.
            ``lambda t: len(enc.encode_ordinary(t))`` with tiktoken.
        keep_first: Sentences at the start of the compressible text always kept (paper: 3).
        keep_last: Sentences at its end, and at the end of the last user message, always
            kept (paper: 2).
    """

    def __init__(
        self,
        count_tokens: Callable[[str], int] | None = None,
        *,
        keep_first: int = 3,
        keep_last: int = 2,
    ) -> None:
        if count_tokens is not None and not callable(count_tokens):
            raise TypeError(f"count_tokens={count_tokens!r} must be callable or None")
        check_int("keep_first", keep_first, minimum=0)
        check_int("keep_last", keep_last, minimum=0)
        self.count_tokens = count_tokens or estimate_tokens
        self.keep_first, self.keep_last = keep_first, keep_last

    def __repr__(self) -> str:
        keep = f"keep_first={self.keep_first}, keep_last={self.keep_last}"
        return f"ExtractiveCompressor({getattr(self.count_tokens, '__name__', '?')}, {keep})"

    def floor(self, messages: Sequence[Mapping[str, Any]]) -> int:
        """Tokens left after dropping every droppable sentence: no budget below it is reachable."""
        prompt = _Prompt(messages, self)
        return prompt.tokens(prompt.droppable)[0]

    def compress(self, messages: Sequence[Mapping[str, Any]], budget_tokens: int) -> Compression:
        """Cut ``messages`` to at most ``budget_tokens`` tokens, or as close as rules allow.

        Returns the input (copied) when it already fits; otherwise the kept sentences in their
        order. When even the floor is above the budget, every droppable sentence is dropped
        and ``fits`` is False: the caller decides what to do with it.

        Raises:
            ValueError: ``budget_tokens`` is not an int >= 1.
            TypeError: ``messages`` is not a list of dicts with a string ``role``.
        """
        check_int("budget_tokens", budget_tokens, minimum=1)
        prompt = _Prompt(messages, self)
        floor, texts = prompt.tokens(prompt.droppable)
        tokens, dropped = floor, int(prompt.droppable.sum())
        if prompt.original_tokens <= budget_tokens:
            tokens, dropped, texts = prompt.original_tokens, 0, [t.text for t in prompt.texts]
        elif floor <= budget_tokens:
            tokens, dropped, texts = self._drop(prompt, budget_tokens)
        return Compression(
            messages=prompt.rebuild(texts),
            original_tokens=prompt.original_tokens,
            tokens=tokens,
            dropped_sentences=dropped,
            fits=tokens <= budget_tokens,
            floor_tokens=floor,
            code_blocks=sum(prompt.code),
        )

    def _drop(self, prompt: _Prompt, budget: int) -> tuple[int, int, list[str]]:
        """Drop the lowest-scoring droppable units until the exact count fits ``budget``."""
        prose = np.array(prompt.prose, dtype=np.int64)
        score = _scores([prompt.units[u] for u in prose])
        candidates = prompt.droppable[prose]
        order = prose[candidates][np.lexsort((prose[candidates], score[candidates]))]
        dropped = np.zeros(len(prompt.units), dtype=bool)
        estimate, k = prompt.original_tokens, 0
        while True:
            while estimate > budget and k < len(order):
                dropped[order[k]] = True
                estimate -= self.count_tokens(prompt.units[order[k]])
                k += 1
            tokens, texts = prompt.tokens(dropped)
            if tokens <= budget or k == len(order):  # the floor fits: ends at last
                return tokens, k, texts
            estimate = tokens  # joins cost more than the units' own counts said
