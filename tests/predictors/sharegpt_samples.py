"""Small synthetic ShareGPT records and files, shared by the ShareGPT and dataset tests."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def msg(speaker: str, text: Any) -> dict[str, Any]:
    return {"from": speaker, "value": text}


def record(cid: str, *messages: Any) -> dict[str, Any]:
    return {"id": cid, "conversations": list(messages)}


def write(path: Path, records: list[Any], indent: int | None = 2) -> Path:
    path.write_text(json.dumps(records, indent=indent, ensure_ascii=False), encoding="utf-8")
    return path


def sample_records() -> list[dict[str, Any]]:
    return [
        record(
            "aaa_0",
            msg("human", "hi there"),
            msg("gpt", "hello how can I help"),
            msg("human", "tell me a joke"),
            msg("gpt", "why did the chicken cross é 🐔"),
        ),
        record("bbb_0", msg("human", "one two three"), msg("gpt", "four five")),
        record("aaa_1", msg("gpt", "continued answer here"), msg("human", "thanks")),
    ]


class WordEncoding:
    """Duck-types the one tiktoken.Encoding method ``count_tokens`` uses (a token per word);
    counts its calls."""

    name = "words"

    def __init__(self) -> None:
        self.calls = 0

    def encode_ordinary_batch(self, text: list[str], *, num_threads: int = 8) -> list[list[int]]:
        self.calls += 1
        return [[0] * len(t.split()) for t in text]
