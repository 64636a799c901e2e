"""The extractive prompt compressor (semisched.compress.compressor): what a caller sees.

A whitespace "tokenizer" (one token per word) keeps budgets easy to reason about; one test
covers the default 4-bytes-per-token estimate.
"""

from __future__ import annotations

import copy
import re
from typing import Any

import pytest

from semisched.compress import compressor as compress_module
from semisched.compress.compressor import Compression, ExtractiveCompressor, estimate_tokens


def words(text: str) -> int:
    return len(text.split())


def total(messages: list[dict[str, Any]]) -> int:
    """Words of every text in ``messages`` (string contents and text parts)."""
    n = 0
    for m in messages:
        content = m.get("content")
        if isinstance(content, str):
            n += words(content)
        elif isinstance(content, list):
            n += sum(words(p["text"]) for p in content if p.get("type") == "text")
    return n


TOPICS = (
    "apples grow in cold orchards",
    "rivers carry sediment to the delta",
    "compilers translate source into machine code",
    "violins need rosin on the bow",
    "glaciers carve deep valleys slowly",
    "bakers proof dough before baking",
    "satellites orbit above the atmosphere",
    "tides follow the pull of the moon",
    "owls hunt mostly at night",
    "granite forms from cooled magma",
)


def prose(n: int, tag: str = "") -> str:
    """``n`` distinct sentences, numbered so each can be found in the output."""
    return " ".join(f"Point {tag}{k}: {TOPICS[k % len(TOPICS)]}." for k in range(n))


def sentences(text: str) -> list[str]:
    return re.findall(r"Point \w+:[^.]*\.", text)


COMPRESSOR = ExtractiveCompressor(words)


def test_a_prompt_that_fits_is_returned_unchanged() -> None:
    messages = [{"role": "user", "content": prose(5)}]
    result = COMPRESSOR.compress(messages, 1000)
    assert result.fits and result.dropped_sentences == 0
    assert result.messages == messages and result.messages[0] is not messages[0]
    assert result.tokens == result.original_tokens == total(messages)


def test_prose_well_above_budget_is_cut_to_at_most_the_budget() -> None:
    messages = [
        {"role": "user", "content": prose(30, "u")},
        {"role": "assistant", "content": prose(30, "a")},
        {"role": "user", "content": prose(10, "q")},
    ]
    original = total(messages)
    result = COMPRESSOR.compress(messages, original // 2)
    assert result.fits and result.tokens <= original // 2
    assert result.tokens == total(result.messages)  # the count is of what is sent
    assert result.original_tokens == original and result.dropped_sentences > 0
    for before, after in zip(messages, result.messages, strict=True):
        kept = sentences(after["content"])
        every = sentences(before["content"])
        assert kept == [s for s in every if s in kept]  # whole sentences, original order


def test_code_blocks_and_system_prompt_survive_verbatim() -> None:
    fenced = "```python\ndef f(x):\n\n    return x + 1\n```"
    tilde = "~~~\nSELECT 1;\n~~~"
    indented = "    make build\n    make test"
    system = prose(20, "s")
    messages = [
        {"role": "system", "content": system},
        {"role": "developer", "content": "Answer tersely. Cite sources."},
        {
            "role": "user",
            "content": f"{prose(8, 'a')}\n{fenced}\n{prose(8, 'b')}\n\n{indented}\n\n"
            f"{prose(8, 'c')}\n{tilde}\n{prose(8, 'd')}",
        },
        {"role": "tool", "content": prose(4, "t"), "tool_call_id": "call_1"},
        {"role": "assistant", "content": f"Here it is.\n```\nplain = True\n```\n{prose(9, 'e')}"},
        {"role": "user", "content": "Why does it fail? Explain it."},
    ]
    result = COMPRESSOR.compress(messages, total(messages) // 2)
    assert result.fits and result.dropped_sentences > 0 and result.code_blocks == 4
    out = result.messages
    assert out[0] == messages[0] and out[1] == messages[1] and out[3] == messages[3]
    for block in (fenced, tilde, indented):
        assert block in out[2]["content"]
    assert "```\nplain = True\n```" in out[4]["content"]
    assert out[5]["content"] == "Why does it fail? Explain it."


def test_an_unreachable_budget_returns_the_floor_with_fits_false() -> None:
    messages = [
        {"role": "system", "content": prose(10, "s")},
        {"role": "user", "content": prose(20) + "\n```\n" + "x = 1\n" * 30 + "```"},
    ]
    floor = COMPRESSOR.floor(messages)
    result = COMPRESSOR.compress(messages, floor - 1)
    assert not result.fits
    assert result.tokens == result.floor_tokens == floor == total(result.messages)
    assert result.messages[0] == messages[0] and "x = 1\n" * 30 in result.messages[1]["content"]
    assert COMPRESSOR.compress(messages, 1).tokens == floor
    assert COMPRESSOR.compress(messages, floor).fits  # the floor itself is reachable


def test_original_messages_are_not_mutated() -> None:
    messages: list[dict[str, Any]] = [
        {"role": "user", "content": prose(20)},
        {"role": "assistant", "content": [{"type": "text", "text": prose(20, "a")}]},
        {"role": "user", "content": "And then? Tell me."},
    ]
    snapshot = copy.deepcopy(messages)
    result = COMPRESSOR.compress(messages, 20)
    assert messages == snapshot
    result.messages[1]["content"][0]["text"] = "changed"
    assert messages == snapshot


def test_non_text_parts_are_untouched_and_text_parts_are_cut() -> None:
    image = {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}
    audio = {"type": "input_audio", "input_audio": {"data": "UklGR", "format": "wav"}}
    messages = [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": prose(25)},
                image,
                {"type": "text", "text": prose(25, "b")},
                audio,
            ],
        }
    ]
    result = COMPRESSOR.compress(messages, 100)
    parts = result.messages[0]["content"]
    assert result.fits
    assert [p["type"] for p in parts] == ["text", "image_url", "text", "input_audio"]
    assert parts[1] == image and parts[3] == audio
    assert result.original_tokens == total(messages)  # non-text parts are not counted


def test_first_three_and_last_two_sentences_and_each_messages_first_are_always_kept() -> None:
    messages = [
        {"role": "user", "content": prose(12, "u")},
        {"role": "assistant", "content": prose(12, "a")},
        {"role": "user", "content": prose(6, "q")},
    ]
    out = COMPRESSOR.compress(messages, 1).messages
    assert sentences(out[0]["content"]) == sentences(prose(3, "u"))
    # No message is emptied (some providers refuse an empty content): its first sentence stays.
    assert sentences(out[1]["content"]) == sentences(prose(1, "a"))
    assert sentences(out[2]["content"]) == [
        sentences(prose(6, "q"))[0],
        *sentences(prose(6, "q"))[-2:],
    ]


def test_the_question_keeps_its_last_sentences_when_an_assistant_message_follows() -> None:
    messages = [
        {"role": "user", "content": prose(12, "q")},
        {"role": "assistant", "content": prose(12, "a")},
    ]
    out = ExtractiveCompressor(words, keep_first=0, keep_last=2).compress(messages, 1).messages
    question = sentences(prose(12, "q"))
    assert sentences(out[0]["content"]) == [question[0], *question[-2:]]  # first: kept, any message
    answer = sentences(prose(12, "a"))
    assert sentences(out[1]["content"]) == [answer[0], *answer[-2:]]


def test_recent_sentences_outlive_the_middle() -> None:
    text = " ".join(f"Item {k} is listed here." for k in range(40))
    out = COMPRESSOR.compress([{"role": "user", "content": text}], 100).messages[0]["content"]
    kept = [int(k) for k in re.findall(r"Item (\d+)", out)]
    assert set(range(30, 40)) <= set(kept)
    assert not set(range(12, 18)) & set(kept)


def test_kept_sentences_are_joined_with_their_own_separators() -> None:
    text = "Alpha one. Beta two. Gamma three.\n\nDelta four. Epsilon five.\n- six\n- item seven"
    only_ends = ExtractiveCompressor(words, keep_first=1, keep_last=1)
    out = only_ends.compress([{"role": "user", "content": text}], 1).messages[0]["content"]
    assert out == "Alpha one.\n\n- item seven"
    first_two = ExtractiveCompressor(words, keep_first=2, keep_last=0)
    out = first_two.compress([{"role": "user", "content": text}], 1).messages[0]["content"]
    assert out == "Alpha one. Beta two."


@pytest.mark.parametrize(
    ("text", "first"),
    [
        ("Dr. Smith arrived at noon, e.g. on time. He sat down.", "Dr. Smith arrived"),
        ("Call J. Doe about item 3. Then rest.", "Call J. Doe about item 3."),
        ("1. Install the package\n2. Run it", "1. Install the package"),
        ("这是第一句。这是第二句！还有第三句？", "这是第一句。"),
        ('She said "stop!" Then left.', 'She said "stop!"'),
        ("Version 3.5 is out. Upgrade now.", "Version 3.5 is out."),
    ],
)
def test_sentences_are_split_where_a_reader_would(text: str, first: str) -> None:
    only_first = ExtractiveCompressor(len, keep_first=1, keep_last=0)  # characters: CJK too
    out = only_first.compress([{"role": "user", "content": text}], 1).messages[0]["content"]
    assert out.startswith(first) and out != text


def test_results_are_deterministic() -> None:
    messages = [
        {"role": "user", "content": prose(40)},
        {"role": "assistant", "content": prose(40, "a") + "\n\n" + prose(40, "b")},
        {"role": "user", "content": prose(5, "q")},
    ]
    first = ExtractiveCompressor(words).compress(messages, 150)
    assert all(ExtractiveCompressor(words).compress(messages, 150) == first for _ in range(3))


def test_more_sentences_than_the_graph_cap_still_compress(monkeypatch: pytest.MonkeyPatch) -> None:
    messages = [{"role": "user", "content": prose(60)}]
    monkeypatch.setattr(compress_module, "GRAPH_CAP", 10)
    result = COMPRESSOR.compress(messages, 150)
    assert result.fits and result.tokens <= 150 and result == COMPRESSOR.compress(messages, 150)


def test_the_default_counter_is_four_utf8_bytes_per_token() -> None:
    assert [estimate_tokens(t) for t in ("", "abcd", "abcde", "é", "日本")] == [0, 1, 2, 1, 2]
    messages = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": prose(30)},
    ]
    result = ExtractiveCompressor().compress(messages, 200)
    assert result.original_tokens == sum(estimate_tokens(m["content"]) for m in messages)
    assert result.fits and result.tokens <= 200
    assert isinstance(result, Compression)


def test_bad_input_is_refused_with_a_clear_message() -> None:
    fine = [{"role": "user", "content": "Hello."}]
    with pytest.raises(ValueError, match=r"^budget_tokens=0 must be an int >= 1"):
        COMPRESSOR.compress(fine, 0)
    with pytest.raises(ValueError, match=r"^budget_tokens="):
        COMPRESSOR.compress(fine, 1.5)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="messages must be a list of dicts"):
        COMPRESSOR.compress("Hello.", 10)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"messages\[1\] must be a dict with a string 'role'"):
        COMPRESSOR.compress([*fine, {"content": "no role"}], 10)
    with pytest.raises(TypeError, match=r"messages\[0\]\['content'\] must be"):
        COMPRESSOR.floor([{"role": "user", "content": 42}])
    with pytest.raises(TypeError, match=r"messages\[0\]\['content'\]\[0\]\['text'\]"):
        COMPRESSOR.floor([{"role": "user", "content": [{"type": "text", "text": None}]}])
    with pytest.raises(ValueError, match=r"^keep_first=-1"):
        ExtractiveCompressor(keep_first=-1)
    with pytest.raises(TypeError, match="count_tokens"):
        ExtractiveCompressor(count_tokens=4)  # type: ignore[arg-type]
