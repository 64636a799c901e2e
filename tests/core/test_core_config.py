"""Config validation (fields named in every error), policy registries and presets."""

from __future__ import annotations

import math
from typing import Any

import pytest

from semisched.core import (
    PRESETS,
    AllocationConfig,
    Bucket,
    ClassSpec,
    Engine,
    OrderingConfig,
    OverloadConfig,
    Prior,
    Request,
    SchedulerConfig,
    Send,
    SignalsConfig,
    preset,
)
from semisched.core.allocation import ALLOCATION_POLICIES
from semisched.core.ordering import ORDERING_POLICIES
from semisched.core.overload import BUCKET_POLICIES


@pytest.mark.parametrize(
    ("cls", "kwargs", "field"),
    [
        (ClassSpec, {"name": ""}, "name"),
        (ClassSpec, {"name": "a", "weight": 0.0}, "weight"),
        (ClassSpec, {"name": "a", "weight": math.inf}, "weight"),
        (ClassSpec, {"name": "a", "quota": 0.0}, "quota"),
        (ClassSpec, {"name": "a", "quota": 1.5}, "quota"),
        (AllocationConfig, {"quantum_tokens": 0.0}, "quantum_tokens"),
        (AllocationConfig, {"quantum_tokens": math.nan}, "quantum_tokens"),
        (AllocationConfig, {"congestion_gain": -0.1}, "congestion_gain"),
        (OrderingConfig, {"w_wait": -1.0}, "w_wait"),
        (OrderingConfig, {"w_size": math.inf}, "w_size"),
        (OrderingConfig, {"w_urgency": -1.0}, "w_urgency"),
        (OrderingConfig, {"size_ref_tokens": 0.0}, "size_ref_tokens"),
        (OrderingConfig, {"urgency_horizon_s": 0.0}, "urgency_horizon_s"),
        (OrderingConfig, {"band_ratio": 1.0}, "band_ratio"),
        (OrderingConfig, {"urgent_candidates": -1}, "urgent_candidates"),
        (OrderingConfig, {"urgent_candidates": 1.5}, "urgent_candidates"),
        (OrderingConfig, {"infeasible_lookahead": -1}, "infeasible_lookahead"),
        (OverloadConfig, {"w_load": -0.1}, "w_load"),
        (OverloadConfig, {"w_queue": math.nan}, "w_queue"),
        (OverloadConfig, {"w_tail": -1.0}, "w_tail"),
        (OverloadConfig, {"defer_threshold": 1.5}, "defer_threshold"),
        (OverloadConfig, {"reject_xlong_threshold": -0.1}, "reject_xlong_threshold"),
        (OverloadConfig, {"reject_long_threshold": math.nan}, "reject_long_threshold"),
        (OverloadConfig, {"backoff_s": 0.0}, "backoff_s"),
        (OverloadConfig, {"max_backoff_s": -1.0}, "max_backoff_s"),
        (OverloadConfig, {"max_defers": -1}, "max_defers"),
        (OverloadConfig, {"retry_after_s": -1.0}, "retry_after_s"),
        (SignalsConfig, {"ewma_alpha": 0.0}, "ewma_alpha"),
        (SignalsConfig, {"ewma_alpha": 1.5}, "ewma_alpha"),
        (SignalsConfig, {"tail_window": 0}, "tail_window"),
        (SignalsConfig, {"tail_quantile": 1.1}, "tail_quantile"),
        (SignalsConfig, {"tail_ratio_full": 1.0}, "tail_ratio_full"),
        (SignalsConfig, {"queue_ref_s": 0.0}, "queue_ref_s"),
        (SignalsConfig, {"initial_s_per_token": 0.0}, "initial_s_per_token"),
        (SignalsConfig, {"headroom_low": 0.0}, "headroom_low"),
        (SignalsConfig, {"headroom_low": 1.5}, "headroom_low"),
        (SchedulerConfig, {"classes": ()}, "classes"),
        (
            SchedulerConfig,
            {"classes": (ClassSpec(name="a"), ClassSpec(name="a"))},
            "classes",
        ),
        (SchedulerConfig, {"max_inflight": 0}, "max_inflight"),
        (SchedulerConfig, {"max_inflight": 2.5}, "max_inflight"),
        (SchedulerConfig, {"max_inflight_tokens": 0.0}, "max_inflight_tokens"),
        (SchedulerConfig, {"input_token_weight": -1.0}, "input_token_weight"),
    ],
)
def test_bad_value_raises_naming_the_field(cls: type, kwargs: dict[str, Any], field: str) -> None:
    with pytest.raises(ValueError, match=rf"^{field}="):
        cls(**kwargs)


def test_configs_are_frozen_and_with_revalidates() -> None:
    cfg = SchedulerConfig()
    with pytest.raises(AttributeError):
        cfg.max_inflight = 3  # type: ignore[misc]
    assert cfg.with_(max_inflight=3).max_inflight == 3
    assert cfg.max_inflight != 3
    with pytest.raises(ValueError, match=r"^max_inflight="):
        cfg.with_(max_inflight=0)


@pytest.mark.parametrize(
    ("config", "registry"),
    [
        (SchedulerConfig(allocation=AllocationConfig(policy="drr")), ALLOCATION_POLICIES),
        (SchedulerConfig(ordering=OrderingConfig(policy="sjf")), ORDERING_POLICIES),
        (SchedulerConfig(overload=OverloadConfig(policy="panic")), BUCKET_POLICIES),
    ],
    ids=["allocation", "ordering", "overload"],
)
def test_unknown_policy_name_raises_listing_the_choices(
    config: SchedulerConfig, registry: dict[str, Any]
) -> None:
    with pytest.raises(ValueError, match=r"^policy=") as info:
        Engine(config)
    for choice in registry:
        assert repr(choice) in str(info.value)


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_every_preset_builds_an_engine_that_serves_a_request(name: str) -> None:
    cfg = preset(name)
    engine = Engine(cfg)
    prior = Prior(p50=20, p90=40)
    request = Request(id="r", klass=cfg.class_for(prior.routing_bucket), prior=prior)
    assert [type(a) for a in engine.submit(request, 0.0)] == [Send]
    engine.completed("r", 1.0, output_tokens=20)
    assert len(engine) == 0


def test_preset_covers_the_paper_strategies() -> None:
    expected = {"direct_naive", "quota_tiered", "adaptive_drr", "final_adrr_olc"}
    assert expected <= set(PRESETS)


def test_direct_naive_sends_everything_on_arrival() -> None:
    engine = Engine(preset("direct_naive"))
    sent = 0
    for i in range(200):
        prior = Prior(p50=2000, p90=4000)  # xlong: would be shed if overload control ran
        actions = engine.submit(Request(id=f"r{i}", klass="batch", prior=prior), 0.0)
        sent += sum(isinstance(a, Send) for a in actions)
    assert sent == 200


def test_preset_with_changes_and_unknown_name() -> None:
    assert preset("final_adrr_olc", max_inflight=7).max_inflight == 7
    assert PRESETS["final_adrr_olc"].max_inflight != 7  # the registry is not mutated
    with pytest.raises(ValueError, match=r"^name='nope' must be one of") as info:
        preset("nope")
    assert "final_adrr_olc" in str(info.value)


@pytest.mark.parametrize(
    ("classes", "bucket", "expected"),
    [
        (None, Bucket.SHORT, "interactive"),
        (None, Bucket.LONG, "batch"),
        (None, Bucket.UNKNOWN, "batch"),
        (("a", "b"), Bucket.SHORT, "a"),  # no interactive class: the first non-interactive one
    ],
)
def test_default_class_follows_the_routing_bucket(
    classes: tuple[str, ...] | None, bucket: Bucket, expected: str
) -> None:
    config = SchedulerConfig()
    if classes is not None:
        config = config.with_(classes=tuple(ClassSpec(name=n) for n in classes))
    assert config.class_for(bucket) == expected
