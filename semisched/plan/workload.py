"""Workloads for the capacity planner: per-request token counts, their classes and arrival times.

A `Workload` is what FleetOpt calls the workload CDF ``F``, kept as the
requests themselves (numpy arrays) so every pool's service distribution can be
calibrated from the requests it would receive (Algorithm 1, lines 7-8):

- ``prompt_tokens``: what the unit prefills;
- ``output_tokens``: what it generates (the true length in a trace, the
  prior's median for a batch input);
- ``reserve_tokens``: the output the *router* counts: the call's
  ``max_tokens``, else the prior's p90, else the true length. Token-Budget-Aware Pool Routing's
  ``L_total = prompt + max_output_tokens``: ``route_tokens`` is what
  ``token_budget`` routing compares with ``B_short``, and what a slot's
  context must hold;
- ``floor_tokens``: the fewest prompt tokens extractive compression can reach
  (``semisched.compress.compressor``), where the prompt text is known; ``None``
  otherwise (then a compressibility rate stands in for it).

Sources: a trace JSONL (`load_trace`), a ``semisched batch`` input file
with priors (`load_batch`), or a synthetic mix (`mix_workload`).
Bad input is a ``ValueError`` that names the file and line.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from semisched.core.buckets import SIZED_BUCKETS
from semisched.core.checks import check_int
from semisched.plan.mixes import MIXES, OUTPUT_RANGES, PROMPT_RANGE

__all__ = [
    "TRACE_FIELDS",
    "Workload",
    "load_batch",
    "load_trace",
    "mix_workload",
    "workload_from_records",
]

IntArray = npt.NDArray[np.int64]

#: Keys of one trace line: the first two are required.
TRACE_FIELDS: tuple[str, ...] = (
    "prompt_tokens",
    "output_tokens",
    "arrival",
    "class",
    "max_tokens",
    "floor_tokens",
)
DEFAULT_CLASS = "default"


@dataclass(frozen=True, eq=False)
class Workload:
    """The requests a fleet is planned for (module docstring)."""

    prompt_tokens: IntArray
    output_tokens: IntArray
    reserve_tokens: IntArray
    classes: IntArray
    class_names: tuple[str, ...]
    floor_tokens: IntArray | None = None
    arrivals: npt.NDArray[np.float64] | None = None
    source: str = ""

    def __post_init__(self) -> None:
        n = len(self.prompt_tokens)
        if n == 0:
            raise ValueError(f"{self.source or 'workload'}: no requests (an empty trace)")
        arrays = [self.output_tokens, self.reserve_tokens, self.classes]
        if self.floor_tokens is not None:
            arrays.append(self.floor_tokens)
        if self.arrivals is not None:
            arrays.append(self.arrivals)  # type: ignore[arg-type]
        if any(len(a) != n for a in arrays):
            raise ValueError("every array of a workload must have one entry per request")
        if int(self.prompt_tokens.min()) < 0 or int(self.output_tokens.min()) < 0:
            raise ValueError("token counts must be >= 0")

    def __len__(self) -> int:
        return len(self.prompt_tokens)

    @property
    def route_tokens(self) -> IntArray:
        """What ``token_budget`` routing compares with ``B_short``: prompt + reserved output."""
        return self.prompt_tokens + self.reserve_tokens

    def arrival_rate(self) -> float | None:
        """Requests per second over the trace's arrival span (``None``: no arrival times)."""
        if self.arrivals is None or len(self.arrivals) < 2:
            return None
        span = float(self.arrivals.max() - self.arrivals.min())
        return (len(self.arrivals) - 1) / span if span > 0 else None


def workload_from_records(
    records: Iterable[Mapping[str, Any]], *, source: str = "trace"
) -> Workload:
    """A workload from trace records (dicts with `TRACE_FIELDS` keys)."""
    prompt: list[int] = []
    output: list[int] = []
    reserve: list[int] = []
    floors: list[int] = []
    arrivals: list[float] = []
    classes: list[str] = []
    for where, record in _numbered(records, source):
        unknown = sorted(set(record) - set(TRACE_FIELDS))
        if unknown:
            raise ValueError(f"{where}: unknown key(s) {unknown}; a line has {list(TRACE_FIELDS)}")
        try:
            p = _tokens(record, "prompt_tokens", required=True)
            o = _tokens(record, "output_tokens", required=True)
            cap = _tokens(record, "max_tokens", required=False)
            floor = _tokens(record, "floor_tokens", required=False)
        except ValueError as exc:
            raise ValueError(f"{where}: {exc}") from None
        assert p is not None and o is not None
        prompt.append(p)
        output.append(o if cap is None else min(o, cap))
        reserve.append(o if cap is None else cap)
        if floor is not None:
            floors.append(min(floor, p))
        arrival = record.get("arrival")
        if arrival is not None:
            if not isinstance(arrival, int | float) or isinstance(arrival, bool):
                raise ValueError(f"{where}: arrival={arrival!r} must be a number (seconds)")
            if not math.isfinite(arrival):
                raise ValueError(f"{where}: arrival={arrival!r} must be finite")
            arrivals.append(float(arrival))
        name = record.get("class", DEFAULT_CLASS)
        if not isinstance(name, str) or not name:
            raise ValueError(f"{where}: class={name!r} must be a non-empty string")
        classes.append(name)
    n = len(prompt)
    if floors and len(floors) != n:
        raise ValueError(f"{source}: floor_tokens must be on every line or on none")
    if arrivals and len(arrivals) != n:
        raise ValueError(f"{source}: arrival must be on every line or on none")
    names = tuple(sorted(set(classes))) or (DEFAULT_CLASS,)
    index = {name: i for i, name in enumerate(names)}
    return Workload(
        prompt_tokens=np.asarray(prompt, dtype=np.int64),
        output_tokens=np.asarray(output, dtype=np.int64),
        reserve_tokens=np.asarray(reserve, dtype=np.int64),
        classes=np.asarray([index[c] for c in classes], dtype=np.int64),
        class_names=names,
        floor_tokens=np.asarray(floors, dtype=np.int64) if floors else None,
        arrivals=np.asarray(sorted(arrivals), dtype=np.float64) if arrivals else None,
        source=source,
    )


def _numbered(
    records: Iterable[Mapping[str, Any]], source: str
) -> Iterable[tuple[str, Mapping[str, Any]]]:
    for number, record in enumerate(records, start=1):
        where = f"{source}: line {number}"
        if not isinstance(record, Mapping):
            raise ValueError(f"{where}: a line is a JSON object, got {type(record).__name__}")
        yield where, record


def _tokens(record: Mapping[str, Any], key: str, *, required: bool) -> int | None:
    value = record.get(key)
    if value is None:
        if required:
            raise ValueError(f"{key} is missing (every line needs prompt_tokens and output_tokens)")
        return None
    check_int(key, value, minimum=0)
    return int(value)


def load_trace(path: str | os.PathLike[str]) -> Workload:
    """Read a trace JSONL: one ``{"prompt_tokens": P, "output_tokens": O, ...}`` per line.

    Optional keys: ``arrival`` (seconds; on every line or none), ``class`` (a
    name, default ``"default"``), ``max_tokens`` (the call's cap: what the
    router reserves), ``floor_tokens`` (the prompt after maximal compression).
    """
    source = os.fspath(path)
    try:
        with open(path, encoding="utf-8") as handle:
            lines = [(n, line) for n, line in enumerate(handle, start=1) if line.strip()]
    except OSError as exc:
        raise ValueError(f"{source}: cannot read the trace: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise ValueError(f"{source}: the trace is not UTF-8 text") from None
    records: list[Any] = []
    for number, line in lines:
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError as exc:
            raise ValueError(f"{source}: line {number}: not JSON ({exc.msg})") from None
    if not records:
        raise ValueError(f"{source}: the trace is empty (no requests to plan for)")
    return workload_from_records(records, source=source)


def mix_workload(name: str, *, requests: int = 100_000, seed: int = 0) -> Workload:
    """``requests`` draws from synthetic mix ``name`` (`semisched.plan.mixes`).

    The class of a request is ``interactive`` for a short answer, ``batch``
    otherwise (as the benchmarks' routing classes with a class-level prior).
    """
    if name not in MIXES:
        raise ValueError(f"mix={name!r} must be one of {', '.join(sorted(MIXES))}")
    check_int("requests", requests, minimum=1)
    rng = np.random.default_rng(seed)
    bucket = rng.choice(len(SIZED_BUCKETS), size=requests, p=MIXES[name])
    low = np.array([OUTPUT_RANGES[b][0] for b in SIZED_BUCKETS])[bucket]
    high = np.array([OUTPUT_RANGES[b][1] for b in SIZED_BUCKETS])[bucket]
    output = rng.integers(low, high + 1).astype(np.int64)
    prompt = rng.integers(PROMPT_RANGE[0], PROMPT_RANGE[1] + 1, size=requests).astype(np.int64)
    return Workload(
        prompt_tokens=prompt,
        output_tokens=output,
        reserve_tokens=output.copy(),
        classes=(bucket != 0).astype(np.int64),
        class_names=("interactive", "batch"),
        source=f"mix {name}",
    )


def load_batch(
    path: str | os.PathLike[str],
    prior: Callable[[Sequence[dict[str, Any]]], Sequence[tuple[float, float]]],
    *,
    count_tokens: Callable[[Sequence[Mapping[str, Any]]], int],
    floor_tokens: Callable[[Sequence[Mapping[str, Any]]], int] | None = None,
) -> Workload:
    """A ``semisched batch`` input file (OpenAI Batch format) as a workload.

    Args:
        path: The input JSONL (``custom_id``, ``body`` with ``messages``).
        prior: The output-length priors of a list of bodies: ``(p50, p90)`` each.
        count_tokens: Prompt tokens of a body's messages.
        floor_tokens: Prompt tokens after maximal compression, when compression is
            planned (``None``: not computed).

    A body's service length is ``min(p50, max_tokens)``; the router reserves its
    ``max_tokens``, else the p90 (what ``token_budget`` routing does at run time).
    """
    source = os.fspath(path)
    bodies: list[dict[str, Any]] = []
    try:
        with open(path, encoding="utf-8") as handle:
            for number, line in enumerate(handle, start=1):
                if not line.strip():
                    continue
                try:
                    obj = json.loads(line)
                except json.JSONDecodeError as exc:
                    raise ValueError(f"{source}: line {number}: not JSON ({exc.msg})") from None
                body = obj.get("body") if isinstance(obj, dict) else None
                if not isinstance(body, dict) or not isinstance(body.get("messages"), list):
                    raise ValueError(f"{source}: line {number}: needs a body with messages")
                bodies.append(body)
    except OSError as exc:
        raise ValueError(f"{source}: cannot read the batch input: {exc.strerror}") from None
    if not bodies:
        raise ValueError(f"{source}: the batch input is empty (no requests to plan for)")
    priors = prior(bodies)
    prompt, output, reserve, floors = [], [], [], []
    for body, (p50, p90) in zip(bodies, priors, strict=True):
        cap = body.get("max_tokens") or body.get("max_completion_tokens")
        messages = body["messages"]
        tokens = count_tokens(messages)
        prompt.append(tokens)
        median = max(1, round(p50))
        output.append(median if cap is None else min(median, int(cap)))
        reserve.append(math.ceil(p90) if cap is None else int(cap))
        if floor_tokens is not None:
            floors.append(min(tokens, floor_tokens(messages)))
    n = len(bodies)
    return Workload(
        prompt_tokens=np.asarray(prompt, dtype=np.int64),
        output_tokens=np.asarray(output, dtype=np.int64),
        reserve_tokens=np.asarray(reserve, dtype=np.int64),
        classes=np.zeros(n, dtype=np.int64),
        class_names=(DEFAULT_CLASS,),
        floor_tokens=np.asarray(floors, dtype=np.int64) if floor_tokens is not None else None,
        source=source,
    )
