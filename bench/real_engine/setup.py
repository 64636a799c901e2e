"""``python -m bench real-engine setup``: build llama.cpp's ``llama-server`` and the model.

Steps, each skipped when its output is already in the cache (so a second run only
reports), each timed:

1. ``download``: the ``llama-cpp-python`` sdist (`LLAMA_CPP_PYTHON`, pinned), by
   ``pip download --no-binary :all: --no-deps``; it vendors llama.cpp (MIT) whole,
   ``convert_hf_to_gguf.py`` and ``gguf-py`` included.
2. ``extract``: unpack it.
3. ``build``: CMake configures the vendored tree (CPU, Release, no web UI download, no
   OpenSSL) and builds only the ``llama-server`` target, two jobs, under ``nice``.
4. ``tokenizer``: a byte-level BPE trained on ShareGPT V3 text (`.model`).
5. ``model``: the Llama model with seeded random weights, written as GGUF.

The cache is ``$SEMISCHED_REAL_ENGINE_CACHE`` or ``~/.cache/semisched/real-engine``;
nothing is written into the repository except ``docs/results/real-engine/setup.md``,
generated here: the engine's version and commit, the build command, the model's
config, the machine and how long each step took.

What it is not: part of CI or the test command; it needs the network for step 1 only.
"""

from __future__ import annotations

import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tarfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from bench.real_engine.model import ENGINE_SPEC, ModelSpec

__all__ = ["LLAMA_CPP_PYTHON", "EnginePaths", "build_command", "configure_command", "setup_main"]

#: The pinned sdist whose vendored llama.cpp is built.
LLAMA_CPP_PYTHON = "0.3.36"
#: Characters of ShareGPT text the tokenizer trains on.
TOKENIZER_CHARS = 8_000_000
_JOBS = 2
_NICE = 10


@dataclass(frozen=True, slots=True)
class EnginePaths:
    """Where each cached artefact lives under one cache root."""

    root: Path

    @classmethod
    def default(cls) -> EnginePaths:
        env = os.environ.get("SEMISCHED_REAL_ENGINE_CACHE")
        root = Path(env) if env else Path.home() / ".cache" / "semisched" / "real-engine"
        return cls(root.expanduser())

    @property
    def sdist(self) -> Path:
        return self.root / "sdist" / f"llama_cpp_python-{LLAMA_CPP_PYTHON}.tar.gz"

    @property
    def package(self) -> Path:
        return self.root / "src" / f"llama_cpp_python-{LLAMA_CPP_PYTHON}"

    @property
    def source(self) -> Path:
        return self.package / "vendor" / "llama.cpp"

    @property
    def build_dir(self) -> Path:
        return self.root / "build"

    @property
    def server(self) -> Path:
        return self.build_dir / "bin" / "llama-server"

    @property
    def model_dir(self) -> Path:
        return self.root / "model"

    @property
    def tokenizer(self) -> Path:
        return self.model_dir / "tokenizer.json"

    @property
    def gguf(self) -> Path:
        return self.model_dir / "model.gguf"

    @property
    def steps(self) -> Path:
        return self.root / "steps.json"


def configure_command(paths: EnginePaths) -> list[str]:
    """CMake's configure step: CPU only, Release, no UI download, no TLS, static."""
    return [
        "cmake", "-S", str(paths.source), "-B", str(paths.build_dir), "-G", "Ninja",
        "-DCMAKE_BUILD_TYPE=Release", "-DGGML_NATIVE=ON", "-DLLAMA_CURL=OFF",
        "-DLLAMA_OPENSSL=OFF", "-DLLAMA_BUILD_UI=OFF", "-DLLAMA_USE_PREBUILT_UI=OFF",
        "-DBUILD_SHARED_LIBS=OFF", "-DLLAMA_BUILD_TESTS=OFF", "-DLLAMA_BUILD_EXAMPLES=OFF",
        "-DLLAMA_BUILD_TOOLS=ON", "-DLLAMA_BUILD_SERVER=ON",
    ]  # fmt: skip


def build_command(paths: EnginePaths) -> list[str]:
    """Only the ``llama-server`` target, two jobs."""
    return ["cmake", "--build", str(paths.build_dir), "--target", "llama-server", "-j", str(_JOBS)]


def _nice(command: list[str]) -> list[str]:
    return ["nice", "-n", str(_NICE), *command]


def _run(command: list[str], log: Path) -> None:
    with open(log, "ab") as sink:
        sink.write(("$ " + " ".join(command) + "\n").encode())
        sink.flush()
        done = subprocess.run(command, stdout=sink, stderr=subprocess.STDOUT, check=False)
    if done.returncode != 0:
        tail = "\n".join(log.read_text(errors="replace").splitlines()[-20:])
        raise RuntimeError(f"{command[2] if command[0] == 'nice' else command[0]} failed:\n{tail}")


def _download(paths: EnginePaths) -> None:
    paths.sdist.parent.mkdir(parents=True, exist_ok=True)
    command = [
        sys.executable, "-m", "pip", "download", "--no-binary", ":all:", "--no-deps",
        "--dest", str(paths.sdist.parent), f"llama-cpp-python=={LLAMA_CPP_PYTHON}",
    ]  # fmt: skip
    _run(_nice(command), paths.root / "download.log")


def _extract(paths: EnginePaths) -> None:
    paths.package.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(paths.sdist) as archive:
        archive.extractall(paths.package.parent, filter="data")


def _build(paths: EnginePaths) -> None:
    _run(_nice(configure_command(paths)), paths.root / "configure.log")
    _run(_nice(build_command(paths)), paths.root / "build.log")


def _tokenizer(paths: EnginePaths) -> None:
    from bench.real_engine.model import sharegpt_texts, train_tokenizer

    paths.model_dir.mkdir(parents=True, exist_ok=True)
    tokenizer = train_tokenizer(sharegpt_texts(TOKENIZER_CHARS), ENGINE_SPEC.vocab_size)
    tokenizer.save(str(paths.tokenizer))


def _model(paths: EnginePaths) -> None:
    from tokenizers import Tokenizer

    from bench.real_engine.model import build_weights, write_gguf

    tokenizer = Tokenizer.from_file(str(paths.tokenizer))
    state = build_weights(ENGINE_SPEC, tokenizer.get_vocab_size())
    partial = paths.gguf.with_suffix(".partial")
    write_gguf(partial, ENGINE_SPEC, state, tokenizer)
    partial.replace(paths.gguf)
    (paths.model_dir / "spec.json").write_text(json.dumps(ENGINE_SPEC.as_dict(), indent=2) + "\n")


def steps(paths: EnginePaths) -> list[tuple[str, Path, Callable[[EnginePaths], None]]]:
    """The steps in order: name, the output whose presence means done, the action."""
    return [
        ("download", paths.sdist, _download),
        ("extract", paths.source / "CMakeLists.txt", _extract),
        ("build", paths.server, _build),
        ("tokenizer", paths.tokenizer, _tokenizer),
        ("model", paths.gguf, _model),
    ]


def run_steps(paths: EnginePaths, say: Callable[[str], None]) -> dict[str, dict[str, object]]:
    """Run the steps not yet done; the record of every step (seconds, when, cached now)."""
    paths.root.mkdir(parents=True, exist_ok=True)
    record: dict[str, dict[str, object]] = {}
    if paths.steps.exists():
        record = json.loads(paths.steps.read_text())
    for name, output, action in steps(paths):
        if output.exists():
            entry = record.setdefault(name, {"seconds": None})
            entry["cached"] = True
            say(f"{name:<10} cached   ({_seconds(entry.get('seconds'))} when it ran) {output}")
            continue
        if name == "build" and paths.build_dir.exists():
            shutil.rmtree(paths.build_dir / "CMakeFiles", ignore_errors=True)
        started = time.perf_counter()
        action(paths)
        took = time.perf_counter() - started
        record[name] = {"seconds": round(took, 1), "cached": False, "at": time.strftime("%F %T")}
        say(f"{name:<10} done in {took:7.1f} s  {output}")
        paths.steps.write_text(json.dumps(record, indent=2) + "\n")
    return record


def _seconds(value: object) -> str:
    return f"{value} s" if isinstance(value, int | float) else "time not recorded"


def engine_commit(paths: EnginePaths) -> str:
    """The llama.cpp commit the sdist vendors, from its changelog's entry for the version."""
    text = (paths.package / "CHANGELOG.md").read_text(encoding="utf-8")
    section = text.split(f"## [{LLAMA_CPP_PYTHON}]", 1)[-1].split("\n## [", 1)[0]
    found = re.search(r"llama\.cpp@([0-9a-f]{7,40})", section)
    return found.group(1) if found else "unknown"


def machine() -> dict[str, str]:
    """CPU model, cores, memory and OS of this machine."""
    cpu = platform.processor() or "unknown"
    memory = "unknown"
    try:
        info = Path("/proc/cpuinfo").read_text()
        cpu = next((ln.split(":", 1)[1].strip() for ln in info.splitlines() if
                    ln.startswith("model name")), cpu)  # fmt: skip
        mem = Path("/proc/meminfo").read_text().split()
        memory = f"{int(mem[mem.index('MemTotal:') + 1]) / 1024**2:.1f} GiB"
    except (OSError, ValueError):
        pass
    cores = str(os.cpu_count())
    return {"cpu": cpu, "cores": cores, "memory": memory, "os": platform.platform()}


def setup_report(paths: EnginePaths, record: dict[str, dict[str, object]], spec: ModelSpec) -> str:
    """``setup.md``: what was built, how, on what, and how long each step took."""
    from tokenizers import Tokenizer

    ggml = re.search(r"ggml commit:\s*(\S+)", _read(paths.root / "configure.log"))
    vocab = Tokenizer.from_file(str(paths.tokenizer)).get_vocab_size()
    lines = [
        "# The real engine: llama.cpp's llama-server and a random-weight Llama model",
        "",
        "Generated by `python -m bench real-engine setup` (do not edit).",
        "",
        f"- engine: llama.cpp vendored in the `llama-cpp-python=={LLAMA_CPP_PYTHON}` sdist, "
        f"commit `{engine_commit(paths)}` (ggml reports `{ggml.group(1) if ggml else '?'}`)",
        f"- configure: `{' '.join(_nice(configure_command(paths)))}`",
        f"- build: `{' '.join(_nice(build_command(paths)))}`",
        f"- binary: `{paths.server}` ({paths.server.stat().st_size / 1e6:.1f} MB)",
        f"- model: `{paths.gguf}` ({paths.gguf.stat().st_size / 1e6:.1f} MB, float16 matrices)",
        f"- tokenizer: byte-level BPE, {vocab} tokens, trained on the first "
        f"{TOKENIZER_CHARS:,} characters of ShareGPT V3 turns",
        "",
        "| model field | value |",
        "|---|---|",
        *(f"| {k} | {v} |" for k, v in spec.as_dict().items()),
        "",
        "| machine | value |",
        "|---|---|",
        *(f"| {k} | {v} |" for k, v in machine().items()),
        "",
        "| step | seconds (when it last ran) |",
        "|---|---|",
        *(
            f"| {name} | {record.get(name, {}).get('seconds') or 'not recorded'} |"
            for name, *_ in steps(paths)
        ),
        "",
    ]
    return "\n".join(lines).replace(str(Path.home()), "~")


def _read(path: Path) -> str:
    return path.read_text(errors="replace") if path.exists() else ""


def setup_main(out: Path) -> int:
    """Run the steps, print each one's time, write ``out/setup.md``."""
    paths = EnginePaths.default()
    print(f"cache: {paths.root}")
    record = run_steps(paths, print)
    out.mkdir(parents=True, exist_ok=True)
    (out / "setup.md").write_text(setup_report(paths, record, ENGINE_SPEC), encoding="utf-8")
    print(f"wrote {out / 'setup.md'}")
    return 0
