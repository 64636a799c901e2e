"""Layers around the provider seam: what happens to one attempt on its way out and back.

`semisched.runtime.provider.Provider.create` is the I/O seam. Everything else
an attempt goes through is a layer that wraps a `Seam` and is itself a
`Seam`, the way httpx transports wrap transports. Per endpoint the
stack is built once, from what the scheduler is configured with
(`Stacks`), outermost first:

1. `CompressionLayer` (compress-and-route on): which prompt this
   attempt sends, by the endpoint it was routed to. (Its step before a request
   reaches the engine, compressing the prompt it may send, is
   `Stacks.prepare`.)
2. `SpendLayer` (`semisched.runtime.spending`; spend caps, or a priced
   endpoint): reserve the attempt's cost in every spend cap first; a refusal comes
   back as `Declined` and nothing is sent. When the answer ends its cost is counted
   and settled.
3. `ReservationLayer` (a shared state): reserve the attempt there
   first; a refusal comes back as `Refused` and nothing is sent. When
   the attempt ends its leases go back, a completion's charge is settled and
   tenants' work is shared.
4. `ObserverLayer` (when an observer gives calls a context): the provider call
   runs inside each such observer's ``attempt`` context (tracing: the caller's context,
   or the live span).
5. `LearningLayer`: each answer's ``usage`` teaches the prompt-token
   estimator and the length calibration.
6. `HeaderLayer`: rate-limit headers, of answers and of failures, go to
   the core's signals (`RateLimits`).
7. `ProviderSeam`: the endpoint's model name, then ``Provider.create``.

A layer a run does not use is not in its stack. The dispatcher calls
``send`` once per attempt and, for an `Answer`, ``ended`` exactly once
when the answer is consumed (at once for a response, at its end for a
stream); a failed or cancelled ``send`` is each layer's own to clean up.

Rules:

1. A layer never resolves a caller and never calls the engine's lifecycle
   events (``completed``, ``failed``, ``refused``): it returns a result or
   raises, and the dispatcher feeds that back.
2. A layer sees one attempt (`Pending`), never the
   dispatcher.

What this module is not: it classifies no failure for the core
(`semisched.runtime.failures`) and decides nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import openai

from semisched.compress.runtime import CompressedPrompt, PromptCompression
from semisched.core.actions import Action
from semisched.core.budget import ProviderLimits, rate_tokens
from semisched.core.engine import Engine
from semisched.core.fleet.endpoint import EndpointSpec
from semisched.core.request import Request
from semisched.fleet.endpoints import Deployments
from semisched.priors.calibration import LengthCalibration
from semisched.runtime.callargs import PreparedCall
from semisched.runtime.estimate import TokenEstimator
from semisched.runtime.failures import classify_failure, closed_unanswered
from semisched.runtime.headers import parse_rate_limits
from semisched.runtime.pending import Pending
from semisched.runtime.provider import Provider
from semisched.runtime.seam import Answer, Declined, Ended, Refused, Seam
from semisched.runtime.spending import Spending, SpendLayer
from semisched.runtime.stats import RuntimeTally
from semisched.state.guard import SharedBudget
from semisched.state.usage import SharedUsage
from semisched.telemetry.observe import Observers

__all__ = [
    "Answer",
    "CompressionLayer",
    "Configured",
    "Ended",
    "HeaderLayer",
    "Layer",
    "LearningLayer",
    "ObserverLayer",
    "ProviderSeam",
    "RateLimits",
    "Refused",
    "ReservationLayer",
    "Seam",
    "Stacks",
]


class ProviderSeam:
    """The innermost seam: the endpoint's model name, then ``Provider.create``.

    An attempt whose connection closed before any byte of its answer came (a kept-alive
    connection the server closed idle as the request went out on it:
    `semisched.runtime.failures.closed_unanswered`) is sent once more at once, and
    counted in ``tally.resent``, not as a failure: the core never sees it. A second
    such close is the attempt's failure.
    """

    def __init__(
        self,
        provider: Provider,
        params_for: Callable[[Mapping[str, Any]], Mapping[str, Any]],
        tally: RuntimeTally,
    ) -> None:
        self.provider = provider
        self.params_for = params_for
        self.tally = tally

    def __repr__(self) -> str:
        return f"<ProviderSeam {self.provider!r}>"

    async def send(self, pending: Pending) -> Answer | Refused | Declined:
        params = self.params_for(pending.params)
        api = pending.call.api
        try:
            response, headers = await self.provider.create(api, params)
        except openai.APIConnectionError as exc:
            if not closed_unanswered(exc):
                raise
            self.tally.resent += 1
            response, headers = await self.provider.create(api, params)
        return Answer(response, headers)

    def ended(self, pending: Pending, end: Ended) -> None:
        return None


class Layer:
    """A seam around ``inner`` that passes everything through; subclasses override."""

    def __init__(self, inner: Seam) -> None:
        self.inner = inner

    def __repr__(self) -> str:
        return f"<{type(self).__name__} around {self.inner!r}>"

    async def send(self, pending: Pending) -> Answer | Refused | Declined:
        return await self.inner.send(pending)

    def ended(self, pending: Pending, end: Ended) -> None:
        self.inner.ended(pending, end)


class CompressionLayer(Layer):
    """Chooses the prompt each attempt sends (`semisched.compress.runtime`, rule 6)."""

    def __init__(self, inner: Seam, compression: PromptCompression, spec: EndpointSpec) -> None:
        super().__init__(inner)
        self.compression = compression
        self.spec = spec

    async def send(self, pending: Pending) -> Answer | Refused | Declined:
        if pending.compressed is not None:
            self.compression.on_send(pending, self.spec)
        return await self.inner.send(pending)


class ReservationLayer(Layer):
    """Reserves each attempt in the shared state first (`semisched.state.guard`).

    Args:
        inner: The seam it wraps.
        shared: The shared state.
        usage: Tenants' usage shared through it (``None``: one tenant).
        now: The engine's time source.
        spawn: Runs a coroutine function in the background (the scheduler's task group).
    """

    def __init__(
        self,
        inner: Seam,
        shared: SharedBudget,
        usage: SharedUsage | None,
        now: Callable[[], float],
        spawn: Callable[..., None],
    ) -> None:
        super().__init__(inner)
        self.shared = shared
        self.usage = usage
        self.now = now
        self.spawn = spawn

    async def send(self, pending: Pending) -> Answer | Refused | Declined:
        try:
            tokens = rate_tokens(pending.request)
            grant, fleet_wide = await self.shared.reserve(pending.id, pending.endpoint, tokens)
            if not grant.ok:
                now = self.now()
                return Refused(now, self.shared.refusal_until(grant, now), fleet_wide)
            return await self.inner.send(pending)
        except BaseException:  # failed or cancelled: the leases go back
            self.spawn(self.shared.release, pending.id, pending.endpoint)
            raise

    def ended(self, pending: Pending, end: Ended) -> None:
        self.spawn(self.shared.release, pending.id, pending.endpoint)
        self.inner.ended(pending, end)
        if end.charged is not None:
            self.spawn(self.shared.settle, pending.id, pending.endpoint, end.charged)
        if end.completed and self.usage is not None:
            self.usage.served(pending.request, end.output_tokens or 0)


class ObserverLayer(Layer):
    """Runs the provider call inside each observer's ``attempt`` context."""

    def __init__(self, inner: Seam, observers: Observers) -> None:
        super().__init__(inner)
        self.observers = observers

    async def send(self, pending: Pending) -> Answer | Refused | Declined:
        with self.observers.attempt(pending.request, pending.attempts, pending.endpoint):
            return await self.inner.send(pending)


class LearningLayer(Layer):
    """Each answer's ``usage`` teaches the token estimator and the length calibration."""

    def __init__(
        self, inner: Seam, estimator: TokenEstimator, calibration: LengthCalibration | None
    ) -> None:
        super().__init__(inner)
        self.estimator = estimator
        self.calibration = calibration

    def ended(self, pending: Pending, end: Ended) -> None:
        if end.prompt_tokens:
            call = pending.call
            self.estimator.observe(
                call.model, call.prompt_kind, pending.prompt_nbytes, end.prompt_tokens
            )
        calibrated = pending.calibrated
        if end.output_tokens is not None and self.calibration is not None and calibrated:
            self.calibration.observe(calibrated, end.output_tokens)
        self.inner.ended(pending, end)


class RateLimits:
    """What rate-limit headers said, latest overall and per endpoint, fed to the engine.

    Args:
        engine: Told each header's headroom and limits.
        now: The engine's time source.
        clock_per_wall: Clock seconds per wall second (header durations are wall seconds).
    """

    def __init__(
        self, engine: Engine, now: Callable[[], float], clock_per_wall: Callable[[], float]
    ) -> None:
        self.engine = engine
        self.now = now
        self.clock_per_wall = clock_per_wall
        self.latest: ProviderLimits | None = None
        self.by_endpoint: dict[str, ProviderLimits] = {}

    def __repr__(self) -> str:
        return f"<RateLimits endpoints={sorted(self.by_endpoint)}>"

    def learn(self, headers: Mapping[str, str], pending: Pending) -> None:
        """Read ``headers`` of ``pending``'s attempt into the engine's signals."""
        info = parse_rate_limits(headers) if headers else None
        if info is None:
            return
        self.latest = info
        self.by_endpoint[pending.endpoint] = info
        now = self.now()
        if info.headroom is not None:
            self.engine.observe_headroom(info.headroom, now, pending.id)
        self.engine.observe_limits(pending.id, now, info.scaled(self.clock_per_wall()))


class HeaderLayer(Layer):
    """Rate-limit headers of answers and of failures go to `RateLimits`."""

    def __init__(self, inner: Seam, limits: RateLimits) -> None:
        super().__init__(inner)
        self.limits = limits

    async def send(self, pending: Pending) -> Answer | Refused | Declined:
        try:
            result = await self.inner.send(pending)
        except Exception as exc:
            self.limits.learn(classify_failure(exc).headers, pending)
            raise
        if isinstance(result, Answer):
            self.limits.learn(result.headers, pending)
        return result


@dataclass(frozen=True, kw_only=True)
class Configured:
    """What a run is configured with; each part that is set adds its layer.

    Attributes:
        deployments: The endpoints' providers and model names.
        estimator: The prompt-token estimator (always).
        calibration: The length calibration, when on.
        observers: Observers, when any.
        shared: The shared state, when one is used.
        compression: Compress-and-route, when on.
        spending: Spend caps and cost accounting, when the run has caps or prices.
    """

    deployments: Deployments
    estimator: TokenEstimator
    calibration: LengthCalibration | None = None
    observers: Observers | None = None
    shared: SharedBudget | None = None
    compression: PromptCompression | None = None
    spending: Spending | None = None


class Stacks:
    """Each endpoint's stack, built once on its first attempt (module docstring).

    Args:
        configured: What the run uses.
        engine: Told rate-limit headers (`RateLimits`) and shared tenants' usage.
        now: The engine's time source (never going backwards).
        clock_per_wall: Clock seconds per wall second.
        spawn: Runs a coroutine function in the background (the scheduler's task group).
        execute: Executes actions the shared tenants' usage lets go.
        tally: The runtime's counters (an attempt sent once more counts in ``resent``).

    Attributes:
        limits: What rate-limit headers said.
        usage: Tenants' usage shared through the state (``None``: no state, or one tenant).
    """

    def __init__(
        self,
        configured: Configured,
        engine: Engine,
        *,
        now: Callable[[], float],
        clock_per_wall: Callable[[], float],
        spawn: Callable[..., None],
        execute: Callable[[list[Action]], None],
        tally: RuntimeTally,
    ) -> None:
        self.configured = configured
        self.tally = tally
        self.now = now
        self.spawn = spawn
        self.limits = RateLimits(engine, now, clock_per_wall)
        shared = configured.shared
        self.usage = None
        if shared is not None:
            cfg = engine.config
            self.usage = shared.track_usage(
                engine, cfg.tenants, cfg.input_token_weight, now, execute
            )
        self._stacks: dict[str, Seam] = {}

    def __repr__(self) -> str:
        return f"<Stacks {sorted(self._stacks)}>"

    def __getitem__(self, name: str) -> Seam:
        stack = self._stacks.get(name)
        if stack is None:
            stack = self._stacks[name] = self._build(name)
        return stack

    def drop(self, name: str) -> None:
        """Forget ``name``'s stack (an endpoint added again under that name gets a new one)."""
        self._stacks.pop(name, None)

    async def prepare(
        self, request: Request, call: PreparedCall
    ) -> tuple[Request, CompressedPrompt | None]:
        """The compression layer's step before ``request`` reaches the engine: its
        compressed prompt, when compress-and-route applies (else ``request``, ``None``)."""
        compression = self.configured.compression
        if compression is None:
            return request, None
        return await compression.prepare(request, call)

    def start(self, run: Callable[[Callable[..., Any], str], object]) -> None:
        """Start the shared state's background work, if any, with ``run(task, name)``
        (the tenants' usage sync of the reservation layer's state)."""
        if self.usage is not None:
            run(self.usage.run, "tenant usage sync")

    def pause(self, endpoint: str, wait: float) -> None:
        """What the engine keeps off for ``wait`` engine seconds, every process sharing the
        state keeps off (a no-op without one)."""
        shared = self.configured.shared
        if shared is not None:
            self.spawn(shared.pause, endpoint, wait)

    def _build(self, name: str) -> Seam:
        """Endpoint ``name``'s stack, innermost first; unused layers left out."""
        c = self.configured
        deployments = c.deployments

        def params_for(params: Mapping[str, Any]) -> Mapping[str, Any]:
            return deployments.params_for(name, params)

        provider = ProviderSeam(deployments.provider(name), params_for, self.tally)
        seam: Seam = HeaderLayer(provider, self.limits)
        seam = LearningLayer(seam, c.estimator, c.calibration)
        if c.observers and c.observers.give_context:  # no layer (an await) for no context
            seam = ObserverLayer(seam, c.observers)
        if c.shared is not None:
            seam = ReservationLayer(seam, c.shared, self.usage, self.now, self.spawn)
        spec = deployments.endpoint(name).spec
        if c.spending is not None and (c.spending.caps or spec.price is not None):
            seam = SpendLayer(seam, c.spending, spec.price, name, self.spawn)
        if c.compression is not None and c.compression.enabled:
            seam = CompressionLayer(seam, c.compression, spec)
        return seam
