"""A scheduler's configuration from the arguments of ``Scheduler(...)``.

`scheduler_config` puts a preset's name or a config together with the
``retry``, ``routing`` and ``tenants`` arguments; `with_tenants` reads the
``tenants=`` argument (the tenants a call may name) into a config. Pure: no
client, no clock.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from semisched.core.config import RoutingConfig, SchedulerConfig, preset
from semisched.core.lifecycle import RetryPolicy
from semisched.core.tenants.config import TenantConfig, TenantSpec

__all__ = ["scheduler_config", "with_tenants"]


def scheduler_config(
    config: SchedulerConfig | str,
    *,
    retry: RetryPolicy | None = None,
    routing: str | RoutingConfig | None = None,
    tenants: TenantConfig | Sequence[TenantSpec] | None = None,
) -> SchedulerConfig:
    """A scheduler's config: ``config`` (a preset's name or a config) with ``retry``,
    ``routing`` (a policy name or a ``RoutingConfig``) and ``tenants``
    (`with_tenants`) put in; what ``Scheduler(config=...)`` is given when
    those differ from a preset's:

    ```python
    Scheduler(client, config=scheduler_config("final_adrr_olc", routing="ewma"))
    ```

    Raises:
        TypeError: ``config``, ``retry`` or ``routing`` of the wrong kind.
        ValueError: An unknown preset, or tenants declared twice.
    """
    if not isinstance(config, SchedulerConfig | str):
        raise TypeError(f"config={config!r} must be a SchedulerConfig or a preset's name")
    if retry is not None and not isinstance(retry, RetryPolicy):
        raise TypeError(f"retry={retry!r} must be a semisched.core.RetryPolicy")
    if isinstance(routing, str):
        routing = RoutingConfig(policy=routing)
    elif routing is not None and not isinstance(routing, RoutingConfig):
        raise TypeError(f"routing={routing!r} must be a policy name, a RoutingConfig or None")
    if isinstance(config, str):
        try:
            config = preset(config)
        except ValueError as exc:
            raise ValueError(f"config={config!r}: {exc}") from None
    if retry is not None:
        config = replace(config, retry=retry)
    config = with_tenants(config, tenants)
    return config if routing is None else replace(config, routing=routing)


def with_tenants(
    config: SchedulerConfig, tenants: TenantConfig | Sequence[TenantSpec] | None
) -> SchedulerConfig:
    """``config`` with the tenants of ``Scheduler(..., tenants=)``.

    Args:
        config: The scheduler's config.
        tenants: A [`TenantConfig`][semisched.core.tenants.config.TenantConfig], or a
            sequence of [`TenantSpec`][semisched.core.tenants.config.TenantSpec] (then
            ``TenantConfig(tenants=tuple(tenants))``: its default policy).
            ``None`` keeps ``config.tenants``.

    Raises:
        ValueError: ``config`` declares tenants of its own as well (which
            one was meant is not ours to guess), or the specs are not
            valid together (no tenant, two with one name).
        TypeError: ``tenants`` is neither of the above.
    """
    if tenants is None:
        return config
    if isinstance(tenants, TenantSpec | str) or not isinstance(tenants, TenantConfig | Sequence):
        raise TypeError(f"tenants={tenants!r} must be a TenantConfig or a sequence of TenantSpec")
    if config.tenants != TenantConfig():
        raise ValueError(
            f"tenants={tenants!r} and config.tenants={config.tenants!r} both declare "
            "tenants: give them in one place"
        )
    if not isinstance(tenants, TenantConfig):
        tenants = TenantConfig(tenants=tuple(tenants))
    return replace(config, tenants=tenants)

