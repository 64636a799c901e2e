"""One name-to-class lookup for every policy layer: the registries, and resolving a policy.

Each layer (allocation, ordering, routing, tenants) has one `Registry` here, at the
bottom of the core: its built-in policies add themselves as their module loads
(``@ROUTING.register``), under their class attribute ``name``, which is the only place a
built-in policy's name is written. The configs (`semisched.core.policy_config` and
`semisched.core.routing_config`, below the policies) check a name against the registry
when they are built, without importing a policy; by then `semisched.core` has loaded
every policy module. A config names a
built-in policy or passes a policy class of its own; `policy_class` resolves either
to the class the layer's factory (``make_allocation``, ``make_ordering``,
``make_routing``, ``make_tenant_policy``) then builds with its own arguments. Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any, TypeVar, cast

from semisched.core.checks import check_choice

__all__ = ["ALLOCATION", "ORDERING", "ROUTING", "TENANT", "Registry", "policy_class"]

P = TypeVar("P")


class Registry(Mapping[str, type[Any]]):
    """The built-in policies of one layer, by name, in the order their module defines them
    (read-only to everyone but `register`)."""

    __slots__ = ("_classes", "layer")

    def __init__(self, layer: str) -> None:
        self.layer = layer
        self._classes: dict[str, type[Any]] = {}

    def register(self, cls: type[P]) -> type[P]:
        """Add a built-in policy under its ``name`` (a class decorator).

        Raises:
            ValueError: No ``name``, or one already taken.
        """
        name = getattr(cls, "name", None)
        if not isinstance(name, str) or not name:
            raise ValueError(f"{cls!r} must have a str class attribute 'name'")
        if name in self._classes:
            raise ValueError(f"a {self.layer} policy named {name!r} is already registered")
        self._classes[name] = cls
        return cls

    def __getitem__(self, name: str) -> type[Any]:
        return self._classes[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._classes)

    def __len__(self) -> int:
        return len(self._classes)

    def __repr__(self) -> str:
        return f"<Registry {self.layer}: {', '.join(self._classes)}>"


#: The allocation policies (`semisched.core.allocation`).
ALLOCATION = Registry("allocation")
#: The ordering policies (`semisched.core.ordering`).
ORDERING = Registry("ordering")
#: The routing policies (`semisched.core.fleet.routing`).
ROUTING = Registry("routing")
#: The tenant policies (`semisched.core.tenants.policies`).
TENANT = Registry("tenant")


def policy_class(policy: object, base: type, registry: Mapping[str, type[P]]) -> type[P]:
    """The class ``policy`` names in ``registry``, or ``policy`` itself when it is a
    subclass of the layer's ``base``.

    Raises:
        TypeError: A class that is not a ``base`` subclass.
        ValueError: A name that is not in ``registry`` (only reachable by bypassing
            the config's own check, which runs when the config is built).
    """
    if isinstance(policy, type):
        if not issubclass(policy, base):
            name = base.__name__
            article = "an" if name[0] in "AEIOU" else "a"
            raise TypeError(f"policy={policy!r} must be {article} {name} subclass")
        return cast("type[P]", policy)
    check_choice("policy", policy, registry)
    assert isinstance(policy, str)
    return registry[policy]
