"""Rate packing: which request a batch sends next when a rate budget binds on two axes."""

from __future__ import annotations

import pytest

from semisched.core import (
    BudgetConfig,
    ClassSpec,
    Engine,
    MakespanFloor,
    Prior,
    Request,
    Send,
    makespan_floor,
    preset,
)


def req(rid: str, cap: int, *, prompt: float = 0.0) -> Request:
    return Request(
        id=rid,
        klass="batch",
        prior=Prior(p50=0.6 * cap, p90=float(cap)),
        input_tokens=prompt,
        max_output_tokens=cap,
    )


def first_sent(engine: Engine, requests: list[Request]) -> list[str]:
    out: list[str] = []
    for r in requests:
        out += [a.request.id for a in engine.submit(r, 0.0) if isinstance(a, Send)]
    return out


def packing(rpm: int | None, tpm: int | None, max_inflight: int = 1) -> Engine:
    budget = BudgetConfig(rpm=rpm, tpm=tpm) if rpm or tpm else None
    return Engine(preset("batch_packing", budget=budget, max_inflight=max_inflight))


def test_when_tokens_are_the_long_pole_the_largest_goes_first() -> None:
    # The first arrival goes at once. Queued behind it: 2300 tokens (0.23 of a 10k-token
    # window) against 2 requests (0.2 of a 10-request window): tokens are the long pole.
    e = packing(rpm=10, tpm=10_000)
    assert first_sent(e, [req("small", 10), req("big", 2000), req("mid", 300)]) == ["small"]
    out = [a.request.id for a in e.completed("small", 1.0, output_tokens=5) if isinstance(a, Send)]
    assert out == ["big"]


def test_when_requests_are_the_long_pole_the_cheapest_that_fits_goes() -> None:
    # 2 rpm against plenty of tokens: requests are the long pole.
    e = packing(rpm=2, tpm=1_000_000)
    assert first_sent(e, [req("first", 10), req("big", 2000), req("small", 20)]) == ["first"]
    out = [a.request.id for a in e.completed("first", 1.0, output_tokens=5) if isinstance(a, Send)]
    assert out == ["small"]


def test_without_a_budget_it_is_longest_first() -> None:
    e = packing(rpm=None, tpm=None)
    assert first_sent(e, [req("a", 10), req("b", 64), req("c", 2000), req("d", 300)]) == ["a"]
    order = []
    for rid in ("a", "c", "d"):
        order += [
            x.request.id for x in e.completed(rid, 1.0, output_tokens=1) if isinstance(x, Send)
        ]
    assert order == ["c", "d", "b"]


def test_the_batch_packing_preset_is_one_class_and_sheds_nothing() -> None:
    cfg = preset("batch_packing")
    assert cfg.classes == (ClassSpec(name="batch"),)
    assert cfg.ordering.policy == "rate_packing" and cfg.overload.policy == "none"


@pytest.mark.parametrize(
    ("rpm", "tpm", "inflight", "binding", "floor_s"),
    [
        (10, 1_000, None, "tokens", 60.0 * (10 + 2000 + 300 + 60) / 1_000),
        (1, 1_000_000, None, "requests", 60.0 * 4 / 1),
        (None, None, 1, "serving", (0.6 * 10 + 0.6 * 2000 + 0.6 * 300 + 0.6 * 60) * 0.0187),
    ],
)
def test_the_floor_names_its_binding_bound(
    rpm: int | None, tpm: int | None, inflight: int | None, binding: str, floor_s: float
) -> None:
    requests = [req("a", 10), req("b", 2000), req("c", 300), req("d", 60)]
    floor = makespan_floor(requests, rpm=rpm, tpm=tpm, max_inflight=inflight)
    assert isinstance(floor, MakespanFloor)
    assert (floor.binding, floor.requests) == (binding, 4)
    assert floor.floor_s == pytest.approx(floor_s)
    assert floor.ratio(2 * floor.floor_s) == pytest.approx(2.0)


def test_the_floor_refuses_a_bad_budget() -> None:
    with pytest.raises(ValueError, match="rpm=0"):
        makespan_floor([], rpm=0, tpm=None)
    assert makespan_floor([], rpm=10, tpm=10).ratio(5.0) != makespan_floor(
        [], rpm=10, tpm=10
    ).ratio(5.0)  # nan
