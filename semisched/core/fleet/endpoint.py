"""One endpoint of a fleet as the core sees it: its description, its live state, its health.

An *endpoint* is one place a request can be executed: a deployment of a model
(a region, an Azure deployment, a key with its own limits, a self-hosted vLLM).
`EndpointSpec` describes it (frozen, validated); `EndpointState`
is what the core learns and counts about it while it runs; the fleet
(`semisched.core.fleet.fleet`) decides whether it can take a request, and a
routing policy (`semisched.core.fleet.routing`) chooses among those that can.

Health rules (a circuit breaker per endpoint, after the classic pattern):

1. *Closed*: sends flow. ``RoutingConfig.failure_threshold`` consecutive failed
   attempts (5xx, timeouts, connection errors) open the circuit for the reason
   ``failures``. A 429 is not a failure of the endpoint (it is busy, not
   broken) and a bad request is the caller's; neither counts, neither resets.
2. *Open*: nothing is sent until ``cooloff_s`` after it opened.
3. *Half-open*: then one probe is sent. Its success closes the circuit; its
   failure opens it again for another ``cooloff_s``.
4. An ``insufficient_quota`` answer takes the endpoint out for good (billing
   does not heal with time); a drained endpoint takes nothing new but finishes
   what it has; a removed one is also forgotten.
5. A refused key (401, 403: `AUTH`) opens the
   circuit for the reason ``auth`` and keeps it open ``auth_cooloff_s`` (long:
   a key does not heal by itself, but one probe now and then finds a key that
   was fixed or an access that was granted); a probe refused again opens it
   for as long again. Refusals elsewhere, successes elsewhere: neither matters.
6. A 429 whose ``retry-after`` is longer than ``RetryPolicy.max_retry_after_s``
   opens the circuit for the reason ``rate_limited`` for that cap only; then
   one probe goes (rule 3): its answer closes it, another 429 opens it again
   (capped again).
7. The last endpoint whose circuit is closed never opens it for rules 1 and 5
   (`semisched.core.fleet.fleet` rule 6): with nowhere else to send, a
   failure is paced by the retry policy and a refusal reaches the caller.

``circuit_reason`` says why a circuit is not closed (``failures``, ``auth``,
``rate_limited``; ``""`` while closed).

Learned speed: an exponentially weighted least-squares fit of each answer's
latency against its output tokens (`SpeedFit`) gives an intercept
(time to first token, network) and a slope (seconds per output token at the
endpoint's current load). Pure: the caller passes every time.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from semisched.core.budget import RateBudget
from semisched.core.checks import check_choice, check_instance, check_int, check_number, check_str
from semisched.core.config import BudgetConfig, SignalsConfig
from semisched.core.fleet.limits import ConcurrencyLimit, FixedLimit, LimitChange
from semisched.core.signals import Signals
from semisched.core.spend import PriceTable, price_table
from semisched.core.stats import EndpointStats

__all__ = ["AUTH", "FAILURES", "POOLS", "RATE_LIMITED", "Circuit", "EndpointSpec",
           "EndpointState", "SpeedFit"]  # fmt: skip

#: ``EndpointSpec.pool`` values: token-budget routing's short and long pools.
POOLS: tuple[str, ...] = ("short", "long")

#: Why a circuit is open (``EndpointState.circuit_reason``; module rules 1, 5, 6).
FAILURES, AUTH, RATE_LIMITED = "failures", "auth", "rate_limited"


@dataclass(frozen=True, kw_only=True)
class EndpointSpec:
    """What the core needs to know about one endpoint.

    Attributes:
        name: Unique within the fleet; reported in `Send`.
        models: Logical model names it serves; ``None`` serves any model.
        max_concurrency: Most requests in flight here at once (``None``: no cap
            of its own; the scheduler's ``max_inflight`` still applies).
        budget: Its own RPM/TPM budget (a key or deployment with its own limits).
        weight: Relative share for weighted policies (capacity, cost, preference).
        pool: ``"short"`` or ``"long"`` for ``token_budget`` routing
            (Token-Budget-Aware Pool Routing); ``None`` serves both pools.
        context_tokens: Largest prompt plus output it serves (token-budget routing's
            ``C_max``): a larger request never goes here.
        price: What it bills (`PriceTable`; a
            [`Price`][semisched.core.spend.Price], a table of one price's fields or of
            model -> price is turned into one): the ``cost`` routing policy and the
            spend statistics read it. ``None``: not priced (it costs nothing).
    """

    name: str
    models: frozenset[str] | None = None
    max_concurrency: int | None = None
    budget: BudgetConfig | None = None
    weight: float = 1.0
    pool: str | None = None
    context_tokens: int | None = None
    price: PriceTable | None = None

    def __post_init__(self) -> None:
        check_str("name", self.name)
        object.__setattr__(self, "price", price_table(self.price))
        if self.models is not None:
            check_instance("models", self.models, frozenset)
            for model in self.models:
                check_str("models[]", model)
        check_int("max_concurrency", self.max_concurrency, minimum=1, optional=True)
        check_instance("budget", self.budget, BudgetConfig, optional=True)
        check_number("weight", self.weight, minimum=0, strict_min=True)
        if self.pool is not None:
            check_choice("pool", self.pool, POOLS)
        check_int("context_tokens", self.context_tokens, minimum=1, optional=True)

    def serves(self, model: str) -> bool:
        """Whether it serves ``model`` (``""``: any model will do)."""
        return self.models is None or not model or model in self.models


class Circuit(enum.Enum):
    """An endpoint's circuit breaker state (module rules 1-3, 5, 6)."""

    CLOSED = "closed"
    OPEN = "open"
    HALF_OPEN = "half_open"


class SpeedFit:
    """Exponentially weighted least squares of latency on output tokens.

    ``latency ~ intercept + slope * tokens``. Until the observed token counts
    vary enough to tell a slope from noise (a spread of 16 tokens), the slope
    is the prior ``s_per_token`` and the intercept the mean residual.
    """

    __slots__ = ("_decay", "_n", "_prior", "_x", "_xx", "_xy", "_y", "intercept_s", "slope_s")

    def __init__(self, decay: float, s_per_token: float) -> None:
        self._decay = decay
        self._prior = s_per_token
        self._n = self._x = self._y = self._xx = self._xy = 0.0
        #: Learned seconds per output token of one request.
        self.slope_s = s_per_token
        #: Learned fixed seconds of an answer (time to first token, network).
        self.intercept_s = 0.0

    def observe(self, tokens: float, latency_s: float) -> None:
        """Fold one answer in and refit: once per answer, so that every routing read
        (several per decision) is a plain attribute."""
        d = self._decay
        n = self._n = d * self._n + 1.0
        x = self._x = d * self._x + tokens
        y = self._y = d * self._y + latency_s
        xx = self._xx = d * self._xx + tokens * tokens
        xy = self._xy = d * self._xy + tokens * latency_s
        mx, my = x / n, y / n
        var = xx / n - mx * mx
        slope = self._prior
        if var > 256.0:
            fitted = (xy / n - mx * my) / var
            slope = fitted if fitted > self._prior * 0.05 else self._prior * 0.05
        self.slope_s = slope
        intercept = my - slope * mx
        self.intercept_s = intercept if intercept > 0.0 else 0.0

    @property
    def tokens_per_s(self) -> float:
        """The learned decode speed of one request (output tokens per second)."""
        return 1.0 / self.slope_s


class EndpointState:
    """The core's live view of one endpoint (read by routing policies).

    Attributes:
        spec: Its description.
        index: Its position in the fleet (stable; round robin follows it).
        cap: The requests it may hold now (``None``: no limit): its explicit
            ``max_concurrency``, or what its concurrency limit learned.
        sure: The part of ``cap`` it has shown it serves at once (``None``: no limit);
            what lies between is a learned limit's probe (`ConcurrencyLimit.sure`).
        limiter: Its concurrency-limit policy (`semisched.core.fleet.limits`);
            ``last_limit_change`` and ``limit_changes`` (per rule) tell its changes.
        inflight: Requests sent here and not yet answered.
        left_at: When a request last left it (answered, failed or cancelled).
        awaiting, awaiting_s: The streamed requests in flight here whose first token
            has not come (a learning limit's books, `semisched.core.fleet.limiting`), and
            the sum of the first-token times each is expected to take alone.
        inflight_cost: Sum of the in-flight requests' estimated costs
            (prior p50 plus weighted prompt tokens).
        sent_at_sum: Sum of their send times (the anticipated load is linear in it).
        sent, completed, failed_attempts, throttled, failovers: Counters (``sent``: the
            sends that left; one its shared budget refused is taken back).
        consecutive_failures: Rule 1's count.
        circuit: Rule 1-3 state; ``open_until`` when it may probe again.
        circuit_reason: Why it is not closed (``failures``, ``auth``,
            ``rate_limited``), ``""`` while closed.
        circuit_opens: How often it opened.
        probing: A half-open probe is in flight.
        out_reason: Why it takes nothing new (drained, removed, out of quota),
            or ``""``.
        removed: Removed from the fleet (it only finishes what it has).
        throttled_until: Its last 429's retry time (routing prefers others until then).
        paused_until: Nothing is sent to it before this (its shared budget refused).
        budget: Its own rate budget, if it has one.
        signals: Its own latency and throttle signals.
        fit: Its learned speed.
    """

    __slots__ = (
        "awaiting",
        "awaiting_s",
        "budget",
        "cap",
        "circuit",
        "circuit_opens",
        "circuit_reason",
        "completed",
        "consecutive_failures",
        "failed_attempts",
        "failovers",
        "fit",
        "index",
        "inflight",
        "inflight_cost",
        "last_limit_change",
        "left_at",
        "limit_changes",
        "limiter",
        "name",
        "open_until",
        "out_reason",
        "paused_until",
        "probing",
        "removed",
        "sent",
        "sent_at_sum",
        "signals",
        "spec",
        "sure",
        "throttled",
        "throttled_until",
        "weight",
    )

    def __init__(
        self, spec: EndpointSpec, index: int, signals: SignalsConfig, speed_decay: float
    ) -> None:
        self.spec = spec
        self.name = spec.name
        self.index = index
        self.weight = spec.weight
        self.cap = self.sure = spec.max_concurrency
        #: Its concurrency limit (the fleet sets it: `semisched.core.fleet.limiting`).
        self.limiter: ConcurrencyLimit = FixedLimit(spec.max_concurrency)
        self.last_limit_change: LimitChange | None = None
        self.limit_changes: dict[str, int] = {}  # rule -> changes
        self.inflight = 0
        self.left_at = float("-inf")
        self.awaiting = 0
        self.awaiting_s = 0.0
        self.inflight_cost = 0.0
        self.sent_at_sum = 0.0
        self.sent = 0
        self.completed = 0
        self.failed_attempts = 0
        self.throttled = 0
        self.failovers = 0
        self.consecutive_failures = 0
        self.circuit = Circuit.CLOSED
        self.open_until = 0.0
        self.circuit_opens = 0
        self.circuit_reason = ""
        self.probing = False
        self.out_reason = ""
        self.removed = False
        self.throttled_until = float("-inf")
        self.paused_until = float("-inf")
        self.budget = RateBudget(spec.budget) if spec.budget is not None else None
        self.signals = Signals(signals)
        self.fit = SpeedFit(speed_decay, signals.initial_s_per_token)

    def __repr__(self) -> str:
        out = f" out={self.out_reason!r}" if self.out_reason else ""
        return (
            f"<EndpointState {self.name!r} inflight={self.inflight} "
            f"circuit={self.circuit.value}{out}>"
        )

    # -- what routing policies read ------------------------------------------------------

    def anticipated_tokens(self, now: float) -> float:
        """Predicted work still to do in flight here (tokens), PreServe's decode load.

        Each in-flight request's cost minus what it has decoded since its send
        (its age past the learned intercept, at the learned speed), summed in
        O(1): ``C - (n*now - sum(sent_at) - n*intercept) / slope``, clamped to
        ``[0, C]`` (overdue requests then count as nearly done).
        """
        n = self.inflight
        if not n:
            return 0.0
        fit = self.fit
        decoded = (n * (now - fit.intercept_s) - self.sent_at_sum) / fit.slope_s
        left = self.inflight_cost - (decoded if decoded > 0.0 else 0.0)
        return left if left > 0.0 else 0.0

    def anticipated_s(self, now: float, extra_tokens: float) -> float:
        """Seconds to decode the anticipated load plus ``extra_tokens``, per unit of weight."""
        return (self.anticipated_tokens(now) + extra_tokens) * self.fit.slope_s / self.weight

    @property
    def latency_ewma(self) -> float:
        """EWMA of observed end-to-end seconds per output token here."""
        return self.signals.s_per_token

    # -- what the fleet maintains ---------------------------------------------------------

    def sendable(self, now: float) -> bool:
        """Whether the circuit lets a send through now (open turns half-open at its time)."""
        circuit = self.circuit
        if circuit is Circuit.CLOSED:
            return True
        if circuit is Circuit.OPEN:
            if now < self.open_until:
                return False
            self.circuit = Circuit.HALF_OPEN
            self.probing = False
        return not self.probing

    def circuit_at(self, now: float) -> Circuit:
        """The circuit as it stands at ``now`` (an open one past its time is half-open),
        read without changing it (statistics)."""
        if self.circuit is Circuit.OPEN and now >= self.open_until:
            return Circuit.HALF_OPEN
        return self.circuit

    def open_circuit(self, until: float, reason: str) -> float:
        """Open the circuit until ``until`` for ``reason`` (rules 1, 5, 6); returns ``until``."""
        if self.circuit is not Circuit.OPEN or self.circuit_reason != reason:
            self.circuit_opens += 1
        self.circuit = Circuit.OPEN
        self.circuit_reason = reason
        self.open_until = until
        self.probing = False
        return until

    def on_success(self) -> None:
        """An answer arrived: the run of failures ends, a half-open circuit closes."""
        self.consecutive_failures = 0
        self.probing = False
        self.circuit = Circuit.CLOSED
        self.circuit_reason = ""

    def on_failure(self, now: float, threshold: int | None, cooloff_s: float) -> None:
        """A failed attempt that is the endpoint's fault (rule 1); ``threshold``
        ``None``: the circuit must not open (the fleet has nowhere else to send)."""
        self.consecutive_failures += 1
        probe = self.circuit is Circuit.HALF_OPEN
        self.probing = False
        if threshold is None:
            if probe:
                self.circuit = Circuit.CLOSED
                self.circuit_reason = ""
            return
        if probe or (self.circuit is Circuit.CLOSED and self.consecutive_failures >= threshold):
            self.circuit_opens += 1
            self.circuit = Circuit.OPEN
            self.circuit_reason = FAILURES
            self.open_until = now + cooloff_s

    def statistics(self, now: float) -> EndpointStats:
        """A snapshot of it at ``now``."""
        return EndpointStats(
            name=self.name,
            state=self.out_reason or "active",
            circuit=self.circuit_at(now).value,
            circuit_reason=self.circuit_reason,
            inflight=self.inflight,
            sent=self.sent,
            completed=self.completed,
            failed_attempts=self.failed_attempts,
            throttled=self.throttled,
            failovers=self.failovers,
            consecutive_failures=self.consecutive_failures,
            circuit_opens=self.circuit_opens,
            s_per_token=self.signals.s_per_token,
            decode_tokens_per_s=self.fit.tokens_per_s,
            intercept_s=self.fit.intercept_s,
            anticipated_tokens=self.anticipated_tokens(now),
            budget=None if self.budget is None else self.budget.snapshot(now),
            limit=self.cap,
            limit_policy=self.limiter.name,
            limit_changes=dict(self.limit_changes),
            last_limit_change=self.last_limit_change,
        )
