"""Priority a gateway user states: ``[[class]]`` tables, ``[priority]`` (an integer
``priority``, ``service_tier``), a key's and a tenant's class, and the deadlines a class
or tenant gives, whose passing while queued sheds the request with a 429.

The served tests run a real gateway in front of a recording :class:`~gateway_kit.Capture`
that answers at once (or holds everything until released). Which class and deadline the
scheduler saw is read from a tracker that records each request as it is submitted; a
shed happens because the only send slot is held until the test releases it, never
because of how long anything took.
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx2
import pytest
from gateway_kit import UPSTREAM_SECRET, Capture, Servers, mock_app, servers, wait_for
from prometheus_client import CollectorRegistry

from semisched.core.buckets import Bucket
from semisched.gateway.app import Gateway
from semisched.gateway.config import GatewayConfig, GatewayConfigError
from semisched.gateway.configfile import config_from_dict, load_config
from semisched.gateway.hints import BadHint
from semisched.gateway.keys import key_hash
from semisched.gateway.priority import PriorityRules
from semisched.gateway.tickets import Tracker

ROOT = Path(__file__).resolve().parents[2]
ENDPOINT = [{"name": "mock", "base_url": "http://127.0.0.1:1/v1", "key_env": "UPSTREAM_KEY"}]
#: A chat completion, as the upstream answers it (the Capture answers every call with it).
ANSWER = {"id": "c-1", "object": "chat.completion", "created": 0, "model": "mock-1",
          "choices": [{"index": 0, "finish_reason": "stop",
                       "message": {"role": "assistant", "content": "ok"}}],
          "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}}  # fmt: skip


def config(data: dict[str, Any], **overrides: Any) -> GatewayConfig:
    """``data`` with an endpoint and no authentication unless it has tenants with keys."""
    auth = {} if any(t.get("key_sha256") for t in data.get("tenant", [])) else {"auth": False}
    return config_from_dict({"endpoint": ENDPOINT, **data}, where="gw.toml",
                            **{**auth, **overrides})  # fmt: skip


def refused(data: dict[str, Any]) -> str:
    with pytest.raises(GatewayConfigError) as caught:
        config(data)
    message = str(caught.value)
    assert message.startswith("gw.toml: "), message
    return message


# -- the file -----------------------------------------------------------------------------


CLASSES = [{"name": "rt", "interactive": True},
           {"name": "std", "tier": 1, "min_share": 0.2, "weight": 2, "quota": 0.5},
           {"name": "bulk", "tier": 2, "deadline_s": 40}]  # fmt: skip


def test_class_tables_replace_the_presets_classes_with_their_fields() -> None:
    c = config({"class": CLASSES})
    classes = c.scheduler_config().classes
    assert [(k.name, k.tier, k.min_share, k.weight, k.interactive) for k in classes] == [
        ("rt", 0, None, 1.0, True),
        ("std", 1, 0.2, 2.0, False),
        ("bulk", 2, None, 1.0, False),
    ]
    assert c.priority.class_deadlines == {"bulk": 40.0}
    assert [k.name for k in config({}).scheduler_config().classes] == ["interactive", "batch"]


@pytest.mark.parametrize(("data", "says"), [
    ({"class": [{"name": "a", "wieght": 2}]}, r"class #1: unknown field 'wieght'"),
    ({"class": [{"name": "a"}, {"name": "a"}]}, r"class #2 \('a'\): the name 'a' is given twice"),
    ({"class": [{"name": "a", "weight": -1}]}, r"class #1 \('a'\): weight=-1"),
    ({"class": [{"name": "a", "tier": -1}]}, r"class #1 \('a'\): tier=-1"),
    ({"class": [{"name": "a", "min_share": 1.5}]}, r"class #1 \('a'\): min_share=1.5"),
    ({"class": [{"name": "a", "min_share": 0.6}, {"name": "b", "min_share": 0.5}]},
     r"min_share add up to 1.1, must be < 1"),
    ({"class": [{"name": "a", "deadline_s": 0}]}, r"class #1 \('a'\): deadline_s=0 must be"),
    ({"class": [{"name": "a", "deadline_s": True}]}, r"deadline_s=True must be"),
    ({"class": {"name": "a"}}, r"'class' must be an array of tables"),
    ({"tenant": [{"name": "t", "deadline_s": -3}]}, r"tenant #1 \('t'\): deadline_s=-3"),
    ({"tenant": [{"name": "t", "default_class": "gold"}]},
     r"tenant 't': default_class='gold' must be one of \['interactive', 'batch'\]"),
    ({"class": CLASSES, "tenant": [{"name": "t", "default_class": "batch"}]},
     r"default_class='batch' must be one of \['rt', 'std', 'bulk'\]"),
    ({"priority": {"level": []}}, r"\[priority\]: unknown field 'level'"),
    ({"priority": {"levels": []}}, r"levels must be \[\[PRIORITY, CLASS\], ...\]"),
    ({"priority": {"levels": [[0, "batch"], [0, "interactive"]]}}, r"0 does not follow 0"),
    ({"priority": {"levels": [[10, "batch"], [5, "interactive"]]}}, r"5 does not follow 10"),
    ({"priority": {"levels": [[True, "batch"]]}}, r"\[True, 'batch'\] is not such a pair"),
    ({"priority": {"levels": [[0.5, "batch"]]}}, r"is not such a pair"),
    ({"priority": {"levels": [[0, "gold"]]}},
     r"\[priority\] levels: priority 0 names the class 'gold', which is not declared"),
    ({"priority": {"levels": [[0, "batch"]], "above": "gold"}},
     r"\[priority\] above names the class 'gold'"),
    ({"priority": {"above": 3}}, r"\[priority\] above=3 must be a class name"),
    ({"priority": {"service_tier": {"flex": "gold"}}},
     r"\[priority\] service_tier: 'flex' names the class 'gold'"),
    ({"priority": {"service_tier": ["flex"]}}, r"service_tier=\['flex'\] must map service tiers"),
])  # fmt: skip
def test_a_bad_class_priority_or_tenant_value_names_the_file_and_the_field(
    data: dict[str, Any], says: str
) -> None:
    assert re.search(says, refused(data)), refused(data)


def test_key_classes_name_the_tenants_own_keys_and_a_declared_class() -> None:
    mine, theirs = key_hash("sk-a"), key_hash("sk-b")
    tenants = [{"name": "a", "key_sha256": mine}, {"name": "b", "key_sha256": theirs}]

    def with_classes(classes: Any) -> dict[str, Any]:
        return {"tenant": [{**tenants[0], "key_classes": classes}, tenants[1]]}

    c = config(with_classes({mine.upper(): "batch"}))
    assert c.priority.key_classes == {mine: "batch"}
    says = refused(with_classes({theirs: "batch"}))
    assert "tenant #1 ('a'): key_classes names a key hash that is not one of" in says
    assert "64 hex digits" in refused(with_classes({"sk-a": "batch"}))
    assert "sk-a" not in refused(with_classes({"sk-a": "batch"}))  # a key is never repeated
    assert "tenant 'a': key_classes: a key names the class 'gold'" in refused(
        with_classes({mine: "gold"})
    )
    assert "key_classes must map key hashes" in refused(with_classes("batch"))


def test_the_preset_classes_take_a_default_class_and_the_file_is_named(tmp_path: Path) -> None:
    c = config({"tenant": [{"name": "t", "default_class": "batch"}]})
    assert c.scheduler_config().class_for(Bucket.SHORT, "t") == "batch"
    path = tmp_path / "gw.toml"
    path.write_text('[[class]]\nname = "a"\nweight = 0\n[[endpoint]]\nname = "e"\n'
                    'base_url = "http://127.0.0.1:1/v1"\n')  # fmt: skip
    with pytest.raises(GatewayConfigError, match=r"gw.toml: class #1 \('a'\): weight=0"):
        load_config(path, auth=False)


# -- the rules, without a server -----------------------------------------------------------


LEVELS = {"levels": [[0, "interactive"], [100, "batch"]]}


def rules(data: dict[str, Any], **overrides: Any) -> PriorityRules:
    return PriorityRules(config(data, **overrides), CollectorRegistry())


@pytest.mark.parametrize(("priority", "klass"), [
    (-5, "interactive"), (0, "interactive"), (1, "batch"), (100, "batch"), (10**30, "bulk"),
])  # fmt: skip
def test_an_integer_priority_maps_through_the_levels_lower_is_more_urgent(
    priority: int, klass: str
) -> None:
    classes = [{"name": "interactive", "interactive": True}, {"name": "batch"}, {"name": "bulk"}]
    r = rules({"class": classes, "priority": {**LEVELS, "above": "bulk"}})
    assert r.klass(None, priority, None, None) == klass


def test_a_priority_above_every_level_without_above_is_a_400() -> None:
    r = rules({"priority": LEVELS})
    with pytest.raises(BadHint) as caught:
        r.klass(None, 101, None, None)
    error = caught.value
    assert (error.status, error.param, error.code) == (400, "priority", "invalid_hint")
    assert "above every level" in str(error) and "at most 100" in str(error)
    assert r.klass("interactive", 101, None, None) == "interactive"  # the header decides


@pytest.mark.parametrize("priority", [True, False, 1.5, 0.0, "urgent", [1], {"p": 1}])
def test_with_levels_a_priority_that_is_no_integer_nor_class_is_a_400(priority: Any) -> None:
    r = rules({"priority": LEVELS})
    for hinted in (None, "batch"):  # bad input, whatever else names the class
        with pytest.raises(BadHint) as caught:
            r.klass(hinted, priority, None, None)
        assert (caught.value.status, caught.value.param, caught.value.code) == (
            400, "priority", "invalid_hint")  # fmt: skip
    assert r.klass(None, "batch", None, None) is None  # a class name: the hints' (read_hints)
    assert r.klass(None, None, None, None) is None


@pytest.mark.parametrize("priority", [5, 1.5, True, "urgent"])
def test_without_levels_priority_is_not_read_as_a_number(priority: Any) -> None:
    for data in ({}, {"priority": {"service_tier": {"flex": "batch"}}}):
        assert rules(data).klass(None, priority, None, None) is None


def test_the_gateway_gives_a_request_naming_no_deadline_its_tenants_or_max_request_s() -> None:
    tenants = [{"name": "t", "deadline_s": 20}, {"name": "u"}, {"name": "long", "deadline_s": 90}]
    data = {"tenant": tenants, "tenants": {"default": "u"}}
    r = rules(data, max_request_s=30)

    def plan(asked: float | None, tenant: str) -> tuple[Any, ...]:
        p = r.deadline(asked, tenant)
        return p.seconds, None if p.defaulted is None else (p.defaulted.source, p.defaulted.name)

    assert plan(3.0, "t") == (3.0, None)  # the caller's own: never defaulted
    assert plan(None, "t") == (20.0, ("tenant", "t"))
    assert plan(None, "u") == (30.0, None)  # max_request_s: a 504, not a shed
    assert plan(None, "long") == (30.0, None)  # max_request_s is sooner


# -- served: the class the scheduler saw ---------------------------------------------------


class Recorder(Tracker):
    """The gateway's tracker, also recording each request's class and deadline as submitted."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[tuple[str, float | None]] = []

    def submitted(self, request: Any, now: float) -> None:
        deadline = None if request.deadline is None else round(request.deadline - now, 3)
        self.seen.append((request.klass, deadline))
        super().submitted(request, now)


KEY_A, KEY_B, KEY_C, KEY_D, KEY_OPS = "sk-a", "sk-b", "sk-c", "sk-d", "sk-ops"
HI = [{"role": "user", "content": "hi"}]


class Stack:
    def __init__(self, s: Servers, capture: Capture, gateway: Gateway, base: str) -> None:
        self.servers, self.capture, self.gateway, self.base = s, capture, gateway, base
        assert isinstance(gateway.tracker, Recorder)
        self.recorder = gateway.tracker

    def post(self, key: str, body: dict[str, Any], **headers: str) -> httpx2.Response:
        return httpx2.post(f"{self.base}/v1/chat/completions", timeout=30, json={
            "model": "mock-1", "messages": HI, "max_tokens": 3, **body},
            headers={"authorization": f"Bearer {key}", **headers})  # fmt: skip

    def seen(self, key: str, body: dict[str, Any], **headers: str) -> tuple[str, float | None]:
        """The class and deadline the scheduler saw for this request (answered 200)."""
        before = len(self.recorder.seen)
        response = self.post(key, body, **headers)
        assert response.status_code == 200, response.text
        assert len(self.recorder.seen) == before + 1
        return self.recorder.seen[-1]


def serve(s: Servers, data: dict[str, Any], capture: Capture) -> Stack:
    upstream = s.serve_app(capture) + "/v1"
    endpoint = [{"name": "mock", "base_url": upstream, "key_env": "UPSTREAM_KEY"}]
    gateway = Gateway(config_from_dict({**data, "endpoint": endpoint}, where="test"),
                      environ={"UPSTREAM_KEY": UPSTREAM_SECRET})  # fmt: skip
    gateway.tracker = Recorder()
    return Stack(s, capture, gateway, s.serve_gateway(gateway).removesuffix("/v1"))


#: Three classes in three tiers, every mapping, a key's class and a tenant's default class.
PRECEDENCE = {
    "gateway": {"port": 0, "models": ["mock-1"], "max_request_s": 60},
    "class": [{"name": "rt", "interactive": True}, {"name": "std", "tier": 1, "min_share": 0.2},
              {"name": "bulk", "tier": 2, "deadline_s": 40}],
    "priority": {"levels": [[0, "rt"], [10, "std"]], "above": "bulk",
                 "service_tier": {"priority": "rt", "flex": "bulk"}},
    "tenant": [
        {"name": "web", "key_sha256": [key_hash(KEY_A), key_hash(KEY_B)],
         "key_classes": {key_hash(KEY_B): "std"}, "service_tiers": ["priority", "flex"]},
        {"name": "batch", "key_sha256": [key_hash(KEY_C), key_hash(KEY_D)],
         "default_class": "bulk", "key_classes": {key_hash(KEY_D): "rt"}},
        {"name": "ops", "key_sha256": key_hash(KEY_OPS), "deadline_s": 50},
    ],
}  # fmt: skip


@pytest.fixture(scope="module")
def precedence() -> Iterator[Stack]:
    with servers() as s:
        capture = Capture(mock_app(api_key=UPSTREAM_SECRET))
        capture.answer = (200, ANSWER)
        yield serve(s, PRECEDENCE, capture)


#: (key, body fields, headers, the class the scheduler saw): each row one step of the order.
ORDER: list[tuple[str, dict[str, Any], dict[str, str], str]] = [
    (KEY_A, {"priority": 0}, {"x-semisched-class": "bulk"}, "bulk"),  # header > integer
    (KEY_A, {"priority": "bulk", "service_tier": "priority"}, {}, "bulk"),  # name > tier
    (KEY_A, {"priority": 11, "service_tier": "priority"}, {}, "bulk"),  # integer > tier
    (KEY_B, {"priority": 0}, {}, "rt"),  # integer > the key's class
    (KEY_B, {"service_tier": "flex"}, {}, "bulk"),  # tier > the key's class
    (KEY_B, {"service_tier": "auto"}, {}, "std"),  # a tier the map lacks: the key's class
    (KEY_D, {}, {}, "rt"),  # the key's class > the tenant's default class
    (KEY_C, {}, {}, "bulk"),  # the tenant's default class > the size
    (KEY_C, {"priority": 10}, {}, "std"),  # an integer > the tenant's default class
    (KEY_A, {}, {}, "rt"),  # nothing said: a short request's size chooses the interactive
]  # fmt: skip


@pytest.mark.wallclock
@pytest.mark.parametrize(("key", "body", "headers", "klass"), ORDER)
def test_the_class_is_the_first_that_applies_in_the_documented_order(
    precedence: Stack, key: str, body: dict[str, Any], headers: dict[str, str], klass: str
) -> None:
    assert precedence.seen(key, body, **headers)[0] == klass


@pytest.mark.wallclock
@pytest.mark.parametrize(("priority", "klass"), [(-1, "rt"), (0, "rt"), (1, "std"), (10, "std"),
                                                 (11, "bulk"), (10**6, "bulk")])  # fmt: skip
def test_an_integer_priority_is_read_as_litellm_writes_it(
    precedence: Stack, priority: int, klass: str
) -> None:
    assert precedence.seen(KEY_A, {"priority": priority})[0] == klass


@pytest.mark.wallclock
def test_priority_is_never_forwarded_and_service_tier_keeps_its_own_rules(
    precedence: Stack,
) -> None:
    response = precedence.post(KEY_A, {"priority": 0, "service_tier": "flex"})
    assert response.status_code == 200
    assert response.headers["x-semisched-stripped"] == "priority"
    sent = precedence.capture.bodies[-1]
    assert "priority" not in sent and sent["service_tier"] == "flex"
    before = len(precedence.capture.bodies)
    refused = precedence.post(KEY_C, {"service_tier": "flex"})  # mapped, yet not batch's to use
    assert refused.status_code == 403
    assert refused.json()["error"]["code"] == "service_tier_not_allowed"
    assert len(precedence.capture.bodies) == before


@pytest.mark.wallclock
@pytest.mark.parametrize("priority", [True, 1.5, "urgent", [0]])
def test_a_priority_of_another_type_is_an_openai_shaped_400_and_nothing_is_sent(
    precedence: Stack, priority: Any
) -> None:
    before = len(precedence.capture.bodies)
    response = precedence.post(KEY_A, {"priority": priority}, **{"x-semisched-class": "rt"})
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert (error["type"], error["param"], error["code"]) == (
        "invalid_request_error", "priority", "invalid_hint")  # fmt: skip
    assert len(precedence.capture.bodies) == before


@pytest.mark.wallclock
def test_a_request_naming_no_deadline_gets_its_class_or_tenant_deadline(
    precedence: Stack,
) -> None:
    assert precedence.seen(KEY_A, {"priority": 11}) == ("bulk", 40.0)  # the class's
    assert precedence.seen(KEY_OPS, {}) == ("rt", 50.0)  # the tenant's
    assert precedence.seen(KEY_OPS, {"priority": 11}) == ("bulk", 40.0)  # the smaller
    assert precedence.seen(KEY_A, {}) == ("rt", 60.0)  # max_request_s
    assert precedence.seen(KEY_A, {"priority": 11}, **{"x-semisched-deadline": "90"}) == (
        "bulk", 40.0)  # the class's is sooner than the caller's own  # fmt: skip
    assert precedence.seen(KEY_A, {"priority": 11}, **{"x-semisched-deadline": "9"}) == (
        "bulk", 9.0)  # the caller's own is sooner  # fmt: skip


# -- served: shedding ----------------------------------------------------------------------


#: One send slot; the interactive and batch classes have deadlines (the scheduler holds a
#: request to its class's, however its class was chosen), the tenant slow has its own, and
#: the class hold has none.
SHED = {
    "gateway": {"port": 0, "models": ["mock-1"], "max_inflight": 1, "retry_after_s": 7},
    "class": [{"name": "interactive", "interactive": True, "deadline_s": 0.2},
              {"name": "batch", "deadline_s": 0.3}, {"name": "hold"}],
    "tenant": [{"name": "web", "key_sha256": key_hash(KEY_A)},
               {"name": "slow", "key_sha256": key_hash(KEY_B), "deadline_s": 0.2}],
}  # fmt: skip


@pytest.fixture
def held() -> Iterator[Stack]:
    """:data:`SHED`'s gateway, its upstream holding every call until the test releases it."""
    with servers() as s:
        capture = Capture(mock_app(api_key=UPSTREAM_SECRET))
        capture.answer = (200, ANSWER)
        capture.open.clear()
        stack = serve(s, SHED, capture)
        try:
            yield stack
        finally:
            capture.open.set()


def assert_shed(response: httpx2.Response, names: str) -> None:
    assert response.status_code == 429, response.text
    assert response.headers["content-type"] == "application/json"
    assert response.headers["retry-after"] == "7"  # the scheduler gives no hint: retry_after_s
    error = response.json()["error"]
    assert (error["type"], error["code"], error["param"]) == (
        "rate_limit_error", "deadline_shed", None)  # fmt: skip
    assert names in error["message"] and "not sent" in error["message"]


@pytest.mark.wallclock
def test_a_defaulted_deadline_passing_in_the_queue_is_a_429_naming_it(held: Stack) -> None:
    with ThreadPoolExecutor(8) as pool:
        blocker = pool.submit(held.post, KEY_A, {}, **{"x-semisched-class": "hold"})
        wait_for(lambda: len(held.capture.bodies) == 1, what="the only slot taken")
        by_class = pool.submit(held.post, KEY_A, {}, **{"x-semisched-class": "batch"})
        by_size = pool.submit(held.post, KEY_A, {})  # short: interactive's, by its size
        by_tenant = pool.submit(held.post, KEY_B, {}, **{"x-semisched-class": "hold"})
        stream = pool.submit(held.post, KEY_A, {"stream": True}, **{"x-semisched-class": "batch"})
        own = pool.submit(held.post, KEY_A, {}, **{"x-semisched-deadline": "0.2",
                                                   "x-semisched-class": "hold"})  # fmt: skip
        assert_shed(by_class.result(), "the class 'batch''s deadline_s=0.3")
        assert_shed(by_size.result(), "the class 'interactive''s deadline_s=0.2")
        assert_shed(by_tenant.result(), "the tenant 'slow''s deadline_s=0.2")
        assert_shed(stream.result(), "the class 'batch''s deadline_s=0.3")  # before any byte
        mine = own.result()  # the caller's own deadline: as before
        assert mine.status_code == 504 and mine.json()["error"]["code"] == "deadline_exceeded"
        assert mine.headers["x-should-retry"] == "false"
        assert len(held.capture.bodies) == 1  # none of them was sent
        held.capture.open.set()
        assert blocker.result().status_code == 200
    metrics = httpx2.get(f"{held.base}/metrics").text
    assert 'semisched_gateway_shed_total{name="batch",source="class"} 2.0' in metrics
    assert 'semisched_gateway_shed_total{name="slow",source="tenant"} 1.0' in metrics


@pytest.mark.wallclock
def test_a_defaulted_deadline_passing_in_flight_stays_a_504(held: Stack) -> None:
    response = held.post(KEY_A, {}, **{"x-semisched-class": "batch"})  # held past its 0.3 s
    assert response.status_code == 504, response.text
    assert response.json()["error"]["code"] == "deadline_exceeded"


# -- the documentation's example ----------------------------------------------------------


def test_the_guides_priority_example_is_a_working_file() -> None:
    guide = (ROOT / "docs/guides/gateway.md").read_text(encoding="utf-8")
    section = guide[guide.index("## Priority") :]
    example = re.search(r"```toml\n(.*?)```", section, flags=re.S)
    assert example is not None
    data = tomllib.loads(example[1])
    c = config_from_dict({**data, "endpoint": ENDPOINT}, where="guide")
    assert c.priority.levels and c.priority.service_tiers and c.priority.class_deadlines
    assert any(t.default_class for t in c.tenants.tenants)  # type: ignore[union-attr]


def test_a_sheds_retry_after_is_the_schedulers_drain_estimate_when_that_is_longer() -> None:
    from semisched.errors import DeadlineExceeded

    r = rules({"class": [{"name": "batch", "deadline_s": 5}, {"name": "rt", "interactive": True}]})
    plan = r.deadline(None, "")
    shed = DeadlineExceeded("deadline exceeded (queued)", request_id="r", klass="batch",
                            phase="queued", deadline=5.0)  # fmt: skip
    long = r.shed_answer(plan, shed, lambda: 42.4)
    short = r.shed_answer(plan, shed, lambda: 0.2)
    assert long is not None and short is not None
    assert long.status_code == short.status_code == 429
    assert long.headers["retry-after"] == "43"  # the queue's drain estimate, rounded up
    assert short.headers["retry-after"] == "1"  # at least retry_after_s
    in_flight = DeadlineExceeded("x", request_id="r", klass="batch", phase="in_flight",
                                 deadline=5.0)  # fmt: skip
    assert r.shed_answer(plan, in_flight, lambda: 42.4) is None  # a 504, as before
