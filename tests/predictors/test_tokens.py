"""Offline token counting: vocabularies from bpe-openai placed under tiktoken's cache names.

These tests need tiktoken + bpe-openai and skip without them.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
from pathlib import Path

import pytest

from predictors import tokens

HAVE_TIKTOKEN = (
    importlib.util.find_spec("tiktoken") is not None
    and importlib.util.find_spec("bpe_openai") is not None
)
needs_tiktoken = pytest.mark.skipif(
    not HAVE_TIKTOKEN,
    reason="offline token counting needs tiktoken and bpe-openai (pip install tiktoken bpe-openai)",
)


@pytest.fixture(autouse=True)
def private_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "cache"
    monkeypatch.setenv("SEMISCHED_CACHE", str(folder))
    return folder


# --------------------------------------------------------------------------------------------
# Offline tiktoken


@needs_tiktoken
def test_vocabulary_installed_under_tiktoken_cache_name(private_cache: Path) -> None:
    folder = private_cache / "tiktoken"
    target = tokens._install_vocabulary("o200k_base", folder)
    url = "https://openaipublic.blob.core.windows.net/encodings/o200k_base.tiktoken"
    assert target == folder / hashlib.sha1(url.encode()).hexdigest()
    digest = hashlib.sha256(target.read_bytes()).hexdigest()
    assert digest == "446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d"
    target.write_bytes(b"damaged")  # a wrong file is replaced
    assert (
        hashlib.sha256(tokens._install_vocabulary("o200k_base", folder).read_bytes()).hexdigest()
        == digest
    )
    with pytest.raises(ValueError, match="unknown encoding"):
        tokens._install_vocabulary("r50k_base", folder)


@needs_tiktoken
def test_encoding_builds_offline_and_counts(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TIKTOKEN_CACHE_DIR", raising=False)
    enc = tokens.encoding("o200k_base")
    assert enc.name == "o200k_base"
    assert "TIKTOKEN_CACHE_DIR" not in os.environ  # restored
    assert tokens.encoding("o200k_base") is enc
    assert tokens.count_tokens(["hello world"]) == [2]
    counts = tokens.count_tokens(["hello world", "", "<|endoftext|>"], enc, num_threads=2)
    assert counts[:2] == [2, 0]
    assert tokens.count_tokens([]) == []
    assert tokens.count_tokens(["hello world"], "cl100k_base") == [2]
