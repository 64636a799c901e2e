"""Every API that spends a key's tokens, through the SDK: the Responses API and embeddings
scheduled like chat, and the calls still passed through counted against the budget.

A real ``AsyncOpenAI`` client against the in-process mock provider, in virtual time.
"""

from __future__ import annotations

import anyio
import pytest
from runtime_kit import chat, mock_client

from semisched import Scheduler
from semisched.core import preset
from semisched.core.config import BudgetConfig
from semisched.runtime.apis import APIS, api_for_path
from semisched.runtime.callargs import CallArgs
from semisched.runtime.calls import prepare_call

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.filterwarnings("ignore:Async generator 'openai._streaming.:ResourceWarning"),
]


def test_each_api_is_one_entry_found_by_its_path() -> None:
    assert list(APIS) == ["chat", "completions", "responses", "embeddings"]
    for name, spec in APIS.items():
        assert api_for_path(spec.path) is spec and api_for_path(spec.path + "/") is spec
        assert spec.name == name
    assert api_for_path("/v1/files") is None


def test_a_call_names_its_api_by_its_prompt_field_or_by_api() -> None:
    assert prepare_call(model="m", input="hi").api == "responses"
    embedding = prepare_call(model="m", input=["a", "b"], api="embeddings")
    assert embedding.api == "embeddings" and embedding.output_cap == 0  # it generates nothing
    assert embedding.prior is not None and embedding.prior.p90 == 1.0  # so it asks for no prior
    ids = {"model": "m", "input": [[1, 2, 3], [4]], "api": "embeddings"}
    tokens = prepare_call(CallArgs.of(ids))
    assert tokens.prompt_tokens == 4  # token ids are counted, not estimated
    with pytest.raises(ValueError, match="takes input=, not messages="):
        prepare_call(model="m", messages=[{"role": "user", "content": "x"}], api="responses")
    with pytest.raises(ValueError, match="does not stream"):
        prepare_call(model="m", input="x", api="embeddings", params={"stream": True})
    with pytest.raises(ValueError, match="exactly one of"):
        prepare_call(model="m", input="x", prompt="y")
    with pytest.raises(TypeError, match=r"no responses\.create"):  # an openai without it
        prepare_call(model="m", input="x", allowed_params={"chat": None})
    capped = prepare_call(model="m", input="x", params={"max_output_tokens": 7})
    assert capped.output_cap == 7  # the Responses API's cap


async def test_a_response_is_scheduled_and_its_usage_read() -> None:
    async with mock_client() as mock:
        async with Scheduler(mock.client) as s:
            answer = await s.client.responses.create(
                model="mock-1", input="say something", instructions="be brief",
                max_output_tokens=6, previous_response_id="resp_earlier", store=False,
            )  # fmt: skip
            stats = s.statistics()
        sent = mock.recorder.bodies[-1]
    assert answer.usage.output_tokens <= 6 and answer.output_text
    assert stats.counters.submitted == 1 and stats.engine.counters.completed == 1
    assert stats.engine.endpoints[0].completed == 1
    # state that refers to earlier calls passes through unchanged
    assert sent["previous_response_id"] == "resp_earlier" and sent["store"] is False
    assert sent["max_output_tokens"] == 6 and "stream_options" not in sent


async def test_a_streamed_response_holds_its_slot_until_its_last_event() -> None:
    async with mock_client() as mock:
        async with Scheduler(mock.client) as s:
            stream = await s.client.responses.create(model="mock-1", input="tell me", stream=True)
            assert s.statistics().engine.inflight == 1  # held while the events come
            kinds = [event.type async for event in stream]
            stats = s.statistics()
    assert kinds[0] == "response.created" and kinds[-1] in ("response.completed",
                                                            "response.incomplete")  # fmt: skip
    assert "response.output_text.delta" in kinds
    assert stats.engine.inflight == 0 and stats.engine.counters.completed == 1


async def test_embeddings_are_scheduled_and_cost_their_input() -> None:
    async with mock_client() as mock:
        async with Scheduler(mock.client) as s:
            vectors = await s.client.embeddings.create(model="mock-1", input=["one two", "three"])
            stats = s.statistics()
    assert len(vectors.data) == 2 and vectors.usage.prompt_tokens > 0
    assert stats.engine.counters.completed == 1


async def test_a_mix_of_apis_over_one_key_meets_no_429_with_the_budget_at_the_limit() -> None:
    config = preset("final_adrr_olc", budget=BudgetConfig(rpm=30, tpm=2_000))
    async with mock_client(rpm=30, tpm=2_000) as mock:
        async with Scheduler(mock.client, config=config) as s:
            async with anyio.create_task_group() as tg:
                for i in range(30):
                    if i % 3 == 0:
                        tg.start_soon(lambda: s.submit(**chat("a few words", max_tokens=40)))
                    elif i % 3 == 1:
                        tg.start_soon(lambda: s.client.responses.create(
                            model="mock-1", input="a few words", max_output_tokens=40))  # fmt: skip
                    else:
                        tg.start_soon(lambda: s.client.embeddings.create(
                            model="mock-1", input=["a few words"] * 5))  # fmt: skip
            stats = s.statistics()
    counters = mock.stats().counters
    assert counters.rate_limited_requests == 0 and counters.rate_limited_tokens == 0
    assert stats.engine.counters.completed == 30


async def test_an_unscheduled_call_with_usage_counts_against_the_budget_and_warns_once() -> None:
    config = preset("final_adrr_olc", budget=BudgetConfig(rpm=100, tpm=10_000))
    async with mock_client() as mock:
        async with Scheduler(mock.client, config=config) as s:
            parse = s.client.chat.completions
            assert parse.create is not None  # the scheduled create is there
            before = s.statistics().engine.budget
            raw = mock.client.chat.completions  # what an unscheduled call looks like

            class Answer:
                class usage:
                    total_tokens = 1234

            async def spend(**_: object) -> Answer:
                return Answer()

            raw.spend = spend  # type: ignore[attr-defined]
            with pytest.warns(UserWarning, match=r"chat\.completions\.spend\(\) is not scheduled"):
                await s.client.chat.completions.spend()
            await s.client.chat.completions.spend()  # warned once only
            after = s.statistics().engine.budget
    assert before is not None and after is not None
    assert after.used_tokens - before.used_tokens == pytest.approx(2 * 1234)
    assert after.used_requests - before.used_requests == pytest.approx(2)
