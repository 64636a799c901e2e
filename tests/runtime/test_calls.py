"""Preparing a call (semisched.runtime.calls): pure validation, no scheduler, no client, no loop."""

from __future__ import annotations

import math
from typing import Any

import pytest

from semisched.core import Prior
from semisched.runtime.callargs import SCHEDULER_ARGS, PreparedCall
from semisched.runtime.calls import accepted_params, output_cap, prepare_call

MESSAGES = [{"role": "user", "content": "hello"}]


def test_a_chat_call_without_any_client() -> None:
    call = prepare_call(
        model="m",
        messages=MESSAGES,
        klass="batch",
        deadline=30,
        prior=(10, 20),
        params={"max_completion_tokens": 64, "temperature": 0.2},
    )
    assert isinstance(call, PreparedCall)
    assert call.api == "chat"
    assert dict(call.params) == {
        "model": "m",
        "messages": MESSAGES,
        "max_completion_tokens": 64,
        "temperature": 0.2,
    }
    assert not SCHEDULER_ARGS & set(call.params)
    assert (call.klass, call.deadline_s, call.output_cap) == ("batch", 30.0, 64)
    assert call.prior == Prior(p50=10.0, p90=20.0)
    assert (call.prompt_nbytes, call.prompt_kind) == (5, "prose")
    assert not call.stream and not call.added_usage
    with pytest.raises(TypeError):
        call.params["model"] = "other"  # type: ignore[index]


def test_a_completions_call_and_its_prior_query() -> None:
    call = prepare_call(model="m", prompt="once upon", params={"max_tokens": 7})
    assert call.api == "completions"
    query = call.prior_query("req-1")
    assert (query.request_id, query.prompt, query.messages, query.max_tokens) == (
        "req-1", "once upon", None, 7
    )  # fmt: skip


@pytest.mark.parametrize(
    ("params", "cap"),
    [
        ({}, None),
        ({"max_tokens": 100}, 100),
        ({"max_completion_tokens": 80}, 80),
        ({"max_completion_tokens": 80, "max_tokens": 80}, 80),
        ({"max_completion_tokens": 80, "max_tokens": None}, 80),
        ({"max_completion_tokens": None, "max_tokens": 50}, 50),
    ],
)
def test_one_rule_for_the_output_cap(params: dict[str, Any], cap: int | None) -> None:
    assert output_cap(params) == cap
    call = prepare_call(model="m", messages=MESSAGES, params=params)
    assert call.output_cap == cap
    assert call.prior_query("r").max_tokens == cap


@pytest.mark.parametrize(
    ("params", "error", "match"),
    [
        ({"max_completion_tokens": 80, "max_tokens": 100}, ValueError, "max_completion_tokens=80"),
        ({"max_tokens": True}, TypeError, "max_tokens=True"),
        ({"max_completion_tokens": False}, TypeError, "max_completion_tokens=False"),
        ({"max_tokens": 10.0}, TypeError, "max_tokens="),
        ({"max_tokens": "10"}, TypeError, "max_tokens="),
        ({"max_tokens": -1}, ValueError, "max_tokens=-1"),
        ({"max_tokens": 0}, ValueError, "max_tokens=0 must be an int >= 1"),
        ({"max_completion_tokens": 10**8 + 1}, ValueError, "must be at most 100_000_000"),
    ],
)
def test_bad_output_caps(params: dict[str, Any], error: type[Exception], match: str) -> None:
    with pytest.raises(error, match=match):
        prepare_call(model="m", messages=MESSAGES, params=params)


def test_disagreeing_caps_name_both() -> None:
    with pytest.raises(ValueError, match="max_completion_tokens=80") as info:
        output_cap({"max_completion_tokens": 80, "max_tokens": 100})
    assert "max_tokens=100" in str(info.value)


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"messages": None}, ValueError, "exactly one of"),
        ({"prompt": "x"}, ValueError, "exactly one of"),
        ({"messages": "hello"}, TypeError, "messages"),
        ({"messages": [{"content": "no role"}]}, ValueError, r"messages\[0\]"),
        ({"deadline": 0}, ValueError, "deadline="),
        ({"deadline": math.nan}, ValueError, "deadline="),
        ({"deadline": True}, TypeError, "deadline="),
        ({"deadline": "5"}, TypeError, "deadline="),
        ({"prior": (True, 2)}, TypeError, "prior="),
        ({"prior": (1, 2, 3)}, TypeError, "prior="),
        ({"prior": (50, 10)}, ValueError, "p90="),
        ({"klass": "vip"}, ValueError, "klass="),
        ({"model": ""}, ValueError, "model="),
        ({"model": None}, ValueError, "model="),
        ({"params": {"stream": 1}}, TypeError, "stream="),
        ({"params": {"stream": True, "stream_options": "all"}}, TypeError, "stream_options="),
        ({"params": {"deadline": 5}}, TypeError, "named argument"),
        ({"params": {"model": "n"}}, TypeError, "named argument"),
    ],
)
def test_misuse_names_the_argument(
    kwargs: dict[str, Any], error: type[Exception], match: str
) -> None:
    args: dict[str, Any] = {"model": "m", "messages": MESSAGES, "class_names": ["a", "batch"]}
    with pytest.raises(error, match=match):
        prepare_call(**{**args, **kwargs})


def test_allowed_params_per_endpoint() -> None:
    allowed = {"chat": frozenset({"max_tokens"}), "completions": None}
    prepare_call(model="m", messages=MESSAGES, params={"max_tokens": 3}, allowed_params=allowed)
    prepare_call(model="m", prompt="p", params={"anything": 1}, allowed_params=allowed)
    with pytest.raises(TypeError, match=r"unknown keyword argument\(s\) for chat: \['top_k'\]"):
        prepare_call(model="m", messages=MESSAGES, params={"top_k": 3}, allowed_params=allowed)
    with pytest.raises(TypeError, match=r"no completions\.create"):
        prepare_call(model="m", prompt="p", allowed_params={"chat": None})


def test_any_params_and_any_class_without_restrictions() -> None:
    call = prepare_call(model="m", messages=MESSAGES, klass="anything", params={"top_k": 3})
    assert call.params["top_k"] == 3
    assert call.klass == "anything"


def test_a_stream_asks_for_usage_once() -> None:
    added = prepare_call(model="m", messages=MESSAGES, params={"stream": True})
    assert added.stream and added.added_usage
    assert added.params["stream_options"] == {"include_usage": True}
    kept = prepare_call(
        model="m",
        messages=MESSAGES,
        params={"stream": True, "stream_options": {"include_usage": True}},
    )
    assert not kept.added_usage
    merged = prepare_call(
        model="m", messages=MESSAGES, params={"stream": True, "stream_options": {"x": 1}}
    )
    assert merged.params["stream_options"] == {"x": 1, "include_usage": True}


def test_accepted_params_reads_a_signature() -> None:
    class Strict:
        def create(self, *, model: str, messages: list[Any], max_tokens: int = 0) -> None: ...

    class Loose:
        def create(self, **kwargs: Any) -> None: ...

    assert accepted_params(Strict()) == frozenset({"max_tokens"})
    assert accepted_params(Loose()) is None
    assert accepted_params(object()) == frozenset()


def test_the_per_call_signature_is_written_once() -> None:
    import inspect

    from semisched import Scheduler
    from semisched.runtime.callargs import CallArgs
    from semisched.runtime.facade import ScheduledClient

    names = [f for f in CallArgs.__dataclass_fields__ if f != "params"]
    for func in (Scheduler.submit, Scheduler.check, ScheduledClient(None).chat.completions.create):  # type: ignore[arg-type]
        params = inspect.signature(func).parameters
        assert [p for p in params if p not in ("self", "params")] == names
        assert params["params"].kind is inspect.Parameter.VAR_KEYWORD
    assert {"api", "klass", "deadline", "prior", "tenant"} == SCHEDULER_ARGS
