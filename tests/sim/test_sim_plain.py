"""The plain run (one open-door endpoint, nothing else modelled) is the general loop's
twin: the same trace, byte for byte, the same statistics and event count."""

from __future__ import annotations

from dataclasses import replace

import pytest

import semisched.sim.simulator as sim_module
from bench.workloads import generate, regime
from mockprovider.gate import GateConfig
from mockprovider.physics import profile
from predictors.priors import Coarse
from semisched.core.config import PRESETS, preset
from semisched.sim.plain import is_plain
from semisched.sim.simulator import ProviderModel, SimResult, Simulator, simulate

PHYS = profile("default")


def _general(monkeypatch: pytest.MonkeyPatch, *args: object) -> SimResult:
    with monkeypatch.context() as m:
        m.setattr(sim_module, "is_plain", lambda sim: False)
        return simulate(*args)  # type: ignore[arg-type]


@pytest.mark.parametrize("strategy", sorted(PRESETS))
@pytest.mark.parametrize("reg", ["balanced/high", "heavy/medium"])
def test_the_plain_run_matches_the_general_loop(
    monkeypatch: pytest.MonkeyPatch, strategy: str, reg: str
) -> None:
    jobs = generate(regime(reg, requests=300), 5, Coarse(), PHYS)
    # A short timeout: some requests time out in the physics, and are retried or failed.
    phys = replace(PHYS, slots=8, timeout_s=20.0)
    plain = simulate(jobs, preset(strategy), phys)
    general = _general(monkeypatch, jobs, preset(strategy), phys)
    assert plain.trace_csv() == general.trace_csv()
    assert plain.engine == general.engine
    assert (plain.events, plain.end_time) == (general.events, general.end_time)


def test_a_run_with_anything_to_model_is_not_plain() -> None:
    config = preset("final_adrr_olc")
    assert is_plain(Simulator(config, PHYS))
    modelled = [
        ProviderModel(gate=GateConfig(rpm=60)),
        ProviderModel(gate=GateConfig(error_rate=0.1)),
        ProviderModel(capacity_loss=(10.0, 0.5)),
        ProviderModel(other_traffic=0.5, gate=GateConfig(rpm=60)),
    ]
    for provider in modelled:
        assert not is_plain(Simulator(config, PHYS, provider))
