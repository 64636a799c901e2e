"""Config validation (fields named in every error), policy registries and presets."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

import pytest

from semisched.core import (
    ALLOCATION_POLICIES,
    ORDERING_POLICIES,
    OVERLOAD_POLICIES,
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
from semisched.core.config import (
    ALLOCATION_POLICY_NAMES,
    ORDERING_POLICY_NAMES,
    OVERLOAD_POLICY_NAMES,
)


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
        # A bool is not an int, nor a number.
        (SchedulerConfig, {"max_inflight": True}, "max_inflight"),
        (OrderingConfig, {"urgent_candidates": False}, "urgent_candidates"),
        (OverloadConfig, {"max_defers": True}, "max_defers"),
        (SignalsConfig, {"tail_window": True}, "tail_window"),
        (AllocationConfig, {"quantum_tokens": True}, "quantum_tokens"),
        (ClassSpec, {"name": "a", "interactive": 1}, "interactive"),
        # Policy names are checked when the config is built.
        (AllocationConfig, {"policy": "drr"}, "policy"),
        (OrderingConfig, {"policy": "sjf"}, "policy"),
        (OverloadConfig, {"policy": "panic"}, "policy"),
        (AllocationConfig, {"policy": None}, "policy"),
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
    ("build", "registry"),
    [
        (lambda: AllocationConfig(policy="drr"), ALLOCATION_POLICIES),
        (lambda: OrderingConfig(policy="sjf"), ORDERING_POLICIES),
        (lambda: OverloadConfig(policy="panic"), OVERLOAD_POLICIES),
    ],
    ids=["allocation", "ordering", "overload"],
)
def test_unknown_policy_name_is_refused_when_the_config_is_built(
    build: Callable[[], object], registry: Mapping[str, Any]
) -> None:
    with pytest.raises(ValueError, match=r"^policy=") as info:
        build()
    for choice in registry:
        assert repr(choice) in str(info.value)


@pytest.mark.parametrize(
    ("layer", "names", "registry", "config_class"),
    [
        ("allocation", ALLOCATION_POLICY_NAMES, ALLOCATION_POLICIES, AllocationConfig),
        ("ordering", ORDERING_POLICY_NAMES, ORDERING_POLICIES, OrderingConfig),
        ("overload", OVERLOAD_POLICY_NAMES, OVERLOAD_POLICIES, OverloadConfig),
    ],
    ids=["allocation", "ordering", "overload"],
)
def test_the_names_a_config_accepts_are_the_registry_names(
    layer: str, names: Mapping[str, Any], registry: Mapping[str, Any], config_class: type
) -> None:
    assert list(registry) == list(names) and len(names) >= 4  # one registry, written once
    for name in names:  # and every accepted name builds an engine
        Engine(SchedulerConfig(**{layer: config_class(policy=name)}))


@pytest.mark.parametrize(
    "registry",
    [ALLOCATION_POLICIES, ORDERING_POLICIES, OVERLOAD_POLICIES, PRESETS],
    ids=["allocation", "ordering", "overload", "presets"],
)
def test_registries_are_read_only(registry: Mapping[str, Any]) -> None:
    name = next(iter(registry))
    with pytest.raises(TypeError):
        registry["mine"] = registry[name]  # type: ignore[index]
    with pytest.raises(TypeError):
        del registry[name]  # type: ignore[attr-defined]
    assert "mine" not in registry


def test_overload_level_tables_are_read_only_too() -> None:
    with pytest.raises(TypeError):
        OVERLOAD_POLICIES["ladder"][Bucket.SHORT] = 2  # type: ignore[index]
    assert Bucket.SHORT not in OVERLOAD_POLICIES["ladder"]


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"allocation": "fifo"}, "allocation"),
        ({"ordering": {"policy": "fifo"}}, "ordering"),
        ({"overload": None}, "overload"),
        ({"budget": {"rpm": 10}}, "budget"),
        ({"classes": [ClassSpec(name="a")]}, "classes"),
        ({"classes": ("a",)}, r"classes\[0\]"),
    ],
)
def test_a_nested_config_of_the_wrong_class_is_a_type_error(
    kwargs: dict[str, Any], field: str
) -> None:
    with pytest.raises(TypeError, match=rf"^{field}="):
        SchedulerConfig(**kwargs)


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


def test_preset_takes_tenants_and_a_budget_as_it_takes_any_field() -> None:
    from semisched.core.policy_config import BudgetConfig
    from semisched.core.tenants.config import TenantConfig, TenantSpec

    tenants = TenantConfig(
        tenants=(TenantSpec(name="web", weight=2), TenantSpec(name="jobs")), default="web"
    )
    config = preset("final_adrr_olc", tenants=tenants, budget=BudgetConfig(rpm=60))
    assert config.tenants == tenants and config.budget == BudgetConfig(rpm=60)
    assert config.allocation == PRESETS["final_adrr_olc"].allocation  # the rest is the preset's
    with pytest.raises(TypeError, match="tenants"):
        preset("final_adrr_olc", tenants=(TenantSpec(name="web"),))  # a TenantConfig, not specs


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
