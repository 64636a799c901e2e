"""An operator's dashboard of an overload, drawn from the SDK's own Prometheus metrics.

``python -m bench dashboard --out DIR`` runs the real SDK (`semisched.Scheduler`
with ``metrics=CollectorRegistry()``) against the in-process HTTP mock
(`mockprovider.app.create_app` through ``httpx2.ASGITransport``) in virtual time on
trio's autojumping ``MockClock``, as `bench.tenants_live` does: a workload that
overloads the provider (`bench.workloads`' ``balanced/high`` by default: 1.1 times its
decode capacity), shared by two tenants, under the full stack (``final_adrr_olc``) with a
client rate budget. Every ``scrape_s`` virtual seconds it scrapes both registries, the
SDK's (``generate_latest``) and the mock's (``GET /metrics``), parses them with
``prometheus_client.parser`` and computes what the Grafana panels of an operator would show:

=======================================  ==================================================
panel                                    PromQL it stands for
=======================================  ==================================================
Requests / s by outcome                  ``sum by (outcome) (rate(semisched_requests_total[1m]))``
Queue wait p50 / p95                     ``histogram_quantile(q, sum by (le)
                                         (rate(semisched_queue_wait_seconds_bucket[1m])))``
Decisions / s by rule                    ``sum by (rule) (rate(semisched_decisions_total[1m]))``
In flight, queue depth, deferred         ``semisched_inflight``, ``semisched_queue_depth``,
                                         ``semisched_deferred``
Overload severity                        ``semisched_severity`` (and the ladder's thresholds)
Budget headroom                          ``semisched_budget_headroom``
Tenant share, tenant debt                ``semisched_tenant_share``,
                                         ``semisched_tenant_debt_tokens``
Output tokens / s                        ``rate(semisched_output_tokens_sum[1m])`` against
                                         the mock's ``rate(mock_generated_tokens_total[1m])``
Request duration p95 by outcome          ``histogram_quantile(0.95, ...duration...)``
Provider batch and hidden queue          ``mock_active_requests``, ``mock_waiting_requests``
Provider answers / s by status           ``sum by (status) (rate(mock_requests_total[1m]))``
=======================================  ==================================================

``rate(x[1m])`` here is the increase over the last ``window_s`` divided by ``window_s``,
with no extrapolation: the registries are fresh, so a counter absent from a scrape is 0 and
the increase is exact (before the first full window it is the increase since 0, still over
``window_s``). ``histogram_quantile`` interpolates linearly inside a bucket and answers the
last finite bound for the ``+Inf`` bucket, as Prometheus does.

Written: ``DIR/dashboard.png`` (a grid of panels titled like a Grafana dashboard) and
``DIR/series.csv`` (one row per scrape: ``t_s``, then ``name[label]`` columns, including the
raw counters ``count[OUTCOME]`` the rates come from). No timing benchmark: virtual time, one
seed; the wall time only shows the cost (~10 s at the default size).
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Final

import anyio
import httpx2
import numpy as np
import openai
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from bench.live import replay_jobs
from bench.report import write_csv
from bench.workloads import generate, regime
from mockprovider.app import MockConfig, create_app
from mockprovider.physics import PhysicsParams
from mockprovider.virtual import inline_platform_lookup
from predictors.priors import information_source
from semisched import RuntimeOptions, Scheduler
from semisched.core.config import BudgetConfig, RoutingConfig, SchedulerConfig, preset
from semisched.core.tenants.config import TenantSpec
from semisched.runtime.calls import scheduler_config
from semisched.sim.simulator import SimJob

__all__ = ["DashboardRun", "Scrape", "dashboard", "histogram_quantile", "series"]

#: The SDK's outcome labels (``semisched_requests_total``), in the panels' order.
OUTCOMES: Final = ("completed", "deferred", "rejected", "expired", "retried", "failed",
                   "cancelled")  # fmt: skip
_BASE = "http://mock"
Labels = tuple[tuple[str, str], ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class DashboardRun:
    """One dashboard run.

    Attributes:
        regime: A `bench.workloads` regime (``mix/congestion``).
        requests: Requests in the workload.
        seed: Workload and scheduler seed.
        tenants: Tenant names (equal weights); request ``i`` goes to ``tenants[0]`` with
            probability ``first_share``, else to one of the others uniformly.
        first_share: The first tenant's part of the traffic.
        rpm: The client budget's requests per minute (``config.budget``), or ``None``.
        tpm: The client budget's tokens per minute, or ``None``.
        scrape_s: Virtual seconds between scrapes.
        window_s: The rate window (a multiple of ``scrape_s``): ``[1m]``.
    """

    regime: str = "balanced/high"
    requests: int = 600
    seed: int = 0
    tenants: tuple[str, ...] = ("app", "reports")
    first_share: float = 0.7
    rpm: int | None = 120
    tpm: int | None = 150_000
    scrape_s: float = 5.0
    window_s: float = 60.0

    def __post_init__(self) -> None:
        steps = self.window_s / self.scrape_s
        if not self.scrape_s > 0 or steps < 1 or abs(steps - round(steps)) > 1e-9:
            raise ValueError(f"window_s={self.window_s} must be a multiple of scrape_s="
                             f"{self.scrape_s} > 0")  # fmt: skip
        if self.requests < 1 or not self.tenants or not 0 < self.first_share <= 1:
            raise ValueError("requests >= 1, at least one tenant, first_share in (0, 1]")

    def config(self) -> SchedulerConfig:
        """The full stack with the run's client budget, a fixed client cap of 32 (no learned
        endpoint limit: the dashboard shows an overload under one cap)."""
        budget = None if self.rpm is None and self.tpm is None else BudgetConfig(
            rpm=self.rpm, tpm=self.tpm)  # fmt: skip
        return preset("final_adrr_olc", budget=budget, max_inflight=32,
                      routing=RoutingConfig(concurrency="fixed"))  # fmt: skip


@dataclass(frozen=True, slots=True)
class Scrape:
    """Both registries at one virtual instant: sample name -> ``(labels, value)`` pairs."""

    t: float
    sdk: Mapping[str, Sequence[tuple[Labels, float]]]
    mock: Mapping[str, Sequence[tuple[Labels, float]]]

    def total(self, source: str, name: str, **match: str) -> float:
        """``sum(name{match})`` (0 when absent, as a fresh counter is)."""
        return sum(v for labels, v in self._samples(source, name) if _has(labels, match))

    def by(self, source: str, name: str, label: str, **match: str) -> dict[str, float]:
        """``sum by (label) (name{match})``."""
        out: dict[str, float] = {}
        for labels, v in self._samples(source, name):
            if _has(labels, match):
                key = dict(labels).get(label, "")
                out[key] = out.get(key, 0.0) + v
        return out

    def _samples(self, source: str, name: str) -> Sequence[tuple[Labels, float]]:
        return (self.sdk if source == "sdk" else self.mock).get(name, ())


def _has(labels: Labels, match: Mapping[str, str]) -> bool:
    found = dict(labels)
    return all(found.get(k) == v for k, v in match.items())


def parse(text: str) -> dict[str, list[tuple[Labels, float]]]:
    """An exposition's samples by sample name (``prometheus_client.parser``)."""
    out: dict[str, list[tuple[Labels, float]]] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out.setdefault(s.name, []).append((tuple(sorted(s.labels.items())), float(s.value)))
    return out


def histogram_quantile(q: float, buckets: Iterable[tuple[float, float]]) -> float:
    """Prometheus' ``histogram_quantile`` over cumulative ``(le, count)`` pairs (any order,
    ending at ``+Inf``); NaN when they hold no observation."""
    ordered = sorted(buckets)
    if not ordered or ordered[-1][1] <= 0:
        return math.nan
    rank = q * ordered[-1][1]
    lower, below = 0.0, 0.0
    for le, count in ordered:
        if count >= rank:
            if math.isinf(le):
                return lower
            if le <= 0:
                return le
            return lower + (le - lower) * (rank - below) / (count - below)
        lower, below = le, count
    return lower  # pragma: no cover - the +Inf bucket holds every observation


# -- the run ------------------------------------------------------------------------------------


def _jobs(run: DashboardRun, physics: PhysicsParams) -> list[SimJob]:
    reg = regime(run.regime, requests=run.requests)
    jobs = generate(reg, run.seed, information_source("coarse", seed=run.seed), physics)
    rng = np.random.default_rng(run.seed + 1)
    first, rest = run.tenants[0], run.tenants[1:] or run.tenants
    out = []
    for job in jobs:
        tenant = first if rng.random() < run.first_share else rest[rng.integers(len(rest))]
        out.append(replace(job, request=replace(job.request, tenant=tenant)))
    return out


async def _replay(run: DashboardRun) -> tuple[list[Scrape], dict[str, int]]:
    """Replay the workload, scraping every ``scrape_s``; the scrapes (the last one after
    every request ended) and each outcome's count as the callers saw them."""
    physics = PhysicsParams()
    jobs = _jobs(run, physics)
    registry = CollectorRegistry()
    app = create_app(MockConfig(physics=physics, seed=run.seed), clock=anyio.current_time)
    scrapes: list[Scrape] = []
    async with httpx2.AsyncClient(transport=httpx2.ASGITransport(app=app), base_url=_BASE) as http:
        client = openai.AsyncOpenAI(base_url=f"{_BASE}/v1", api_key="dashboard", http_client=http)
        tenants = [TenantSpec(name=name) for name in run.tenants]
        scheduler = Scheduler(
            client,
            priors="heuristic",
            metrics=registry,
            tracing=False,
            config=scheduler_config(run.config(), tenants=tenants),
            options=RuntimeOptions(calibration=False, seed=run.seed, cancel_late=False),
        )
        async with scheduler:
            start, done = anyio.current_time(), anyio.Event()

            async def scraper() -> None:
                for k in range(10**9):
                    await anyio.sleep_until(start + k * run.scrape_s)
                    sdk = parse(generate_latest(registry).decode())
                    mock = parse((await http.get("/metrics")).text)
                    scrapes.append(Scrape(k * run.scrape_s, sdk, mock))
                    if done.is_set():
                        return

            async with anyio.create_task_group() as tg:
                tg.start_soon(scraper)
                records, _ = await replay_jobs(scheduler, jobs)
                done.set()
    seen: dict[str, int] = {}
    for rec in records.values():
        seen[rec.outcome] = seen.get(rec.outcome, 0) + 1
    return scrapes, seen


# -- the panels' quantities ------------------------------------------------------------------


#: The labelled gauges the dashboard reads: column prefix, metric, label.
_GAUGES: Final = (
    ("headroom", "semisched_budget_headroom", "endpoint"),
    ("tenant_share", "semisched_tenant_share", "tenant"),
    ("tenant_debt_tokens", "semisched_tenant_debt_tokens", "tenant"),
    ("queue_depth", "semisched_queue_depth", "class"),
)


@dataclass(frozen=True, slots=True)
class _Window:
    """PromQL over one window: ``now`` and the scrape ``window_s`` before (``None``: the
    window reaches back before the run, where every counter was 0)."""

    now: Scrape
    before: Scrape | None
    window_s: float

    def rate(self, source: str, name: str, **match: str) -> float:
        """``sum(rate(name{match}[window]))``, without extrapolation."""
        base = 0.0 if self.before is None else self.before.total(source, name, **match)
        return (self.now.total(source, name, **match) - base) / self.window_s

    def quantile(self, q: float, name: str, **match: str) -> float:
        """``histogram_quantile(q, sum by (le) (rate(name_bucket{match}[window])))``."""
        les = self.now.by("sdk", name, "le", **match)
        return histogram_quantile(q, [(float(le), self.rate("sdk", name, le=le, **match))
                                      for le in les])  # fmt: skip


def series(
    scrapes: Sequence[Scrape], window_s: float, classes: Sequence[str]
) -> list[dict[str, float]]:
    """One row per scrape: the panels' quantities (module docstring), ``name[label]``
    columns, the same columns in every row."""
    steps = round(window_s / (scrapes[1].t - scrapes[0].t)) if len(scrapes) > 1 else 1
    last = scrapes[-1]
    rules = sorted(last.by("sdk", "semisched_decisions_total", "rule"))
    statuses = [s for s, v in last.by("mock", "mock_requests_total", "status").items() if v]
    outcomes = sorted(last.by("sdk", "semisched_request_duration_seconds_count", "outcome"))
    seen = {key: sorted({k for s in scrapes for k in s.by("sdk", name, label)})
            for key, name, label in _GAUGES}  # fmt: skip
    wait = "semisched_queue_wait_seconds_bucket"
    rows = []
    for i, now in enumerate(scrapes):
        w = _Window(now, scrapes[i - steps] if i >= steps else None, window_s)
        row: dict[str, float] = {"t_s": now.t}
        row["count[submitted]"] = now.total("sdk", "semisched_requests_submitted_total")
        row["rate_per_s[submitted]"] = w.rate("sdk", "semisched_requests_submitted_total")
        for outcome in OUTCOMES:
            row[f"count[{outcome}]"] = now.total("sdk", "semisched_requests_total", outcome=outcome)
            row[f"rate_per_s[{outcome}]"] = w.rate("sdk", "semisched_requests_total",
                                                   outcome=outcome)  # fmt: skip
        row["queue_wait_p50_s"] = w.quantile(0.5, wait)
        row["queue_wait_p95_s"] = w.quantile(0.95, wait)
        for klass in classes:
            row[f"queue_wait_p95_s[{klass}]"] = w.quantile(0.95, wait, **{"class": klass})
        for outcome in outcomes:
            row[f"duration_p95_s[{outcome}]"] = w.quantile(
                0.95, "semisched_request_duration_seconds_bucket", outcome=outcome)  # fmt: skip
        for rule in rules:
            row[f"decisions_per_s[{rule}]"] = w.rate("sdk", "semisched_decisions_total", rule=rule)
        row["inflight"] = now.total("sdk", "semisched_inflight")
        row["deferred"] = now.total("sdk", "semisched_deferred")
        row["severity"] = now.total("sdk", "semisched_severity")
        for key, name, label in _GAUGES:
            values = now.by("sdk", name, label)
            for value in seen[key]:
                row[f"{key}[{value}]"] = values.get(value, math.nan)
        row["output_tokens_per_s"] = w.rate("sdk", "semisched_output_tokens_sum")
        row["provider_tokens_per_s"] = w.rate("mock", "mock_generated_tokens_total")
        row["provider_active"] = now.total("mock", "mock_active_requests")
        row["provider_waiting"] = now.total("mock", "mock_waiting_requests")
        row["provider_slots"] = now.total("mock", "mock_slots")
        for status in statuses:
            row[f"provider_rate_per_s[{status}]"] = w.rate("mock", "mock_requests_total",
                                                           status=status)  # fmt: skip
        rows.append(row)
    return rows


# -- the picture -------------------------------------------------------------------------------

_BG, _PANEL, _TEXT, _GRID = "#111217", "#181b1f", "#ccccdc", "#2c3036"
_PALETTE = ("#73bf69", "#f2cc0c", "#f2495c", "#5794f2", "#ff9830", "#b877d9", "#8ab8ff",
            "#fade2a", "#ff7383", "#96d98d")  # fmt: skip


def _columns(rows: Sequence[Mapping[str, float]], prefix: str) -> dict[str, list[float]]:
    """``prefix[label]`` columns that are not all zero (or NaN), by label."""
    out = {}
    for key in rows[0]:
        if key.startswith(prefix + "[") and key.endswith("]"):
            values = [row[key] for row in rows]
            if any(v and not math.isnan(v) for v in values):
                out[key[len(prefix) + 1 : -1]] = values
    return out


def draw(rows: Sequence[Mapping[str, float]], path: Path, *, title: str,
         thresholds: Sequence[float]) -> None:  # fmt: skip
    """Draw the dashboard's panels (module docstring) into ``path`` (PNG)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    t = [row["t_s"] / 60.0 for row in rows]
    col = {key: [row[key] for row in rows] for key in rows[0]}
    panels: list[tuple[str, str, dict[str, list[float]]]] = [
        ("Requests / s by outcome", "req/s",
         {"submitted": col["rate_per_s[submitted]"], **_columns(rows, "rate_per_s")}),
        ("Queue wait p50 / p95", "s",
         {"p50": col["queue_wait_p50_s"], "p95": col["queue_wait_p95_s"],
          **{f"p95 {k}": v for k, v in _columns(rows, "queue_wait_p95_s").items()}}),
        ("Decisions / s by rule", "decisions/s", _columns(rows, "decisions_per_s")),
        ("In flight, queued, deferred", "requests",
         {"in flight": col["inflight"], "deferred": col["deferred"],
          **{f"queued {k}": v for k, v in _columns(rows, "queue_depth").items()}}),
        ("Overload severity", "severity", {"severity": col["severity"]}),
        ("Budget headroom", "1 - used/limit", _columns(rows, "headroom")),
        ("Tenant share", "share of usage", _columns(rows, "tenant_share")),
        ("Tenant debt", "work tokens", _columns(rows, "tenant_debt_tokens")),
        ("Output tokens / s", "tokens/s",
         {"SDK (completed)": col["output_tokens_per_s"],
          "provider": col["provider_tokens_per_s"]}),
        ("Request duration p95 by outcome", "s", _columns(rows, "duration_p95_s")),
        ("Provider batch and hidden queue", "requests",
         {"batch": col["provider_active"], "waiting": col["provider_waiting"],
          "slots": col["provider_slots"]}),
        ("Provider answers / s by status", "answers/s", _columns(rows, "provider_rate_per_s")),
    ]  # fmt: skip
    fig, axes = plt.subplots(4, 3, figsize=(18, 16), facecolor=_BG)
    for ax, (name, unit, lines) in zip(axes.flat, panels, strict=False):
        ax.set_facecolor(_PANEL)
        ax.set_title(name, color=_TEXT, loc="left", fontsize=12)
        for k, (label, values) in enumerate(lines.items()):
            ax.plot(
                t,
                values,
                label=label,
                color=_PALETTE[k % len(_PALETTE)],
                linewidth=2.4 if k == 0 else 1.4,  # overlapping lines stay visible
                linestyle="-" if k % 2 == 0 else (0, (4, 1.5)),
            )
        if name == "Overload severity":
            for level, label in zip(thresholds, ("defer", "reject xlong", "reject long"),
                                    strict=True):  # fmt: skip
                ax.axhline(level, color="#f2495c", linestyle="--", linewidth=0.8)
                ax.text(t[0], level, f" {label} {level:g}", color=_TEXT, fontsize=8, va="bottom")
            ax.set_ylim(0, 1)
        ax.set_ylabel(unit, color=_TEXT)
        ax.set_xlabel("virtual minutes", color=_TEXT)
        ax.tick_params(colors=_TEXT)
        ax.grid(color=_GRID, linewidth=0.6)
        for spine in ax.spines.values():
            spine.set_color(_GRID)
        if lines:
            ax.legend(fontsize=8, facecolor=_PANEL, edgecolor=_GRID, labelcolor=_TEXT)
    for ax in axes.flat[len(panels) :]:
        ax.set_visible(False)
    fig.suptitle(title, color=_TEXT, fontsize=15, x=0.01, ha="left")
    fig.tight_layout(rect=(0, 0, 1, 0.97))
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=80, facecolor=_BG)
    plt.close(fig)


def dashboard(out_dir: Path, run: DashboardRun | None = None) -> dict[str, object]:
    """Run, scrape, compute and draw (module docstring); write ``dashboard.png`` and
    ``series.csv`` into ``out_dir``. Returns a summary: the final counts by outcome from
    the metrics and as the callers saw them, scrapes, the peaks, the wall time."""
    import trio
    import trio.testing

    run = DashboardRun() if run is None else run
    started = time.perf_counter()
    with inline_platform_lookup():
        scrapes, seen = trio.run(_replay, run, clock=trio.testing.MockClock(autojump_threshold=0))
    config = run.config()
    rows = series(scrapes, run.window_s, [c.name for c in config.classes])
    out_dir.mkdir(parents=True, exist_ok=True)
    write_csv(out_dir / "series.csv", rows)
    overload = config.overload
    draw(rows, out_dir / "dashboard.png",
         title=f"semisched — {run.regime}, {run.requests} requests, tenants "
               f"{', '.join(run.tenants)} (virtual time, scraped every {run.scrape_s:g} s)",
         thresholds=(overload.defer_threshold, overload.reject_xlong_threshold,
                     overload.reject_long_threshold))  # fmt: skip
    final = rows[-1]
    return {
        "scrapes": len(rows),
        "virtual_s": final["t_s"],
        "submitted": final["count[submitted]"],
        **{f"metrics_{o}": final[f"count[{o}]"] for o in OUTCOMES if final[f"count[{o}]"]},
        **{f"callers_{o}": float(n) for o, n in sorted(seen.items())},
        "peak_severity": max(row["severity"] for row in rows),
        "peak_queue_wait_p95_s": max(
            (row["queue_wait_p95_s"] for row in rows if not math.isnan(row["queue_wait_p95_s"])),
            default=math.nan,
        ),
        "wall_s": time.perf_counter() - started,
    }
