"""Instructions, not seconds: the decision's and the simulator's cost counted by cachegrind.

Timings on a shared machine drift by tens of percent from minute to minute (a
whole run of alternating rounds included), so ``python -m bench perf
--instructions`` also counts the CPU instructions each side executes, with
valgrind's cachegrind. A count does not depend on the machine's load: one run
per side says what changed, to about a tenth of a percent.

Each figure is a difference of two runs of the same probe in one tree, so that
start-up, imports and set-up cancel out: the instructions of ``2n`` steps less
those of ``n``, over ``n``.

* ``decision``: one arrival (`Engine.submit`) and one dispatch decision
  (`Engine.completed` on a full engine, ``max_inflight=1``) with 10k queued, one
  endpoint and one tenant: the timing probe's engine and requests
  (``bench.perf._fill``, ``bench.perf._request``).
* ``sim``: one simulated request of the speed probe's workload (``bench.perf.sim_speed``'s
  jobs, config and physics; the jobs are built before, the same ones in both runs).

Cache misses are not counted (``--cache-sim=no``): they depend on the cache
cachegrind models, not on this machine's. Needs ``valgrind`` on ``PATH``.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

__all__ = ["COUNTS", "count_instructions", "instructions_per_step"]

#: ``(figure, label, steps n)``: what each count probe measures, in the table's words.
COUNTS: tuple[tuple[str, str, int], ...] = (
    ("decision_instructions", "decision at 10k queued: instructions per arrival and dispatch", 500),
    ("sim_instructions", "simulator: instructions per request", 1000),
)

# Each probe runs ``STEPS`` steps (argv[1]); only what differs between n and 2n counts.
_PROBES: dict[str, str] = {
    "decision_instructions": (
        "import gc, sys\n"
        "import numpy as np\n"
        "from bench.perf import _fill, _request\n"
        "from semisched.core.config import preset\n"
        "from semisched.core.engine import Engine, Send\n"
        "rng = np.random.default_rng(0)\n"
        "engine = Engine(preset('adaptive_drr', max_inflight=1))\n"
        "next_id, inflight = _fill(engine, 10000, rng)\n"
        "steps = int(sys.argv[1])\n"
        "requests = [_request(next_id + k, 0.001 * (k + 1), rng) for k in range({most})]\n"
        "gc.collect(); gc.disable()\n"
        "for k in range(steps):\n"
        "    now = 0.001 * (k + 1)\n"
        "    engine.submit(requests[k], now)\n"
        "    for action in engine.completed(inflight, now, output_tokens=100):\n"
        "        if type(action) is Send:\n"
        "            inflight = action.request.id\n"
        "            break\n"
    ),
    "sim_instructions": (
        "import gc, sys\n"
        "import bench.perf as p\n"
        "run, got = p.simulate, []\n"
        "def keep(jobs, config, phys):\n"
        "    got.append((jobs, config, phys))\n"
        "    raise SystemExit\n"
        "p.simulate = keep\n"
        "try:\n"
        "    p.sim_speed(requests={most})\n"
        "except SystemExit:\n"
        "    pass\n"
        "jobs, config, phys = got[0]\n"
        "gc.collect()\n"
        "run(jobs[: int(sys.argv[1])], config, phys)\n"
    ),
}

_REFS = re.compile(r"I\s+refs:\s+([\d,]+)")


def _instructions(tree: Path, code: str, steps: int) -> int:
    """Instructions of one run of ``code`` with ``steps`` steps in ``tree`` (its root
    first on ``sys.path``; hashing fixed, so that a rerun counts the same)."""
    env = {**os.environ, "PYTHONPATH": str(tree), "PYTHONHASHSEED": "0",
           "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1"}  # fmt: skip
    with tempfile.TemporaryDirectory(prefix="semisched-count-") as tmp:
        done = subprocess.run(
            ["valgrind", "--tool=cachegrind", "--cache-sim=no",
             f"--cachegrind-out-file={Path(tmp) / 'out'}", "python", "-c", code, str(steps)],
            cwd=tree, env=env, capture_output=True, text=True,
        )  # fmt: skip
    found = _REFS.search(done.stderr)
    if done.returncode != 0 or found is None:
        raise RuntimeError(f"counting in {tree} failed:\n{done.stderr[-2000:]}")
    return int(found.group(1).replace(",", ""))


def instructions_per_step(tree: Path, figure: str, steps: int) -> float:
    """``figure``'s instructions per step in ``tree``: a run of ``2 * steps`` less one of
    ``steps``, over ``steps``.

    Raises:
        ValueError: An unknown figure, or ``steps`` < 1.
        RuntimeError: valgrind is missing, or the probe failed.
    """
    if figure not in _PROBES:
        raise ValueError(f"figure={figure!r} must be one of {sorted(_PROBES)}")
    if steps < 1:
        raise ValueError(f"steps={steps!r} must be >= 1")
    if shutil.which("valgrind") is None:
        raise RuntimeError("valgrind is not on PATH (apt install valgrind), needed to count")
    code = _PROBES[figure].format(most=2 * steps)
    with ThreadPoolExecutor(2) as pool:  # the two runs side by side (a count ignores load)
        few, many = pool.map(lambda n: _instructions(tree, code, n), (steps, 2 * steps))
    return (many - few) / steps


def count_instructions(tree: Path, scale: float = 1.0) -> dict[str, float]:
    """Every figure of `COUNTS` in ``tree`` (``scale`` multiplies the steps)."""
    return {
        figure: instructions_per_step(tree, figure, max(1, round(steps * scale)))
        for figure, _, steps in COUNTS
    }
