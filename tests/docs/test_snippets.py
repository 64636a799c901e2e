"""Every code block of the README and the docs site runs as printed, or says what it is.

A block is one of (the HTML comment on the line before its fence says which):

- a ``python`` block with no comment: a complete program, run in a subprocess against the
  mock provider (and the Redis server) that the docs' own set-up commands start; a
  ``text`` block after it marked ``<!-- output -->`` is what it must print, exactly;
- ``<!-- server -->``: set-up commands. A ``pip install`` line must name extras that
  exist; a ``python -m venv`` line makes and activates the environment (this run has
  one); every other line is a server, started here until it accepts connections;
- ``<!-- excerpt: PATH -->``: every line of the block is in ``PATH``, a file that is
  itself run or tested;
- ``<!-- run by: TEST -->``: the test file ``TEST`` reads this page and runs the block;
- ``<!-- not run: WHY -->``: shown only (a real provider's key, minutes of benchmark),
  and says why;
- a ``bash`` block with no comment: run here, line by line, as printed, except that
  ``python examples/NAME.py`` lines must be run by ``tests/examples`` instead;
- ``text``, ``toml`` and ``json`` blocks are shown output and files, never run.

The documented ports (8100 for the mock, 8200 for a mock fleet, 8080 for the gateway, 6379
for Redis, 9464 for metrics) are replaced by free ones, so the tests never collide with a
server already running.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import re
import shlex
import socket
import subprocess
import sys
import tempfile
import time
import tomllib
from collections.abc import Iterator
from pathlib import Path

import pytest

from bench.redis_server import server_binary
from mockprovider.launch import free_port, stop_process

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.wallclock

FENCE = re.compile(r"^```(\w*)\s*$")
MARKER = re.compile(r"^<!-- (excerpt|not run|run by|server|output)(?::\s*(.*?))?\s*-->$")
PORTS = (8100, 8200, 8080, 6379, 9464)
SHOWN = {"text", "toml", "json"}


@dataclasses.dataclass(frozen=True)
class Block:
    path: Path
    line: int
    lang: str
    code: str
    marker: str | None
    arg: str

    @property
    def id(self) -> str:
        return f"{self.path.relative_to(ROOT).as_posix()}:{self.line}"


def pages() -> list[Path]:
    """The README and every hand-written page of the docs site (not the generated results)."""
    docs = ROOT / "docs"
    written = sorted(p for p in docs.rglob("*.md") if docs / "results" not in p.parents)
    return [ROOT / "README.md", *written]


def blocks(path: Path) -> list[Block]:
    """The fenced blocks of ``path``, each with the marker comment just above it."""
    found: list[Block] = []
    lines = path.read_text(encoding="utf-8").splitlines()
    i = 0
    while i < len(lines):
        fence = FENCE.match(lines[i])
        if fence is None:
            i += 1
            continue
        end = next(j for j in range(i + 1, len(lines)) if lines[j].startswith("```"))
        above = next((lines[j].strip() for j in range(i - 1, -1, -1) if lines[j].strip()), "")
        marker = MARKER.match(above)
        code = "\n".join(lines[i + 1 : end]) + "\n"
        kind, arg = (marker.group(1), marker.group(2) or "") if marker else (None, "")
        found.append(Block(path, i + 1, fence.group(1), code, kind, arg))
        i = end + 1
    return found


ALL = [block for path in pages() for block in blocks(path)]


def of(kind: str | None, *langs: str) -> list[Block]:
    return [b for b in ALL if b.marker == kind and (not langs or b.lang in langs)]


def commands(block: Block) -> list[str]:
    """The block's shell commands, continuations joined, comments and blanks dropped."""
    joined = block.code.replace("\\\n", " ")
    return [" ".join(shlex.split(line, comments=True)) for line in joined.splitlines()
            if shlex.split(line, comments=True)]  # fmt: skip


def with_ports(text: str, ports: dict[int, int]) -> str:
    """``text`` with each documented port replaced by this run's free one."""
    pattern = r"(?<=[:( ])(" + "|".join(map(str, PORTS)) + r")\b"
    return re.sub(pattern, lambda m: str(ports[int(m.group(1))]), text)


@contextlib.contextmanager
def serving(command: str, port: int) -> Iterator[None]:
    """Run a documented server command until it accepts connections on ``port``."""
    argv = shlex.split(command)
    if argv[0] == "python":
        argv[0] = sys.executable
    elif argv[0] == "redis-server":
        argv[0] = str(server_binary())
    elif argv[0] == "semisched":
        argv[:1] = [sys.executable, "-m", "semisched"]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    with tempfile.TemporaryFile() as log:
        proc = subprocess.Popen(argv, cwd=ROOT, env=env, stdout=log, stderr=log)
        try:
            deadline = time.monotonic() + 30
            while True:
                if proc.poll() is not None:
                    log.seek(0)
                    pytest.fail(f"{command!r} exited: {log.read()[-2000:]!r}")
                with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port)):
                    break
                assert time.monotonic() < deadline, f"{command!r} did not listen on {port}"
                time.sleep(0.1)  # bounded start-up wait for a child process
            yield
        finally:
            stop_process(proc)


def server_lines(block: Block) -> list[str]:
    """The server commands of a ``<!-- server -->`` block; its pip lines name real extras."""
    extras = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"])  # fmt: skip
    servers = []
    for command in commands(block):
        install = re.fullmatch(r"python -m pip install -e \.\[([\w,]+)\]", command)
        if re.fullmatch(r"python -m venv (\S+) && \. \1/bin/activate", command):
            continue  # the environment this test already runs in
        if install:
            assert set(install.group(1).split(",")) <= extras, command
        else:
            servers.append(command)
    return servers


@pytest.fixture(scope="module")
def ports() -> Iterator[dict[int, int]]:
    """The README's mock, the shared-state guide's Redis and the gateway guide's demo
    gateway, started as documented."""
    chosen = {port: free_port() for port in PORTS}
    (mock,) = server_lines(next(b for b in of("server") if b.path.name == "README.md"))
    (redis,) = server_lines(next(b for b in of("server") if b.path.name == "shared-state.md"))
    (gateway,) = server_lines(next(b for b in of("server") if b.path.name == "gateway.md"))
    with serving(with_ports(mock, chosen), chosen[8100]):
        with serving(with_ports(redis, chosen), chosen[6379]):
            with serving(with_ports(gateway, chosen), chosen[8080]):
                yield chosen


def run(code: str, ports: dict[int, int], tmp_path: Path, shell: bool = False) -> str:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OPENAI_API_KEY": "unused"}
    env.pop("OPENAI_BASE_URL", None)
    argv = ["bash", "-ec", code] if shell else [sys.executable, "-c", code]
    done = subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=90)  # fmt: skip
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    return done.stdout


@pytest.mark.parametrize("block", of(None, "python"), ids=lambda b: b.id)
def test_every_python_block_runs_as_printed(
    block: Block, ports: dict[int, int], tmp_path: Path
) -> None:
    out = run(with_ports(block.code, ports), ports, tmp_path)
    shown = next((b for b in ALL if b.path == block.path and b.line > block.line), None)
    if shown is not None and shown.marker == "output":
        assert out == shown.code, f"{block.id} printed something else than {shown.id}"


@pytest.mark.parametrize("block", of(None, "bash"), ids=lambda b: b.id)
def test_every_bash_block_runs_as_printed(
    block: Block, ports: dict[int, int], tmp_path: Path
) -> None:
    tested = (ROOT / "tests/examples/test_examples.py").read_text(encoding="utf-8")
    script = []
    for line in block.code.splitlines():
        example = re.fullmatch(r"python examples/(\w+\.py)\s*(#.*)?", line.strip())
        if example:
            assert f'run("{example.group(1)}")' in tested, f"{line} is run by no test"
        else:
            script.append(line.replace("examples/", f"{ROOT}/examples/"))
    if "".join(script).strip():
        run(with_ports("\n".join(script), ports), ports, tmp_path, shell=True)


@pytest.mark.parametrize("block", of("server"), ids=lambda b: b.id)
def test_every_server_block_starts(block: Block) -> None:
    for command in server_lines(block):
        chosen = {port: free_port() for port in PORTS}
        port = next(chosen[p] for p in PORTS if re.search(rf"\b{p}\b", command))
        with serving(with_ports(command, chosen), port):
            pass


@pytest.mark.parametrize("block", of("excerpt"), ids=lambda b: b.id)
def test_every_excerpt_is_in_its_file(block: Block) -> None:
    source = (ROOT / block.arg).read_text(encoding="utf-8")
    missing = [line for line in block.code.splitlines()
               if line.strip() and line.strip().rstrip("\\").strip() not in source]  # fmt: skip
    assert missing == [], f"{block.id}: not in {block.arg}"


@pytest.mark.parametrize("block", of("run by"), ids=lambda b: b.id)
def test_every_block_run_elsewhere_names_a_test_that_reads_its_page(block: Block) -> None:
    test = (ROOT / block.arg).read_text(encoding="utf-8")
    assert block.path.relative_to(ROOT).as_posix() in test


def test_every_block_is_run_or_says_what_it_is() -> None:
    unknown = [b.id for b in ALL if b.marker is None and b.lang not in {"python", "bash", *SHOWN}]
    assert unknown == []  # an unlabelled or other-language block would go untested
    assert all(b.arg for b in of("not run")), "a block not run must say why"
    assert all(b.marker != "output" or b.lang == "text" for b in ALL)
    assert of(None, "python") and of("server")


def test_the_readme_quickstart_is_the_getting_started_pages_first_part() -> None:
    """The README's Quickstart section is on the site word for word (its links made
    relative to docs/), so the two never drift."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    start = readme.index("## Quickstart\n\n") + len("## Quickstart\n\n")
    section = readme[start : readme.index("\n## ", start)]
    shared = section[: section.index("\nStreaming, the gateway")].replace("](docs/", "](")
    page = (ROOT / "docs/getting-started.md").read_text(encoding="utf-8")
    begin = "<!-- the README's Quickstart section"
    inside = page[page.index("\n", page.index(begin)) + 1 : page.index("<!-- /the README's")]
    assert inside == shared
