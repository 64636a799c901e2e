"""The runtime's own knobs: what a [`Scheduler`][semisched.Scheduler] needs that is not scheduling.

`RuntimeOptions` groups the settings of one scheduler *process*: how long
a prior may take, how prompt tokens are estimated, how many requests may wait,
the jitter's seed, what to do with a call still in flight at its deadline, and
the key namespace of a shared state. The scheduling policy itself (classes,
admission, retry, routing, tenants) lives in the core's
[`SchedulerConfig`][semisched.core.config.SchedulerConfig], and ``Scheduler`` takes it
whole, never field by field:

```python
config = preset("final_adrr_olc", routing=RoutingConfig(policy="ewma"))
Scheduler(client, config=config, options=RuntimeOptions(max_pending=1000, seed=7))
```

`removed_argument` names the new place of each keyword the constructor
no longer takes, so an old call fails with a ``TypeError`` that says what to
write instead. `check_runtime_objects` checks the constructor's runtime
objects (clock, telemetry, observers) before anything is built from them, so a
wrong one is a ``TypeError`` naming the argument, not an error deep inside (or
only on entering the context).

What this module is not: it builds nothing, imports no optional extra and
reads no environment.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final

from semisched.core.checks import check_bool, check_int, check_number
from semisched.priors.calibration import LengthCalibration
from semisched.priors.sources import PriorSource
from semisched.runtime.estimate import TokenEstimator
from semisched.state.address import check_namespace

__all__ = ["RuntimeOptions", "check_runtime_objects", "removed_argument"]


@dataclass(frozen=True, kw_only=True)
class RuntimeOptions:
    """A scheduler process's runtime settings (none of them a scheduling decision).

    Attributes:
        prior_timeout_s: Longest wait (event-loop seconds) for a blocking prior
            source; then ``fallback`` answers.
        fallback: Prior source used on timeout or error of the scheduler's
            ``priors`` (``None``: [`Heuristic`][semisched.priors.sources.Heuristic]).
        calibration: Online correction of the source's priors from the lengths
            answers report ([`LengthCalibration`][semisched.priors.calibration.LengthCalibration]):
            ``True`` (a fresh one), ``False`` (off), or one to share or inspect.
            A caller's own ``prior=`` is never corrected.
        estimator: Prompt-token estimator (bytes-per-token EMA; ``None``: a fresh one).
        max_pending: Refuse (``QueueFull``) beyond this many unresolved requests.
        seed: Seed of the retry back-off's jitter (``random.Random(seed).random``)
            and of the shared state's worker id: the same seed gives the same
            back-off times. ``None``: seeded from the OS.
        cancel_late: Abort a call still in flight when its deadline passes
            (``DeadlineExceeded``, phase ``in_flight``). ``False`` lets it finish
            late and returns the response (how the paper and the simulator count
            a late completion).
        namespace: The key namespace of the scheduler's ``state`` (one per fleet or team).

    Raises:
        ValueError, TypeError: A bad value, naming the field.
    """

    prior_timeout_s: float = 0.05
    fallback: PriorSource | None = None
    calibration: LengthCalibration | bool = True
    estimator: TokenEstimator | None = None
    max_pending: int | None = None
    seed: int | None = None
    cancel_late: bool = True
    namespace: str = "semisched"

    def __post_init__(self) -> None:
        check_number("prior_timeout_s", self.prior_timeout_s, minimum=0)
        if not isinstance(self.calibration, LengthCalibration | bool):
            raise TypeError(
                f"calibration={self.calibration!r} must be a LengthCalibration or a bool"
            )
        check_int("max_pending", self.max_pending, minimum=1, optional=True)
        check_int("seed", self.seed, optional=True)
        check_bool("cancel_late", self.cancel_late)
        check_namespace(self.namespace)

    def length_calibration(self) -> LengthCalibration | None:
        """The calibration to use (a fresh one for ``True``; ``None``: off)."""
        if self.calibration is True:
            return LengthCalibration()
        return self.calibration or None


#: Keywords ``Scheduler`` no longer takes, and where each went.
_CONFIG_FIELDS: Final = ("retry", "routing", "tenants")
_OPTION_FIELDS: Final = (
    "prior_timeout_s",
    "fallback",
    "calibration",
    "estimator",
    "max_pending",
    "seed",
    "cancel_late",
    "namespace",
)


def removed_argument(names: object) -> TypeError | None:
    """A ``TypeError`` naming the new way for removed ``Scheduler`` keywords (``None``: none).

    Args:
        names: The keyword names a caller passed beyond the constructor's own.
    """
    if not isinstance(names, dict) or not names:
        return None
    given = list(names)
    config = [n for n in given if n in _CONFIG_FIELDS]
    options = [n for n in given if n in _OPTION_FIELDS]
    unknown = [n for n in given if n not in _CONFIG_FIELDS and n not in _OPTION_FIELDS]
    if unknown:
        return TypeError(f"Scheduler() got unexpected keyword argument(s) {unknown}")
    keywords = [f"{n}=" for n in given]
    named = keywords[0] if len(keywords) == 1 else ", ".join(keywords[:-1]) + " or " + keywords[-1]
    where = []
    if config:
        where.append(f"config=preset('final_adrr_olc', {', '.join(f'{n}=...' for n in config)})")
    if options:
        where.append(f"options=RuntimeOptions({', '.join(f'{n}=...' for n in options)})")
    pronoun = "it" if len(given) == 1 else "them"
    return TypeError(
        f"Scheduler() no longer takes {named}: pass {pronoun} as {' and '.join(where)}"
    )


def check_runtime_objects(*, clock: Any, metrics: Any, tracing: Any, observers: Any) -> None:
    """Check ``Scheduler``'s runtime objects by what the runtime will call on them.

    Args:
        clock: ``None`` or a [`Clock`][semisched.runtime.clock.Clock] instance
            (``now()``, ``sleep()``, ``to_wall()``).
        metrics: A bool or a ``prometheus_client.CollectorRegistry``.
        tracing: A bool or an ``opentelemetry.trace.TracerProvider``.
        observers: A sequence (its items are checked where they are used).

    Raises:
        TypeError: One of them is of the wrong kind, naming it.
    """
    methods = ("now", "sleep", "to_wall")
    if clock is not None and (
        isinstance(clock, type) or not all(callable(getattr(clock, m, None)) for m in methods)
    ):
        raise TypeError(
            f"clock={clock!r} must be a Clock instance with now(), sleep() and to_wall() "
            "(e.g. AnyioClock()), or None"
        )
    _check_flag_or("metrics", metrics, "prometheus_client", "CollectorRegistry")
    _check_flag_or("tracing", tracing, "opentelemetry.trace", "TracerProvider")
    if isinstance(observers, str | bytes) or not isinstance(observers, Sequence):
        raise TypeError(f"observers={observers!r} must be a sequence of RequestObserver")


def _check_flag_or(name: str, value: Any, module: str, cls: str) -> None:
    """``value`` is a bool or an instance of ``module.cls`` (an optional extra: when it is
    not imported, nothing can be an instance of it, so it is not imported here)."""
    if isinstance(value, bool):
        return
    kind = getattr(sys.modules.get(module), cls, None)
    if kind is None or not isinstance(value, kind):
        raise TypeError(f"{name}={value!r} must be True, False or an instance of {module}.{cls}")
