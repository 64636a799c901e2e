"""Routing over two real engines: ``python -m bench real-engine routing``.

Two llama-servers run side by side on loopback: ``fast`` with 8 slots (``--parallel 8``)
and ``slow`` with 2 (:data:`FLEET`), each one thread at ``nice 10``. One
:class:`semisched.Scheduler` (``final_adrr_olc``, at most 10 in flight) sends to both
through one :class:`semisched.Endpoint` each, and routes by each policy of
:data:`POLICIES` in turn, on the same seeded workload (:mod:`.headline`'s: the scaled
balanced mix, paper-scale priors and deadlines) at a congestion level of the pair's joint
capacity (:func:`~bench.real_engine.headline.fleet_capacity`, from the ``llama-cpp``
profile with each server's slots), under each endpoint cap of :data:`CAPS`: ``slots``,
each endpoint capped at its slots (``max_concurrency``: what a user who started the
servers would set), so that a send goes where a slot is free whatever the policy; and
``none``, only the scheduler's total cap (a user who knows the fleet's size but not each
server's), so that the policy decides which server queues what.

On this 2-core machine the two servers are not independent: each has one thread, so with
both busy they hold a core each and the client (the SDK, in Python) takes its time from
both; other sessions on the machine take theirs too. ``slow`` is slow because it decodes 2
sequences a step where ``fast`` decodes 8, and queues the rest.

Size-aware routing is ``token_budget`` (the short and long pools of "Token-Budget-Aware
Pool Routing for Cost-Efficient LLM Inference"): every run gives ``slow`` the short pool
and ``fast`` the long one (:data:`POOLS`), with the short pool's budget
:data:`SHORT_POOL_TOKENS`; the other policies ignore pools.

Beside each engine run, the simulator runs the same jobs over the same two endpoints (each
the ``llama-cpp`` profile with its slots, the same caps, pools and config): its prediction.

Written: ``routing.csv`` (per caps, policy and seed: short P95, global P95, completion,
satisfaction, goodput, and each endpoint's share of the completions, on the engine and, as
``sim_*``, in the simulator) and ``routing.md`` (medians over seeds, engine / sim).
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import time
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from bench.real_engine.headline import median

__all__ = [
    "CAPS",
    "FLEET",
    "POLICIES",
    "POOLS",
    "SHORT_POOL_TOKENS",
    "endpoint_shares",
    "routing_config",
    "routing_main",
    "routing_markdown",
    "routing_row",
    "routing_summary",
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


def routing_config(policy: str, fleet: Mapping[str, int] = FLEET) -> Any:
    """``final_adrr_olc`` routing by ``policy``, its client cap the fleet's slots, the short
    pool's budget :data:`SHORT_POOL_TOKENS` (read by ``token_budget`` only).

    Raises:
        ValueError: An unknown ``policy``.
    """
    from semisched.core.config import preset

    base = preset(STRATEGY)
    routing = replace(base.routing, policy=policy, short_pool_tokens=SHORT_POOL_TOKENS)
    return base.with_(max_inflight=sum(fleet.values()), routing=routing)


def simulated_row(
    jobs: Sequence[Any], config: Any, members: Mapping[str, Any], seed: int,
    caps: Mapping[str, int] | None,
) -> dict[str, object]:  # fmt: skip
    """The simulator's metrics for ``jobs`` over ``members`` (name -> physics), each
    endpoint capped at ``caps[name]`` and in its :data:`POOLS` pool, prefixed ``sim_``:
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
    result = simulate([j.sim for j in jobs], config, fleet=fleet)
    bucket = {j.sim.request.id: j.bucket for j in jobs}
    for row in result.rows:
        row.bucket = bucket[row.id]
    metrics = metric_row(list(result.rows))
    done = [row.endpoint for row in result.rows if row.outcome == "completed"]
    for name in members:
        metrics[f"share_{name}"] = done.count(name) / len(done) if done else math.nan
    return {f"sim_{key}": value for key, value in metrics.items()}


def endpoint_shares(stats: Any, names: Sequence[str]) -> dict[str, float]:
    """Each endpoint's share of the completions, from the scheduler's statistics."""
    done = {e.name: e.completed for e in stats.engine.endpoints}
    total = sum(done.values())
    return {f"share_{n}": done.get(n, 0) / total if total else math.nan for n in names}


def routing_markdown(rows: Sequence[Mapping[str, object]], names: Sequence[str]) -> str:
    """Medians over seeds per endpoint caps and policy: the metrics and each endpoint's
    share, each cell ``engine / sim`` where the rows have the simulator's (``sim_*``)."""
    columns = [("short P95 s", "short_p95_ms", 1e-3), ("global P95 s", "global_p95_ms", 1e-3),
               ("completion", "completion_rate", 1.0), ("satisfaction", "satisfaction", 1.0),
               *((f"share {n}", f"share_{n}", 1.0) for n in names)]  # fmt: skip
    seeds = sorted({int(str(r["seed"])) for r in rows})
    sim = all("sim_short_p95_ms" in r for r in rows)
    title = [f"{c[0]}: engine / sim" if sim else c[0] for c in columns]
    head = (f"Medians over seeds {seeds}" + ("; each cell is engine / sim (the simulator, "
            "each endpoint the fitted `llama-cpp` profile with its slots)" if sim else "")
            + ". Caps `slots`: each endpoint takes at most its slots; `none`: only the "
            "scheduler's total cap.")  # fmt: skip
    lines = [head, "",
             "| caps | policy | " + " | ".join(title) + " |",
             "|---|---|" + "---|" * len(columns)]  # fmt: skip
    groups = dict.fromkeys((str(r.get("caps", "slots")), str(r["policy"])) for r in rows)
    for caps, policy in groups:
        mine = [r for r in rows if (str(r.get("caps", "slots")), r["policy"]) == (caps, policy)]
        cells = [_cell(mine, key, scale) + (f" / {_cell(mine, 'sim_' + key, scale)}" if sim else "")
                 for _, key, scale in columns]  # fmt: skip
        lines.append(f"| {caps} | {policy} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


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
    return f"{median([float(r[key]) for r in rows]) * scale:.2f}"  # type: ignore[arg-type]


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


#: Endpoint caps a run can compare: each endpoint capped at its slots, or none.
CAPS = ("slots", "none")


def routing_main(
    out: Path, *, seeds: Sequence[int], load: str, requests: int, caps: Sequence[str] = CAPS
) -> Path:
    """Run every policy and seed on the two servers, under each of ``caps``; write the
    files (module docstring). Returns ``routing.md``."""
    import anyio
    from tokenizers import Tokenizer

    from bench.real_engine.headline import INFORMATION, engine_jobs, engine_run, fleet_capacity
    from bench.real_engine.headline_report import write_rows
    from bench.real_engine.setup import EnginePaths
    from mockprovider.physics import profile
    from predictors.priors import information_source

    physics = profile("llama-cpp")
    members = {name: replace(physics, slots=slots) for name, slots in FLEET.items()}
    vocab = Tokenizer.from_file(str(EnginePaths.default().tokenizer)).get_vocab_size()
    rows: list[dict[str, object]] = []
    started, before = time.perf_counter(), [round(x, 2) for x in os.getloadavg()]
    with _servers(FLEET) as urls:
        for seed in seeds:
            capacity = fleet_capacity(physics, list(members.values()), requests=requests,
                                      seed=seed)  # fmt: skip
            jobs, rate = engine_jobs(physics, information_source(INFORMATION, seed=seed),
                                     load=load, requests=requests, seed=seed, vocab=vocab,
                                     capacity=capacity)  # fmt: skip
            for cap, policy in ((c, p) for c in caps for p in POLICIES):
                t0 = time.perf_counter()
                slots = FLEET if cap == "slots" else None
                config = routing_config(policy)
                records, stats = anyio.run(engine_run, urls, jobs, config, seed, slots, POOLS)
                row = routing_row(records, stats, policy=policy, caps=cap, load=load, seed=seed,
                                  requests=requests, rate_per_s=round(rate, 4))  # fmt: skip
                row["wall_s"] = round(time.perf_counter() - t0, 1)
                row.update(simulated_row(jobs, config, members, seed, slots))
                rows.append(row)
                print(f"seed {seed} caps {cap} {policy}: {row['wall_s']} s", flush=True)
                write_rows(out / "routing.csv", rows)
    run = {"wall_s": round(time.perf_counter() - started, 1), "load_average_before": before,
           "load_average_after": [round(x, 2) for x in os.getloadavg()],
           "cores": os.cpu_count(), "fleet": dict(FLEET), "pools": dict(POOLS),
           "short_pool_tokens": SHORT_POOL_TOKENS, "caps": list(caps)}  # fmt: skip
    (out / "routing_run.json").write_text(json.dumps(run, indent=2) + "\n", encoding="utf-8")
    (out / "routing.md").write_text(routing_markdown(rows, list(FLEET)), encoding="utf-8")
    print(routing_markdown(rows, list(FLEET)))
    return out / "routing.md"


def routing_row(records: Sequence[Any], stats: Any, **keys: object) -> dict[str, object]:
    """``keys``, the :data:`~bench.real_engine.headline.METRICS` of ``records`` and each
    endpoint's share of the completions."""
    from bench.real_engine.headline import metric_row

    row = metric_row(records, **keys)
    row.update(endpoint_shares(stats, list(FLEET)))
    return row
