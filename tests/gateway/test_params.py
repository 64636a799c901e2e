"""What the gateway checks before sending, as plain functions: the body's JSON, each field's
row, the declared models, the service tiers, duplicated headers, the stripped-fields header."""

from __future__ import annotations

import json
from typing import Any

import pytest

from semisched.gateway.config import GatewayConfigError
from semisched.gateway.configfile import config_from_dict
from semisched.gateway.field_rules import (
    API_RULES,
    CHAT_RULES,
    COMPLETION_RULES,
    MAX_OUTPUT_TOKENS,
)
from semisched.gateway.hints import (
    API_FIELDS,
    CHAT_FIELDS,
    COMPLETION_FIELDS,
    MAX_STRIPPED_BYTES,
    BadHint,
    BadRequest,
    read_hints,
    request_headers,
    stripped_header,
)
from semisched.gateway.limits import Refused
from semisched.gateway.params import (
    QUOTE_CHARS,
    RequestChecks,
    declared_models,
    parse_body,
    quote,
    refuse_stream,
)
from semisched.runtime.apis import APIS, ApiSpec

HI = [{"role": "user", "content": "hi"}]
CHAT = {"model": "m", "messages": HI}
COMPLETION = {"model": "m", "prompt": "once upon"}
RESPONSE = {"model": "m", "input": "once upon"}
EMBEDDING = {"model": "m", "input": ["a", "b"], "_api": "embeddings"}  # _api: not a field
CHAT_API = APIS["chat"]


def refusal(call: Any) -> BadRequest:
    with pytest.raises(BadRequest) as caught:
        call()
    return caught.value


# -- the body's JSON ------------------------------------------------------------------


@pytest.mark.parametrize(("raw", "says"), [
    (b'{"model": "m", "temperature": NaN}', "NaN is not a JSON number"),
    (b'{"model": "m", "temperature": Infinity}', "Infinity is not a JSON number"),
    (b'{"model": "m", "temperature": -Infinity}', "-Infinity is not a JSON number"),
    (b'{"model": "m", "temperature": 1e999}', "too large"),
    (b'{"model": "a", "model": "b"}', "'model' is given twice"),
    (b'{"messages": [{"role": "user", "role": "system"}]}', "'role' is given twice"),
    (b'[1, 2]', "must be a JSON object"),
    (b'"text"', "must be a JSON object"),
    (b'{"model": ', "not valid JSON"),
    (b'{"model": "m"} {}', "not valid JSON"),
    (b'{"model": "\xff"}', "not UTF-8"),
    (b'{"n": ' + b"1" * 5000 + b"}", "integer too long"),
])  # fmt: skip
def test_a_body_that_is_not_one_plain_json_object_is_refused(raw: bytes, says: str) -> None:
    error = refusal(lambda: parse_body(raw, 128))
    assert (error.status, error.code) == (400, "invalid_json")
    assert says in str(error)


def test_a_good_body_parses_as_json_loads_would() -> None:
    raw = json.dumps({**CHAT, "temperature": 0.5, "logit_bias": {"50256": -100}}).encode()
    assert parse_body(raw, 128) == json.loads(raw)
    assert parse_body(b"\xef\xbb\xbf" + raw, 128) == json.loads(raw)  # a byte-order mark


@pytest.mark.parametrize("raw", [b"[" * 200 + b"]" * 200, b"[" * 100_000 + b"]" * 100_000])
def test_nesting_is_the_limits_modules_refusal(raw: bytes) -> None:
    with pytest.raises(Refused) as caught:
        parse_body(b'{"a": ' + raw + b"}", 128)
    assert caught.value.status == 400


# -- the fields' rows -----------------------------------------------------------------

#: (route's base body, field, bad value): one row per way a field can be wrong.
BAD_FIELDS: list[tuple[dict[str, Any], str, Any]] = [
    (CHAT, "n", 10**9), (CHAT, "n", -1), (CHAT, "n", 0), (CHAT, "n", 1.5), (CHAT, "n", True),
    (CHAT, "temperature", "hot"), (CHAT, "temperature", 2.5), (CHAT, "temperature", -0.1),
    (CHAT, "top_p", 1.01), (CHAT, "presence_penalty", -3), (CHAT, "frequency_penalty", 2.1),
    (CHAT, "max_tokens", 10**8), (CHAT, "max_tokens", 0), (CHAT, "max_tokens", "5"),
    (CHAT, "max_completion_tokens", MAX_OUTPUT_TOKENS + 1), (CHAT, "stream", "yes"),
    (CHAT, "stream", None), (CHAT, "stop", ["a", "b", "c", "d", "e"]), (CHAT, "stop", 3),
    (CHAT, "stop", [1]), (CHAT, "messages", []), (CHAT, "messages", "hi"),
    (CHAT, "messages", [{"content": "no role"}]), (CHAT, "messages", ["hi"]),
    (CHAT, "model", ""), (CHAT, "model", 4), (CHAT, "model", None),
    (CHAT, "logit_bias", {"50256": 200}), (CHAT, "logit_bias", {"word": 1}),
    (CHAT, "logit_bias", [1]), (CHAT, "seed", 2**63), (CHAT, "seed", "42"),
    (CHAT, "top_logprobs", 21), (CHAT, "logprobs", 5), (CHAT, "tools", {}),
    (CHAT, "tool_choice", 1), (CHAT, "response_format", "json"), (CHAT, "user", 7),
    (CHAT, "service_tier", 1), (CHAT, "stream_options", True),
    (COMPLETION, "logprobs", 6), (COMPLETION, "logprobs", True), (COMPLETION, "best_of", 21),
    (COMPLETION, "echo", "yes"), (COMPLETION, "prompt", 5), (COMPLETION, "prompt", None),
    (COMPLETION, "n", 129), (COMPLETION, "suffix", []),
    (RESPONSE, "input", None), (RESPONSE, "input", []), (RESPONSE, "input", 3),
    (RESPONSE, "max_output_tokens", 0), (RESPONSE, "max_output_tokens", "5"),
    (RESPONSE, "max_output_tokens", MAX_OUTPUT_TOKENS + 1), (RESPONSE, "temperature", 3),
    (RESPONSE, "top_p", -1), (RESPONSE, "instructions", ["x"]), (RESPONSE, "store", "no"),
    (RESPONSE, "previous_response_id", 7), (RESPONSE, "metadata", "x"),
    (RESPONSE, "reasoning", "high"), (RESPONSE, "tools", {}), (RESPONSE, "stream", None),
    (RESPONSE, "top_logprobs", 21), (RESPONSE, "max_tool_calls", -1),
    (RESPONSE, "background", 1), (RESPONSE, "include", "x"), (RESPONSE, "text", []),
    (EMBEDDING, "input", ""), (EMBEDDING, "input", []), (EMBEDDING, "input", {}),
    (EMBEDDING, "dimensions", 0), (EMBEDDING, "dimensions", 1.5),
    (EMBEDDING, "encoding_format", "int8"), (EMBEDDING, "user", 1),
]  # fmt: skip


def api_of(base: dict[str, Any]) -> ApiSpec:
    if "_api" in base:
        return APIS[base["_api"]]
    return next(s for s in APIS.values() if s.prompt_field in base)


def body_of(base: dict[str, Any], **fields: Any) -> dict[str, Any]:
    return {k: v for k, v in {**base, **fields}.items() if k != "_api"}


@pytest.mark.parametrize(("base", "field", "value"), BAD_FIELDS)
def test_each_bad_field_is_a_400_naming_it(base: dict[str, Any], field: str, value: Any) -> None:
    body = body_of(base, **{field: value})
    error = refusal(lambda: RequestChecks().check(body, api=api_of(base), tenant="t"))
    assert (error.status, error.param, error.code) == (400, field, "invalid_value")
    assert str(error).startswith(f"{field}: ")


@pytest.mark.parametrize(("base", "field"), [
    (CHAT, "model"), (CHAT, "messages"), (COMPLETION, "model"), (COMPLETION, "prompt"),
    (RESPONSE, "model"), (RESPONSE, "input"), (EMBEDDING, "model"), (EMBEDDING, "input"),
])  # fmt: skip
def test_a_missing_required_field_is_a_400(base: dict[str, Any], field: str) -> None:
    body = {k: v for k, v in body_of(base).items() if k != field}
    error = refusal(lambda: RequestChecks().check(body, api=api_of(base), tenant="t"))
    assert (error.status, error.param, error.code) == (400, field, "missing_required_parameter")


@pytest.mark.parametrize("value", [True, "yes", 1, {}])
def test_stream_on_an_api_that_never_streams_is_a_400(value: Any) -> None:
    error = refusal(lambda: refuse_stream({**EMBEDDING, "stream": value}, APIS["embeddings"]))
    assert (error.status, error.param, error.code) == (400, "stream", "invalid_value")
    assert "/v1/embeddings" in str(error)
    for quiet in (False, None):  # stripped later as a foreign field, never refused
        refuse_stream({**EMBEDDING, "stream": quiet}, APIS["embeddings"])
    for spec in (APIS["chat"], APIS["responses"]):
        refuse_stream({"stream": True}, spec)


def test_good_bodies_pass_with_nulls_where_openai_takes_them() -> None:
    chat = {**CHAT, "n": 128, "temperature": 2, "top_p": 0, "presence_penalty": -2,
            "frequency_penalty": 2.0, "max_tokens": MAX_OUTPUT_TOKENS, "stream": True,
            "stop": ["a", "b", "c", "d"], "logit_bias": {"50256": -100}, "seed": -(2**63),
            "top_logprobs": 20, "logprobs": True, "tools": [], "tool_choice": "auto",
            "response_format": {"type": "json_object"}, "user": "u", "service_tier": "auto",
            "max_completion_tokens": None, "store": None}  # fmt: skip
    RequestChecks().check(chat, api=APIS["chat"], tenant="t")
    completion = {**COMPLETION, "prompt": [[1, 2]], "logprobs": 5, "best_of": 20,
                  "echo": False, "suffix": None, "stop": "\n"}  # fmt: skip
    RequestChecks().check(completion, api=APIS["completions"], tenant="t")
    response = {**RESPONSE, "input": [{"role": "user", "content": "hi"}], "store": False,
                "previous_response_id": "resp_1", "max_output_tokens": 1, "stream": False,
                "metadata": {"k": "v"}, "reasoning": {"effort": "low"}, "text": None,
                "conversation": "conv_1", "max_tool_calls": None, "top_logprobs": 0,
                "tool_choice": {"type": "function", "name": "f"}}  # fmt: skip
    RequestChecks().check(response, api=APIS["responses"], tenant="t")
    RequestChecks().check({**RESPONSE, "input": ""}, api=APIS["responses"], tenant="t")
    embedding = {**body_of(EMBEDDING), "input": [[1, 2], [3]], "dimensions": 8,
                 "encoding_format": "base64", "user": None}  # fmt: skip
    RequestChecks().check(embedding, api=APIS["embeddings"], tenant="t")


def test_every_forwarded_field_has_a_row_and_no_row_is_for_a_stripped_field() -> None:
    assert set(CHAT_RULES) == CHAT_FIELDS
    assert set(COMPLETION_RULES) == COMPLETION_FIELDS
    assert set(API_FIELDS) == set(API_RULES) == set(APIS)  # every scheduled API has a route
    for name, spec in APIS.items():
        assert set(API_RULES[name]) == API_FIELDS[name]
        assert {"model", spec.prompt_field} <= API_FIELDS[name]
        assert ("stream" in API_FIELDS[name]) == spec.streams
        assert set(spec.cap_fields) <= API_FIELDS[name]
    # the SDK's own argument names never ride in a body (the Responses API's prompt template)
    assert "prompt" not in API_FIELDS["responses"]


@pytest.mark.parametrize("value", ["x" * 100_000, 10**4000, 1e308, list(range(10**5)),
                                   {str(i): i for i in range(10**4)}])  # fmt: skip
def test_a_refused_value_is_quoted_by_a_short_prefix(value: Any) -> None:
    body = {**CHAT, "temperature": value}
    error = refusal(lambda: RequestChecks().check(body, api=CHAT_API, tenant="t"))
    assert len(str(error)) < QUOTE_CHARS + 100
    assert len(quote(value)) <= QUOTE_CHARS + 5


# -- models and service tiers ---------------------------------------------------------


def test_an_undeclared_model_is_a_404_and_any_model_goes_when_none_is_declared() -> None:
    checks = RequestChecks(models=frozenset({"mock-1"}))
    checks.check({**CHAT, "model": "mock-1"}, api=CHAT_API, tenant="t")
    error = refusal(lambda: checks.check(CHAT, api=CHAT_API, tenant="t"))
    assert (error.status, error.param, error.code) == (404, "model", "model_not_found")
    RequestChecks(models=None).check(CHAT, api=CHAT_API, tenant="t")


def endpoint(name: str, model_map: dict[str, str] | None = None) -> dict[str, Any]:
    table: dict[str, Any] = {"name": name, "base_url": f"http://127.0.0.1:9/{name}"}
    return table if model_map is None else {**table, "model_map": model_map}


@pytest.mark.parametrize(("gateway", "endpoints", "declared"), [
    ({}, [endpoint("a")], None),
    ({"models": ["m1"]}, [endpoint("a")], {"m1"}),
    ({}, [endpoint("a", {"m2": "d"}), endpoint("b", {"m3": "d"})], {"m2", "m3"}),
    ({}, [endpoint("a", {"m2": "d"}), endpoint("b")], None),  # b serves any model
    ({"models": ["m1"]}, [endpoint("a", {"m2": "d"}), endpoint("b")], {"m1", "m2"}),
])  # fmt: skip
def test_the_declared_models_are_those_get_models_lists(
    gateway: dict[str, Any], endpoints: list[dict[str, Any]], declared: set[str] | None
) -> None:
    config = config_from_dict({"gateway": {"auth": False, **gateway}, "endpoint": endpoints})
    assert declared_models(config) == (None if declared is None else frozenset(declared))


def test_a_service_tier_beyond_auto_and_default_needs_the_tenants_permission() -> None:
    config = config_from_dict({
        "tenant": [{"name": "web", "key_sha256": "a" * 64, "service_tiers": ["priority"]},
                   {"name": "batch", "key_sha256": "b" * 64}],
        "endpoint": [endpoint("mock")],
    })  # fmt: skip
    assert dict(config.service_tiers) == {"web": ("priority",)}
    checks = RequestChecks.of(config)
    for tier in ("auto", "default", None):
        checks.check({**CHAT, "service_tier": tier}, api=CHAT_API, tenant="batch")
    checks.check({**CHAT, "service_tier": "priority"}, api=CHAT_API, tenant="web")
    for tenant, tier in (("batch", "priority"), ("web", "flex"), ("batch", "scale")):
        body = {**CHAT, "service_tier": tier}
        error = refusal(lambda b=body, t=tenant: checks.check(b, api=CHAT_API, tenant=t))
        assert (error.status, error.param, error.code) == (
            403,
            "service_tier",
            "service_tier_not_allowed",
        )


@pytest.mark.parametrize("tiers", ["priority", [""], [1]])
def test_a_bad_service_tiers_setting_is_a_config_error(tiers: Any) -> None:
    with pytest.raises(GatewayConfigError, match="service_tiers"):
        config_from_dict({"tenant": [{"name": "web", "key_sha256": "a" * 64,
                                      "service_tiers": tiers}],
                          "endpoint": [endpoint("mock")]})  # fmt: skip


# -- headers --------------------------------------------------------------------------


@pytest.mark.parametrize("name", [b"authorization", b"x-semisched-class", b"x-semisched-tenant"])
def test_authorization_or_a_hint_given_twice_is_a_400(name: bytes) -> None:
    raw = [(b"host", b"h"), (name, b"Bearer a"), (b"accept", b"*/*"), (name, b"Bearer b")]
    with pytest.raises(BadHint) as caught:
        request_headers(raw)
    assert (caught.value.status, caught.value.code) == (400, "duplicate_header")
    assert caught.value.param == name.decode()


def test_other_headers_may_come_twice_and_the_last_one_is_read() -> None:
    raw = [(b"accept", b"a"), (b"authorization", b"Bearer k"), (b"accept", b"b")]
    assert request_headers(raw) == {"accept": "b", "authorization": "Bearer k"}


# -- the stripped-fields header -------------------------------------------------------


@pytest.mark.parametrize(("names", "header"), [
    (["guardrails", "metadata", "priority"], "guardrails,metadata,priority"),
    (["caf\u00e9", "metadata"], "metadata,+1 more"),
    (["bad\r\nx-evil: 1", "ok"], "ok,+1 more"),
    (["\u2603"], "+1 more"),
    ([f"f{i:05}" for i in range(20_000)], ",".join(f"f{i:05}" for i in range(16)) + ",+19984 more"),
    (["x" * 65, "y"], "y,+1 more"),
])  # fmt: skip
def test_the_stripped_header_is_short_ascii_and_counts_the_rest(
    names: list[str], header: str
) -> None:
    value = stripped_header(names)
    assert value == header
    assert value.isascii() and "\r" not in value and "\n" not in value


def test_the_stripped_header_is_bounded_in_bytes() -> None:
    names = [c * 64 for c in "abcdefghijklmnopqrstuvwxyz"]
    value = stripped_header(names)
    shown = value.split(",")[:-1]
    assert len(",".join(shown)) <= MAX_STRIPPED_BYTES and shown == names[: len(shown)]
    assert value.endswith(f",+{len(names) - len(shown)} more")


def test_the_stripped_header_is_decided_with_the_hints() -> None:
    body = {**CHAT, "caf\u00e9": 1, "guardrails": 2}
    hints = read_hints({}, body, tenant="t", allowed=CHAT_FIELDS, classes=("interactive",))
    assert hints.stripped == ("caf\u00e9", "guardrails") and set(body) == set(CHAT)
    assert hints.response_headers() == {"x-semisched-stripped": "guardrails,+1 more"}
    assert read_hints({}, dict(CHAT), tenant="t", allowed=CHAT_FIELDS,
                      classes=()).response_headers() == {}  # fmt: skip
