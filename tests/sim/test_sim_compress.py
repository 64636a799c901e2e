"""Compress-and-route in the simulator: the physics prefills a job's compressed prompt only
where the core says the compressed prompt goes (a short endpoint that cannot hold it whole)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from mockprovider.physics import profile
from semisched.core.config import RoutingConfig, preset
from semisched.core.fleet.endpoint import EndpointSpec
from semisched.core.request import Prior, Request
from semisched.sim.simulator import Outcome, SimEndpoint, SimJob, Simulator

B_SHORT, CAP = 1000, 100


def job(rid: str, prompt: int, compressed: int | None, at: float = 0.0) -> SimJob:
    """A job whose estimates are its true lengths (the compressed one included)."""
    estimate = None if compressed is None else float(compressed)
    request = Request(id=rid, klass="batch", prior=Prior(p50=80.0, p90=100.0),
                      input_tokens=float(prompt), arrival=at, max_output_tokens=CAP,
                      compressed_tokens=estimate)  # fmt: skip
    return SimJob(request, 80, prompt, compressed_input_tokens=compressed)


def run(jobs: list[SimJob], band: float) -> tuple[dict[str, tuple[str, int, bool]], dict[str, int]]:
    """Each job's (endpoint, prefilled tokens, compressed) and what each physics got."""
    routing = RoutingConfig(policy="token_budget", short_pool_tokens=B_SHORT,
                            compress_band=band, spill_outstanding=1)  # fmt: skip
    fleet = [
        SimEndpoint(spec=EndpointSpec(name=name, pool=name, context_tokens=context),
                    physics=profile("default"))
        for name, context in (("short", B_SHORT), ("long", 8000))
    ]  # fmt: skip
    sim = Simulator(replace(preset("direct_naive"), routing=routing), fleet=fleet)
    prefilled: dict[str, int] = {}

    def recording(submit: Callable[[float, str, int, int], None]) -> Callable[..., None]:
        def record(now: float, rid: str, tokens: int, out: int) -> None:
            prefilled[rid] = tokens
            submit(now, rid, tokens, out)

        return record

    for name in ("short", "long"):
        physics = sim.physics(name)
        physics.submit = recording(physics.submit)  # type: ignore[method-assign]
    result = sim.run(jobs)
    assert {r.outcome for r in result.rows} == {Outcome.COMPLETED}
    assert result.compressed == sum(r.compressed for r in result.rows)
    return {r.id: (r.endpoint, r.input_tokens, r.compressed) for r in result.rows}, prefilled


def test_the_physics_prefills_the_compressed_prompt_only_on_the_short_pool() -> None:
    jobs = [
        job("borderline", 1100, 850),  # 1200 in (1000, 1500]: compressed, short
        job("spilled", 1100, 850),  # the short endpoint is busy (spill_outstanding=1): long
        job("too-big", 1100, 950, at=60.0),  # 1050 does not fit B_short: long, whole
        job("small", 400, None, at=120.0),  # fits whole: short, whole
    ]
    rows, prefilled = run(jobs, band=1.5)
    assert rows == {
        "borderline": ("short", 850, True),
        "spilled": ("long", 1100, False),
        "too-big": ("long", 1100, False),
        "small": ("short", 400, False),
    }
    assert prefilled == {"borderline": 850, "spilled": 1100, "too-big": 1100, "small": 400}


def test_with_compression_off_every_prompt_is_prefilled_whole() -> None:
    rows, prefilled = run([job("borderline", 1100, 850)], band=1.0)
    assert rows == {"borderline": ("long", 1100, False)}
    assert prefilled == {"borderline": 1100}
