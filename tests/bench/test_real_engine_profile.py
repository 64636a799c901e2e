"""The real engine's load, without an engine: which profile sizes it (a fit of this engine
on this machine, reused or made first), the achieved load beside the intended one, and the
routing run's endpoint caps (``slots``, ``learned``, ``none``)."""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
from pathlib import Path
from types import SimpleNamespace

import pytest

from bench.real_engine.calibrate import EngineFit, write_fit
from bench.real_engine.compare import Workload, demand_s, run_loads, workload
from bench.real_engine.headline import (
    achieved_load,
    engine_jobs,
    fleet_capacity,
    offered_work_s,
    simulate_jobs,
    strategy_config,
)
from bench.real_engine.headline_report import headline_markdown
from bench.real_engine.profiles import engine_profile, fit_mismatch, machine_identity
from bench.real_engine.routing_engine import (
    CAPS,
    FLEET,
    endpoint_caps,
    endpoint_limits,
    routing_config,
    routing_main,
    routing_markdown,
    simulated_row,
)
from bench.workloads import CONGESTION
from mockprovider.physics import profile
from predictors.priors import information_source

PHYSICS = profile("llama-cpp")
HERE = {"engine_commit": "abc1234", "machine": {"node": "box", "cores": "2", "cpu": "x"}}
FIT = EngineFit(slots=8, base_iter_ms=2.0, per_slot_ms=1.0, context_ms_per_token=0.001,
                decode_r_squared=0.99, prefill_ms_per_token=0.5, prefill_intercept_ms=0.0,
                prefill_chunk=512, overhead_ms=3.0)  # fmt: skip


# -- the routing run's caps ---------------------------------------------------------------


def test_learned_caps_tell_nothing_and_learn_each_endpoints_limit() -> None:
    config = routing_config("round_robin", "learned")
    assert config.max_inflight is None
    assert config.routing.concurrency == "learned"
    assert endpoint_caps("learned") is None
    assert CAPS == ("slots", "learned", "none")


def test_none_keeps_only_the_total_and_no_learned_limit() -> None:
    config = routing_config("round_robin", "none")
    assert config.max_inflight == sum(FLEET.values()) == 10
    assert config.routing.concurrency == "fixed"
    assert endpoint_caps("none") is None


def test_slots_caps_each_endpoint_at_its_slots() -> None:
    config = routing_config("token_budget", "slots")
    assert config.max_inflight == 10 and config.routing.concurrency == "fixed"
    assert endpoint_caps("slots") == {"fast": 8, "slow": 2}
    assert routing_config("token_budget") == config  # slots is the default
    with pytest.raises(ValueError, match="caps='some'"):
        routing_config("round_robin", "some")


def test_the_headline_fixes_the_client_cap_and_leaves_direct_dispatch_uncapped() -> None:
    direct = strategy_config("direct_naive")
    assert direct.max_inflight is None and direct.routing.concurrency == "fixed"
    for strategy in ("quota_tiered", "adaptive_drr", "final_adrr_olc"):
        config = strategy_config(strategy, 6)
        assert (config.max_inflight, config.routing.concurrency) == (6, "fixed")


def _stats(**limits: int | None) -> SimpleNamespace:
    changes = {"fast": {"limit.queued": 1, "limit.probe": 9}}
    return SimpleNamespace(endpoints=tuple(
        SimpleNamespace(name=n, limit=v, limit_changes=changes.get(n, {}))
        for n, v in limits.items()))  # fmt: skip


def test_each_endpoints_final_limit_and_its_changes_are_recorded_and_none_is_empty() -> None:
    assert endpoint_limits(_stats(fast=8, slow=None), ["fast", "slow"]) == {
        "limit_fast": 8, "limit_slow": "",
        "changes_fast": "limit.probe 9 limit.queued 1", "changes_slow": ""}  # fmt: skip


def test_the_routing_run_refuses_an_unknown_policy_before_any_engine_starts(
    tmp_path: Path,
) -> None:
    with pytest.raises(ValueError, match="must name some of round_robin"):
        routing_main(tmp_path, seeds=[0], load="high", requests=10, policies=["fastest"])
    assert not any(tmp_path.iterdir())


def test_the_simulated_twin_runs_the_same_caps_and_reports_each_limit() -> None:
    members = {name: dataclasses.replace(PHYSICS, slots=slots) for name, slots in FLEET.items()}
    capacity = fleet_capacity(PHYSICS, list(members.values()), requests=60, seed=2)
    jobs, _ = engine_jobs(PHYSICS, information_source("coarse", seed=2), load="medium",
                          requests=60, seed=2, vocab=8192, capacity=capacity)  # fmt: skip
    rows = {cap: simulated_row(jobs, routing_config("round_robin", cap), members, 2,
                               endpoint_caps(cap)) for cap in CAPS}  # fmt: skip
    assert (rows["slots"]["sim_limit_fast"], rows["slots"]["sim_limit_slow"]) == (8, 2)
    assert (rows["none"]["sim_limit_fast"], rows["none"]["sim_limit_slow"]) == ("", "")
    learned = (rows["learned"]["sim_limit_fast"], rows["learned"]["sim_limit_slow"])
    assert all(isinstance(limit, int) and limit >= 1 for limit in learned)
    assert "limit.start" in rows["learned"]["sim_changes_fast"]  # streamed: slow start from 2
    assert rows["slots"]["sim_changes_fast"] == ""  # a told cap never changes
    assert all(row["sim_completion_rate"] == 1.0 for row in rows.values())


def test_the_routing_report_shows_limits_and_both_loads() -> None:
    row = {"policy": "round_robin", "caps": "learned", "seed": 0, "short_p95_ms": 2000.0,
           "global_p95_ms": 9000.0, "completion_rate": 1.0, "satisfaction": 1.0,
           "share_fast": 0.75, "share_slow": 0.25, "limit_fast": 6, "limit_slow": 2,
           "intended_load": 1.1, "achieved_load": 0.8}  # fmt: skip
    rows = [row, {**row, "seed": 1, "limit_fast": 7, "achieved_load": 0.9}]
    text = routing_markdown(rows, ["fast", "slow"], "a fit")
    assert "| limit fast | limit slow | intended load | achieved load |" in text
    assert "| learned | round_robin | 2.00 | 9.00 | 1.00 | 1.00 | 0.75 | 0.25 | 6.5 | 2 | 1.10 " \
        "| 0.85 |" in text  # fmt: skip
    assert "Load sized by a fit." in text and "achieved load: the same offered work" in text
    old = [{k: v for k, v in r.items() if not k.startswith(("limit", "intended", "achieved"))}
           for r in rows]  # fmt: skip
    assert "| 0.75 | 0.25 | - | - | - | - |" in routing_markdown(old, ["fast", "slow"])


# -- the achieved load --------------------------------------------------------------------


def test_the_achieved_load_is_the_offered_work_over_the_time_taken() -> None:
    assert achieved_load(120.0, 2.0, 60_000.0) == pytest.approx(1.0)
    assert achieved_load(120.0, 1.0, 200_000.0) == pytest.approx(0.6)
    assert math.isnan(achieved_load(120.0, 1.0, 0.0))
    assert math.isnan(achieved_load(120.0, 1.0, math.nan))


def test_the_intended_load_is_the_offered_work_per_second_of_arrivals() -> None:
    jobs, rate = engine_jobs(PHYSICS, information_source("coarse", seed=4), load="high",
                             requests=400, seed=4, vocab=8192)  # fmt: skip
    work = offered_work_s(PHYSICS, jobs)
    prompts = [j.sim.input_tokens for j in jobs]
    outputs = [j.sim.output_tokens for j in jobs]
    assert work == pytest.approx(float(sum(demand_s(PHYSICS, prompts, outputs))))
    assert rate * work / len(jobs) == pytest.approx(CONGESTION["high"])
    assert offered_work_s(PHYSICS, []) == 0.0


def test_an_engine_as_the_profile_achieves_about_the_intended_load_below_one() -> None:
    jobs, _ = engine_jobs(PHYSICS, information_source("coarse", seed=1), load="medium",
                          requests=300, seed=1, vocab=8192)  # fmt: skip
    work = offered_work_s(PHYSICS, jobs)
    direct = strategy_config("direct_naive")  # nothing shed: every request is served

    def achieved(physics: object) -> float:
        rows = simulate_jobs(jobs, direct, physics, 1)  # type: ignore[arg-type]
        makespan = max(r.end for r in rows) - min(r.arrival for r in rows)
        return achieved_load(work, 1.0, makespan * 1000.0)

    assert 0.6 < achieved(PHYSICS) < CONGESTION["medium"]  # the last answers' drain
    slower = dataclasses.replace(PHYSICS, base_iter_ms=3 * PHYSICS.base_iter_ms,
                                 per_slot_ms=3 * PHYSICS.per_slot_ms,
                                 prefill_ms_per_token=3 * PHYSICS.prefill_ms_per_token,
                                 context_ms_per_token=3 * PHYSICS.context_ms_per_token)  # fmt: skip
    assert achieved(slower) == pytest.approx(1 / 3, abs=0.03)  # it fell behind: its capacity


def test_compare_reports_both_sides_achieved_load() -> None:
    work: Workload = workload(PHYSICS, requests=50, load=0.9, seed=0, vocab=100)
    offered = float(sum(demand_s(PHYSICS, [len(j.prompt) for j in work.jobs],
                                 [j.max_tokens for j in work.jobs])))  # fmt: skip
    first = min(j.arrival for j in work.jobs)
    loads = run_loads(PHYSICS, work, 0.9, (first + offered, first + 2 * offered))
    assert loads == {"intended_load": 0.9, "engine_achieved_load": 1.0,
                     "mock_achieved_load": 0.5}  # fmt: skip


def test_the_headline_report_shows_intended_and_achieved_load() -> None:
    def row(mode: str, seed: int, achieved: float) -> dict[str, object]:
        return {"load": "high", "strategy": "final_adrr_olc", "mode": mode, "seed": seed,
                "short_p95_ms": 1000.0, "global_p95_ms": 9000.0, "completion_rate": 1.0,
                "satisfaction": 1.0, "goodput_rps": 1.0, "intended_load": 1.1,
                "achieved_load": achieved}  # fmt: skip

    text = headline_markdown([row("engine", 0, 0.95), row("sim", 0, 0.9)])
    assert "| goodput /s: engine / sim | intended load | achieved load: engine / sim |" in text
    assert "| 1.000 / 1.000 | 1.10 | 0.95 / 0.90 |" in text
    assert "Intended load: the congestion level" in text


# -- which profile sizes the load ---------------------------------------------------------


def _write(folder: Path, **provenance: object) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    write_fit(folder, FIT, {"refused": "test"}, provenance=provenance)
    return folder / "fit.json"


class _Fitter:
    """A stand-in for the short fit: writes a fit of ``HERE`` and counts its calls."""

    def __init__(self) -> None:
        self.calls: list[Path] = []

    def __call__(self, folder: Path, parallel: int, wanted: object) -> Path:
        self.calls.append(folder)
        return _write(folder, **wanted)  # type: ignore[arg-type]


def _profile(out: Path, tmp: Path, fitter: _Fitter, choice: str = "machine") -> object:
    said: list[str] = []
    chosen = engine_profile(out, choice, 8, say=said.append, fit=fitter, wanted=HERE,
                            cache=tmp / "cache")  # fmt: skip
    return chosen, said


def test_a_fit_of_the_same_engine_and_machine_is_reused_when_cached_is_asked(
    tmp_path: Path,
) -> None:
    out = tmp_path / "out"
    _write(out, **HERE)
    fitter = _Fitter()
    chosen, said = _profile(out, tmp_path, fitter, "cached")
    assert fitter.calls == [] and said == []
    assert chosen.path == out / "fit.json"  # type: ignore[attr-defined]
    assert chosen.physics.base_iter_ms == 2.0  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("provenance", "reason"),
    [
        ({**HERE, "machine": {**HERE["machine"], "node": "other"}}, "machine"),  # type: ignore[dict-item]
        ({**HERE, "engine_commit": "fff0000"}, "engine fff0000"),
        ({}, "records no engine commit or machine"),
        (None, "no fit"),
    ],
)
def test_another_machine_engine_or_no_fit_is_fitted_first(
    tmp_path: Path, provenance: dict[str, object] | None, reason: str
) -> None:
    out = tmp_path / "out"
    if provenance is not None:
        _write(out, **provenance)
    fitter = _Fitter()
    chosen, said = _profile(out, tmp_path, fitter, "cached")
    assert fitter.calls == [tmp_path / "cache"]
    assert chosen.path == tmp_path / "cache" / "fit.json"  # type: ignore[attr-defined]
    assert len(said) == 1 and reason in said[0] and "fitting it first" in said[0]  # type: ignore[index]
    if provenance is not None:  # the repository's fit.json is left as it was
        assert json.loads((out / "fit.json").read_text()).get("engine_commit") == \
            provenance.get("engine_commit")  # fmt: skip
    _, again = _profile(out, tmp_path, fitter, "cached")  # the cached fit is reused next time
    assert len(fitter.calls) == 1 and again == []


def test_the_default_fits_now_even_beside_a_fit_of_this_machine(tmp_path: Path) -> None:
    out = tmp_path / "out"
    _write(out, **HERE)
    fitter = _Fitter()
    for _ in range(2):  # a machine's speed drifts: every run measures it again
        chosen, said = _profile(out, tmp_path, fitter)
        assert chosen.path == tmp_path / "cache" / "fit.json"  # type: ignore[attr-defined]
        assert len(said) == 1 and "drifts" in said[0]  # type: ignore[index]
    assert fitter.calls == [tmp_path / "cache"] * 2


def test_the_committed_profile_is_kept_on_request(tmp_path: Path) -> None:
    fitter = _Fitter()
    chosen, _ = _profile(tmp_path, tmp_path, fitter, "committed")
    assert chosen.physics == PHYSICS and fitter.calls == []  # type: ignore[attr-defined]
    with pytest.raises(ValueError, match="profile='mine'"):
        _profile(tmp_path, tmp_path, fitter, "mine")


def test_a_fit_of_other_slots_is_refused(tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    write_fit(out, dataclasses.replace(FIT, slots=4), {}, provenance=HERE)
    with pytest.raises(ValueError, match="fit of 4 slots, not 8"):
        _profile(out, tmp_path, _Fitter(), "cached")


def test_the_fit_records_its_engine_and_machine() -> None:
    here = machine_identity()
    assert set(here) == {"node", "cores", "cpu"} and here["cores"].isdigit()
    assert fit_mismatch({**HERE}, HERE) is None
    assert fit_mismatch({"profile": {}}, HERE) == "the fit records no engine commit or machine"


def test_the_commands_take_a_profile_and_learned_caps() -> None:
    from bench.real_engine.cli import add_parser

    parser = argparse.ArgumentParser()
    add_parser(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["real-engine", "routing", "--caps", "slots,learned"])
    assert (args.caps, args.profile) == (("slots", "learned"), "machine")
    assert args.policies == ("round_robin", "anticipated_load", "latency_ewma", "token_budget")
    args = parser.parse_args(["real-engine", "routing", "--policies", "token_budget,round_robin"])
    assert args.policies == ("token_budget", "round_robin")
    with pytest.raises(SystemExit):
        parser.parse_args(["real-engine", "routing", "--policies", "fastest"])
    for step in ("headline", "compare"):
        args = parser.parse_args(["real-engine", step, "--profile", "committed"])
        assert args.profile == "committed"
