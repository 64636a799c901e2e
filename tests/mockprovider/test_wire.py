"""The mock's wire format without a server: parsing and bodies (mockprovider.wire,
mockprovider.completions)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from mockprovider.completions import parse_job
from mockprovider.faults import Fault
from mockprovider.wire import BadRequest, Job, completion_body, stream_head, stream_tail

MESSAGES: Any = [{"role": "user", "content": "x" * 40}]  # 10 prompt tokens


def job(headers: dict[str, str] | None = None, *, chat: bool = True, **body: Any) -> Job:
    payload = {"model": "m", **({"messages": MESSAGES} if chat else {"prompt": "x" * 40}), **body}
    return parse_job(headers or {}, json.dumps(payload).encode(), chat=chat, default_output=7)


@pytest.mark.parametrize(
    ("headers", "body", "output", "finish", "charge"),
    [
        ({}, {}, 7, "stop", 10 + 7),  # the default length, charged as such
        ({}, {"max_tokens": 5}, 5, "stop", 10 + 5),
        ({"x-mock-output-tokens": "50"}, {"max_tokens": 20}, 20, "length", 10 + 20),
        ({"x-mock-output-tokens": "3"}, {"max_completion_tokens": 20}, 3, "stop", 10 + 20),
        ({}, {"metadata": {"mock_output_tokens": "12"}}, 12, "stop", 10 + 12),
        (
            {"x-mock-output-tokens": "4"},
            {"metadata": {"mock_output_tokens": "12"}},
            4,
            "stop",
            10 + 4,
        ),  # the header wins
        ({"x-mock-input-tokens": "100"}, {"max_tokens": 1}, 1, "stop", 100 + 1),
    ],
)
def test_output_length_finish_reason_and_charge(
    headers: dict[str, str], body: dict[str, Any], output: int, finish: str, charge: int
) -> None:
    parsed = job(headers, **body)
    assert (parsed.output_tokens, parsed.finish_reason, parsed.charge) == (output, finish, charge)


def test_forced_fault_header_and_its_errors() -> None:
    assert job({"x-mock-fault": " Drop "}).forced_fault is Fault.DROP
    assert job().forced_fault is None
    with pytest.raises(BadRequest) as info:
        job({"x-mock-fault": "explode"})
    assert info.value.param == "x-mock-fault"


@pytest.mark.parametrize("chat", [True, False])
def test_a_stream_reassembles_to_the_json_answer(chat: bool) -> None:
    parsed = job({"x-mock-output-tokens": "9"}, chat=chat, stream=True)
    head, *tail = [stream_head(parsed, "id", 0), *stream_tail(parsed, "id", 0)]
    assert tail[-1] == b"data: [DONE]\n\n"
    chunks = [json.loads(event.removeprefix(b"data: ")) for event in [head, *tail[:-1]]]
    if chat:
        text = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks)
        whole = completion_body(parsed, "id", 0)["choices"][0]["message"]["content"]
    else:
        text = "".join(c["choices"][0]["text"] for c in chunks)
        whole = completion_body(parsed, "id", 0)["choices"][0]["text"]
    assert text == whole
    assert len(whole.split()) == 9
    assert chunks[-1]["choices"][0]["finish_reason"] == "stop"


def test_a_cap_beyond_the_context_window_is_vllms_400() -> None:
    with pytest.raises(BadRequest) as info:
        parse_job({}, json.dumps({"model": "m", "messages": MESSAGES, "max_tokens": 95}).encode(),
                  chat=True, default_output=7, context_tokens=100)  # fmt: skip
    assert info.value.message == (
        "'max_tokens' or 'max_completion_tokens' is too large: 95. This model's maximum "
        "context length is 100 tokens and your request has 10 input tokens (95 > 100 - 10)."
    )
    error = info.value
    assert (error.param, error.type, error.code) == ("max_tokens", "BadRequestError", 400)
    fits = parse_job({}, json.dumps({"model": "m", "messages": MESSAGES,
                                     "max_completion_tokens": 90}).encode(),
                     chat=True, default_output=7, context_tokens=100)  # fmt: skip
    assert fits.output_tokens == 90


def test_a_prompt_that_fills_the_context_window_is_vllms_400() -> None:
    body = json.dumps({"model": "m", "prompt": "x"}).encode()
    with pytest.raises(BadRequest) as info:
        parse_job({"x-mock-input-tokens": "100"}, body, chat=False, default_output=7,
                  context_tokens=100)  # fmt: skip
    assert info.value.message.startswith(
        "This model's maximum context length is 100 tokens. However, your request has 100 "
        "input tokens."
    )
    assert info.value.param == "prompt"


def test_without_a_cap_the_context_window_cuts_the_answer() -> None:
    body = json.dumps({"model": "m", "messages": MESSAGES}).encode()
    cut = parse_job({"x-mock-output-tokens": "500"}, body, chat=True, default_output=7,
                    context_tokens=100)  # fmt: skip
    assert (cut.output_tokens, cut.finish_reason) == (90, "length")
