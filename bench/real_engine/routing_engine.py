"""Routing over two real engines: ``python -m bench real-engine routing``.

Two llama-servers run side by side on loopback: ``fast`` with 8 slots (``--parallel 8``)
and ``slow`` with 2 (`FLEET`), each one thread at ``nice 10``. One
`semisched.Scheduler` (``final_adrr_olc``) sends to both through one
`semisched.Endpoint` each, and routes by each policy of `POLICIES` in turn, on
the same seeded workload (`.headline`'s: the scaled balanced mix, paper-scale priors
and deadlines) at a congestion level of the pair's joint capacity
(`fleet_capacity`, from the engine's profile with each
server's slots: a fit of this engine on this machine, made first when there is none, or
with ``--profile committed`` the committed ``llama-cpp`` profile; `.profiles`), under
each endpoint cap of `CAPS` (`routing_config`):

* ``slots``: each endpoint capped at its slots (``max_concurrency``: what a user who
  started the servers would set), the scheduler's total their sum, so that a send goes
  where a slot is free whatever the policy;
* ``learned``: nothing told, the core's default: no caps, no ``max_inflight``, each
  endpoint's limit learned (``RoutingConfig.concurrency="learned"``,
  `semisched.core.fleet.limits`);
* ``none``: only the scheduler's total cap (``max_inflight``, the sum of the slots: a user
  who knows the fleet's size but not each server's) and no learned limit
  (``concurrency="fixed"``), so that the policy decides which server queues what.

On this 2-core machine the two servers are not independent: each has one thread, so with
both busy they hold a core each and the client (the SDK, in Python) takes its time from
both; other sessions on the machine take theirs too. ``slow`` is slow because it decodes 2
sequences a step where ``fast`` decodes 8, and queues the rest.

Size-aware routing is ``token_budget`` (the short and long pools of "Token-Budget-Aware
Pool Routing for Cost-Efficient LLM Inference"): every run gives ``slow`` the short pool
and ``fast`` the long one (`POOLS`), with the short pool's budget
`SHORT_POOL_TOKENS`; the other policies ignore pools.

Every call is streamed and read to its end, so that the scheduler sees each answer's
first token (what a learned concurrency limit reads), as the simulator does.

Beside each engine run, the simulator runs the same jobs over the same two endpoints (each
the engine's profile with its slots, the same caps, pools and config): its prediction.

Load (`.headline`'s definitions): the *intended load* is the congestion level, the
offered work (each request's seconds of a full batch in the profile) per second of
arrivals over the pair's capacity; the *achieved load* is the same offered work over the
time the run took (first arrival to last answer), over the same capacity.

Written: ``routing.csv`` (per caps, policy and seed: short P95, global P95, completion,
satisfaction, goodput, each endpoint's share of the completions and its concurrency limit
at the end (``limit_<name>``: its cap, or the limit it learned; empty for none) and how
its limit changed (``changes_<name>``: the count of each rule's changes, such as
``limit.probe 9 limit.queued 1``; empty for none), the intended and achieved load, on
the engine and, as ``sim_*``, in the simulator),
``routing.md`` (medians over seeds, engine / sim) and ``routing_run.json`` (the run's
machine load, fleet and profile).

Each seed runs every caps and policy back to back, the seeds at odd positions backwards
(`run_order`), so that a drift of the machine within a seed's runs favours no condition.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import time
from collections.abc import Mapping, Sequence
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import Any

from bench.real_engine.headline import median

__all__ = [
    "CAPS",
    "FLEET",
    "POLICIES",
    "POOLS",
    "SHORT_POOL_TOKENS",
    "endpoint_caps",
    "endpoint_limits",
    "endpoint_shares",
    "routing_config",
    "routing_main",
    "routing_markdown",
    "routing_row",
    "routing_summary",
    "run_order",
    "simulated_row",
]

#: The routing policies compared (``semisched.core.fleet.routing``'s names).
POLICIES = ("round_robin", "anticipated_load", "latency_ewma", "token_budget")
#: Each server's name and slots (``--parallel``).
FLEET: Mapping[str, int] = {"fast": 8, "slow": 2}
#: Each server's ``token_budget`` pool: the 2-slot server, whose steps batch fewer
#: sequences, keeps its slots for small requests.
POOLS: Mapping[str, str] = {"fast": "long", "slow": "short"}
#: ``token_budget``'s short-pool budget (prompt plus output tokens): about the 85th
#: percentile of the workload's requests, chosen in the simulator before any engine run
#: (budgets of 300 to 1,400 tokens tried).
SHORT_POOL_TOKENS = 600.0
STRATEGY = "final_adrr_olc"
#: Endpoint caps a run can compare (module docstring): each endpoint capped at its slots,
#: each endpoint's limit learned (nothing told), or only the scheduler's total.
CAPS = ("slots", "learned", "none")


def routing_config(policy: str, caps: str = "slots", fleet: Mapping[str, int] = FLEET) -> Any:
    """``final_adrr_olc`` routing by ``policy`` under ``caps`` (`CAPS`), the short
    pool's budget `SHORT_POOL_TOKENS` (read by ``token_budget`` only): ``slots`` and
    ``none`` a fixed total of the fleet's slots (``max_inflight``) and no learned limit
    (``slots`` adds each endpoint's cap: `endpoint_caps`); ``learned`` no total and
    each endpoint's limit learned.

    Raises:
        ValueError: An unknown ``policy`` or ``caps``.
    """
    from semisched.core.config import preset

    if caps not in CAPS:
        raise ValueError(f"caps={caps!r} must be one of {', '.join(CAPS)}")
    base = preset(STRATEGY)
    learned = caps == "learned"
    routing = replace(base.routing, policy=policy, short_pool_tokens=SHORT_POOL_TOKENS,
                      concurrency="learned" if learned else "fixed")  # fmt: skip
    return base.with_(max_inflight=None if learned else sum(fleet.values()), routing=routing)


def endpoint_caps(caps: str, fleet: Mapping[str, int] = FLEET) -> Mapping[str, int] | None:
    """Each endpoint's ``max_concurrency`` under ``caps``: its slots for ``slots``, none
    otherwise."""
    return dict(fleet) if caps == "slots" else None


def simulated_row(
    jobs: Sequence[Any], config: Any, members: Mapping[str, Any], seed: int,
    caps: Mapping[str, int] | None,
) -> dict[str, object]:  # fmt: skip
    """The simulator's metrics for ``jobs`` over ``members`` (name -> physics), each
    endpoint capped at ``caps[name]`` and in its `POOLS` pool, prefixed ``sim_``:
    the same metrics and shares as an engine row."""
    from bench.real_engine.headline import metric_row
    from semisched.core.fleet.endpoint import EndpointSpec
    from semisched.sim.model import SimEndpoint
    from semisched.sim.simulator import ProviderModel, simulate

    limits = caps or {}
    fleet = [SimEndpoint(spec=EndpointSpec(name=name, max_concurrency=limits.get(name),
                                           pool=POOLS.get(name)),
                         physics=physics, provider=ProviderModel(seed=seed))
             for name, physics in members.items()]  # fmt: skip
    # Streamed, as the engine's calls are (a learned limit reads a late first token).
    sims = [replace(j.sim, request=replace(j.sim.request, stream=True)) for j in jobs]
    result = simulate(sims, config, fleet=fleet)
    bucket = {j.sim.request.id: j.bucket for j in jobs}
    for row in result.rows:
        row.bucket = bucket[row.id]
    metrics = metric_row(list(result.rows))
    done = [row.endpoint for row in result.rows if row.outcome == "completed"]
    for name in members:
        metrics[f"share_{name}"] = done.count(name) / len(done) if done else math.nan
    metrics.update(endpoint_limits(result.engine, list(members)))
    return {f"sim_{key}": value for key, value in metrics.items()}


def endpoint_shares(stats: Any, names: Sequence[str]) -> dict[str, float]:
    """Each endpoint's share of the completions, from the scheduler's statistics."""
    done = {e.name: e.completed for e in stats.engine.endpoints}
    total = sum(done.values())
    return {f"share_{n}": done.get(n, 0) / total if total else math.nan for n in names}


def endpoint_limits(engine: Any, names: Sequence[str]) -> dict[str, object]:
    """Each endpoint's concurrency limit at the end, from the engine's statistics (the
    scheduler's ``statistics().engine``, a simulation's ``engine``): its cap, or the limit
    it learned (``""`` for none); and its changes, the count of each rule's
    (``changes_<name>``: ``limit.probe 9 limit.queued 1``)."""
    limits = {e.name: e.limit for e in engine.endpoints}
    changes = {e.name: " ".join(f"{rule} {n}" for rule, n in sorted(e.limit_changes.items()))
               for e in engine.endpoints}  # fmt: skip
    found: dict[str, object] = {
        f"limit_{n}": "" if limits.get(n) is None else limits[n] for n in names
    }
    found.update({f"changes_{n}": changes.get(n, "") for n in names})
    return found


def routing_markdown(
    rows: Sequence[Mapping[str, object]], names: Sequence[str], source: str | None = None
) -> str:
    """Medians over seeds per endpoint caps and policy: the metrics, each endpoint's share
    and final limit, the intended and achieved load, each cell ``engine / sim`` where the
    rows have the simulator's (``sim_*``); ``source``: what sized the load."""
    columns = [("short P95 s", "short_p95_ms", 1e-3), ("global P95 s", "global_p95_ms", 1e-3),
               ("completion", "completion_rate", 1.0), ("satisfaction", "satisfaction", 1.0),
               *((f"share {n}", f"share_{n}", 1.0) for n in names),
               *((f"limit {n}", f"limit_{n}", 0.0) for n in names),
               ("achieved load", "achieved_load", 1.0)]  # fmt: skip
    seeds = sorted({int(str(r["seed"])) for r in rows})
    sim = all("sim_short_p95_ms" in r for r in rows)
    title = [f"{c[0]}: engine / sim" if sim else c[0] for c in columns]
    title.insert(-1, "intended load")
    lines = [_caption(seeds, sim, source), "",
             "| caps | policy | " + " | ".join(title) + " |",
             "|---|---|" + "---|" * len(title)]  # fmt: skip
    groups = dict.fromkeys((str(r.get("caps", "slots")), str(r["policy"])) for r in rows)
    for caps, policy in groups:
        mine = [r for r in rows if (str(r.get("caps", "slots")), r["policy"]) == (caps, policy)]
        cells = [_cell(mine, key, scale) + (f" / {_cell(mine, 'sim_' + key, scale)}" if sim else "")
                 for _, key, scale in columns]  # fmt: skip
        cells.insert(-1, _cell(mine, "intended_load", 1.0))
        lines.append(f"| {caps} | {policy} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def _caption(seeds: Sequence[int], sim: bool, source: str | None) -> str:
    return (f"Medians over seeds {list(seeds)}" + ("; each cell is engine / sim (the simulator, "
            "each endpoint the engine's profile with its slots)" if sim else "") + ". "
            + (f"Load sized by {source}. " if source else "")
            + "Caps `slots`: each endpoint takes at most its slots; `learned`: nothing told, "
            "each endpoint's limit learned; `none`: only the scheduler's total cap, no learned "
            "limit. Limit: each endpoint's concurrency limit at the end of the run (its cap, or "
            "the limit it learned; - for none). Intended load: the congestion level, the "
            "offered work (each request's seconds of a full batch in the profile) per second "
            "of arrivals over the pair's capacity; achieved load: the same offered work over "
            "the time the run took (first arrival to last answer), over the capacity.")  # fmt: skip


def routing_summary(rows: Sequence[Mapping[str, object]]) -> str:
    """The README's lines: with each endpoint capped at its slots, each policy's short and
    global P95 on the engine and in the simulator (medians over the seeds), and its short
    P95 over round robin's."""
    capped = [r for r in rows if str(r.get("caps", "slots")) == "slots"]
    policies = list(dict.fromkeys(str(r["policy"]) for r in capped))

    def med(policy: str, key: str) -> float:
        return median([float(r[key]) for r in capped if r["policy"] == policy])  # type: ignore[arg-type]

    lines = ["| policy | short P95 s: engine / sim | vs round_robin: engine / sim | "
             "global P95 s: engine / sim |", "|---|---:|---:|---:|"]  # fmt: skip
    for policy in policies:
        short = [med(policy, "short_p95_ms"), med(policy, "sim_short_p95_ms")]
        base = [med("round_robin", "short_p95_ms"), med("round_robin", "sim_short_p95_ms")]
        lines.append(f"| {policy} | {short[0] / 1e3:.2f} / {short[1] / 1e3:.2f} | "
                     f"{short[0] / base[0]:.2f} / {short[1] / base[1]:.2f} | "
                     f"{med(policy, 'global_p95_ms') / 1e3:.1f} / "
                     f"{med(policy, 'sim_global_p95_ms') / 1e3:.1f} |")  # fmt: skip
    seeds = len({str(r["seed"]) for r in capped})
    requests = sorted({str(r.get("requests", "?")) for r in capped})
    return (
        "\n".join(lines) + f"\n\nMedians over {seeds} seeds, {', '.join(requests)} requests a run."
    )


def _cell(rows: Sequence[Mapping[str, object]], key: str, scale: float) -> str:
    """The median of ``key`` over ``rows`` (``-`` for none); ``scale`` 0: a limit, as
    a count."""
    value = median([_number(r.get(key)) for r in rows])
    if math.isnan(value):
        return "-"
    return f"{value:g}" if scale == 0.0 else f"{value * scale:.2f}"


def _number(value: object) -> float:
    try:
        return float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return math.nan


@contextlib.contextmanager
def _servers(fleet: Mapping[str, int]) -> Any:
    from bench.real_engine.client import Job, run_jobs
    from bench.real_engine.launcher import LlamaServer, ServerOptions
    from bench.real_engine.setup import EnginePaths

    paths = EnginePaths.default()
    with contextlib.ExitStack() as stack:
        urls = {}
        for name, slots in fleet.items():
            options = ServerOptions(binary=paths.server, model=paths.gguf, parallel=slots)
            log = paths.gguf.with_name(f"llama-server-{name}.log")
            srv = stack.enter_context(LlamaServer(options, log=log))
            run_jobs(srv.base_url, [Job(arrival=0.0, prompt=(5, 6, 7), max_tokens=8)])  # warm-up
            urls[name] = srv.base_url
        yield urls


def routing_main(
    out: Path,
    *,
    seeds: Sequence[int],
    load: str,
    requests: int,
    caps: Sequence[str] = CAPS,
    profile: str = "machine",
    policies: Sequence[str] = POLICIES,
) -> Path:
    """Run each of ``policies`` and seeds on the two servers, under each of ``caps``, the
    load sized by ``profile`` (`bench.real_engine.profiles.engine_profile`); write the
    files (module docstring). Returns ``routing.md``.

    Raises:
        ValueError: An unknown cap or policy (before any engine starts).
    """
    from dataclasses import asdict

    from bench.real_engine.profiles import engine_profile

    unknown = [p for p in policies if p not in POLICIES]
    if unknown or not policies:
        raise ValueError(f"policies={list(policies)} must name some of {', '.join(POLICIES)}")
    for cap in caps:
        routing_config(POLICIES[0], cap)  # an unknown cap stops before any engine starts
    chosen = engine_profile(out, profile, FLEET["fast"])
    print(f"load sized by {chosen.source}", flush=True)
    source = chosen.source.replace(str(Path.home()), "~")
    rows: list[dict[str, object]] = []
    started, before = time.perf_counter(), [round(x, 2) for x in os.getloadavg()]
    with _servers(FLEET) as urls:
        for position, seed in enumerate(seeds):
            _one_seed(urls, chosen.physics, seed, load=load, requests=requests,
                      order=run_order(caps, policies, position), rows=rows, out=out)  # fmt: skip
    run = {"wall_s": round(time.perf_counter() - started, 1), "load_average_before": before,
           "load_average_after": [round(x, 2) for x in os.getloadavg()],
           "cores": os.cpu_count(), "fleet": dict(FLEET), "pools": dict(POOLS),
           "short_pool_tokens": SHORT_POOL_TOKENS, "caps": list(caps),
           "policies": list(policies),
           "profile": asdict(chosen.physics), "profile_source": source}  # fmt: skip
    (out / "routing_run.json").write_text(json.dumps(run, indent=2) + "\n", encoding="utf-8")
    text = routing_markdown(rows, list(FLEET), source)
    (out / "routing.md").write_text(text, encoding="utf-8")
    print(text)
    return out / "routing.md"


def _one_seed(
    urls: Mapping[str, str], physics: Any, seed: int, *, load: str, requests: int,
    order: Sequence[tuple[str, str]], rows: list[dict[str, object]], out: Path,
) -> None:  # fmt: skip
    """Each ``(caps, policy)`` of ``order`` on one seed's workload, engine and sim; the rows
    appended, the csv rewritten after each run."""
    import anyio
    from tokenizers import Tokenizer

    from bench.real_engine.headline import (
        INFORMATION,
        achieved_load,
        engine_jobs,
        engine_run,
        fleet_capacity,
        offered_work_s,
    )
    from bench.real_engine.headline_report import write_rows
    from bench.real_engine.setup import EnginePaths
    from bench.workloads import CONGESTION
    from predictors.priors import information_source

    members = {name: replace(physics, slots=slots) for name, slots in FLEET.items()}
    vocab = Tokenizer.from_file(str(EnginePaths.default().tokenizer)).get_vocab_size()
    capacity = fleet_capacity(physics, list(members.values()), requests=requests, seed=seed)
    source = information_source(INFORMATION, seed=seed)
    jobs, rate = engine_jobs(physics, source, load=load, requests=requests, seed=seed,
                             vocab=vocab, capacity=capacity)  # fmt: skip
    work = offered_work_s(physics, jobs)
    for cap, policy in order:
        t0 = time.perf_counter()
        slots, config = endpoint_caps(cap), routing_config(policy, cap)
        records, stats = anyio.run(partial(engine_run, stream=True), urls, jobs, config, seed,
                                   slots, POOLS)  # fmt: skip
        row = routing_row(records, stats, policy=policy, caps=cap, load=load, seed=seed,
                          requests=requests, rate_per_s=round(rate, 4),
                          intended_load=CONGESTION[load])  # fmt: skip
        row["wall_s"] = round(time.perf_counter() - t0, 1)
        row.update(simulated_row(jobs, config, members, seed, slots))
        for prefix in ("", "sim_"):
            makespan = _number(row[f"{prefix}makespan_ms"])
            row[f"{prefix}achieved_load"] = achieved_load(work, capacity, makespan)
        rows.append(row)
        print(f"seed {seed} caps {cap} {policy}: {row['wall_s']} s", flush=True)
        write_rows(out / "routing.csv", rows)


def run_order(
    caps: Sequence[str], policies: Sequence[str], position: int
) -> list[tuple[str, str]]:
    """Every ``(caps, policy)`` of one seed, in the order they run: the seed at an odd
    ``position`` in the run takes them backwards, so that no condition always runs first
    on a seed's workload (a machine that warms up or drifts during a seed's runs then
    favours none of them)."""
    order = [(cap, policy) for cap in caps for policy in policies]
    return order[::-1] if position % 2 else order


def routing_row(records: Sequence[Any], stats: Any, **keys: object) -> dict[str, object]:
    """``keys``, the `METRICS` of ``records``, each
    endpoint's share of the completions and its final limit."""
    from bench.real_engine.headline import metric_row

    row = metric_row(records, **keys)
    row.update(endpoint_shares(stats, list(FLEET)))
    row.update(endpoint_limits(stats.engine, list(FLEET)))
    return row
