"""Fit an endpoint's speed from what it did: ``semisched plan fit LOG``.

A LOG is either a simulator trace (`semisched.sim.simulator.SimResult.trace_csv`,
recognised by its CSV header) or a ``semisched batch`` output file (JSONL;
each success record's ``semisched`` key, `semisched.batch.timing`, and
its response's ``usage``). Each completed request is one observation: its
endpoint and run, when it was sent and answered, its prompt and output tokens.
A trace's ``first_send`` is its first attempt, so only jobs sent once are used;
error records, batch records without timing and retried jobs are *skipped*
and counted.

The model is the mock provider's (FleetOpt eq. 3-4, `mockprovider.physics`):
a request holds a slot for ``iters = max(1, ceil(prompt / chunk) + output)``
iterations of ``W + H * n`` ms each, then is seen ``overhead`` ms later. So
its duration is ``overhead + W * iters + H * iters * n_bar``, with ``n_bar``
the mean number of requests in flight at its endpoint (same run) while it was
in the batch, ``[sent, end - overhead]``. `fit_observations` solves that
by least squares, in passes:

1. ``n_bar`` of every observation from one sweep over the sorted sends and
   ends of its group (O(n log n)); the first pass averages over time, later
   passes over iterations (each instant weighted by ``1 / (W + H n)`` with
   the last pass's W and H), which makes the model exact for fluid batching:
   ``∫ dt = W ∫ dG + H ∫ n dG`` over the request's iterations ``G``.
2. Observations that saw more than ``slots`` requests in flight are dropped
   (the excess waited in the provider's hidden queue, which the model does
   not see) and counted.
3. Least squares on the rest; the fitted overhead moves each end for the
   next pass, until W, H and the overhead settle.

What it is not: no clock, no simulation, no plot. Misfits are errors, not
clipped: a log with one concurrency level cannot separate W from H.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any, NoReturn, TextIO

import numpy as np
import numpy.typing as npt

from semisched.core.checks import check_int
from semisched.plan.profile import UnitProfile, named_profile

__all__ = ["Observations", "ProfileFit", "fit_log", "fit_main", "fit_observations", "read_log"]

_F = npt.NDArray[np.float64]
_Row = tuple[str, float, float, float, float] | None  # (group, sent, end, prompt, output)
_COLUMNS = ("outcome", "attempts", "endpoint", "first_send", "end", "input_tokens", "output_tokens")
_PASSES = 30  # more than enough: a trace of the mock settles in 3-6


@dataclass(frozen=True, slots=True)
class Observations:
    """Completed requests of one LOG, as parallel arrays (times in seconds).

    Attributes:
        group: Index of the request's ``(run, endpoint)`` in ``groups``.
        groups: ``"run/endpoint"`` (a trace has one run, ``""``).
        sent, end: When it was sent and answered.
        prompt, output: Its prompt and output tokens.
        skipped: Requests of the log that are not observations (not completed,
            retried, or no timing recorded).
    """

    group: npt.NDArray[np.int64]
    groups: tuple[str, ...]
    sent: _F
    end: _F
    prompt: _F
    output: _F
    skipped: int = 0

    def __len__(self) -> int:
        return len(self.sent)


@dataclass(frozen=True, slots=True, kw_only=True)
class ProfileFit:
    """A fitted endpoint speed (module docstring).

    Attributes:
        profile: The base profile with W, H and the overhead (at least 0) fitted,
            ``slots`` and ``prefill_chunk`` as the fit assumed them.
        base_iter_ms, per_slot_ms, overhead_ms: ``W``, ``H`` and the intercept (ms).
        observations: Observations the fit used.
        dropped: Observations dropped for seeing more than ``slots`` in flight.
        skipped: Requests of the log that were not observations.
        r_squared: Share of the durations' variance the fit explains.
        residual_p50_ms, residual_p95_ms: Percentiles of ``|duration - fit|``.
        n_bar_min, n_bar_max: The range of mean concurrency the fit saw.
    """

    profile: UnitProfile
    base_iter_ms: float
    per_slot_ms: float
    overhead_ms: float
    observations: int
    dropped: int
    skipped: int
    r_squared: float
    residual_p50_ms: float
    residual_p95_ms: float
    n_bar_min: float
    n_bar_max: float

    def as_dict(self) -> dict[str, Any]:
        """Every field, the profile as its own mapping, plus the profile's headline speeds."""
        data = {f.name: getattr(self, f.name) for f in fields(self)}
        data.update(
            lone_decode_ms_per_token=self.profile.lone_decode_ms_per_token(),
            full_batch_tokens_per_s=self.profile.capacity_tokens_per_s(),
        )
        return data | {"profile": asdict(self.profile)}


def read_log(path: str | os.PathLike[str]) -> Observations:
    """The observations of a simulator trace or a batch output (module docstring).

    Raises:
        ValueError: The file cannot be read, is empty, or has a bad line (named).
    """
    name = os.fspath(path)
    try:
        with open(path, encoding="utf-8", newline="") as handle:
            lines = handle.read().splitlines()
    except OSError as exc:
        raise ValueError(f"{name}: cannot read the log: {exc.strerror}") from None
    except UnicodeDecodeError:
        raise ValueError(f"{name}: not a text file") from None
    first = next((i for i, line in enumerate(lines) if line.strip()), None)
    if first is None:
        raise ValueError(f"{name}: the log is empty")
    if lines[first].lstrip().startswith("{"):
        return _collect(_from_batch(name, lines))
    header = next(csv.reader([lines[first]]))
    if "first_send" in header:
        return _collect(_from_trace(name, lines[first:], header, first))
    raise ValueError(
        f"{name} line {first + 1}: neither a simulator trace header nor a batch output record"
    )


def _collect(rows: Iterator[_Row]) -> Observations:
    found = list(rows)
    kept = [row for row in found if row is not None]
    keys = {key: i for i, key in enumerate(dict.fromkeys(row[0] for row in kept))}
    group = np.array([keys[row[0]] for row in kept], dtype=np.int64)
    sent, end, prompt, output = np.array([row[1:] for row in kept]).reshape(-1, 4).T.copy()
    return Observations(group, tuple(keys), sent, end, prompt, output, len(found) - len(kept))


def _from_trace(name: str, lines: list[str], header: list[str], offset: int) -> Iterator[_Row]:
    missing = [f for f in _COLUMNS if f not in header]
    if missing:
        old = " (written before traces carried it: simulate again)" * ("input_tokens" in missing)
        raise ValueError(f"{name}: the trace lacks {', '.join(missing)}{old}")
    outcome, attempts, endpoint, sent, end, prompt, output = (header.index(f) for f in _COLUMNS)
    for number, row in enumerate(csv.reader(lines[1:]), start=offset + 2):
        if not row:
            continue
        try:
            if row[outcome] != "completed" or int(row[attempts]) != 1:
                yield None
                continue
            s, e, p, o = (float(row[i]) for i in (sent, end, prompt, output))
            yield (row[endpoint], s, e, p, o)
        except (IndexError, ValueError):
            raise ValueError(f"{name} line {number}: not a row of the trace: {_cut(row)}") from None


def _from_batch(name: str, lines: list[str]) -> Iterator[_Row]:
    for number, raw in enumerate(lines, start=1):
        if not raw.strip():
            continue
        try:
            record = json.loads(raw)
        except ValueError:
            raise ValueError(f"{name} line {number}: not JSON: {_cut(raw)}") from None
        if not isinstance(record, dict) or "custom_id" not in record:
            raise ValueError(f"{name} line {number}: not a batch output record: {_cut(raw)}")
        timing, response = record.get("semisched"), record.get("response")
        if record.get("error") is not None or not isinstance(timing, dict):
            yield None
            continue
        try:
            usage = response["body"]["usage"]  # type: ignore[index]
            s, e = float(timing["sent_s"]), float(timing["done_s"])
            p, o = float(usage["prompt_tokens"]), float(usage["completion_tokens"])
            yield (f"{timing['run']}/{timing['endpoint']}", s, e, p, o)
        except (KeyError, TypeError, ValueError):
            raise ValueError(
                f"{name} line {number}: a success record without usage or timing: {_cut(raw)}"
            ) from None


def _cut(text: object, most: int = 60) -> str:
    return repr(text) if len(repr(text)) <= most else repr(text)[: most - 3] + "..."


def _sweep(sent: _F, end: _F, slots: int, speed: tuple[float, float] | None) -> tuple[_F, Any]:
    """Mean in-flight count over each ``[sent, end)`` of one group, and whether it ever
    exceeded ``slots``; ``speed``: weight by iterations of ``W + H n`` (module docstring)."""
    n = len(sent)
    times = np.concatenate((sent, end))
    delta = np.concatenate((np.ones(n), -np.ones(n)))
    order = np.lexsort((delta, times))  # by time, ends before sends at a tie
    count = np.cumsum(delta[order])  # in flight on [times[k], times[k + 1])
    width = np.diff(times[order], append=times[order[-1]])
    rate = np.ones_like(count) if speed is None else 1.0 / (speed[0] + speed[1] * count)
    rank = np.empty(2 * n, dtype=np.int64)
    rank[order] = np.arange(2 * n)
    start, stop = rank[:n], rank[n:]

    def during(values: Any) -> Any:  # the sum of ``values`` over each request's segments
        sums = np.concatenate(([0.0], np.cumsum(values)))
        return sums[stop] - sums[start]

    return during(width * rate * count) / during(width * rate), during(count > slots) > 0


def _check_posed(iters: _F, n_bar: _F, dropped: int, slots: int) -> None:
    if len(iters) < 4:
        why = f"{dropped} dropped for more than {slots} in flight"
        raise ValueError(f"only {len(iters)} usable observations ({why}): a fit needs at least 4")
    if np.ptp(iters) == 0:
        raise ValueError(
            "every request took the same number of iterations: W cannot be told from the "
            "overhead; fit a log with requests of varied lengths"
        )
    design = np.column_stack((np.ones_like(iters), iters))
    loads = iters * n_bar
    rest = loads - design @ np.linalg.lstsq(design, loads, rcond=None)[0]
    if np.ptp(n_bar) < 0.5 or np.linalg.norm(rest) <= 1e-6 * np.linalg.norm(loads):
        raise ValueError(
            f"every request saw the same concurrency (n_bar {n_bar.min():.2f} to "
            f"{n_bar.max():.2f} in flight): H cannot be told from W; fit a log taken "
            "at varied load (several request rates or concurrency caps)"
        )


def fit_observations(
    obs: Observations,
    base: UnitProfile,
    *,
    slots: int | None = None,
    prefill_chunk: int | None = None,
    name: str = "fitted",
) -> ProfileFit:
    """Fit W, H and the overhead to ``obs`` (`read_log`; module docstring); the
    fitted profile, ``name``, keeps ``base``'s other fields. ``slots`` and
    ``prefill_chunk`` default to the base's.

    Raises:
        ValueError: No observation, an ill-posed fit (too few, one length, one
            concurrency level), or W, H or the overhead below 0.
    """
    slots = base.slots if slots is None else slots
    chunk = base.prefill_chunk if prefill_chunk is None else prefill_chunk
    check_int("slots", slots, minimum=1)
    check_int("prefill_chunk", chunk, minimum=1)
    good = obs.end > obs.sent
    if not good.any():
        raise ValueError(f"no completed request in the log ({obs.skipped} skipped)")
    solved = _solve(obs, good, slots, chunk)
    keep, coef, design, duration = solved.keep, solved.coef, solved.design, solved.duration
    overhead, w, h = (float(c) for c in coef)
    residual = np.abs(duration[keep] - design @ coef)
    spread = float(np.sum((duration[keep] - duration[keep].mean()) ** 2))
    if overhead < -max(1.0, 0.01 * float(np.median(duration[keep]))):  # not rounding: refuse
        raise ValueError(
            f"the fit gives a negative overhead ({overhead:.1f} ms): the log's "
            "send and answer times do not follow the batching model"
        )
    fitted = {"base_iter_ms": w, "per_slot_ms": h, "overhead_ms": max(overhead, 0.0)}
    sized = base.with_(max_slots=max(base.max_slots, slots), slots=slots, prefill_chunk=chunk)
    profile = sized.with_(name=name, **fitted)
    return ProfileFit(
        profile=profile,
        base_iter_ms=w,
        per_slot_ms=h,
        overhead_ms=overhead,
        observations=int(keep.sum()),
        dropped=int((~keep).sum()),
        skipped=obs.skipped + int((~good).sum()),
        r_squared=1.0 - float(np.sum(residual**2)) / spread if spread > 0 else 1.0,
        residual_p50_ms=float(np.percentile(residual, 50)),
        residual_p95_ms=float(np.percentile(residual, 95)),
        n_bar_min=float(solved.n_bar[keep].min()),
        n_bar_max=float(solved.n_bar[keep].max()),
    )


FloatArray = npt.NDArray[np.float64]


@dataclass(frozen=True)
class _Solved:
    """The last pass of `_solve`: who was kept, the design, the coefficients."""

    keep: npt.NDArray[np.bool_]
    n_bar: FloatArray
    design: FloatArray
    duration: FloatArray
    coef: FloatArray


def _solve(obs: Observations, good: npt.NDArray[np.bool_], slots: int, chunk: int) -> _Solved:
    """Least squares in passes, each with the in-flight means the last pass's speed gives
    (the module docstring's fit), until the coefficients stop moving."""
    origin = obs.sent[good].min()  # near 0, ``sent + 1e-9`` stays after ``sent``
    group, sent, end = obs.group[good], obs.sent[good] - origin, obs.end[good] - origin
    iters = np.maximum(1.0, np.ceil(obs.prompt[good] / chunk) + obs.output[good])
    duration = (end - sent) * 1000.0
    members = [np.flatnonzero(group == g) for g in range(len(obs.groups))]
    overhead, speed, last = 0.0, None, None
    for _ in range(_PASSES):
        active = np.maximum(end - max(overhead, 0.0) / 1000.0, sent + 1e-9)
        n_bar, over = np.empty_like(sent), np.zeros(len(sent), dtype=bool)
        for idx in (idx for idx in members if len(idx)):
            n_bar[idx], over[idx] = _sweep(sent[idx], active[idx], slots, speed)
        keep = ~over
        if last is None:
            _check_posed(iters[keep], n_bar[keep], int(over.sum()), slots)
        design = np.column_stack((np.ones(int(keep.sum())), iters[keep], iters[keep] * n_bar[keep]))
        coef = np.linalg.lstsq(design, duration[keep], rcond=None)[0]
        overhead, w, h = (float(c) for c in coef)
        if w <= 0.0 or h < 0.0:
            raise ValueError(
                f"the fit gives W={w:.3f} ms and H={h:.3f} ms per request in flight, but W must "
                "be positive and H not negative: the log does not follow the batching model "
                "(W + H n per iteration), or --prefill-chunk / --slots do not match the endpoint"
            )
        speed = (w, h)
        if last is not None and np.allclose(coef, last, rtol=1e-9, atol=1e-9):
            break
        last = coef
    return _Solved(keep, n_bar, design, duration, coef)


def fit_log(
    path: str | os.PathLike[str],
    base: UnitProfile | None = None,
    *,
    slots: int | None = None,
    prefill_chunk: int | None = None,
) -> ProfileFit:
    """`read_log` then `fit_observations` (base: the ``default`` profile); the
    fitted profile is named ``fit-<log file stem>``."""
    base = named_profile("default") if base is None else base
    obs, name = read_log(path), f"fit-{Path(path).stem}"
    return fit_observations(obs, base, slots=slots, prefill_chunk=prefill_chunk, name=name)


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:  # one line, no usage: fit_main prints it
        raise ValueError(message)


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="semisched plan fit", description="Fit an endpoint's W, H, overhead.")
    add = parser.add_argument
    add("log", help="a simulator trace (CSV) or a `semisched batch` output (JSONL)")
    add("--profile", default="default", help="the profile whose other fields the fit keeps")
    add("--slots", type=int, help="slots of one endpoint (default: the profile's)")
    add("--prefill-chunk", type=int, help="prompt tokens per prefill iteration (default: ditto)")
    add("--json", action="store_true", help="print the fit as JSON")
    add("--out", type=Path, help="write the fitted profile (JSON) here")
    return parser


def _table(fit: ProfileFit, log: str) -> list[str]:
    physics = fit.profile
    rows = [
        ("W  base iteration", f"{fit.base_iter_ms:.3f} ms"),
        ("H  per request in flight", f"{fit.per_slot_ms:.3f} ms"),
        ("overhead", f"{fit.overhead_ms:.1f} ms"),
        ("R²", f"{fit.r_squared:.5f}"),
        ("|residual| p50 / p95", f"{fit.residual_p50_ms:.1f} / {fit.residual_p95_ms:.1f} ms"),
        ("in flight (n_bar)", f"{fit.n_bar_min:.2f} to {fit.n_bar_max:.2f}"),
        ("lone decode (W + H)", f"{physics.lone_decode_ms_per_token():.2f} ms/token"),
        (f"full batch ({physics.slots} slots)", f"{physics.capacity_tokens_per_s():.0f} tokens/s"),
    ]
    head = (
        f"fitted from {log}: {fit.observations} requests ({fit.dropped} dropped: more than "
        f"{physics.slots} in flight; {fit.skipped} skipped: failed, retried or untimed)"
    )
    return [head, *(f"  {label:<26}{value}" for label, value in rows)]


def fit_main(argv: Sequence[str], stream: TextIO) -> int:
    """``semisched plan fit LOG [--profile NAME] [--slots N] [--prefill-chunk N] [--json]
    [--out PROFILE.json]``: print the fit to ``stream``; 0, or 2 with a one-line message
    on ``stream`` for bad input."""
    try:
        args = _parser().parse_args(list(argv))
        base = named_profile(args.profile)
        fit = fit_log(args.log, base, slots=args.slots, prefill_chunk=args.prefill_chunk)
        if args.out is not None:
            try:
                args.out.write_text(fit.profile.to_json(), encoding="utf-8")
            except OSError as exc:
                raise ValueError(f"{args.out}: cannot write the profile: {exc.strerror}") from None
    except ValueError as exc:
        print(f"semisched plan fit: {exc}", file=stream)
        return 2
    if args.json:
        print(json.dumps(fit.as_dict(), indent=2), file=stream)
    else:
        print("\n".join(_table(fit, args.log)), file=stream)
        if args.out is not None:
            print(f"profile written to {args.out}", file=stream)
    return 0
