"""The provider's door (mockprovider.gate): outage windows before quota, windows and faults.

Pure and synchronous: the gate takes ``now`` in virtual seconds, so these tests need no clock.
"""

from __future__ import annotations

import math

import pytest

from mockprovider.faults import Fault
from mockprovider.gate import GateConfig, GateVerdict, ProviderGate


@pytest.mark.parametrize(
    "outages",
    [
        [(0.0, 1.0)],  # a list, not a tuple
        ((1.0, 1.0),),  # empty window
        ((2.0, 1.0),),  # end before start
        ((-1.0, 1.0),),  # before the first request
        ((0.0, math.inf),),
        ((math.nan, 1.0),),
        ((0.0, 1.0, 2.0),),
        ((True, 2.0),),
        (("0", "1"),),
        ((0.0, 1.0), 5.0),
    ],
)
def test_outage_validation_names_the_field(outages: object) -> None:
    with pytest.raises(ValueError, match="outages="):
        GateConfig(outages=outages)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("t", "down"),
    [(0.0, False), (9.999, False), (10.0, True), (19.999, True), (20.0, False), (25.0, True)],
)
def test_windows_include_their_start_and_exclude_their_end(t: float, down: bool) -> None:
    config = GateConfig(outages=((10.0, 20.0), (24.0, 30.0), (25, 26)))  # overlaps are fine
    assert config.in_outage(t) is down


def test_an_outage_refuses_before_quota_and_windows_and_charges_nothing() -> None:
    gate = ProviderGate(GateConfig(rpm=2, quota_tokens=10, outages=((5.0, 6.0),)))
    assert gate.admit(0.0, 3).verdict is GateVerdict.ADMITTED
    gate.bill(10)  # the quota is spent: outside the window that is what a request meets
    down = gate.admit(5.0, 3)
    assert (down.verdict, down.fault, down.rate, down.retry_after_s) == (
        GateVerdict.UNAVAILABLE,
        Fault.NONE,
        None,
        None,
    )
    assert gate.admit(6.0, 3).verdict is GateVerdict.QUOTA_EXHAUSTED
    requests, _ = gate.limiter.states(6.0)
    assert requests is not None and requests.remaining == 1  # only the t=0 request counted


def test_outages_leave_the_seeded_fault_draws_of_other_requests_unchanged() -> None:
    rates = {"error_rate": 0.3, "hang_rate": 0.2, "drop_rate": 0.1, "seed": 4}
    plain = ProviderGate(GateConfig(**rates))  # type: ignore[arg-type]
    gapped = ProviderGate(GateConfig(outages=((10.0, 20.0),), **rates))  # type: ignore[arg-type]
    times = [float(t) for t in range(30)]
    expected = [plain.admit(t, 1).fault for t in times if not 10.0 <= t < 20.0]
    got = [gapped.admit(t, 1) for t in times]
    assert [d.verdict for d in got].count(GateVerdict.UNAVAILABLE) == 10
    assert [d.fault for d in got if d.verdict is GateVerdict.ADMITTED] == expected
    assert len(set(expected)) == 4  # every kind of fault occurs: the comparison means something


def test_a_forced_fault_in_an_outage_is_still_refused() -> None:
    gate = ProviderGate(GateConfig(outages=((0.0, 1.0),)))
    assert gate.admit(0.5, 1, forced=Fault.ERROR).verdict is GateVerdict.UNAVAILABLE
    assert gate.admit(1.0, 1, forced=Fault.ERROR).fault is Fault.ERROR
