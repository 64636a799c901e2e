"""What an engine is built of follows what its configuration uses: a run with one
endpoint, one tenant or no overload control pays for no book it does not use."""

from __future__ import annotations

from typing import Any

import pytest

from semisched.core.config import SchedulerConfig, preset
from semisched.core.engine import Engine, Send
from semisched.core.fleet.endpoint import EndpointSpec
from semisched.core.request import Prior, Request
from semisched.core.signals import Signals
from semisched.core.tenants.config import TenantConfig, TenantSpec
from semisched.core.tenants.lanes import SoloLedger, TenantLedger


def make_request(rid: str, tokens: float) -> Request:
    return Request(id=rid, klass="batch", prior=Prior(p50=tokens, p90=2 * tokens))


def _counting_severity(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Count every severity read (each goes through `Signals.severity`)."""
    reads = [0]
    severity = Signals.severity

    def counted(self: Signals, *args: Any) -> float:
        reads[0] += 1
        return severity(self, *args)

    monkeypatch.setattr(Signals, "severity", counted)
    return reads


def _fill(engine: Engine, n: int) -> None:
    for i in range(n):
        engine.submit(make_request(f"r{i}", tokens=100), 0.0)


def test_without_overload_control_an_arrival_reads_no_severity(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    engine = Engine(preset("adaptive_drr", max_inflight=1))  # overload control "none"
    reads = _counting_severity(monkeypatch)
    _fill(engine, 5)  # one sent, four queued behind a full engine
    assert reads[0] == 1  # the one dispatch that sent; the arrivals read nothing
    assert engine.statistics().counters.admitted == 5


def test_with_overload_control_every_arrival_is_judged_at_the_severity_now(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    engine = Engine(preset("final_adrr_olc", max_inflight=1))
    reads = _counting_severity(monkeypatch)
    _fill(engine, 5)
    assert reads[0] == 5 + 1  # each arrival judged, and the dispatch that sent


def test_one_tenant_keeps_no_usage_and_several_share_a_ledger() -> None:
    one = Engine(SchedulerConfig(max_inflight=2))
    assert type(one._parts.tenancy.ledger) is SoloLedger
    two = TenantConfig(tenants=(TenantSpec(name="a"), TenantSpec(name="b")), default="a")
    assert type(Engine(SchedulerConfig(max_inflight=2, tenants=two))._parts.tenancy.ledger) is (
        TenantLedger
    )


@pytest.mark.parametrize("endpoints", [1, 2])
def test_one_endpoint_reads_no_fleet_pressure(endpoints: int) -> None:
    specs = [EndpointSpec(name=f"e{i}", max_concurrency=1) for i in range(endpoints)]
    engine = Engine(SchedulerConfig(max_inflight=None), endpoints=specs)
    fleet = engine._parts.fleet
    asked = [0]
    pressure = fleet.pressure

    def counted(now: float) -> tuple[float, float]:
        asked[0] += 1
        return pressure(now)

    fleet.pressure = counted  # type: ignore[method-assign]
    actions = []
    for i in range(3):
        actions += engine.submit(make_request(f"r{i}", tokens=100), 0.0)
    assert sum(isinstance(a, Send) for a in actions) == endpoints
    assert (asked[0] > 0) == (endpoints > 1)

