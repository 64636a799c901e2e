"""Small synthetic ShareGPT records and files, shared by the ShareGPT and dataset tests."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def msg(speaker: str, text: str) -> dict[str, str]:
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
