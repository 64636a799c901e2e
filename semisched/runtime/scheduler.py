"""The async runtime: ``await scheduler.submit(...)`` over any OpenAI-compatible client.

`Scheduler` executes what `semisched.core.Engine` decides and
decides nothing itself. It

- is built one way: the client (or endpoints), one
  [`SchedulerConfig`][semisched.core.config.SchedulerConfig] (every scheduling decision,
  retry, routing and tenants included), runtime objects (priors, state, clock,
  telemetry) and [`RuntimeOptions`][semisched.runtime.options.RuntimeOptions],
- validates a call (`semisched.runtime.callargs.CallArgs`,
  `semisched.runtime.calls.prepare_call`) and builds the
  core's [`Request`][semisched.core.Request] (prior from a
  [`PriorSource`][semisched.priors.sources.PriorSource] via `semisched.priors.batching`,
  prompt tokens from the bytes-per-token estimator),
- runs every `Send` as a task in its own task group,
  through the endpoint's stack of layers around the wrapped client
  (`semisched.runtime.layers`: compression, shared-state reservation,
  observers, usage learning, rate-limit headers; its retries turned off),
- classifies each failed attempt (`semisched.runtime.failures`) and reports it
  with ``engine.failed``; the core's retry policy answers with
  `Retry` (the engine re-queues and later re-sends it),
  `Expire` or `Fail`,
- resolves each caller exactly once: the provider's response object, or an
  outcome from `semisched.errors`.

Structured concurrency (anyio): the scheduler is an async context manager that
owns its task group; nothing is fire-and-forget. Cancelling a caller's
``submit`` removes the request from the queue or aborts its in-flight call and
releases its send opportunity. Time comes from a [`Clock`][semisched.runtime.clock.Clock]
(by default the event loop's, so trio's ``MockClock`` runs it in virtual time).

This module holds the public `Scheduler`: its arguments, its context
manager, ``submit``/``check``/``pause``/``resume``/``statistics`` and the
fleet's changes. A call's way in (validation, room under ``max_pending``, its
id, the building of the core's request) is `semisched.runtime.intake`; how the
task group's errors leave it, `semisched.runtime.supervise`. What it is not: it
executes no action itself (`semisched.runtime.dispatch`), makes no scheduling
decision and no retry arithmetic (`semisched.core`), reads no ``openai``
exception (`semisched.runtime.failures`). Streams are in
`semisched.runtime.streams`, the drop-in facade in `semisched.runtime.facade`,
statistics in `semisched.runtime.stats`.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from types import TracebackType
from typing import TYPE_CHECKING, Any, Never

import anyio
from anyio.abc import TaskGroup

from semisched.compress.runtime import PromptCompression
from semisched.core.checks import check_instance
from semisched.core.config import SchedulerConfig
from semisched.core.engine import Engine
from semisched.core.lifecycle import RetryPolicy
from semisched.core.spend import SpendCap
from semisched.errors import SchedulerClosed
from semisched.fleet.endpoints import Deployments, Endpoint
from semisched.priors.batching import PriorResolver
from semisched.priors.default import scheduler_priors
from semisched.priors.sources import Heuristic, PriorSource
from semisched.runtime.callargs import call_signature
from semisched.runtime.calls import scheduler_config
from semisched.runtime.clock import AnyioClock, Clock
from semisched.runtime.dispatch import Dispatcher
from semisched.runtime.estimate import TokenEstimator
from semisched.runtime.facade import ScheduledClient
from semisched.runtime.intake import Intake
from semisched.runtime.layers import Configured
from semisched.runtime.options import (
    RuntimeOptions,
    check_runtime_objects,
    removed_argument,
)
from semisched.runtime.spending import run_spending
from semisched.runtime.stats import RuntimeCounters, RuntimeTally, SchedulerStats
from semisched.runtime.supervise import leave_group
from semisched.state.base import StateBackend
from semisched.state.guard import SharedBudget, backend_for
from semisched.telemetry.observe import RequestObserver, build_observers

if TYPE_CHECKING:
    from opentelemetry.trace import TracerProvider
    from prometheus_client import CollectorRegistry
from semisched.runtime.streams import ScheduledStream

__all__ = [
    "RetryPolicy",
    "RuntimeCounters",
    "RuntimeOptions",
    "ScheduledClient",
    "ScheduledStream",
    "Scheduler",
    "SchedulerStats",
]



class Scheduler:
    r"""Client-side scheduler over an OpenAI-compatible async client.

    For example:

    ```python
    async with Scheduler(AsyncOpenAI()) as scheduler:
        resp = await scheduler.submit(model="gpt-4o-mini", messages=[...],
                                      max_completion_tokens=200, deadline=30)
    ```

    Args:
        client: ``openai.AsyncOpenAI`` or any object with
            ``chat.completions.create`` / ``completions.create`` coroutines.
            An OpenAI client is used through ``with_options(max_retries=0)``:
            the scheduler owns retries, so the core sees every attempt.
            The one-endpoint case of ``endpoints``.
        endpoints: Several deployments ([`Endpoint`][semisched.Endpoint]), instead of
            ``client``: each send goes to the endpoint the core's routing layer
            picks (``config.routing``), a failed attempt fails over to another,
            and ``statistics().engine.endpoints`` reports each.
        config: A `SchedulerConfig` or a preset name: every scheduling
            decision, the retry policy (``config.retry``), routing
            (``config.routing``) and tenants (``config.tenants``; each call names
            its own with ``submit(..., tenant=)``). Change a preset with
            ``preset("final_adrr_olc", routing=...)`` or
            `semisched.runtime.calls.scheduler_config`.
        priors: Where priors come from when a call gives none: a
            [`PriorSource`][semisched.priors.sources.PriorSource], or a name from
            `semisched.priors.default`. ``"auto"`` is the shipped learned
            length model when the ``ml`` extra is installed, else
            [`Heuristic`][semisched.priors.sources.Heuristic] (from the output cap);
            ``"learned"`` insists on the model, ``"heuristic"`` never loads it.
            ``None`` (the default) reads ``$SEMISCHED_PRIORS``, else ``"auto"``.
            The model is loaded on entering the context (seconds, once per
            process, in a worker thread) and, like any
            `BatchPriorSource`, runs off the event loop.
        state: Share budgets, leases and 429 pauses with every scheduler in
            ``options.namespace`` (other processes, other machines): a Redis URL
            (``"redis://127.0.0.1:6379/0"``; needs the ``redis`` extra) or a
            [`StateBackend`][semisched.state.base.StateBackend]. Each send is reserved
            there first (the fleet's ``config.budget`` and ``max_inflight``, each
            endpoint's ``rpm``/``tpm``/``max_concurrency``: set them to the
            *shared* limits). Unreachable on entering: `StateUnavailable`.
            Lost later: one warning, then this process runs on its share of each
            limit until the store is back (`semisched.state.guard`).
        clock: Time source (default [`AnyioClock`][semisched.runtime.clock.AnyioClock]: the
            event loop's clock, virtual under trio's ``MockClock``).
        metrics: Prometheus metrics (`semisched.telemetry.prometheus`;
            the ``metrics`` extra): ``True`` registers them in the default
            registry, or give a ``prometheus_client.CollectorRegistry``.
        tracing: One OpenTelemetry span per request
            (`semisched.telemetry.tracing`): ``True`` uses the global
            tracer provider (a no-op unless the application configured an
            SDK), or give a ``TracerProvider``; ``False``: none. Each span is
            built when its request ends, from recorded times; for spans that an
            instrumented HTTP client's spans nest under, pass ``tracing=False``
            and ``observers=[RequestTracing(provider, nest_http=True)]``.
        observers: More [`RequestObserver`][semisched.telemetry.observe.RequestObserver]s, told
            what happens to each request.
        spend_caps: [`SpendCap`][semisched.SpendCap]s: at most so many US dollars per
            calendar hour, day or month, for a tenant or the whole key, at the endpoints'
            prices (``Endpoint(..., price=...)``). Each request's cost is reserved before
            it is sent and settled on its usage; one that would pass a cap is refused with
            [`SpendCapExceeded`][semisched.SpendCapExceeded]. Kept beside ``state`` when
            there is one, so they hold across processes.
        options: The runtime's own settings ([`RuntimeOptions`][semisched.RuntimeOptions]):
            prior timeout and fallback, calibration, token estimator,
            ``max_pending``, the jitter's ``seed``, ``cancel_late`` and the
            state's ``namespace`` (``None``, the default: ``RuntimeOptions()``).

    Raises:
        TypeError: An argument of the wrong kind, naming it: openai's synchronous
            ``OpenAI`` client (give ``AsyncOpenAI``), a ``config`` that is not a
            config or a preset's name, a ``clock`` without ``now``/``sleep``/
            ``to_wall``, ``metrics`` or ``tracing`` that is neither a bool nor a
            registry or provider; or a keyword this constructor no longer takes
            (``routing=``, ``retry=``, ``seed=``, ...), naming where it went.
        ValueError: A bad value, naming it (an unknown preset or prior source).

    Errors inside ``async with``: what the block raises (an outcome of
    ``submit`` such as [`ProviderError`][semisched.errors.ProviderError], or the
    caller's own exception) leaves the block as itself, never wrapped in an
    ``ExceptionGroup``, so ``except ProviderError`` around the block catches
    it. The scheduler's own tasks raise nothing of their own (each outcome
    goes to the caller that submitted the request), so an exception there is
    a bug or an interrupt: alone, it too leaves as itself; together with the
    block's, both leave as one ``BaseExceptionGroup`` (catch with
    ``except*``), so that neither is lost.
    """

    def __init__(
        self,
        client: Any = None,
        *,
        endpoints: Sequence[Endpoint] | None = None,
        config: SchedulerConfig | str = "final_adrr_olc",
        priors: PriorSource | str | None = None,
        state: StateBackend | str | None = None,
        clock: Clock | None = None,
        metrics: CollectorRegistry | bool = False,
        tracing: TracerProvider | bool = True,
        observers: Sequence[RequestObserver] = (),
        spend_caps: Sequence[SpendCap] = (),
        options: RuntimeOptions | None = None,
        **removed: Never,
    ) -> None:
        if error := removed_argument(removed):
            raise error
        options = RuntimeOptions() if options is None else options
        check_instance("options", options, RuntimeOptions)
        check_runtime_objects(clock=clock, metrics=metrics, tracing=tracing, observers=observers)
        self.config = scheduler_config(config)
        self.options = options
        source, self._prior_choice, self._load_priors = scheduler_priors(priors)
        self._deployments = Deployments.of(client, endpoints)
        self._engine = Engine(
            self.config,
            jitter=random.Random(options.seed).random,
            endpoints=[self._deployments.endpoint(n).spec for n in self._deployments.names],
        )
        fallback = options.fallback if options.fallback is not None else Heuristic()
        self._priors = PriorResolver(source, fallback, timeout_s=options.prior_timeout_s)
        self._calibration = options.length_calibration()
        self._clock: Clock = clock if clock is not None else AnyioClock()
        backend = backend_for(state, options.namespace)
        self._shared = None if backend is None else SharedBudget(
            backend, self._engine, self._clock, seed=options.seed
        )  # fmt: skip
        self._estimator = options.estimator if options.estimator is not None else TokenEstimator()
        self._tally = RuntimeTally()
        self._compression = PromptCompression(self.config.routing, self._estimator)
        watchers = build_observers(observers, metrics=metrics, tracing=tracing,
                                   statistics=self.statistics)  # fmt: skip
        priced = any(self._deployments.endpoint(n).spec.price for n in self._deployments.names)
        self._spending = run_spending(spend_caps, backend, priced)
        configured = Configured(deployments=self._deployments, estimator=self._estimator,
                                calibration=self._calibration, observers=watchers,
                                shared=self._shared, compression=self._compression,
                                spending=self._spending)  # fmt: skip
        self._dispatch = Dispatcher(self._engine, configured, self._clock, self._tally,
                                    cancel_late=options.cancel_late)  # fmt: skip
        self._intake = Intake(self.config, options, self._deployments, self._dispatch,
                              self._tally, self._calibration, self._estimator)  # fmt: skip
        self._tg: TaskGroup | None = None
        self._closed = False
        self.client = ScheduledClient(self, client)

    def __repr__(self) -> str:
        state = "closed" if self._closed else "open" if self._tg else "not started"
        pending = len(self._dispatch.pending)
        return f"<Scheduler {state} pending={pending} {self._engine!r}>"

    # -- lifecycle -----------------------------------------------------------------------

    async def __aenter__(self) -> Scheduler:
        if self._tg is not None or self._closed:
            raise RuntimeError("a Scheduler can be entered only once")
        if self._load_priors is not None:  # a model: loaded in a worker thread
            source, self._prior_choice = await anyio.to_thread.run_sync(self._load_priors)
            self._priors = self._priors.with_source(source)
        if self._shared is not None:
            await self._shared.open()  # StateUnavailable: a clear error, nothing started
        self._tg = anyio.create_task_group()
        await self._tg.__aenter__()
        self._dispatch.start(self._tg)
        if self._shared is not None:
            self._tg.start_soon(self._shared.run_heartbeat, self._shared.backend.lease_ttl_s)
        if self._priors.batched:
            self._priors.open()
            self._tg.start_soon(self._priors.run)
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool | None:
        """Leaving normally waits for every pending request; leaving with an
        exception resolves them with `SchedulerClosed` at once. Errors
        leave as the class docstring says: one error as itself, several as a group."""
        assert self._tg is not None
        self._closed = True
        try:
            if exc_type is None:
                await self._dispatch.wait_idle()
        finally:
            for pending in list(self._dispatch.pending.values()):
                self._dispatch.abandon(pending, SchedulerClosed(
                    "the scheduler was closed", request_id=pending.id, klass=pending.request.klass
                ))  # fmt: skip
            self._tg.cancel_scope.cancel()
            self._priors.close()
            try:
                error = await leave_group(self._tg, exc_type, exc, tb)
            finally:
                if self._shared is not None:
                    with anyio.CancelScope(shield=True):
                        await self._shared.close()
            if error is not None and error is not exc:
                raise error  # a task's lone error; the block's own leaves unchanged below
        return None

    @property
    def alive(self) -> bool:
        """Entered, not closed, its task group running (else a health check says restart)."""
        return self._tg is not None and not self._closed and not self._tg.cancel_scope.cancel_called

    # -- the public calls ------------------------------------------------------------------

    @call_signature
    async def submit(self, **call: Any) -> Any:
        """Schedule one call of a scheduled API (`APIS`).

        Args:
            **call: The call (`CallArgs`): ``model``,
                ``messages`` (chat), ``prompt`` (completions) or ``input`` (the
                Responses API; embeddings with ``api="embeddings"``), the scheduling
                hints ``klass``, ``deadline``, ``prior``, ``tenant``; everything
                else is passed to the provider unchanged (``max_completion_tokens``,
                ``max_output_tokens``, ``temperature``, ``stream``, ...).

        Returns:
            The wrapped client's own response (``ChatCompletion``, ``Completion``,
                ``Response``, ``CreateEmbeddingResponse``), or a `ScheduledStream`
                for ``stream=True``.

        Raises:
            ValueError, TypeError: Bad input, before anything is queued
                (`semisched.runtime.calls.prepare_call`), and what can
                never succeed: an output cap outside ``[1, 10**8]``, a prior
                outside ``1 <= p50 <= p90 <= 10**8``, a deadline outside
                ``(0, 1e8]`` seconds (`semisched.runtime.calls`, rule 7).
            RequestError: An outcome (see `semisched.errors`).
        """
        prepared = self._intake.prepare(call)
        if self._tg is None or self._closed:
            raise SchedulerClosed("the scheduler is not running (use `async with Scheduler(...)`)",
                                  request_id="", klass=prepared.klass or "")  # fmt: skip
        return await self._intake.submit(prepared, self._priors)

    @call_signature
    def check(self, **call: Any) -> str:
        """Validate a call exactly as `submit` would, without scheduling it.

        Returns:
            The API it would call (``"chat"``, ``"responses"``, ...: ``APIS``).

        Raises:
            ValueError, TypeError: What `submit` would raise for it.
        """
        return self._intake.prepare(call).api

    def spent(self, tokens: int, endpoint: str | None = None) -> None:
        """A call this scheduler did not send spent ``tokens`` of the key (an
        unscheduled call's usage; the facade tells it): the rate budgets count them."""
        self._engine.spent(tokens, self._dispatch.now(), endpoint)

    def pause(self) -> None:
        """Send nothing more until `resume`; queued requests wait (deadlines still apply).

        In-flight calls continue. A batch job uses this on Ctrl-C: stop
        dispatching, let what is in flight finish, then leave.
        """
        self._dispatch.execute(self._engine.hold(self._dispatch.now()))

    def resume(self) -> None:
        """Undo `pause`."""
        self._dispatch.execute(self._engine.release(self._dispatch.now()))

    # -- the fleet ---------------------------------------------------------------------

    @property
    def endpoints(self) -> tuple[str, ...]:
        """The names of the endpoints new calls can use, in fleet order."""
        return self._deployments.names

    def add_endpoint(self, endpoint: Endpoint) -> None:
        """Add an endpoint at run time; queued work may go there at once.

        Raises:
            ValueError: Its name is already in use.
            TypeError: ``endpoint`` is not a [`Endpoint`][semisched.Endpoint].
        """
        self._deployments.add(endpoint)
        self._dispatch.stacks.drop(endpoint.name)
        self._dispatch.execute(self._engine.add_endpoint(endpoint.spec, self._dispatch.now()))

    def drain_endpoint(self, name: str) -> None:
        """Send nothing new to ``name``; its calls in flight finish. Queued calls that
        no other endpoint serves are rejected ([`RequestRejected`][semisched.RequestRejected]).

        Raises:
            ValueError: No endpoint has that name.
        """
        self._dispatch.execute(self._engine.drain_endpoint(name, self._dispatch.now()))

    def remove_endpoint(self, name: str) -> None:
        """Drain ``name`` (`drain_endpoint`) and drop it from the fleet.

        Raises:
            ValueError: No endpoint has that name.
        """
        self._dispatch.execute(self._engine.remove_endpoint(name, self._dispatch.now()))
        self._deployments.remove(name)

    def statistics(self) -> SchedulerStats:
        """A frozen snapshot: counters, the core's state, rate limits, the estimator.

        Per endpoint: ``statistics().engine.endpoints``. Per tenant:
        ``statistics().engine.tenants`` (or ``.engine.tenant("acme")``), each a
        [`TenantStats`][semisched.TenantStats]: queued, in flight, completed,
        rejected, served tokens, and its share, entitlement and debt.
        """
        return SchedulerStats(
            pending=len(self._dispatch.pending),
            open_streams=self._dispatch.answers.open_streams,
            counters=self._tally.freeze(),
            engine=self._engine.statistics(),
            rate_limits=self._dispatch.rate_limits,
            rate_limits_by_endpoint=dict(self._dispatch.rate_limits_by_endpoint),
            estimator=self._estimator.statistics(),
            priors=self._prior_choice,
            calibration=None if self._calibration is None else self._calibration.statistics(),
            state=None if self._shared is None else self._shared.statistics(),
            compression=self._compression.statistics(),
            spend=None if self._spending is None else self._spending.statistics(),
        )
