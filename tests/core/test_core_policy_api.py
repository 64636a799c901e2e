"""A new policy is written from ``semisched.core``'s exported names alone and plugged in
by passing its class as the config's ``policy``; the name registries stay read-only."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from semisched.core import (
    ORDERING_POLICIES,
    Action,
    AllocationConfig,
    ClassQueue,
    Engine,
    Entry,
    LatencyEstimate,
    OrderingConfig,
    OrderingPolicy,
    Prior,
    Request,
    SchedulerConfig,
    Send,
)


class ShortestFirst(OrderingPolicy):
    """Smallest estimated cost first among the band heads (SJF at band resolution)."""

    name = "shortest_first"

    def choose(self, queue: ClassQueue, now: float, estimate: LatencyEstimate) -> Entry:
        return min(queue.heads(), key=lambda entry: (entry.cost, entry.seq))


def sent(actions: Sequence[Action]) -> list[str]:
    return [a.request.id for a in actions if isinstance(a, Send)]


def test_a_custom_ordering_policy_runs_through_the_engine() -> None:
    config = SchedulerConfig(max_inflight=1, ordering=OrderingConfig(policy=ShortestFirst))
    engine = Engine(config)
    assert "shortest_first" in repr(engine)

    def request(rid: str, p50: float) -> Request:
        return Request(id=rid, klass="batch", prior=Prior(p50=p50, p90=2 * p50))

    order = sent(engine.submit(request("first", 300), now=0.0))  # the only one: sent at once
    for i, p50 in enumerate((900, 100, 500)):  # queued behind it, in this arrival order
        order += sent(engine.submit(request(f"q{p50}", p50), now=1.0 + i))
    done = 5.0
    for rid in ("first", "q100", "q500"):
        order += sent(engine.completed(rid, now=done, output_tokens=10))
        done += 1.0
    # FIFO would send q900 next; the custom policy sends the smallest first.
    assert order == ["first", "q100", "q500", "q900"]


def test_a_custom_name_is_refused_by_the_config_and_cannot_be_registered() -> None:
    with pytest.raises(ValueError, match=r"^policy='shortest_first' must be one of"):
        OrderingConfig(policy="shortest_first")
    with pytest.raises(TypeError):
        ORDERING_POLICIES["shortest_first"] = ShortestFirst  # type: ignore[index]


def test_a_class_of_the_wrong_layer_is_refused() -> None:
    with pytest.raises(TypeError, match="must be an AllocationPolicy subclass"):
        Engine(SchedulerConfig(allocation=AllocationConfig(policy=ShortestFirst)))  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="class attribute 'name'"):
        OrderingConfig(policy=int)  # type: ignore[arg-type]
