"""Fit the mock provider's physics to llama-server: ``python -m bench real-engine fit``.

The mock's model (`mockprovider.physics`) is an iteration time ``W + H*n + P*p + K*c``
with ``n`` sequences in the batch, ``p`` prompt tokens in it and ``c`` tokens of context
(every sequence's prompt and output so far), a prompt that takes
``ceil(L_in / C)`` iterations, one iteration per output token, and a fixed ``overhead``
outside the batch. llama-server puts a whole prompt of up to ``--batch-size`` tokens in
one step beside the other slots' decode tokens, so ``C`` is that batch size and a prompt
stalls every sequence for ``P * L_in``. Each constant is measured on the real server,
from llama-server's own per-request ``timings``:

1. **Decode**: ``n`` identical requests at once (``n`` = 1 .. slots, prompts of 32
   tokens), and the **context** sweep: lone requests with prompts of 512 .. 1536 tokens.
   Each ``predicted_ms / predicted_n`` is the mean iteration time with ``n`` in the batch
   holding ``n * (L_in + (L_out - 1) / 2)`` tokens of context on average; a least-squares
   fit of ``W + H*n + K*c`` through each level's median gives ``W``, ``H`` and ``K``.
   The context sweep also sends ``slots`` long prompts at once, kept in
   ``calibration.csv`` but left out of the fit: the first sequences then decode beside the
   others' prompt chunks, steps the mock charges to the prompt (``P``), so their mean
   step measures prefill as much as context.
2. **Prefill**: one request at a time, prompts of 32 .. 512 tokens, one output token;
   the slope of the median ``prompt_ms`` over prompt tokens is ``P``.
3. **Overhead**: the median, over the lone requests, of the client's latency minus what
   the mock would take for the same request alone,
   ``i * (W + H + K*L) + K*i^2/2 + P * L`` with ``i = ceil(L/C) + L_out`` iterations.

As a cross-check, the same requests' send and answer times go through ``semisched plan
fit`` (`semisched.plan.fit.fit_observations`: W, H and the overhead from client
times alone, with the slots and ``C`` above).

What it is not: no simulation; the comparison of whole workloads is `.compare`.
"""

from __future__ import annotations

import csv
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from bench.real_engine.client import Completion, Job, prompt_ids
from mockprovider.physics_params import PhysicsParams

__all__ = [
    "EngineFit",
    "context_jobs",
    "decode_jobs",
    "fit_engine",
    "fit_line",
    "prefill_jobs",
    "profile_from_fit",
]

DECODE_PROMPT = 32
DECODE_TOKENS = 128
#: Prompt lengths of the prefill sweep: the range the comparison's prompts span (32-512).
PREFILL_LENGTHS = (32, 64, 128, 192, 256, 384, 512)
#: Prompt lengths of the context sweep: contexts up to those of the comparison's longest
#: requests (a 512-token prompt and 1,024 output tokens).
CONTEXT_PROMPTS = (512, 1024, 1536)


def decode_jobs(rng: np.random.Generator, n: int, vocab: int, repeat: int) -> list[Job]:
    """``n`` requests sent together (``DECODE_TOKENS`` each), tagged ``decode/n/repeat``."""
    return [
        Job(arrival=0.0, prompt=prompt_ids(rng, DECODE_PROMPT, vocab),
            max_tokens=DECODE_TOKENS, tag=f"decode/{n}/{repeat}")
        for _ in range(n)
    ]  # fmt: skip


def context_jobs(
    rng: np.random.Generator, n: int, prompt: int, vocab: int, repeat: int
) -> list[Job]:
    """``n`` requests of ``prompt`` tokens sent together (``DECODE_TOKENS`` each), tagged
    ``context/n/repeat``."""
    return [
        Job(arrival=0.0, prompt=prompt_ids(rng, prompt, vocab),
            max_tokens=DECODE_TOKENS, tag=f"context/{n}/{repeat}")
        for _ in range(n)
    ]  # fmt: skip


def prefill_jobs(rng: np.random.Generator, vocab: int, repeat: int) -> list[Job]:
    """One request per prompt length, each with one output token (sent one at a time)."""
    return [
        Job(arrival=0.0, prompt=prompt_ids(rng, length, vocab), max_tokens=1,
            tag=f"prefill/{length}/{repeat}")
        for length in PREFILL_LENGTHS
    ]  # fmt: skip


def fit_line(x: Sequence[float], y: Sequence[float]) -> tuple[float, float]:
    """Least-squares ``(intercept, slope)`` of ``y`` over ``x``.

    Raises:
        ValueError: Fewer than two distinct ``x``.
    """
    xs, ys = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    if len(xs) != len(ys) or len(set(xs.tolist())) < 2:
        raise ValueError("a line needs points at two or more distinct x")
    slope, intercept = np.polyfit(xs, ys, 1)
    return float(intercept), float(slope)


@dataclass(frozen=True, slots=True, kw_only=True)
class EngineFit:
    """The mock's constants measured on the engine (module docstring).

    Attributes:
        slots: The server's ``--parallel``.
        base_iter_ms, per_slot_ms: ``W`` and ``H`` from the decode sweeps.
        context_ms_per_token: ``K`` from the decode sweeps (0 without a context sweep).
        decode_r_squared: How well ``W + H n + K c`` fits the decode sweeps.
        prefill_ms_per_token, prefill_intercept_ms: The prefill sweep's line (``P``).
        prefill_chunk: ``C``, the server's ``--batch-size``.
        overhead_ms: The fixed latency outside the batch.
    """

    slots: int
    base_iter_ms: float
    per_slot_ms: float
    context_ms_per_token: float
    decode_r_squared: float
    prefill_ms_per_token: float
    prefill_intercept_ms: float
    prefill_chunk: int
    overhead_ms: float


def _medians(points: Sequence[tuple[float, float]]) -> tuple[list[float], list[float]]:
    """The median ``y`` at each distinct ``x``: a sweep's repeats on a shared machine meet
    other processes' bursts, which the median of each level leaves out."""
    levels = sorted({x for x, _ in points})
    return levels, [float(np.median([y for x, y in points if x == lv])) for lv in levels]


def _lone(c: Completion) -> bool:
    kind, n, _ = c.tag.split("/")
    return kind == "prefill" or n == "1"


def _decode_fit(decode: Sequence[Completion]) -> tuple[float, float, float, float]:
    """``(W, H, K, r²)`` of each decode level's median iteration time over ``n`` and the
    batch's mean context (``K = 0`` when every level has the same prompt: no context
    sweep, as in a calibration from before it)."""
    levels: dict[tuple[int, float], list[float]] = {}
    for c in decode:
        size = int(c.tag.split("/")[1])
        mean_context = size * (c.prompt_tokens + (c.predicted_n - 1) / 2)
        levels.setdefault((size, mean_context), []).append(c.predicted_ms / c.predicted_n)
    keys = sorted(levels)
    n = np.array([key[0] for key in keys], dtype=float)
    context = np.array([key[1] for key in keys])
    y = np.array([float(np.median(levels[key])) for key in keys])
    if len({c.prompt_tokens for c in decode}) < 2:
        w, h = fit_line(n.tolist(), y.tolist())
        k = 0.0
    else:
        design = np.column_stack([np.ones_like(n), n, context])
        (w, h, k), *_ = np.linalg.lstsq(design, y, rcond=None)
    fitted = w + h * n + k * context
    spread = float(np.sum((y - np.mean(y)) ** 2))
    r2 = 1.0 - float(np.sum((y - fitted) ** 2)) / spread if spread else 1.0
    return float(w), float(h), float(k), r2


def fit_engine(completions: Sequence[Completion], slots: int, batch: int) -> EngineFit:
    """The constants from the decode and prefill sweeps' completions (tags as the job
    builders above set them) of a server with ``slots`` and ``batch`` (its batch size).

    Raises:
        ValueError: A sweep is missing or gives a negative ``W``, ``H`` or slope.
    """
    decode = [c for c in completions  # the lone context levels only (module docstring)
              if c.tag.startswith(("decode/", "context/1/")) and c.predicted_n > 0]  # fmt: skip
    prefill = [c for c in completions if c.tag.startswith("prefill/")]
    w, h, k, r2 = _decode_fit(decode)
    a, b = fit_line(*_medians([(float(c.prompt_tokens), c.prompt_ms) for c in prefill]))
    if w <= 0 or h < 0 or k < 0 or b <= 0:
        raise ValueError(f"the sweeps give W={w:.3f}, H={h:.3f}, K={k:.5f}, "
                         f"prefill {b:.4f} ms/token")  # fmt: skip
    lone = [c for c in completions if _lone(c)]
    mock = PhysicsParams(slots=slots, base_iter_ms=w, per_slot_ms=h, prefill_chunk=batch,
                         prefill_ms_per_token=b, context_ms_per_token=k)  # fmt: skip
    service = []
    for c in lone:  # the mock's fluid lockstep, alone: iteration w + h + k * (L + G)
        iters = math.ceil(c.prompt_tokens / batch) + c.output_tokens
        ms = (iters * mock.iteration_ms(1) + mock.context_ms(c.prompt_tokens, iters)
              + b * c.prompt_tokens)  # fmt: skip
        service.append(ms / 1000.0)
    overhead = float(np.median([c.latency - s for c, s in zip(lone, service, strict=True)]))
    return EngineFit(
        slots=slots,
        base_iter_ms=w,
        per_slot_ms=h,
        context_ms_per_token=k,
        decode_r_squared=r2,
        prefill_ms_per_token=b,
        prefill_intercept_ms=a,
        prefill_chunk=batch,
        overhead_ms=max(0.0, overhead * 1000.0),
    )


def profile_from_fit(fit: EngineFit) -> dict[str, float | int]:
    """The mock's ``PhysicsParams`` fields for the fit, rounded as the profile table holds
    them (W, H to 0.01 ms, P to 0.001 ms, K to 0.00001 ms, the overhead to 0.1 ms)."""
    return {
        "slots": fit.slots,
        "base_iter_ms": round(fit.base_iter_ms, 2),
        "per_slot_ms": round(fit.per_slot_ms, 2),
        "prefill_chunk": fit.prefill_chunk,
        "prefill_ms_per_token": round(fit.prefill_ms_per_token, 3),
        "context_ms_per_token": round(fit.context_ms_per_token, 5),
        "overhead_ms": round(fit.overhead_ms, 1),
    }


def plan_fit_crosscheck(
    completions: Sequence[Completion], fit: EngineFit
) -> dict[str, float | str]:
    """``semisched plan fit`` on the same requests' client times (module docstring); where
    it refuses the log, its reason (``{"refused": ...}``)."""
    from semisched.plan.fit import Observations, fit_observations
    from semisched.plan.profile import named_profile

    runs = sorted({c.tag for c in completions})  # one tag, one run: its times share an origin
    group = np.array([runs.index(c.tag) for c in completions], dtype=np.int64)
    obs = Observations(
        group=group,
        groups=tuple(runs),
        sent=np.array([c.sent for c in completions]),
        end=np.array([c.end for c in completions]),
        prompt=np.array([float(c.prompt_tokens) for c in completions]),
        output=np.array([float(c.output_tokens) for c in completions]),
    )
    base = named_profile("default")
    try:
        result = fit_observations(obs, base, slots=fit.slots, prefill_chunk=fit.prefill_chunk)
    except ValueError as exc:
        return {"refused": str(exc)}
    keys = ("base_iter_ms", "per_slot_ms", "overhead_ms", "r_squared", "observations")
    return {k: float(result.as_dict()[k]) for k in keys}


def write_calibration(out: Path, completions: Sequence[Completion]) -> None:
    """The raw sweeps as ``calibration.csv``."""
    with open(out / "calibration.csv", "w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(["tag", "sent_s", "end_s", "prompt_tokens", "output_tokens",
                         "prompt_ms", "predicted_ms", "predicted_n"])  # fmt: skip
        for c in completions:
            writer.writerow([c.tag, f"{c.sent:.4f}", f"{c.end:.4f}", c.prompt_tokens,
                             c.output_tokens, f"{c.prompt_ms:.3f}", f"{c.predicted_ms:.3f}",
                             c.predicted_n])  # fmt: skip


def read_calibration(path: Path) -> list[Completion]:
    """``calibration.csv`` back as completions."""
    with open(path, newline="", encoding="utf-8") as handle:
        return [
            Completion(tag=r["tag"], sent=float(r["sent_s"]), end=float(r["end_s"]),
                       prompt_tokens=int(r["prompt_tokens"]),
                       output_tokens=int(r["output_tokens"]), prompt_ms=float(r["prompt_ms"]),
                       predicted_ms=float(r["predicted_ms"]), predicted_n=int(r["predicted_n"]))
            for r in csv.DictReader(handle)
        ]  # fmt: skip


def write_fit(
    out: Path,
    fit: EngineFit,
    crosscheck: dict[str, float | str],
    *,
    provenance: Mapping[str, object] | None = None,
) -> dict[str, object]:
    """``fit.json``: the measured constants, the profile, the plan-fit cross-check and, as
    ``provenance`` gives them, the engine commit and the machine it was measured on
    (`bench.real_engine.profiles.provenance`: a run reuses only a fit of its own)."""
    data: dict[str, object] = {
        "fit": asdict(fit),
        "profile": profile_from_fit(fit),
        "plan_fit_crosscheck": crosscheck,
        **(provenance or {}),
    }
    (out / "fit.json").write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
    return data
