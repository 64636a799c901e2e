"""One name-to-class lookup for every policy layer's factory.

Each layer (allocation, ordering, routing, tenants) keeps its read-only
registry of built-in policies by name; a config names one of them or passes a
policy class of its own. :func:`policy_class` resolves either to the class the
layer's factory (``make_allocation``, ``make_ordering``, ``make_routing``,
``make_tenant_policy``) then builds with its own arguments. Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TypeVar, cast

from semisched.core.checks import check_choice

__all__ = ["policy_class"]

P = TypeVar("P")


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
