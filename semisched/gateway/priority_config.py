"""The gateway file's classes and priority: ``[[class]]``, ``[priority]``, tenants' classes.

Read from the gateway's file (its rules: `semisched.gateway.config`) into
`PrioritySettings`, which `semisched.gateway.priority` applies to
each request (the precedence and the shedding are its rules):

```toml
[[class]]                        # replace the preset's classes
name = "interactive"
interactive = true               # short requests go here when nothing names a class
tier = 0                         # strict priority: tier 0 first
[[class]]
name = "batch"
tier = 1
min_share = 0.1                  # still a tenth of the sends while tier 0 is busy
deadline_s = 120                 # not sent within 120 s: 429 deadline_shed

[priority]
levels = [[0, "interactive"], [100, "batch"]]   # integer priority <= bound -> class
above = "batch"                                  # above every bound (else 400)
service_tier = { priority = "interactive", flex = "batch" }

[[tenant]]
name = "web"
key_sha256 = ["<sha256 of key A>", "<sha256 of key B>"]
default_class = "interactive"                # the tenant's requests naming none
key_classes = { "<sha256 of key B>" = "batch" }  # one key's requests naming none
deadline_s = 300                             # its requests' deadline when they name none
```

Rules:

1. A ``[[class]]`` takes [`ClassSpec`][semisched.core.config.ClassSpec]'s fields
   (``name``, ``weight``, ``interactive``, ``quota``, ``tier``, ``min_share``,
   ``deadline_s``); names are unique. Any ``[[class]]`` replaces all of the
   preset's classes.
2. ``levels`` are ``[PRIORITY, CLASS]`` pairs, integer priorities increasing;
   ``service_tier`` maps service tier names to classes.
3. ``key_classes`` names hashes of the tenant's own ``key_sha256``.
4. ``deadline_s`` (a class's, a tenant's) is a finite number of seconds > 0.
5. Every class named (levels, ``above``, ``service_tier``, ``key_classes``, a
   tenant's ``default_class``) is one of the scheduler's classes: the
   ``[[class]]`` tables, else the preset's (`PrioritySettings.check`, when
   the configuration is checked).

What this module is not: it applies nothing to a request and imports no web
framework (the CLI reads the file before the gateway's extra is known present).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Final

from semisched.core.checks import short_repr
from semisched.core.config import ClassSpec
from semisched.gateway.keys import check_hash

__all__ = ["CLASS_FIELDS", "PRIORITY_FIELDS", "PrioritySettings", "known_fields", "read_settings"]

#: Keys of a ``[[class]]`` table: [`ClassSpec`][semisched.core.config.ClassSpec]'s.
CLASS_FIELDS: Final = ("name", "weight", "interactive", "quota", "tier", "min_share",
                       "deadline_s")  # fmt: skip
#: Keys of ``[priority]``.
PRIORITY_FIELDS: Final = ("levels", "above", "service_tier")


@dataclass(frozen=True, kw_only=True)
class PrioritySettings:
    """What the file says about classes and priority (module docstring).

    Attributes:
        classes: ``[[class]]`` tables: they replace the preset's classes (empty: the preset's).
        class_deadlines: ``{class: deadline_s}`` (``[[class]] deadline_s``).
        levels: ``((bound, class), ...)``, bounds increasing (``[priority] levels``).
        above: The class of a priority above every bound (``None``: 400).
        service_tiers: ``{service_tier value: class}`` (``[priority] service_tier``).
        key_classes: ``{key sha256: class}`` (``[[tenant]] key_classes``).
        tenant_deadlines: ``{tenant: deadline_s}`` (``[[tenant]] deadline_s``).
    """

    classes: tuple[ClassSpec, ...] = ()
    class_deadlines: Mapping[str, float] = field(default_factory=dict)
    levels: tuple[tuple[int, str], ...] = ()
    above: str | None = None
    service_tiers: Mapping[str, str] = field(default_factory=dict)
    key_classes: Mapping[str, str] = field(default_factory=dict)
    tenant_deadlines: Mapping[str, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for name in ("class_deadlines", "service_tiers", "key_classes", "tenant_deadlines"):
            object.__setattr__(self, name, MappingProxyType(dict(getattr(self, name))))

    def check(self, class_names: Sequence[str], keys: Mapping[str, str]) -> None:
        """Every class named here is one of ``class_names`` (the scheduler's classes).

        Args:
            class_names: The scheduler's classes.
            keys: ``{sha256: tenant}`` of the gateway keys (to name a key's tenant).

        Raises:
            ValueError: Naming the field and the class.
        """
        named = [(f"[priority] levels: priority {bound}", k) for bound, k in self.levels]
        named += [(f"[priority] service_tier: {t!r}", k) for t, k in self.service_tiers.items()]
        named += [("[priority] above", self.above)] if self.above is not None else []
        named += [(f"tenant {keys.get(h)!r}: key_classes: a key", k)
                  for h, k in self.key_classes.items()]  # fmt: skip
        for where, klass in named:
            if klass not in class_names:
                raise ValueError(f"{where} names the class {klass!r}, which is not declared "
                                 f"(classes: {list(class_names)})")  # fmt: skip


# -- reading the file -------------------------------------------------------------------


def _seconds(where: str, value: object) -> float:
    if (isinstance(value, bool) or not isinstance(value, int | float) or not value > 0
            or math.isinf(value)):  # fmt: skip
        raise ValueError(f"{where}: deadline_s={short_repr(value)} must be a finite number of "
                         "seconds > 0")  # fmt: skip
    return float(value)


def known_fields(where: str, table: object, known: Sequence[str]) -> dict[str, Any]:
    """``table`` (a TOML table at ``where``) as a dict of the ``known`` fields only.

    Raises:
        ValueError: It is not a table, or it has a field not in ``known``.
    """
    if not isinstance(table, dict):
        raise ValueError(f"{where} must be a table")
    for key in table:
        if key not in known:
            raise ValueError(f"{where}: unknown field {key!r} (known: {', '.join(known)})")
    return dict(table)


def _classes(tables: object) -> tuple[tuple[ClassSpec, ...], dict[str, float]]:
    """The ``[[class]]`` tables: their specs, and their ``deadline_s``."""
    if not isinstance(tables, list):
        raise ValueError("'class' must be an array of tables ([[class]])")
    specs: list[ClassSpec] = []
    deadlines: dict[str, float] = {}
    for i, table in enumerate(tables, 1):
        table = known_fields(f"class #{i}", table, CLASS_FIELDS)
        label = f"class #{i} ({table.get('name')!r})"
        deadline = table.get("deadline_s")
        if deadline is not None:
            table["deadline_s"] = _seconds(label, deadline)
        try:
            spec = ClassSpec(**table)
        except (ValueError, TypeError) as exc:
            raise ValueError(f"{label}: {exc}") from None
        if any(s.name == spec.name for s in specs):
            raise ValueError(f"{label}: the name {spec.name!r} is given twice")
        specs.append(spec)
        if spec.deadline_s is not None:
            deadlines[spec.name] = spec.deadline_s
    return tuple(specs), deadlines


def _levels(value: object) -> tuple[tuple[int, str], ...]:
    want = ("[priority] levels must be [[PRIORITY, CLASS], ...] with integer priorities "
            'increasing, e.g. [[0, "interactive"], [100, "batch"]]')  # fmt: skip
    if not isinstance(value, list) or not value:
        raise ValueError(f"{want}, not {short_repr(value)}")
    levels: list[tuple[int, str]] = []
    for item in value:
        if (not isinstance(item, list) or len(item) != 2 or type(item[0]) is not int
                or not isinstance(item[1], str) or not item[1]):  # fmt: skip
            raise ValueError(f"{want}; {short_repr(item)} is not such a pair")
        if levels and item[0] <= levels[-1][0]:
            raise ValueError(f"{want}; {item[0]} does not follow {levels[-1][0]}")
        levels.append((item[0], item[1]))
    return tuple(levels)


def _priority(table: object) -> dict[str, Any]:
    """``[priority]`` as `PrioritySettings` fields."""
    table = known_fields("[priority]", table, PRIORITY_FIELDS)
    out: dict[str, Any] = {}
    if "levels" in table:
        out["levels"] = _levels(table["levels"])
    above = table.get("above")
    if above is not None and (not isinstance(above, str) or not above):
        raise ValueError(f"[priority] above={short_repr(above)} must be a class name")
    out["above"] = above
    tiers = table.get("service_tier", {})
    if not isinstance(tiers, dict) or not all(
        isinstance(k, str) and k and isinstance(v, str) and v for k, v in tiers.items()
    ):
        raise ValueError(
            f"[priority] service_tier={short_repr(tiers)} must map service tiers "
            'to classes, e.g. { priority = "interactive", flex = "batch" }'
        )
    out["service_tiers"] = tiers
    return out


def _tenant_fields(
    tables: list[Any], keys: Mapping[str, str]
) -> tuple[dict[str, str], dict[str, float]]:
    """Each ``[[tenant]]``'s ``key_classes`` (hashes of its own keys) and ``deadline_s``."""
    key_classes: dict[str, str] = {}
    deadlines: dict[str, float] = {}
    for i, table in enumerate(tables, 1):
        name = str(table.get("name"))
        label = f"tenant #{i} ({name!r})"
        if table.get("deadline_s") is not None:
            deadlines[name] = _seconds(label, table["deadline_s"])
        value = table.get("key_classes")
        if value is None:
            continue
        if not isinstance(value, dict):
            raise ValueError(f'{label}: key_classes must map key hashes to classes, e.g. '
                             '{ "<sha256 of a key>" = "batch" }')  # fmt: skip
        for digest, klass in value.items():
            digest = check_hash(digest, f"{label}: key_classes")
            if keys.get(digest) != name:
                raise ValueError(f"{label}: key_classes names a key hash that is not one of "
                                 "this tenant's key_sha256")  # fmt: skip
            if not isinstance(klass, str) or not klass:
                raise ValueError(f"{label}: key_classes: {short_repr(klass)} must be a class name")
            key_classes[digest] = klass
    return key_classes, deadlines


def read_settings(data: Mapping[str, Any], keys: Mapping[str, str]) -> PrioritySettings:
    """The file's ``[[class]]``, ``[priority]`` and the tenants' fields read here.

    Args:
        data: The parsed file.
        keys: ``{sha256: tenant}`` of the gateway keys (``key_classes`` must name them).

    Raises:
        ValueError: A bad table or value, naming it (the caller names the file).
    """
    classes, class_deadlines = _classes(data.get("class", []))
    tenants = [t for t in data.get("tenant") or [] if isinstance(t, dict)]
    key_classes, tenant_deadlines = _tenant_fields(tenants, keys)
    priority = _priority(data["priority"]) if "priority" in data else {}
    return PrioritySettings(classes=classes, class_deadlines=class_deadlines,
                            key_classes=key_classes, tenant_deadlines=tenant_deadlines,
                            **priority)  # fmt: skip
