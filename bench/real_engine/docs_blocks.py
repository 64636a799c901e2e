"""The real engine's blocks of the generated docs (`bench.docs`), from
``docs/results/real-engine/``: the fitted profile and each mock-against-engine comparison
(``real-engine``), the headline's and routing's reports as their commands wrote them
(``real-engine-headline``, ``real-engine-routing``), the README's summaries of their
rows (``real-engine-summary``, ``real-engine-routing-summary``) and learned against
told over several routing runs, seed by seed (``real-engine-pooled``, and its pooled
rows for the README: ``real-engine-pooled-summary``)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from bench.docs_tables import DOCS, Row, read_rows, table

__all__ = ["REAL_ENGINE_BLOCKS"]


def _real_engine(root: Path) -> str:
    """``docs/results/real-engine/``: the mock's ``llama-cpp`` profile as fitted (fit.json),
    then the same workload on the fitted mock and on llama-server (compare.csv)."""
    import json

    folder = root / DOCS / "real-engine"
    fit = json.loads((folder / "fit.json").read_text(encoding="utf-8"))
    f, check = fit["fit"], fit["plan_fit_crosscheck"]
    crosscheck = (
        f"refused: {check['refused']}" if "refused" in check
        else f"{check['base_iter_ms']:.2f} / {check['per_slot_ms']:.2f} / "
        f"{check['overhead_ms']:.1f}, {check['r_squared']:.3f}"
    )  # fmt: skip
    profile = table(
        ("slots", "W (ms)", "H (ms)", "K (ms per context token)", "P (ms per prompt token) / C",
         "overhead (ms)", "decode R²", "plan fit on client times: W / H / overhead, R²"),
        [(str(f["slots"]), f"{f['base_iter_ms']:.2f}", f"{f['per_slot_ms']:.2f}",
          f"{f.get('context_ms_per_token', 0.0):.5f}",
          f"{f['prefill_ms_per_token']:.3f} / {f['prefill_chunk']}", f"{f['overhead_ms']:.1f}",
          f"{f['decode_r_squared']:.3f}", crosscheck)],
    )  # fmt: skip
    tables = [profile]
    for run in (folder, *sorted(folder.glob("load-*"))):
        if (run / "compare.csv").exists():
            tables.append(_real_engine_compare(run))
    return "\n\n".join(tables)


def _real_engine_compare(run: Path) -> str:
    """One ``compare.csv``: each bucket's P50/P95 on the mock and the engine, and the
    engine's over the mock's; its title from ``compare_run.json``."""
    import json

    rows = read_rows(run / "compare.csv")
    meta = run / "compare_run.json"
    title = f"`{run.name}`"
    if meta.exists():
        m = json.loads(meta.read_text(encoding="utf-8"))
        achieved = (f", achieved load {m['engine_achieved_load']:.2f} on the engine, "
                    f"{m['mock_achieved_load']:.2f} on the mock" if "engine_achieved_load" in m
                    else "")  # fmt: skip
        title = (f"load {m['load']} ({m['requests']} requests, {m['rate_per_s']:.2f}/s"
                 f"{achieved}; load average {m['load_average_before'][0]} before, "
                 f"{m['load_average_after'][0]} after)")  # fmt: skip

    def pair(r: Row, q: str) -> str:
        mock, engine = r[f"mock_{q}_s"], r[f"engine_{q}_s"]
        return f"{float(mock):.2f} / {float(engine):.2f}" if mock else ""

    body = [(r["bucket"], r["requests"], pair(r, "p50"), r["ratio_p50"], pair(r, "p95"),
             r["ratio_p95"], r["ratio_p99"]) for r in rows]  # fmt: skip
    header = ("bucket", "requests", "P50 s: mock / engine", "engine / mock", "P95 s: mock / engine",
              "engine / mock", "P99 engine / mock")  # fmt: skip
    return f"{title}, `{run.as_posix().split('docs/results/')[-1]}/compare.csv`:\n\n" + table(
        header, body
    )


def _generated(name: str, command: str) -> Callable[[Path], str]:
    """A block that shows ``docs/results/real-engine/<name>`` as ``command`` wrote it, or
    says that it has not run yet."""

    def render(root: Path) -> str:
        path = root / DOCS / "real-engine" / name
        if not path.exists():
            return f"Not run yet: `{command}` writes `real-engine/{name}`."
        return f"`real-engine/{name}`:\n\n" + path.read_text(encoding="utf-8").strip()

    return render


def _summary(
    name: str, command: str, summarize: Callable[[list[dict[str, str]]], str]
) -> Callable[[Path], str]:
    """A README block: ``summarize`` of the rows of ``docs/results/real-engine/<name>``, or
    that ``command`` has not run yet."""

    def render(root: Path) -> str:
        path = root / DOCS / "real-engine" / name
        if not path.exists():
            return f"Not run yet: `{command}` writes `real-engine/{name}`."
        return summarize(read_rows(path))

    return render


def _pooled(root: Path) -> str:
    from bench.real_engine.pooled import pooled_markdown

    return pooled_markdown(root / DOCS / "real-engine")


def _pooled_summary(root: Path) -> str:
    from bench.real_engine.pooled import pooled_markdown

    return pooled_markdown(root / DOCS / "real-engine", pooled_only=True)


def _headline_summary(rows: list[dict[str, str]]) -> str:
    from bench.real_engine.headline_report import summary_markdown

    return summary_markdown(rows)


def _routing_summary(rows: list[dict[str, str]]) -> str:
    from bench.real_engine.routing_engine import routing_summary

    return routing_summary(rows)


#: The real-engine blocks, by name (merged into `bench.docs`' blocks).
REAL_ENGINE_BLOCKS: dict[str, Callable[[Path], str]] = {
    "real-engine": _real_engine,
    "real-engine-summary": _summary("headline.csv", "python -m bench real-engine headline",
                                    _headline_summary),
    "real-engine-routing-summary": _summary("routing.csv", "python -m bench real-engine routing",
                                            _routing_summary),
    "real-engine-headline": _generated("headline.md", "python -m bench real-engine headline"),
    "real-engine-routing": _generated("routing.md", "python -m bench real-engine routing"),
    "real-engine-pooled": _pooled,
    "real-engine-pooled-summary": _pooled_summary,
}  # fmt: skip
