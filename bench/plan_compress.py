"""Compress-and-Route on ShareGPT: how often borderline prompts fit after extractive compression.

"FleetOpt: Analytical Fleet Provisioning for LLM Inference", section 5.1: a request whose
prompt plus output lies in the borderline band
``(B, γB]`` of a short pool's context ``B`` is compressed to ``T_c = B - L_out`` prompt tokens and
served by the short pool; the planner needs ``β`` (the band's share of traffic) and ``p_c`` (the
share of the band that compression gets under ``T_c``). This measures both on ShareGPT V3 chat
requests (`predictors.conversations`: the whole conversation so far, ``o200k_base`` counts)
with `ExtractiveCompressor`, plus what the paper's Table 4
reports:
the compressor's latency per request, and ``β`` times its mean as the overhead per request.

Timing is wall time (``time.perf_counter``) around one ``compress`` call, tokenizer included, on
one BLAS thread (``threadpoolctl``; the paper measured one core; on a busy
2-core machine OpenBLAS's threads made the similarity product several times slower).

Run: ``python -m bench.plan_compress --out results/plan-compress``.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import platform
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import threadpoolctl  # type: ignore[import-untyped]

from bench.report import format_table, write_csv
from predictors import tokens
from predictors.conversations import ConversationSet, conversation_requests
from semisched.compress.compressor import ExtractiveCompressor

__all__ = ["CompressRow", "compress_study", "main", "o200k_counter", "write_compress_tables"]

#: Requests compressed per (B, γ) cell at most: a seeded subsample beyond it.
MAX_PER_CELL = 1500


@dataclass(frozen=True, slots=True, kw_only=True)
class CompressRow:
    """One (B, γ) cell of the study.

    Attributes:
        boundary: ``B``, the short pool's context (prompt + output tokens).
        gamma: ``γ``; the band is ``B < prompt + output <= γB``.
        requests: All requests of the data set.
        band: Requests in the band.
        band_share: ``β = band / requests``.
        compressed: Band requests compressed (all of them, or a seeded subsample).
        fit_share: ``p_c``: share of the compressed whose prompt fits ``T_c = B - output``.
        code_share: Share of the compressed with a code block in user or assistant text.
        gate_fit_share: Share that fits and has no code: ``p_c`` under the paper's gate,
            which excludes requests with code instead of keeping their code verbatim.
        reduction_mean: Mean token reduction of those that fit, as a fraction of the prompt.
        reduction_p50: Its median.
        reduction_p95: Its 95th percentile.
        ms_p50: Compression time per request, median (ms).
        ms_p95: 95th percentile (ms).
        ms_p99: 99th percentile (ms).
        overhead_ms: ``β`` times the mean compression time: the added latency per request
            over all traffic (FleetOpt Table 4's "Overhead/req").
        floor_over_share: Share of the compressed whose floor (all droppable text dropped)
            is above ``T_c``: unreachable by any extractive cut under these rules.
        no_room_share: Share of the compressed whose output alone fills ``B`` (``T_c < 1``).
    """

    boundary: int
    gamma: float
    requests: int
    band: int
    band_share: float
    compressed: int
    fit_share: float
    code_share: float
    gate_fit_share: float
    reduction_mean: float
    reduction_p50: float
    reduction_p95: float
    ms_p50: float
    ms_p95: float
    ms_p99: float
    overhead_ms: float
    floor_over_share: float
    no_room_share: float


def o200k_counter() -> Callable[[str], int]:
    """Tokens of a text in ``o200k_base`` (offline, `predictors.tokens.encoding`)."""
    encode = tokens.encoding("o200k_base").encode_ordinary
    return lambda text: len(encode(text))


@contextlib.contextmanager
def _one_blas_thread() -> Iterator[str]:
    """Limit BLAS to one thread (the paper timed one core); yields what was done."""
    with threadpoolctl.threadpool_limits(1, "blas"):
        yield "BLAS threads: 1 (threadpoolctl)"


def _share(flags: Sequence[bool]) -> float:
    return float(np.mean(flags)) if len(flags) else float("nan")


def _pct(values: Sequence[float], q: float) -> float:
    return float(np.percentile(values, q)) if len(values) else float("nan")


def compress_study(
    boundaries: Sequence[int] = (1024, 2048, 4096),
    gammas: Sequence[float] = (1.5, 2.0),
    limit: int | None = None,
    count_tokens: Callable[[str], int] | None = None,
    *,
    max_per_cell: int | None = MAX_PER_CELL,
    seed: int = 0,
    requests: ConversationSet | None = None,
) -> list[CompressRow]:
    """Compress every borderline request (or a seeded subsample) for each ``B`` and ``γ``.

    Args:
        boundaries: Short-pool contexts ``B`` (tokens).
        gammas: Band ratios ``γ`` (> 1).
        limit: ShareGPT records read (None = all); ignored when ``requests`` is given.
        count_tokens: Token counter for the compressor; default ``o200k_base``, the counter
            of the requests' own lengths, so budgets and lengths agree.
        max_per_cell: Compress at most this many requests per cell, a uniform sample drawn
            with ``numpy.random.default_rng((seed, B, round(100 γ)))``; None = all.
        seed: Seed of the subsamples.
        requests: The requests (default `conversation_requests` with ``limit``).
    """
    if requests is None:
        requests = conversation_requests(limit)
    compressor = ExtractiveCompressor(count_tokens or o200k_counter())
    total = requests.prompt_tokens + requests.output_tokens
    rows: list[CompressRow] = []
    for boundary in boundaries:
        for gamma in gammas:
            band = np.flatnonzero((total > boundary) & (total <= gamma * boundary))
            picked = band
            if max_per_cell is not None and len(band) > max_per_cell:
                rng = np.random.default_rng((seed, boundary, round(100 * gamma)))
                picked = np.sort(rng.choice(band, max_per_cell, replace=False))
            fits, code, floor_over, no_room = [], [], [], []
            reductions, ms = [], []
            for i in picked.tolist():
                messages = requests.messages(i)
                budget = boundary - int(requests.output_tokens[i])
                start = time.perf_counter()
                result = compressor.compress(messages, max(1, budget))
                ms.append((time.perf_counter() - start) * 1e3)
                fit = result.fits and budget >= 1
                fits.append(fit)
                code.append(result.code_blocks > 0)
                floor_over.append(result.floor_tokens > budget)
                no_room.append(budget < 1)
                if fit:
                    reductions.append(1 - result.tokens / result.original_tokens)
            share = len(band) / max(1, len(requests))
            rows.append(
                CompressRow(
                    boundary=boundary,
                    gamma=gamma,
                    requests=len(requests),
                    band=len(band),
                    band_share=share,
                    compressed=len(picked),
                    fit_share=_share(fits),
                    code_share=_share(code),
                    gate_fit_share=_share([f and not c for f, c in zip(fits, code, strict=True)]),
                    reduction_mean=float(np.mean(reductions)) if reductions else float("nan"),
                    reduction_p50=_pct(reductions, 50),
                    reduction_p95=_pct(reductions, 95),
                    ms_p50=_pct(ms, 50),
                    ms_p95=_pct(ms, 95),
                    ms_p99=_pct(ms, 99),
                    overhead_ms=share * float(np.mean(ms)) if ms else float("nan"),
                    floor_over_share=_share(floor_over),
                    no_room_share=_share(no_room),
                )
            )
    return rows


#: (column title, field, format) of compress.md.
_COLUMNS: tuple[tuple[str, str, str], ...] = (
    ("B", "boundary", "d"),
    ("γ", "gamma", "g"),
    ("band", "band", "d"),
    ("β", "band_share", ".3f"),
    ("compressed", "compressed", "d"),
    ("p_c (fits)", "fit_share", ".3f"),
    ("has code", "code_share", ".3f"),
    ("p_c, code excluded", "gate_fit_share", ".3f"),
    ("floor > T_c", "floor_over_share", ".3f"),
    ("output ≥ B", "no_room_share", ".3f"),
    ("cut mean", "reduction_mean", ".1%"),
    ("cut p50", "reduction_p50", ".1%"),
    ("cut p95", "reduction_p95", ".1%"),
    ("ms p50", "ms_p50", ".1f"),
    ("ms p95", "ms_p95", ".1f"),
    ("ms p99", "ms_p99", ".1f"),
    ("overhead ms/req", "overhead_ms", ".2f"),
)


def write_compress_tables(
    rows: Sequence[CompressRow], out_dir: Path, *, note: str = ""
) -> tuple[Path, Path]:
    """Write ``compress.md`` (a caption and a markdown table) and ``compress.csv``."""
    out_dir.mkdir(parents=True, exist_ok=True)
    display = [
        {title: format(getattr(row, field), spec) for title, field, spec in _COLUMNS}
        for row in rows
    ]
    table = format_table(display, [title for title, _, _ in _COLUMNS], (), markdown=True)
    requests = rows[0].requests if rows else 0
    subsampled = any(row.compressed < row.band for row in rows)
    caption = [
        "# Compress-and-Route on ShareGPT: borderline prompts after extractive compression",
        "",
        f"ShareGPT V3, {requests:,} chat requests (the whole conversation so far, "
        "`predictors.conversations`), lengths in `o200k_base` tokens. Band: "
        "B < prompt + output <= γB; each band request is compressed to T_c = B − output "
        '("FleetOpt: Analytical Fleet Provisioning for LLM Inference", section 5.1) '
        "by `semisched.compress.compressor.ExtractiveCompressor` (o200k counter). "
        "p_c: share that fits T_c. Cut: token reduction of those that fit. ms: one `compress` "
        "call, tokenizer included; overhead = β × mean ms.",
    ]
    if subsampled:
        caption.append(
            "Cells whose band exceeds `compressed` were subsampled: a seeded uniform sample "
            "of that many band requests (β and band count all of them)."
        )
    if note:
        caption.append(note)
    md = out_dir / "compress.md"
    md.write_text("\n\n".join([caption[0], " ".join(caption[2:]), table]) + "\n")
    csv = out_dir / "compress.csv"
    write_csv(csv, [asdict(row) for row in rows])
    return md, csv


def main(argv: Sequence[str] | None = None) -> None:
    """``python -m bench.plan_compress``: run the study, print and write the table."""
    parser = argparse.ArgumentParser(prog="python -m bench.plan_compress", description=__doc__)
    parser.add_argument("--out", type=Path, default=Path("results/plan-compress"))
    parser.add_argument("--limit", type=int, default=None, help="ShareGPT records (default all)")
    parser.add_argument("--max-per-cell", type=int, default=MAX_PER_CELL, help="0 = all")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--boundaries", type=int, nargs="+", default=[1024, 2048, 4096])
    parser.add_argument("--gammas", type=float, nargs="+", default=[1.5, 2.0])
    args = parser.parse_args(argv)
    started = time.perf_counter()
    with _one_blas_thread() as blas:
        rows = compress_study(
            args.boundaries,
            args.gammas,
            args.limit,
            max_per_cell=args.max_per_cell or None,
            seed=args.seed,
        )
    elapsed = time.perf_counter() - started
    machine = f"{platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}"
    note = f"{blas}; {machine}; seed {args.seed}; whole run {elapsed:.0f} s."
    md, _ = write_compress_tables(rows, args.out, note=note)
    print(md.read_text())


if __name__ == "__main__":
    main()
