"""``semisched batch`` as a real process against a real mock server: kill -9, Ctrl-C, resume.

The command runs in a subprocess with its progress on a pipe (one plain line
per result with ``--progress-every 0``); the test reads those lines (a blocking
read, not a poll) and signals the process after a chosen number of results.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import urllib.request
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from mockprovider.launch import running_server
from mockprovider.stats import MockStats

pytestmark = pytest.mark.wallclock  # a real process, a real server, real signals

SCALE = 50.0
N = 40
SECRET = "sk-test-never-written-0123456789"


def _body(i: int) -> tuple[str, dict[str, Any]]:
    """Line ``i``'s url and body: chat, Responses and embeddings in turn (one key)."""
    text = f"question {i} " * 10
    hint = {"mock_output_tokens": str(40 + 7 * i)}
    if i % 3 == 0:
        return "/v1/chat/completions", {"model": "mock-1", "max_tokens": 300, "metadata": hint,
                                        "messages": [{"role": "user", "content": text}]}
    if i % 3 == 1:
        return "/v1/responses", {"model": "mock-1", "input": text, "max_output_tokens": 300,
                                 "metadata": hint}
    return "/v1/embeddings", {"model": "mock-1", "input": [text, text]}


def _write_input(path: Path) -> None:
    with path.open("w") as handle:
        for i in range(N):
            url, body = _body(i)
            line = {"custom_id": f"job-{i}", "method": "POST", "url": url}
            handle.write(json.dumps({**line, "body": body}) + "\n")


def _command(url: str, tmp: Path) -> list[str]:
    return [
        sys.executable, "-m", "semisched", "batch", str(tmp / "in.jsonl"),
        "-o", str(tmp / "out.jsonl"), "--base-url", url, "--api-key-env", "BATCH_TEST_KEY",
        "--time-scale", str(SCALE), "--priors", "heuristic", "--max-concurrency", "4",
        "--rpm", "120", "--progress-every", "0",
    ]  # fmt: skip


def _start(url: str, tmp: Path) -> subprocess.Popen[str]:
    env = {**os.environ, "BATCH_TEST_KEY": SECRET}
    return subprocess.Popen(
        _command(url, tmp), stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True, env=env
    )


def _read_until_done(proc: subprocess.Popen[str], done: int) -> list[str]:
    """Progress lines up to the one reporting ``done`` results (blocking reads)."""
    assert proc.stderr is not None
    seen: list[str] = []
    for line in proc.stderr:
        seen.append(line)
        head = line.split(" ", 1)[0]
        if "/" in head and head.split("/")[0].isdigit() and int(head.split("/")[0]) >= done:
            return seen
    raise AssertionError(f"the process ended before {done} results: {''.join(seen)[-2000:]}")


def _requests_seen(url: str) -> int:
    with urllib.request.urlopen(f"{url}/mock/stats") as response:
        return MockStats.from_json(json.load(response)).counters.requests


def _records(path: Path) -> list[dict[str, Any]]:
    return [json.loads(raw) for raw in path.read_text().splitlines() if raw.strip()]


@pytest.mark.timeout(180)
def test_after_kill_9_a_rerun_answers_every_custom_id_exactly_once(tmp_path: Path) -> None:
    _write_input(tmp_path / "in.jsonl")
    with running_server("--time-scale", str(SCALE), "--rpm", "120") as url:
        proc = _start(url, tmp_path)
        _read_until_done(proc, 10)
        proc.send_signal(signal.SIGKILL)
        proc.communicate(timeout=30)  # reaps it and closes the pipe
        assert proc.returncode == -signal.SIGKILL
        before = _requests_seen(url)
        answered = {r["custom_id"] for r in _records(tmp_path / "out.jsonl")}
        assert 10 <= len(answered) < N

        rerun = _start(url, tmp_path)
        _, err = rerun.communicate(timeout=120)
        assert rerun.returncode == 0, err
        sent_again = _requests_seen(url) - before

    ids = Counter(r["custom_id"] for r in _records(tmp_path / "out.jsonl"))
    assert ids == Counter({f"job-{i}": 1 for i in range(N)})  # none lost, none twice
    assert sent_again == N - len(answered)  # no answered request was sent again
    assert all(r["error"] is None for r in _records(tmp_path / "out.jsonl"))
    assert SECRET not in (tmp_path / "out.jsonl").read_text() and SECRET not in err


@pytest.mark.timeout(180)
def test_ctrl_c_stops_dispatching_keeps_what_finished_and_exits_130(tmp_path: Path) -> None:
    _write_input(tmp_path / "in.jsonl")
    with running_server("--time-scale", str(SCALE), "--rpm", "120") as url:
        proc = _start(url, tmp_path)
        _read_until_done(proc, 5)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
        assert proc.returncode == 130, err
        assert "rerun the same command to resume" in err
        first = _records(tmp_path / "out.jsonl")
        sent_first = _requests_seen(url)
        # in flight at the signal: finished and recorded, nothing more was sent
        assert len(first) == sent_first < N

        rerun = _start(url, tmp_path)
        _, err = rerun.communicate(timeout=120)
        assert rerun.returncode == 0, err
        assert _requests_seen(url) == N

    ids = Counter(r["custom_id"] for r in _records(tmp_path / "out.jsonl"))
    assert ids == Counter({f"job-{i}": 1 for i in range(N)})
    assert SECRET not in err
