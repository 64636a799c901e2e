"""The capacity planner: queueing maths, pool sizing, the two-pool sweep, and its CLI."""

from __future__ import annotations

import io
import json
import math
import tomllib
from dataclasses import replace

import numpy as np
import pytest

from semisched.fleet.fleetfile import load_fleet
from semisched.plan.cli import plan_main
from semisched.plan.planner import Infeasible, assign, make_plan, predict_pool
from semisched.plan.profile import UnitProfile, load_profile, named_profile
from semisched.plan.queueing import erlang_c, sojourn_quantile, wait_quantile
from semisched.plan.slo import Slo, parse_slo
from semisched.plan.workload import Workload, load_trace, mix_workload, workload_from_records

PROFILE = named_profile("default")


def _direct_erlang_c(c: int, a: float) -> float:
    below = sum(a**k / math.factorial(k) for k in range(c))
    top = a**c / math.factorial(c) / (1 - a / c)
    return top / (below + top)


@pytest.mark.parametrize(("c", "a"), [(1, 0.5), (5, 3.0), (20, 15.0), (50, 45.0), (100, 70.0)])
def test_erlang_c_matches_the_textbook_formula(c: int, a: float) -> None:
    assert erlang_c(c, a) == pytest.approx(_direct_erlang_c(c, a), rel=1e-7)


def test_erlang_c_limits_and_large_fleets() -> None:
    assert erlang_c(10, 0.0) == 0.0
    assert erlang_c(10, 10.0) == 1.0  # unstable: everyone waits
    assert 0.0 < erlang_c(25_600, 0.99 * 25_600) < 1.0  # no overflow at tens of thousands
    with pytest.raises(ValueError, match="servers"):
        erlang_c(0, 1.0)


def test_sojourn_quantile_matches_monte_carlo() -> None:
    rng = np.random.default_rng(0)
    values = np.arange(1.0, 101.0)
    weights = np.ones(100)
    p_wait, theta = 0.5, 0.1
    n = 400_000
    service = rng.choice(values, n)
    wait = np.where(rng.random(n) < p_wait, rng.exponential(1 / theta, n), 0.0)
    simulated = float(np.quantile(service + wait, 0.99))
    assert sojourn_quantile(values, weights, p_wait, theta, 0.99) == pytest.approx(
        simulated, rel=0.01
    )
    # No waiting: the service quantile itself.
    assert sojourn_quantile(values, weights, 0.0, theta, 0.99) == 99.0
    # The paper's W99 (eq. 6 with its Kimura scaling folded into theta).
    assert wait_quantile(0.5, theta, 0.99) == pytest.approx(math.log(50) / theta)
    assert wait_quantile(0.005, theta, 0.99) == 0.0


def test_slo_parsing_and_labels() -> None:
    slo = parse_slo("batch:e2e_p95<=60")
    assert slo == Slo("e2e", 0.95, 60.0, "batch")
    assert parse_slo(slo.key()) == slo
    assert parse_slo("ttft_p99=2").label() == "P99 TTFT <= 2 s"
    for bad in ("ttft<=2", "p99<=2", "ttft_p100<=2", "ttft_p99<=-1", "ttft_p99<=x"):
        with pytest.raises(ValueError, match=r"slo|seconds|percentile"):
            parse_slo(bad)


def _sim_tail(workload: Workload, rate: float, units: int, slo: Slo) -> float:
    from bench.plan_sim import simulate_pool

    arrivals = np.cumsum(np.random.default_rng(1).exponential(1 / rate, len(workload)))
    timed = replace(workload, arrivals=arrivals)
    idx = np.arange(len(workload))
    times = simulate_pool(timed, idx, workload.prompt_tokens, [(None, units, PROFILE, 8192)])
    values = times[slo.metric]
    if slo.klass is not None:
        values = values[workload.classes == workload.class_names.index(slo.klass)]
    return float(np.quantile(values, slo.quantile))


def test_one_pool_plan_meets_the_slo_in_simulation_and_one_unit_less_does_not() -> None:
    work = mix_workload("balanced", requests=8_000, seed=4)
    slo = parse_slo("ttft_p99<=1")
    plan = make_plan(work, rate=20.0, slos=[slo], profile=PROFILE, max_utilisation=0.99)
    n = plan.one_pool.units
    assert plan.one_pool.bound == "slo"
    assert all(t.met for t in plan.one_pool.tails)
    at_plan = _sim_tail(work, 20.0, n, slo)
    assert at_plan <= slo.seconds
    # One unit fewer misses by the model; `python -m bench plan` checks it in longer
    # simulations (near saturation a queue takes many minutes of arrivals to build).
    smaller = predict_pool(work, rate=20.0, profile=PROFILE, context_tokens=8192, units=n - 1,
                           slos=[slo])  # fmt: skip
    assert not smaller.tails[0].met
    # The model's tail at the planned size is close to the simulated one.
    predicted = plan.one_pool.tails[0].seconds
    assert predicted == pytest.approx(at_plan, rel=0.15)


def test_utilisation_cap_sizes_the_pool_when_it_binds() -> None:
    work = mix_workload("balanced", requests=20_000)
    loose = [parse_slo("e2e_p99<=1000")]
    capped = make_plan(work, rate=20.0, slos=loose, profile=PROFILE, max_utilisation=0.5)
    assert capped.one_pool.bound == "utilisation"
    assert capped.one_pool.utilisation <= 0.5
    one_less = predict_pool(work, rate=20.0, profile=PROFILE, context_tokens=8192,
                            units=capped.one_pool.units - 1, slos=loose)  # fmt: skip
    assert one_less.utilisation > 0.5


def _bimodal(n: int = 20_000, seed: int = 0) -> Workload:
    """Mostly short chat with a long-context tail: where a short pool pays off."""
    rng = np.random.default_rng(seed)
    long = rng.random(n) < 0.1
    prompt = np.where(long, rng.integers(9_000, 30_000, n), rng.integers(50, 900, n))
    output = rng.integers(20, 300, n)
    return Workload(
        prompt_tokens=prompt.astype(np.int64), output_tokens=output.astype(np.int64),
        reserve_tokens=output.astype(np.int64), classes=np.zeros(n, dtype=np.int64),
        class_names=("default",),
    )  # fmt: skip


def test_two_pools_win_on_a_short_heavy_workload_and_the_split_routes_consistently() -> None:
    work = _bimodal()
    unit = PROFILE.with_(context_tokens=32_768)
    plan = make_plan(work, rate=40.0, slos=[parse_slo("e2e_p95<=30")], profile=unit)
    assert plan.two_pools_win and plan.best is not None and plan.saving > 0
    best = plan.best
    assert best.short is not None and best.long is not None
    assert best.short.slots == unit.slots_for(best.boundary) > unit.slots
    assert best.cost_per_hour < plan.one_pool.cost_per_hour
    short, _ = assign(work, best.boundary, best.gamma)
    assert short.mean() == pytest.approx(best.alpha)


def test_compress_and_route_moves_the_borderline_band_and_never_costs_more() -> None:
    rng = np.random.default_rng(1)
    n = 20_000
    prompt = rng.integers(100, 1_500, n)
    prompt[: n // 5] = rng.integers(2_100, 3_000, n // 5)  # a borderline band above 2048
    output = np.full(n, 100)
    work = Workload(
        prompt_tokens=prompt.astype(np.int64), output_tokens=output, reserve_tokens=output,
        classes=np.zeros(n, dtype=np.int64), class_names=("default",),
    )  # fmt: skip
    slos = [parse_slo("e2e_p95<=20")]
    unit = PROFILE.with_(context_tokens=16_384)
    plain = make_plan(work, rate=200.0, slos=slos, profile=unit, boundaries=[2048])
    compressed = make_plan(
        work, rate=200.0, slos=slos, profile=unit, boundaries=[2048], compressibility=1.0
    )
    assert plain.best is not None and compressed.best is not None
    assert plain.best.gamma == 1.0 and plain.best.compressed == 0.0
    assert compressed.best.gamma > 1.0
    assert compressed.best.beta >= compressed.best.compressed > 0.15
    assert compressed.best.cost_per_hour <= plain.best.cost_per_hour
    assert compressed.compress_gain == plain.best.cost_per_hour - compressed.best.cost_per_hour
    # Per-request floors decide instead of p_c: floors that cannot fit move nobody.
    stuck = replace(work, floor_tokens=work.prompt_tokens.copy())
    floors = make_plan(stuck, rate=200.0, slos=slos, profile=unit, boundaries=[2048])
    assert floors.best is not None and floors.best.compressed == 0.0
    assert floors.compressibility is None


def test_infeasible_slo_says_what_it_would_take() -> None:
    work = mix_workload("balanced", requests=5_000)
    with pytest.raises(Infeasible, match=r"It would take an SLO of at least [0-9.]+ s, or a unit"):
        make_plan(work, rate=10.0, slos=[parse_slo("e2e_p95<=10")], profile=PROFILE)
    slow = PROFILE.with_(overhead_ms=3294.0)
    with pytest.raises(Infeasible, match="overhead alone exceeds it"):
        make_plan(work, rate=10.0, slos=[parse_slo("ttft_p99<=2")], profile=slow)


def test_bad_input_is_refused_clearly(tmp_path) -> None:
    work = mix_workload("balanced", requests=1_000)
    slo = [parse_slo("ttft_p99<=2")]
    with pytest.raises(ValueError, match="rate"):
        make_plan(work, rate=-1.0, slos=slo, profile=PROFILE)
    with pytest.raises(ValueError, match="slots"):
        PROFILE.with_(slots=0)
    with pytest.raises(ValueError, match="no class 'vip'"):
        make_plan(work, rate=1.0, slos=[parse_slo("vip:ttft_p99<=2")], profile=PROFILE)
    with pytest.raises(ValueError, match="need more than the unit's 1024-token context"):
        make_plan(work, rate=1.0, slos=slo, profile=PROFILE.with_(context_tokens=1024))
    with pytest.raises(ValueError, match="slos must name"):
        make_plan(work, rate=1.0, slos=[], profile=PROFILE)
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n")
    with pytest.raises(ValueError, match="empty"):
        load_trace(empty)
    bad = tmp_path / "bad.jsonl"
    bad.write_text(
        '{"prompt_tokens": 10, "output_tokens": 5}\n{"prompt_tokens": -1, "output_tokens": 5}\n'
    )
    with pytest.raises(ValueError, match="line 2: prompt_tokens=-1"):
        load_trace(bad)
    with pytest.raises(ValueError, match="unknown key"):
        workload_from_records([{"prompt_tokens": 1, "output_tokens": 1, "promt": 3}])


def _trace(path, n: int = 3_000) -> None:
    rng = np.random.default_rng(0)
    with open(path, "w") as handle:
        t = 0.0
        for _ in range(n):
            t += float(rng.exponential(1 / 8.0))
            handle.write(json.dumps({
                "prompt_tokens": int(rng.integers(20, 3_000)),
                "output_tokens": int(rng.integers(5, 600)),
                "arrival": t,
            }) + "\n")  # fmt: skip


def test_cli_table_json_and_fleet_files(tmp_path) -> None:
    trace = tmp_path / "trace.jsonl"
    _trace(trace)
    fleet = tmp_path / "fleet.toml"
    mock = tmp_path / "mock.toml"
    out = io.StringIO()
    code = plan_main(
        ["--trace", str(trace), "--slo", "e2e_p95<=30", "--fleet-out", str(fleet),
         "--mock-fleet-out", str(mock), "--key-env", "PLAN_KEY"], out,
    )  # fmt: skip
    assert code == 0
    text = out.getvalue()
    assert "one pool" in text and "Recommended:" in text and "req/s" in text
    loaded = load_fleet(fleet)
    data = json.loads(_json(trace))
    units = data["two_pools"]["units"] if data["recommended"] == "two_pools" else data[
        "one_pool"]["units"]  # fmt: skip
    assert len(loaded.endpoints) == units
    assert all(e.key_env == "PLAN_KEY" for e in loaded.endpoints)
    assert all(e.max_concurrency for e in loaded.endpoints)
    if data["recommended"] == "two_pools":
        assert loaded.routing is not None and loaded.routing.policy == "token_budget"
        assert loaded.routing.short_pool_tokens == data["best"]["boundary"]
    served = tomllib.loads(mock.read_text())
    assert len(served["endpoint"]) == units
    # The rate came from the trace's arrival times (~8/s).
    assert data["rate"] == pytest.approx(8.0, rel=0.1)


def _json(trace) -> str:
    out = io.StringIO()
    assert plan_main(["--trace", str(trace), "--slo", "e2e_p95<=30", "--json"], out) == 0
    return out.getvalue()


def test_cli_errors_exit_2_with_one_line(tmp_path, capsys) -> None:
    trace = tmp_path / "trace.jsonl"
    _trace(trace, 200)
    cases = [
        (["--mix", "balanced", "--rate", "-3", "--slo", "ttft_p99<=2"], "--rate -3.0 must be"),
        (["--mix", "balanced", "--rate", "5", "--slo", "ttft_p99<=2", "--slots", "0"], "slots=0"),
        (["--mix", "balanced", "--rate", "5", "--slo", "e2e_p95<=5"], "infeasible"),
        (["--mix", "balanced", "--slo", "ttft_p99<=2"], "--rate is needed"),
        (["--trace", str(tmp_path / "nope.jsonl"), "--slo", "ttft_p99<=2"], "cannot read"),
    ]
    for argv, message in cases:
        assert plan_main(argv, io.StringIO()) == 2
        err = capsys.readouterr().err
        assert message in err and "Traceback" not in err


def test_profiles_round_trip_and_named_profiles(tmp_path) -> None:
    path = tmp_path / "p.json"
    unit = UnitProfile(name="h100", base_iter_ms=9.0, per_slot_ms=0.5, slots=64,
                       context_tokens=16_384, cost_per_hour=2.5)  # fmt: skip
    path.write_text(unit.to_json())
    assert load_profile(path) == unit
    assert unit.slots_for(4096) == 256 and unit.slots_for(2048) == 256  # max_slots caps it
    assert named_profile("production-fit").overhead_ms == 3294.0
    with pytest.raises(ValueError, match="profile='nope' must be one of"):
        named_profile("nope")
    path.write_text('{"base_iter_ms": 1, "per_slot_ms": 1, "slots": 4, "colour": "red"}')
    with pytest.raises(ValueError, match="unknown field"):
        load_profile(path)


def test_the_named_units_are_the_mock_providers_profiles() -> None:
    """The planner keeps the mock's physics as data (it never imports the mock): the two
    tables must say the same."""
    from dataclasses import asdict

    from mockprovider.physics import PROFILES
    from semisched.plan.profile import NAMED_UNITS

    assert set(NAMED_UNITS) == set(PROFILES)
    for name, unit in NAMED_UNITS.items():
        mock = asdict(PROFILES[name])
        assert unit == {key: mock[key] for key in unit}, name
