"""Live cross-check of the routing matrix: the simulator against the SDK and the HTTP fleet mock.

For one regime and seed of `bench.routing`, per per-endpoint cap and routing policy,
the same jobs run twice:

- *sim*: `bench.routing.run_routing`, the real core in the discrete-event simulator;
- *live*: the real SDK (`semisched.Scheduler` over one `semisched.Endpoint`
  per deployment, each an ``openai.AsyncOpenAI``) against the real HTTP fleet mock
  (`mockprovider.fleet.create_fleet_app` through ``httpx2.ASGITransport``), in virtual
  time on trio's autojumping ``MockClock``: minutes of traffic in about a wall second.

The live fleet is `bench.routing.fleet_for`'s: each endpoint's physics, limits, rate
window, faults, capacity loss and seed become its ``MockConfig``, and the
`EndpointSpec` that ``semisched.Endpoint`` builds (cap, pool, a budget
that learns advertised limits) must equal the simulated one, or the run refuses to start.
The clocks' origins differ: the simulator's is the workload's t=0, the mock's its first
request, i.e. the first arrival (an idle scheduler sends at once). The mock's windows
(outages, capacity loss) are moved earlier by the first arrival; the live row reports where
the mock's origin really fell (``mock_origin_lag_s``, 0 when aligned).

Each job is submitted at its arrival with its prior (``prior=``), class and deadline, a filler
prompt of ~4 bytes per true prompt token and its true lengths as the mock's hints, as
`bench.live` does; late answers are kept (``cancel_late=False``) and retries seeded with
the run's seed, as simulated. A recording transport under the openai clients notes every HTTP
attempt (endpoint, time, status): the first is the request's first send, the one answered 200
tells which endpoint served it.

Per run: `semisched.sim.metrics.summarize`, failovers, 429s and retries (the core's
counters), and per endpoint its sends, completions and their share, utilisation and share of
the short requests; live rows add the mock's own counts per endpoint (completed, 429, 503 in
the outage). The simulated shares come from a second simulation of the same pieces, which must
reproduce ``run_routing``'s metrics (a guard against the two building different runs).

What it is not: no timing benchmark (wall time only shows the cost), no matrix (one regime,
one seed), no real time, so no HTTP or event-loop latency. What differs is the runtime's own
nondeterminism: answers due at one virtual instant reach the SDK in the order trio runs their
tasks, which it shuffles on purpose, so a live run can drift from the simulator's (which
breaks ties by a fixed sequence) and from its own previous run.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import anyio
import httpx2
import openai

from bench.live import ID_HEADER, replay_jobs
from bench.report import write_csv
from bench.routing import (
    CAPS,
    NAMES,
    RoutingSpec,
    caps_label,
    fleet_for,
    routing_config,
    routing_jobs,
    run_routing,
)
from mockprovider.app import MockConfig
from mockprovider.fleet import FleetConfig, FleetEndpoint, create_fleet_app
from mockprovider.virtual import inline_platform_lookup
from semisched import Endpoint, RuntimeOptions, Scheduler
from semisched.core.config import SchedulerConfig
from semisched.core.stats import EngineStats
from semisched.sim.metrics import RequestRecord, summarize
from semisched.sim.simulator import SimEndpoint, SimJob, Simulator

__all__ = [
    "ID_HEADER",
    "Recorder",
    "live_row",
    "routing_live_check",
    "sim_row",
]

_BASE = "http://fleet"


def _pieces(spec: RoutingSpec) -> tuple[list[SimJob], SchedulerConfig]:
    """The jobs and the config `bench.routing.run_routing` builds for ``spec``."""
    return routing_jobs(spec), routing_config(spec.policy)


def _metrics(
    records: Sequence[RequestRecord],
    engine: EngineStats,
    fleet: Sequence[SimEndpoint],
    endpoints: tuple[Mapping[int, str], Mapping[int, str]],
) -> dict[str, float]:
    """One run's numbers, sim or live: `summarize`, the core's
    counters, and per endpoint its sends, completions, share of completions, utilisation and
    share of the short requests (as `bench.routing.run_routing` defines the last two).

    ``endpoints`` maps a record's index to the endpoint that served it and to the one its last
    attempt went to.
    """
    row = summarize(records)
    counters = engine.counters
    row.update(failovers=float(counters.failovers), throttled=float(counters.throttled),
               retries=float(counters.retries))  # fmt: skip
    served_by, routed_to = endpoints
    completed = [i for i, r in enumerate(records) if r.outcome == "completed"]
    shorts = [i for i, r in enumerate(records) if r.bucket == "short"]
    sent = {e.name: e.sent for e in engine.endpoints}
    makespan = row["makespan_ms"] / 1000.0
    for endpoint in fleet:
        name = endpoint.spec.name
        mine = [i for i in completed if served_by.get(i) == name]
        capacity = endpoint.physics.capacity_tokens_per_s() * makespan
        tokens = sum(records[i].output_tokens for i in mine)
        row[f"util_{name}"] = tokens / capacity if capacity > 0 else 0.0
        routed = sum(routed_to.get(i) == name for i in shorts)
        row[f"short_share_{name}"] = routed / max(1, len(shorts))
        row[f"sent_{name}"] = float(sent.get(name, 0))
        row[f"completed_{name}"] = float(len(mine))
        row[f"share_{name}"] = len(mine) / len(completed) if completed else math.nan
    return row


def _head(spec: RoutingSpec, mode: str) -> dict[str, object]:
    """A row's first columns: ``run_routing``'s keys, then the mode."""
    return {"regime": spec.regime, "caps": caps_label(spec.cap), "condition": spec.policy,
            "seed": spec.seed, "mode": mode}  # fmt: skip


def _same(a: object, b: object) -> bool:
    if isinstance(a, float) and isinstance(b, float):
        return (math.isnan(a) and math.isnan(b)) or math.isclose(a, b, rel_tol=1e-9)
    return a == b


def sim_row(spec: RoutingSpec) -> dict[str, object]:
    """The simulated cell: `bench.routing.run_routing`'s row plus completions per endpoint.

    Raises:
        RuntimeError: A simulation of this module's pieces does not reproduce
            ``run_routing``'s metrics (the two no longer build the same run).
    """
    row = _head(spec, "sim")
    row.update(run_routing(spec))
    jobs, config = _pieces(spec)
    fleet = fleet_for(jobs, spec.seed, spec.cap)
    result = Simulator(config, fleet=fleet).run(jobs)
    served = {i: r.endpoint for i, r in enumerate(result.rows) if r.outcome == "completed"}
    routed = {i: r.endpoint for i, r in enumerate(result.rows) if r.endpoint}
    mine = _metrics(result.rows, result.engine, fleet, (served, routed))
    differ = [k for k, v in row.items() if k in mine and not _same(v, mine[k])]
    if differ:
        raise RuntimeError(
            f"bench.routing_live's jobs or config differ from run_routing's for {spec}: "
            f"{', '.join(differ)} disagree"
        )
    row.update(mine)
    return row


# -- the live run ------------------------------------------------------------------------------


def _shifted(window: tuple[float, float], offset: float) -> tuple[float, float]:
    start, end = window
    return max(0.0, start - offset), end - offset


def _mock_fleet(fleet: Sequence[SimEndpoint], offset: float) -> FleetConfig:
    """The HTTP fleet mock playing ``fleet``, its clock origin ``offset`` virtual seconds
    after the simulator's (see the module docstring). Sliding rate windows need no shift.

    Raises:
        ValueError: A door the HTTP mock cannot play (other traffic, a window that is not
            60 s) or a window that ends before the mock's origin.
    """
    endpoints = []
    for endpoint in fleet:
        model, gate = endpoint.provider, endpoint.provider.gate
        name = endpoint.spec.name
        if model.other_traffic or gate.window_s != 60.0:
            raise ValueError(
                f"endpoint {name!r}: the HTTP mock has no other traffic and 60 s windows only"
            )
        if any(end <= offset for _, end in gate.outages):
            raise ValueError(f"endpoint {name!r}: an outage ends before the first arrival")
        loss = model.capacity_loss
        config = MockConfig(
            physics=endpoint.physics,
            rpm=gate.rpm,
            tpm=gate.tpm,
            rate_window=gate.rate_window,
            quota_tokens=gate.quota_tokens,
            error_rate=gate.error_rate,
            hang_rate=gate.hang_rate,
            drop_rate=gate.drop_rate,
            capacity_loss=None if loss is None else (max(0.0, loss[0] - offset), loss[1]),
            outages=tuple(_shifted(w, offset) for w in gate.outages),
            seed=gate.seed,
        )
        endpoints.append(FleetEndpoint(name=name, config=config))
    return FleetConfig(endpoints=tuple(endpoints))


@dataclass(frozen=True, slots=True)
class _Attempt:
    request: str
    endpoint: str
    time: float
    status: int


class Recorder(httpx2.AsyncBaseTransport):
    """Notes every attempt (request id, endpoint, send time, status), then passes it on."""

    def __init__(self, inner: httpx2.AsyncBaseTransport, clock: Callable[[], float]) -> None:
        self._inner, self._clock = inner, clock
        self.attempts: list[_Attempt] = []

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        sent = self._clock()
        response = await self._inner.handle_async_request(request)
        endpoint = request.url.path.split("/")[1]
        rid = request.headers.get(ID_HEADER, "")
        self.attempts.append(_Attempt(rid, endpoint, sent, response.status_code))
        return response


def _sdk_endpoints(fleet: Sequence[SimEndpoint], http: httpx2.AsyncClient) -> list[Endpoint]:
    """One ``semisched.Endpoint`` per simulated endpoint, over the fleet mock's ``/NAME/v1``.

    Raises:
        ValueError: The SDK would build another `EndpointSpec`
            than the one the simulator models.
    """
    endpoints = []
    for sim in fleet:
        spec = sim.spec
        client = openai.AsyncOpenAI(
            base_url=f"{_BASE}/{spec.name}/v1", api_key="routing-live", http_client=http
        )
        endpoint = Endpoint(spec.name, client, max_concurrency=spec.max_concurrency,
                            weight=spec.weight, pool=spec.pool,
                            context_tokens=spec.context_tokens)  # fmt: skip
        if endpoint.spec != spec:
            raise ValueError(
                f"endpoint {spec.name!r}: the SDK builds {endpoint.spec!r}, "
                f"the simulator models {spec!r}"
            )
        endpoints.append(endpoint)
    return endpoints


async def _replay(
    spec: RoutingSpec, jobs: Sequence[SimJob], config: SchedulerConfig, fleet: Sequence[SimEndpoint]
) -> dict[str, object]:
    ordered = sorted(jobs, key=lambda j: (j.request.arrival, j.request.id))
    offset = ordered[0].request.arrival  # the mock's origin: the first request
    app = create_fleet_app(_mock_fleet(fleet, offset), clock=anyio.current_time)
    recorder = Recorder(httpx2.ASGITransport(app=app), anyio.current_time)
    async with httpx2.AsyncClient(transport=recorder, base_url=_BASE) as http:
        scheduler = Scheduler(
            endpoints=_sdk_endpoints(fleet, http),
            config=config,
            priors="heuristic",
            options=RuntimeOptions(calibration=False, seed=spec.seed, cancel_late=False),
        )
        async with scheduler:
            records, start = await replay_jobs(scheduler, ordered)
            stats = scheduler.statistics()
        mock = app.state.fleet_stats()
        origin = anyio.current_time() - start - next(iter(mock.values())).virtual_time
    rows = [records[j.request.id] for j in ordered]
    for attempt in recorder.attempts:
        send = attempt.time - start
        rec = records[attempt.request]
        rec.first_send = send if rec.first_send is None else min(rec.first_send, send)
    row = _head(spec, "live")
    row.update(_metrics(rows, stats.engine, fleet, _endpoints_of(ordered, recorder.attempts)))
    for name, counts in ((n, m.counters) for n, m in mock.items()):
        row[f"mock_completed_{name}"] = float(counts.completed)
        row[f"mock_429_{name}"] = float(counts.rate_limited)
        row[f"mock_503_{name}"] = float(counts.unavailable)
    row["mock_origin_lag_s"] = origin - offset  # where the mock's time 0 fell, against the plan
    row["unresolved"] = float(sum(not r.outcome for r in rows))
    return row


def _endpoints_of(
    jobs: Sequence[SimJob], attempts: Sequence[_Attempt]
) -> tuple[dict[int, str], dict[int, str]]:
    """Per job index: the endpoint that answered it 200, and the one its last attempt went to."""
    index = {j.request.id: i for i, j in enumerate(jobs)}
    served: dict[int, str] = {}
    routed: dict[int, str] = {}
    for attempt in sorted(attempts, key=lambda a: a.time):
        i = index[attempt.request]
        routed[i] = attempt.endpoint
        if attempt.status == 200:
            served[i] = attempt.endpoint
    return served, routed


def live_row(spec: RoutingSpec) -> dict[str, object]:
    """Replay ``spec``'s jobs through the SDK and the HTTP fleet mock in virtual time.

    Returns:
        The run's metrics (the simulated row's columns, ``mode="live"``, the mock's own
        per-endpoint counts, ``mock_origin_lag_s``, ``unresolved`` and ``wall_s``).

    Raises:
        ValueError: The simulated fleet has something the SDK or the HTTP mock cannot play.
    """
    import trio
    import trio.testing

    jobs, config = _pieces(spec)
    fleet = fleet_for(jobs, spec.seed, spec.cap)
    started = time.perf_counter()
    with inline_platform_lookup():
        row = trio.run(
            _replay, spec, jobs, config, fleet, clock=trio.testing.MockClock(autojump_threshold=0)
        )
    row["wall_s"] = time.perf_counter() - started
    return row


# -- the report --------------------------------------------------------------------------------


def _num(row: Mapping[str, object], key: str) -> float:
    value = row.get(key, math.nan)
    return float(value) if isinstance(value, int | float) else math.nan


def _pair(sim: Mapping[str, object], live: Mapping[str, object], key: str, fmt: str) -> str:
    a, b = (_num(row, key) for row in (sim, live))
    return " / ".join("n/a" if math.isnan(v) else format(v, fmt) for v in (a, b))


def _ratio(sim: Mapping[str, object], live: Mapping[str, object], key: str) -> str:
    a, b = _num(sim, key), _num(live, key)
    return "n/a" if not a or math.isnan(a) or math.isnan(b) else f"{b / a:.2f}"


def _markdown(title: str, pairs: Sequence[tuple[dict[str, object], dict[str, object]]]) -> str:
    header = ["caps", "policy", "short P95 s", "live/sim", "global P95 s", "live/sim", "CR",
              "satisfaction", "failovers", "429s", *(f"share {n}" for n in NAMES)]  # fmt: skip
    lines = [
        f"# Routing live cross-check: {title}",
        "",
        "Each cell is *simulated / live*: the same jobs through the simulator "
        "(`bench.routing.run_routing`) and through the SDK (`Scheduler(endpoints=...)`) against "
        "the HTTP fleet mock, both in virtual time. Caps: the client's per-endpoint "
        "`max_concurrency`. Share: the endpoint's part of the completions. "
        "Generated by `bench.routing_live.routing_live_check`; do not edit.",
        "",
        "| " + " | ".join(header) + " |",
        "|---" * len(header) + "|",
    ]
    for sim, live in pairs:
        cells = [
            str(sim["caps"]),
            str(sim["condition"]),
            f"{_num(sim, 'short_p95_ms') / 1e3:.2f} / {_num(live, 'short_p95_ms') / 1e3:.2f}",
            _ratio(sim, live, "short_p95_ms"),
            f"{_num(sim, 'global_p95_ms') / 1e3:.1f} / {_num(live, 'global_p95_ms') / 1e3:.1f}",
            _ratio(sim, live, "global_p95_ms"),
            _pair(sim, live, "completion_rate", ".3f"),
            _pair(sim, live, "satisfaction", ".3f"),
            _pair(sim, live, "failovers", ".0f"),
            _pair(sim, live, "throttled", ".0f"),
            *(_pair(sim, live, f"share_{n}", ".2f") for n in NAMES),
        ]
        lines.append("| " + " | ".join(cells) + " |")
    lines += [
        "",
        "Live runs as the mock counted them (per endpoint: completed / 429s / 503s in the "
        "outage), where the mock's clock origin fell against the first arrival (s), and the "
        "wall time of each live run (s):",
        "",
        "| caps | policy | " + " | ".join(NAMES) + " | origin lag | wall |",
        "|---" * (len(NAMES) + 4) + "|",
    ]
    for _, live in pairs:
        counts = [
            "{:.0f} / {:.0f} / {:.0f}".format(
                *(_num(live, f"mock_{k}_{n}") for k in ("completed", "429", "503"))
            )
            for n in NAMES
        ]
        lines.append(
            f"| {live['caps']} | {live['condition']} | " + " | ".join(counts) + " | "
            f"{_num(live, 'mock_origin_lag_s'):.2g} | {_num(live, 'wall_s'):.1f} |"
        )
    return "\n".join(lines) + "\n"


def routing_live_check(
    out: Path,
    *,
    regime: str = "balanced/high",
    seed: int = 0,
    policies: Sequence[str] = ("round_robin", "anticipated_load"),
    requests: int = 300,
    caps: Sequence[int | None] = CAPS,
) -> Path:
    """Simulate and replay one routing cell per cap and policy; write ``summary.csv``
    (one row per cap, policy and mode) and ``tables.md``.

    Args:
        out: The folder written (created if missing).
        regime: One of `bench.routing.REGIMES`.
        seed: Workload and retry seed.
        policies: Routing policies (`bench.routing.POLICIES`), one cell each.
        requests: Requests per run.
        caps: Per-endpoint client caps (`bench.routing.CAPS`; ``None``: none).

    Returns:
        The path of ``tables.md``.
    """
    pairs = []
    for cap in caps:
        for policy in policies:
            spec = RoutingSpec(regime, policy, seed, requests, cap)
            pairs.append((sim_row(spec), live_row(spec)))
    out.mkdir(parents=True, exist_ok=True)
    write_csv(out / "summary.csv", [row for pair in pairs for row in pair])
    path = out / "tables.md"
    path.write_text(_markdown(f"{regime}, seed {seed}, {requests} requests", pairs))
    return path
