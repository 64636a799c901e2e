"""Launching shared-budget workers: the driver's and the tests' side of `bench.shared_worker`.

`command` is one worker's command line (``python -m bench.shared_worker ...
--wait-go``) and `probe_command` one probe's; `worker_fleet` starts N of them,
waits for every ``ready``, releases them at once, reads each one's JSON line and
kills leftovers (`WorkerFleet`).

What a worker does once started is `bench.shared_worker`'s; the configurations,
measures and tables are the driver's (`bench.shared_budget`).
"""

from __future__ import annotations

import contextlib
import json
import select
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

__all__ = ["WorkerFleet", "command", "probe_command", "worker_fleet"]


def probe_command(state: str, namespace: str, count: int) -> list[str]:
    """The command line of one probe that waits for the go (`bench.shared_worker.run_probe`)."""
    return [sys.executable, "-m", "bench.shared_worker", "--probe", str(count),
            "--state", state, "--namespace", namespace, "--wait-go"]  # fmt: skip


def command(
    base_url: str,
    *,
    requests: int,
    rate: float,
    rpm: int,
    tpm: int,
    time_scale: float,
    seed: int,
    max_concurrency: int = 32,
    state: str | None = None,
    namespace: str = "semisched",
    worker_id: str | None = None,
    lease_ttl: float | None = None,
    margin: float = 1.0,
    adapt: bool = True,
    policy: str = "batch_makespan",
) -> list[str]:
    """The command line of one worker that waits for the go (``--wait-go``)."""
    argv = [sys.executable, "-m", "bench.shared_worker", "--base-url", base_url,
            "--requests", str(requests), "--rate", repr(rate), "--rpm", str(rpm),
            "--tpm", str(tpm), "--time-scale", repr(time_scale), "--seed", str(seed),
            "--max-concurrency", str(max_concurrency), "--margin", repr(margin),
            "--policy", policy, "--namespace", namespace, "--wait-go"]  # fmt: skip
    if state is not None:
        argv += ["--state", state]
    if worker_id is not None:
        argv += ["--worker-id", worker_id]
    if lease_ttl is not None:
        argv += ["--lease-ttl", repr(lease_ttl)]
    if not adapt:
        argv.append("--no-adapt")
    return argv


class WorkerFleet:
    """Worker processes started together: each opens its scheduler and says ``ready``;
    `go` releases them all at once; `results` reads each one's JSON line.

    Use `worker_fleet`, which kills whatever is still running on exit.
    """

    def __init__(self, commands: Sequence[list[str]], logdir: Path) -> None:
        self.logs = [logdir / f"worker-{i}.log" for i in range(len(commands))]
        self.procs: list[subprocess.Popen[str]] = []
        for argv, log in zip(commands, self.logs, strict=True):
            with log.open("w") as err:  # the child keeps its own descriptor
                self.procs.append(subprocess.Popen(
                    argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err, text=True
                ))  # fmt: skip

    def __repr__(self) -> str:
        alive = sum(p.poll() is None for p in self.procs)
        return f"<WorkerFleet {alive}/{len(self.procs)} running>"

    def _stderr(self, i: int) -> str:
        return self.logs[i].read_text()[-2000:]

    def ready(self, timeout_s: float = 60.0) -> None:
        """Wait until every worker said ``ready``.

        Raises:
            RuntimeError: One exited or stayed silent (its stderr in the message).
        """
        deadline = time.monotonic() + timeout_s
        for i, proc in enumerate(self.procs):
            assert proc.stdout is not None
            left = max(0.0, deadline - time.monotonic())
            readable, _, _ = select.select([proc.stdout], [], [], left)
            line = proc.stdout.readline() if readable else ""
            if line.strip() != "ready":
                raise RuntimeError(f"worker {i} did not start ({line!r}):\n{self._stderr(i)}")

    def go(self) -> None:
        """Release every worker (one line on each stdin)."""
        for proc in self.procs:
            assert proc.stdin is not None
            proc.stdin.write("go\n")
            proc.stdin.flush()

    def kill(self, i: int) -> None:
        """``kill -9`` worker ``i`` and reap it."""
        self.procs[i].send_signal(signal.SIGKILL)
        self.procs[i].wait()

    def results(self, timeout_s: float = 600.0, *, skip: Sequence[int] = ()) -> list[Any]:
        """Each worker's JSON line (``None`` for those in ``skip``), once all have exited.

        Raises:
            RuntimeError: A worker failed or printed no result (its stderr in the message).
        """
        deadline = time.monotonic() + timeout_s
        found: list[Any] = []
        for i, proc in enumerate(self.procs):
            if i in skip:
                found.append(None)
                continue
            out, _ = proc.communicate(timeout=max(0.1, deadline - time.monotonic()))
            lines = [line for line in out.splitlines() if line.startswith("{")]
            if proc.returncode != 0 or len(lines) != 1:
                raise RuntimeError(f"worker {i} exited {proc.returncode}:\n{self._stderr(i)}")
            found.append(json.loads(lines[0]))
        return found

    def close(self) -> None:
        """Kill and reap whatever still runs."""
        for proc in self.procs:
            if proc.poll() is None:
                proc.kill()
            proc.wait()
            for pipe in (proc.stdin, proc.stdout):
                if pipe is not None:
                    pipe.close()


@contextlib.contextmanager
def worker_fleet(commands: Sequence[list[str]], logdir: Path) -> Iterator[WorkerFleet]:
    """Start ``commands`` (see `command`), stderr to ``logdir``; kill leftovers on exit."""
    fleet = WorkerFleet(commands, logdir)
    try:
        yield fleet
    finally:
        fleet.close()
