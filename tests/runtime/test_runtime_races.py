"""The runtime where cancels, deadlines and answers race: a stateful property test.

A hypothesis ``RuleBasedStateMachine`` drives a real :class:`~semisched.Scheduler`
(two endpoints, a shared state, streams, retries) on an asyncio loop in virtual
time (:mod:`virtual_loop`), against a fake provider the test answers call by
call. Its rules interleave submits, caller cancels at every await point (queued,
while the shared state reserves, in flight, in the same instant as the answer
or the failure, mid-stream), deadlines, retries (500, 429, connection errors), a
connection closed unanswered (sent again at once, the resend racing the rest),
shared-state refusals, endpoint removal and close. After every rule it checks
what a user would state:

1. every request resolves exactly once: an answer, a stream, an outcome or the
   caller's own cancellation, never two;
2. no exception escapes: the loop's exception handler hears nothing, and no
   caller meets anything but an outcome of :mod:`semisched.errors`;
3. the scheduler keeps serving: its task group is alive until the test closes it,
   and at the end a fresh request is answered;
4. the books return to zero: with nothing pending and no stream open, the core
   holds nothing queued, deferred or in flight, the shared state no lease, and the
   spend books no reservation: what a spend cap's period holds is what was spent.

The endpoints are priced and one tenant of two has a spend cap, so reservations of
cost race with everything else too (refused before sending, released on a failure or
a cancel, settled on an answer).

The default run tries a few hundred examples; the slow run many more.
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass, field
from typing import Any

import httpx2
import openai
import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
)
from virtual_loop import VirtualLoop

from semisched import (
    Endpoint,
    Price,
    RuntimeOptions,
    Scheduler,
    SpendCap,
    TenantConfig,
    TenantSpec,
)
from semisched.errors import RequestError
from semisched.runtime.calls import scheduler_config
from semisched.state.base import Grant
from semisched.state.local import LocalState
from semisched.state.spend import LocalSpend

_URL = "http://upstream.test/v1/chat/completions"


def _status_error(status: int, headers: dict[str, str] | None = None) -> Exception:
    request = httpx2.Request("POST", _URL)
    response = httpx2.Response(status, headers=headers or {}, request=request)
    if status == 429:
        return openai.RateLimitError("rate limited", response=response, body=None)
    return openai.APIStatusError(f"status {status}", response=response, body=None)


def _closed_unanswered() -> Exception:
    """A kept-alive connection the server closed as the request went out: resent at once."""
    error = openai.APIConnectionError(request=httpx2.Request("POST", _URL))
    error.__cause__ = httpx2.RemoteProtocolError("Server disconnected without sending a response.")
    return error


FAILURES = {
    "500": lambda: _status_error(500),
    "closed": _closed_unanswered,
    "429": lambda: _status_error(429, {"retry-after": "2"}),
    "connection": lambda: openai.APIConnectionError(request=httpx2.Request("POST", _URL)),
    "400": lambda: _status_error(400),
}


@dataclass
class _Usage:
    prompt_tokens: int
    completion_tokens: int


@dataclass
class _Completion:
    caller: int
    usage: _Usage


@dataclass
class _Chunk:
    choices: list[Any]
    usage: _Usage | None = None


class _Stream:
    """A provider stream the test feeds chunk by chunk."""

    def __init__(self) -> None:
        self.queue: asyncio.Queue[Any] = asyncio.Queue()
        self.closed = False

    def __aiter__(self) -> _Stream:
        return self

    async def __anext__(self) -> Any:
        item = await self.queue.get()
        if item is StopAsyncIteration:
            raise StopAsyncIteration
        if isinstance(item, BaseException):
            raise item
        return item

    async def close(self) -> None:
        self.closed = True


@dataclass
class _Call:
    caller: int
    endpoint: str
    stream: bool
    future: asyncio.Future[Any]


class FakeProvider:
    """Every endpoint's calls, each waiting until the test answers or fails it."""

    def __init__(self) -> None:
        self.calls: list[_Call] = []

    def open_calls(self) -> list[_Call]:
        return [c for c in self.calls if not c.future.done()]

    def client(self, endpoint: str) -> Any:
        provider = self

        class _Completions:
            async def create(self, **params: Any) -> Any:
                caller = int(params["messages"][0]["content"].split()[-1])
                future = asyncio.get_running_loop().create_future()
                provider.calls.append(_Call(caller, endpoint, bool(params.get("stream")), future))
                return await future

        class _Chat:
            completions = _Completions()

        class _Client:
            chat = _Chat()

        return _Client()


class DrivenState(LocalState):
    """The in-process shared state, which the test can make refuse or hold reservations."""

    def __init__(self, clock: Any) -> None:
        super().__init__(clock=clock)
        self.refuse = 0
        self.gate: asyncio.Event | None = None

    async def reserve(self, request_id: str, tokens: float, scopes: Any) -> Grant:
        if self.gate is not None:
            await self.gate.wait()  # a cancel can land here, before anything is sent
        if self.refuse > 0:
            self.refuse -= 1
            return Grant(ok=False, wait_s=1.0, scope=scopes[-1].key, reason="rpm")
        return await super().reserve(request_id, tokens, scopes)

    def leases(self) -> int:
        return sum(len(scope.leases) for scope in self._scopes.values())

    @property
    def spend_books(self) -> LocalSpend:
        books = self.__dict__.get("_gated_spend")
        if books is None:
            books = self.__dict__["_gated_spend"] = GatedSpend(self)
        return books


class GatedSpend(LocalSpend):
    """Spend books whose answer the test can hold after the charge is made: a cancel
    landing then must not leave the charge behind."""

    def __init__(self, state: DrivenState) -> None:
        super().__init__()
        self.state = state

    async def reserve_spend(self, request_id: str, usd: float, caps: Any) -> Any:
        grant = await super().reserve_spend(request_id, usd, caps)
        if self.state.gate is not None:
            await self.state.gate.wait()  # the store charged it; its answer is on the way
        return grant


@dataclass
class Caller:
    index: int
    stream: bool
    task: asyncio.Task[None] | None = None
    outcomes: list[str] = field(default_factory=list)
    provider_stream: _Stream | None = None


class RuntimeRaces(RuleBasedStateMachine):
    """The runtime under interleaved cancels, deadlines, answers and faults (module rules)."""

    def __init__(self) -> None:
        super().__init__()
        self.loop = VirtualLoop()
        self.escaped: list[str] = []
        self.loop.set_exception_handler(lambda loop, ctx: self.escaped.append(repr(ctx)))
        self.provider = FakeProvider()
        self.state = DrivenState(self.loop.time)
        self.callers: dict[int, Caller] = {}
        self.streams: dict[int, _Stream] = {}
        self.closed = False
        self.removed = False
        self.cap = SpendCap(usd=4.0, per="day", tenant="capped")

    @initialize()
    def start(self) -> None:
        price = Price(input=100.0, output=1000.0)  # 2,000 output tokens: $2
        endpoints = [Endpoint(name, self.provider.client(name), max_concurrency=2, price=price)
                     for name in ("a", "b")]  # fmt: skip
        tenants = TenantConfig(tenants=(TenantSpec(name="capped"), TenantSpec(name="free")),
                               default="free")
        self.scheduler = Scheduler(endpoints=endpoints, priors="heuristic", state=self.state,
                                   tracing=False, options=RuntimeOptions(seed=1),
                                   config=scheduler_config("final_adrr_olc", tenants=tenants),
                                   spend_caps=[self.cap])
        self.stop = asyncio.Event()
        self.host = self.loop.create_task(self._host())
        self.loop.settle()

    async def _host(self) -> None:
        async with self.scheduler:
            await self.stop.wait()

    async def _call(self, caller: Caller, **call: Any) -> None:
        try:
            result = await self.scheduler.submit(**call)
        except RequestError as exc:
            caller.outcomes.append(type(exc).__name__)
            return
        except asyncio.CancelledError:
            caller.outcomes.append("cancelled")
            raise
        except Exception as exc:
            caller.outcomes.append(f"unexpected {exc!r}")
            return
        if not caller.stream:
            caller.outcomes.append("answered")
            return
        try:
            async for _ in result:
                pass
        except asyncio.CancelledError:
            caller.outcomes.append("cancelled mid-stream")
            raise
        except Exception as exc:  # the provider's stream failed: the caller's to see
            caller.outcomes.append(f"stream failed {type(exc).__name__}")
            return
        caller.outcomes.append("streamed")

    def _waiting(self) -> list[Caller]:
        return [c for c in self.callers.values() if c.task is not None and not c.task.done()]

    # -- rules ---------------------------------------------------------------------------

    @precondition(lambda self: not self.closed)
    @rule(stream=st.booleans(), tokens=st.integers(1, 2000),
          deadline=st.none() | st.floats(0.5, 60),
          klass=st.sampled_from(["interactive", "batch"]),
          tenant=st.sampled_from(["capped", "free"]))  # fmt: skip
    def submit(
        self, stream: bool, tokens: int, deadline: float | None, klass: str, tenant: str
    ) -> None:
        caller = Caller(len(self.callers), stream)
        self.callers[caller.index] = caller
        call = {"model": "m", "messages": [{"role": "user", "content": f"caller {caller.index}"}],
                "max_tokens": tokens, "stream": stream, "deadline": deadline,
                "klass": klass, "tenant": tenant}  # fmt: skip
        caller.task = self.loop.create_task(self._call(caller, **call))
        self.loop.settle()

    @precondition(lambda self: not self.closed)
    @rule(which=st.integers(0, 10**6), tokens=st.integers(0, 300),
          cancel=st.sampled_from(["no", "before", "after"]))  # fmt: skip
    def answer(self, which: int, tokens: int, cancel: str) -> None:
        """Answer a call; ``cancel``: its caller is cancelled in the same instant."""

        def answer(call: _Call) -> None:
            if call.stream:
                self.streams[call.caller] = _Stream()
                call.future.set_result(self.streams[call.caller])
            else:
                call.future.set_result(_Completion(call.caller, _Usage(10, tokens)))

        self._end_call(which, cancel, answer)

    def _end_call(self, which: int, cancel: str, end: Any) -> None:
        """End one open call with ``end(call)``, its caller cancelled just before or after."""
        calls = self.provider.open_calls()
        if not calls:
            return
        call = calls[which % len(calls)]
        task = self.callers[call.caller].task
        if cancel == "before" and task is not None:
            task.cancel()
        end(call)
        if cancel == "after" and task is not None:
            task.cancel()
        self.loop.settle()

    @precondition(lambda self: not self.closed)
    @rule(which=st.integers(0, 10**6), kind=st.sampled_from(sorted(FAILURES)),
          cancel=st.sampled_from(["no", "before", "after"]))  # fmt: skip
    def fail(self, which: int, kind: str, cancel: str) -> None:
        """Fail a call; ``cancel``: its caller is cancelled in the same instant."""
        self._end_call(which, cancel, lambda call: call.future.set_exception(FAILURES[kind]()))

    @precondition(lambda self: not self.closed)
    @rule(which=st.integers(0, 10**6), event=st.sampled_from(["chunk", "end", "fail"]),
          cancel=st.booleans())  # fmt: skip
    def stream(self, which: int, event: str, cancel: bool) -> None:
        """Feed an open stream a chunk, its end or a failure (its caller may cancel at once)."""
        open_streams = [(i, s) for i, s in sorted(self.streams.items()) if not s.closed]
        if not open_streams:
            return
        index, stream = open_streams[which % len(open_streams)]
        if event == "chunk":
            stream.queue.put_nowait(_Chunk([object()]))
        elif event == "end":
            stream.queue.put_nowait(_Chunk([], _Usage(10, 5)))
            stream.queue.put_nowait(StopAsyncIteration)
        else:
            stream.queue.put_nowait(openai.APIConnectionError(request=httpx2.Request("POST", _URL)))
        task = self.callers[index].task
        if cancel and task is not None:
            task.cancel()
        self.loop.settle()

    @precondition(lambda self: not self.closed)
    @rule(which=st.integers(0, 10**6))
    def cancel(self, which: int) -> None:
        """A caller gives up, wherever its request is."""
        waiting = self._waiting()
        if waiting:
            task = waiting[which % len(waiting)].task
            assert task is not None
            task.cancel()
            self.loop.settle()

    @precondition(lambda self: not self.closed)
    @rule(seconds=st.floats(0.01, 40))
    def advance(self, seconds: float) -> None:
        """Virtual time passes: deadlines, retries' waits, refusals' waits."""
        self.loop.advance(seconds)

    @precondition(lambda self: not self.closed)
    @rule(count=st.integers(1, 3))
    def refuse(self, count: int) -> None:
        """The shared state refuses the next ``count`` reservations."""
        self.state.refuse += count

    @precondition(lambda self: not self.closed)
    @rule()
    def hold_or_release_state(self) -> None:
        """Reservations wait in the shared state (or go on again)."""
        if self.state.gate is None:
            self.state.gate = asyncio.Event()
        else:
            gate, self.state.gate = self.state.gate, None
            gate.set()
            self.loop.settle()

    @precondition(lambda self: not self.closed and not self.removed)
    @rule()
    def remove_endpoint(self) -> None:
        """Endpoint ``b`` leaves the fleet; its calls in flight finish."""
        self.removed = True
        self.loop.call(lambda: self.scheduler.remove_endpoint("b"))

    @precondition(lambda self: not self.closed and len(self.callers) >= 3)
    @rule()
    def close(self) -> None:
        """The scheduler is closed with requests still pending (its host is cancelled)."""
        self.closed = True
        self.host.cancel()
        self.loop.settle()

    @precondition(lambda self: self.closed)
    @rule()
    def submit_after_close(self) -> None:
        """A closed scheduler refuses new work with an outcome, not a crash."""
        caller = Caller(len(self.callers), False)
        self.callers[caller.index] = caller
        call = {"model": "m", "messages": [{"role": "user", "content": f"caller {caller.index}"}]}
        caller.task = self.loop.create_task(self._call(caller, **call))
        self.loop.settle()
        assert caller.outcomes == ["SchedulerClosed"], caller

    # -- invariants ----------------------------------------------------------------------

    @invariant()
    def nothing_escapes(self) -> None:
        assert not self.escaped, self.escaped
        for caller in self.callers.values():
            assert not any(o.startswith("unexpected") for o in caller.outcomes), caller

    @invariant()
    def resolved_at_most_once(self) -> None:
        for caller in self.callers.values():
            assert len(caller.outcomes) <= 1, caller
            if caller.task is not None and caller.task.done():
                assert len(caller.outcomes) == 1, caller

    @invariant()
    def still_serving(self) -> None:
        if not self.closed:
            assert not self.host.done(), self._host_error()

    @invariant()
    def books_back_to_zero(self) -> None:
        if self.closed or self.host.done():
            return
        stats = self.loop.call(self.scheduler.statistics)
        if stats.pending or stats.open_streams:
            return
        engine = stats.engine
        assert (engine.inflight, sum(engine.queued.values()), engine.deferred) == (0, 0, 0)
        assert self.state.leases() == 0
        spend = stats.spend
        assert spend is not None and spend.reserved_usd == 0
        books = self.state.spend_books
        assert books.outstanding() == 0  # every reservation settled or released
        capped = spend.by_tenant.get("capped", 0.0)
        assert books.spent(self.cap) == pytest.approx(capped, abs=1e-6)

    def _host_error(self) -> str:
        if self.host.done() and not self.host.cancelled():
            return f"the scheduler stopped: {self.host.exception()!r}"
        return "the scheduler stopped"

    def teardown(self) -> None:
        try:
            if not self.closed and not self.host.done():
                self._finish_everything()
                self._serves_a_fresh_request()
                self.stop.set()
                self.loop.settle()
                assert self.host.done() and self.host.exception() is None
        finally:
            for task in asyncio.all_tasks(self.loop):
                task.cancel()
            with contextlib.suppress(BaseException):
                self.loop.settle()
            self.loop.close()

    def _finish_everything(self) -> None:
        if self.state.gate is not None:
            self.state.gate.set()
            self.state.gate = None
        self.state.refuse = 0
        for _ in range(200):
            for call in self.provider.open_calls():
                call.future.set_result(_Completion(call.caller, _Usage(10, 1)))
            for stream in self.streams.values():
                stream.queue.put_nowait(StopAsyncIteration)
            self.loop.advance(5.0)
            if not self._waiting():
                break
        assert not self._waiting(), [c for c in self.callers.values() if not c.task.done()]
        self.nothing_escapes()
        self.resolved_at_most_once()
        self.books_back_to_zero()

    def _serves_a_fresh_request(self) -> None:
        caller = Caller(len(self.callers), False)
        self.callers[caller.index] = caller
        call = {"model": "m", "messages": [{"role": "user", "content": f"caller {caller.index}"}],
                "max_tokens": 5}  # fmt: skip
        caller.task = self.loop.create_task(self._call(caller, **call))
        for _ in range(20):
            for c in self.provider.open_calls():
                c.future.set_result(_Completion(c.caller, _Usage(10, 1)))
            self.loop.advance(1.0)
            if caller.task.done():
                break
        assert caller.outcomes == ["answered"], caller


_SETTINGS = {"deadline": None, "suppress_health_check": [HealthCheck.too_slow], "derandomize": True}

TestRuntimeRaces = RuntimeRaces.TestCase
TestRuntimeRaces.settings = settings(max_examples=300, stateful_step_count=40, **_SETTINGS)


@pytest.mark.slow
@pytest.mark.timeout(900)  # about 100 s alone on two cores
def test_runtime_races_many_examples() -> None:
    from hypothesis.stateful import run_state_machine_as_test

    run_state_machine_as_test(RuntimeRaces, settings=settings(
        max_examples=1500, stateful_step_count=60, **_SETTINGS))  # fmt: skip
