"""``python -m bench real-engine steps``: the engine's step time, token by token, beside the mock's.

The fit (`.calibrate`) reads whole requests: a request's time minus its prompt's,
over its tokens, in batches of one shape. This probe streams each answer instead and
times every token, so that a step is read while a known set of sequences decodes
together, in shapes the fit never ran:

``same_4x32``, ``same_4x512``
    Four sequences with equal prompts (32 or 512 tokens), decoding together.
``mixed_1x1536_3x32``
    One long context beside three short ones. The mock charges context as the batch's
    sum (``K`` per token held); an engine that pads every sequence to the longest would
    cost ``n`` times the longest instead. The two differ by 2x here.
``lone_1536``
    One sequence alone with a long context.
``prefill_beside_3``
    Three sequences decoding when a 512-token prompt arrives: the decoders' longest gap
    is the step that prefilled it (the mock charges ``P`` per prompt token in that step).
``same_4x32_after_1536``
    ``same_4x32`` again, right after one 1,536-token request ran alone and finished. A
    slot keeps a finished sequence's cache until a new request takes that slot, and the
    server gives new requests the slots used longest ago, so the four short sequences
    decode beside an idle slot that still holds about 1,900 tokens. The mock has no
    such term: its step is ``same_4x32``'s, and the ratio is what the idle cache costs.

Before every case the probe sends one short request per slot at once (`FLUSH`,
not measured), so that every case starts on slots that hold almost nothing: otherwise
a case would pay for what the cases before it left in the idle slots (the reason for
``same_4x32_after_1536``). A case's `PRELUDES` run after that flush, also not
measured.

Each decode case's step is the median gap between consecutive tokens of each stream
while every stream of the case has its first token and none has its last, then the
median over streams. Now and then the server sends a stream's tokens in a few chunks
(seen on a lone stream): that run has no step to read, is left out of the medians, and
``steps.csv`` says so. The mock's step for the same batch is
``W + H*n + K*(sum of the sequences' contexts)`` at that window's middle
(`mock_step_ms`). Writes ``steps.csv`` and ``steps.md``.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mockprovider.physics import PhysicsParams

__all__ = [
    "CASES",
    "FLUSH",
    "PRELUDES",
    "Stream",
    "decode_step_ms",
    "mock_step_ms",
    "prefill_stall_ms",
    "run_order",
    "steps_main",
]

#: Each case: its streams as (prompt tokens, output tokens, seconds after the case starts).
CASES: dict[str, tuple[tuple[int, int, float], ...]] = {
    "same_4x32": ((32, 384, 0.0),) * 4,
    "same_4x512": ((512, 384, 0.0),) * 4,
    "mixed_1x1536_3x32": ((1536, 384, 0.0),) + ((32, 384, 0.0),) * 3,
    "lone_1536": ((1536, 384, 0.0),),
    "prefill_beside_3": ((32, 512, 0.0),) * 3 + ((512, 64, 1.5),),
    "same_4x32_after_1536": ((32, 384, 0.0),) * 4,
}
#: What runs, unmeasured, between the flush and a case (module docstring).
PRELUDES: dict[str, tuple[tuple[int, int, float], ...]] = {
    "same_4x32_after_1536": ((1536, 384, 0.0),),
}
#: One flush request: a short prompt and a few tokens (one of these per slot at once).
FLUSH: tuple[int, int, float] = (32, 4, 0.0)
#: The case whose last stream arrives while the others decode.
PREFILL_CASE = "prefill_beside_3"
#: Gaps this close to a window's edges are left out (the batch changes there).
_EDGE_S = 0.05


@dataclass(frozen=True, slots=True)
class Stream:
    """One streamed answer: its prompt and output lengths and each token's arrival
    (seconds from the case's start)."""

    prompt: int
    output: int
    delay: float
    times: tuple[float, ...]


def decode_step_ms(streams: Sequence[Stream]) -> tuple[float, float]:
    """The median step (ms) while every stream decodes, and that window's seconds.

    Raises:
        ValueError: A stream that came in far fewer chunks than tokens (the server sent
            several tokens in one: no step to read), or no gap inside the window (streams
            that never overlap).
    """
    for s in streams:
        if len(s.times) < 0.9 * s.output:
            raise ValueError(f"a stream of {s.output} tokens came in {len(s.times)} chunks: "
                             "no step to read")  # fmt: skip
    start = max(s.times[0] for s in streams)
    end = min(s.times[-1] for s in streams)
    medians = []
    for s in streams:
        gaps = [(b - a) * 1000.0 for a, b in zip(s.times, s.times[1:], strict=False)
                if start + _EDGE_S < b < end - _EDGE_S]  # fmt: skip
        if gaps:
            medians.append(statistics.median(gaps))
    if not medians:
        raise ValueError("the streams never decode together: no step to read")
    return statistics.median(medians), end - start


def mock_step_ms(physics: PhysicsParams, streams: Sequence[Stream], step_ms: float) -> float:
    """The mock's step for the batch of ``streams`` at the middle of their common window:
    ``W + H*n + K*sum(context)``, each context its prompt plus the tokens it has by then
    (counted at the measured ``step_ms``)."""
    start = max(s.times[0] for s in streams)
    end = min(s.times[-1] for s in streams)
    middle = (start + end) / 2.0
    held = sum(s.prompt + 1 + (middle - s.times[0]) * 1000.0 / step_ms for s in streams)
    n = len(streams)
    return physics.iteration_ms(n) + physics.context_ms_per_token * held


def prefill_stall_ms(decoders: Sequence[Stream], late: Stream) -> float:
    """The longest gap of any decoder between ``late``'s arrival and its first token."""
    longest = 0.0
    for s in decoders:
        for a, b in zip(s.times, s.times[1:], strict=False):
            if b > late.delay and a < late.times[0] + _EDGE_S:
                longest = max(longest, (b - a) * 1000.0)
    return longest


def rows_of(name: str, repeat: int, streams: Sequence[Stream], physics: PhysicsParams
            ) -> dict[str, object]:  # fmt: skip
    """One ``steps.csv`` row: the engine's step (or stall) and the mock's, and their ratio."""
    if name == PREFILL_CASE:
        late = max(streams, key=lambda s: s.delay)
        decoders = [s for s in streams if s is not late]
        engine = prefill_stall_ms(decoders, late)
        step, _ = decode_step_ms(decoders)
        mock = (physics.prefill_ms_per_token * late.prompt
                + mock_step_ms(physics, [*decoders, late], step))  # fmt: skip
        what = "longest decoder gap while the prompt prefills"
    else:
        engine, _ = decode_step_ms(streams)
        mock = mock_step_ms(physics, streams, engine)
        what = "decode step, all streams together"
    return {"case": name, "repeat": repeat, "what": what, "engine_ms": round(engine, 2),
            "mock_ms": round(mock, 2), "engine_over_mock": round(engine / mock, 3)}  # fmt: skip


def markdown(rows: Sequence[dict[str, Any]], physics: PhysicsParams) -> str:
    """``steps.md``: per case, the median over repeats of the engine's and the mock's ms."""
    lines = [
        "Per case, medians over the repeats (generated by `python -m bench real-engine steps`).",
        f"The mock: W {physics.base_iter_ms:g} ms, H {physics.per_slot_ms:g} ms, "
        f"K {physics.context_ms_per_token:g} ms per context token, "
        f"P {physics.prefill_ms_per_token:g} ms per prompt token.",
        "",
        "| case | what | engine ms | mock ms | engine / mock | repeats read |",
        "|---|---|---:|---:|---:|---:|",
    ]
    for name in CASES:
        mine = [r for r in rows if r["case"] == name and not math.isnan(float(r["engine_ms"]))]
        if not mine:
            continue
        engine = statistics.median(float(r["engine_ms"]) for r in mine)
        mock = statistics.median(float(r["mock_ms"]) for r in mine)
        runs = sum(1 for r in rows if r["case"] == name)
        lines.append(f"| {name} | {mine[0]['what']} | {engine:.2f} | {mock:.2f} | "
                     f"{engine / mock:.3f} | {len(mine)} of {runs} |")  # fmt: skip
    return "\n".join(lines) + "\n"


async def _stream(client: Any, url: str, prompt: tuple[int, ...], output: int, delay: float,
                  origin: float) -> Stream:  # fmt: skip
    import anyio

    await anyio.sleep(delay)
    body = {"model": "engine", "prompt": list(prompt), "max_tokens": output, "stream": True,
            "ignore_eos": True, "temperature": 0.0, "cache_prompt": False}  # fmt: skip
    times: list[float] = []
    async with client.stream("POST", f"{url}/completions", json=body) as answer:
        answer.raise_for_status()
        async for line in answer.aiter_lines():
            if line.startswith("data: ") and line != "data: [DONE]":
                times.append(time.perf_counter() - origin)
    return Stream(len(prompt), output, delay, tuple(times))


async def run_case(url: str, prompts: Sequence[tuple[int, ...]],
                   specs: Sequence[tuple[int, int, float]]) -> list[Stream]:  # fmt: skip
    """Stream every request of one case at once (each after its delay)."""
    import anyio
    import httpx2

    done: list[Stream] = []
    async with httpx2.AsyncClient(timeout=600.0) as client:
        origin = time.perf_counter()

        async def one(prompt: tuple[int, ...], output: int, delay: float) -> None:
            done.append(await _stream(client, url, prompt, output, delay, origin))

        async with anyio.create_task_group() as group:
            for prompt, (_, output, delay) in zip(prompts, specs, strict=True):
                group.start_soon(one, prompt, output, delay)
    return sorted(done, key=lambda s: (s.delay, -s.prompt))


def run_order(parallel: int) -> list[tuple[str | None, tuple[tuple[int, int, float], ...]]]:
    """One repeat's requests, in order: ``(case, streams)`` for a measured case, and
    ``(None, streams)`` for what runs unmeasured before it (the flush over ``parallel``
    slots, then the case's prelude, if any)."""
    order: list[tuple[str | None, tuple[tuple[int, int, float], ...]]] = []
    for name, specs in CASES.items():
        order.append((None, (FLUSH,) * parallel))
        if name in PRELUDES:
            order.append((None, PRELUDES[name]))
        order.append((name, specs))
    return order


def steps_main(out: Path, *, fit: Path, repeats: int, seed: int, parallel: int) -> Path:
    """Run every case ``repeats`` times on one fresh server; write ``steps.csv`` and
    ``steps.md`` beside the mock of ``fit``."""
    import anyio
    import numpy as np
    from tokenizers import Tokenizer

    from bench.real_engine.client import prompt_ids
    from bench.real_engine.compare import fitted_physics
    from bench.real_engine.launcher import LlamaServer, ServerOptions
    from bench.real_engine.setup import EnginePaths
    from bench.report import write_csv

    physics = fitted_physics(fit)
    paths = EnginePaths.default()
    vocab = Tokenizer.from_file(str(paths.tokenizer)).get_vocab_size()
    rng = np.random.default_rng(seed)
    rows: list[dict[str, object]] = []
    options = ServerOptions(binary=paths.server, model=paths.gguf, parallel=parallel)
    with LlamaServer(options) as server:
        for repeat in range(repeats):
            for name, specs in run_order(parallel):
                prompts = [prompt_ids(rng, p, vocab) for p, _, _ in specs]
                streams = anyio.run(run_case, server.base_url, prompts, specs)
                if name is None:  # the flush or a prelude: not measured
                    continue
                try:
                    rows.append(rows_of(name, repeat, streams, physics))
                except ValueError as exc:  # left out of the medians; the csv says why
                    rows.append({"case": name, "repeat": repeat, "what": f"unread: {exc}",
                                 "engine_ms": math.nan, "mock_ms": math.nan,
                                 "engine_over_mock": math.nan})  # fmt: skip
                print(f"{name} repeat {repeat}: engine {rows[-1]['engine_ms']} ms, "
                      f"mock {rows[-1]['mock_ms']} ms", flush=True)  # fmt: skip
    write_csv(out / "steps.csv", rows)
    (out / "steps.md").write_text(markdown(rows, physics))
    return out / "steps.md"
