"""Argument checks: one set of rules, one message style, for every config and value type.

The core's frozen dataclasses (and the shells' own configs) validate their
fields in ``__post_init__`` by calling these functions, so the same mistake
gets the same answer everywhere. This module decides nothing about
scheduling; it only says whether a value is acceptable.

Rules:

1. A ``bool`` is never an int and never a number (``max_inflight=True`` is a
   mistake, not ``1``).
2. Where a number is accepted, an int is too (``window_s=60``); any
   `numbers.Real` counts, so NumPy scalars pass. Where an int is
   required, any `numbers.Integral` counts.
3. NaN is never accepted; ``±inf`` only where a check says ``allow_inf=True``.
4. ``optional=True`` admits ``None``, and the message then says "None or ...".
5. Every failure raises ``ValueError`` with the message
   ``f"{name}={value!r} must be {what}"``, naming the field first, so callers
   and tests can match on ``^field=``. The one exception is
   `check_instance` (an object of the wrong class), which raises
   ``TypeError`` in the same style.
6. A message quotes a value with `short_repr`: at most
   `QUOTE_CHARS` characters of its ``repr``, so a 5 MB string a caller
   (or a gateway client) passed is never repeated back in full.

Pure: no I/O; imports only `math`, `numbers`, `reprlib` and
(for type hints) `collections.abc`.
"""

from __future__ import annotations

import math
import numbers
import operator
import reprlib
from collections.abc import Collection, Mapping
from typing import Final

__all__ = [
    "check_bool",
    "check_choice",
    "check_fraction",
    "check_instance",
    "check_int",
    "check_named",
    "check_number",
    "check_policy",
    "check_positive",
    "check_str",
    "short_repr",
    "token_count",
]

#: At most this many characters of a value's ``repr`` are quoted in a message (rule 6).
QUOTE_CHARS: Final = 100

_REPR: Final = reprlib.Repr()
_REPR.maxstring = _REPR.maxother = _REPR.maxlong = QUOTE_CHARS


def short_repr(value: object) -> str:
    """``repr(value)`` for a message, cut to `QUOTE_CHARS` characters and ``...``
    (rule 6); a long string or container is never rendered whole first."""
    text = _REPR.repr(value)
    return text if len(text) <= QUOTE_CHARS else text[:QUOTE_CHARS] + "..."


_INF = math.inf
_NEG_INF = -math.inf


def _fail(name: str, value: object, what: str, optional: bool) -> ValueError:
    prefix = "None or " if optional else ""
    return ValueError(f"{name}={short_repr(value)} must be {prefix}{what}")


def _article(noun: str) -> str:
    return f"{'an' if noun[:1].lower() in 'aeiou' else 'a'} {noun}"


def _bounds(
    minimum: float | None, maximum: float | None, strict_min: bool, strict_max: bool
) -> str:
    """``" in (0, 1]"``, ``" > 0"``, ``" <= 5"`` or ``""``."""
    if minimum is not None and maximum is not None:
        low, high = "(" if strict_min else "[", ")" if strict_max else "]"
        return f" in {low}{minimum!r}, {maximum!r}{high}"
    if minimum is not None:
        return f" {'>' if strict_min else '>='} {minimum!r}"
    if maximum is not None:
        return f" {'<' if strict_max else '<='} {maximum!r}"
    return ""


def check_int(
    name: str,
    value: object,
    *,
    minimum: int | None = None,
    maximum: int | None = None,
    optional: bool = False,
) -> None:
    """Require an int (not a bool) within ``[minimum, maximum]``.

    Raises:
        ValueError: ``f"{name}={value!r} must be an int >= {minimum}"`` and the like.
    """
    if value is None and optional:
        return
    kind = type(value)
    if kind is int or (kind is not bool and isinstance(value, numbers.Integral)):
        number: int = value  # type: ignore[assignment]
        if (minimum is None or number >= minimum) and (maximum is None or number <= maximum):
            return
    raise _fail(name, value, "an int" + _bounds(minimum, maximum, False, False), optional)


def check_number(
    name: str,
    value: object,
    *,
    minimum: float | None = None,
    maximum: float | None = None,
    strict_min: bool = False,
    strict_max: bool = False,
    allow_inf: bool = False,
    optional: bool = False,
) -> None:
    """Require a real number (int or float, not a bool, never NaN) within bounds.

    Args:
        name: Field name for the message.
        value: The value to check.
        minimum: Lower bound, inclusive unless ``strict_min``.
        maximum: Upper bound, inclusive unless ``strict_max``.
        strict_min: The lower bound itself is refused (``> minimum``).
        strict_max: The upper bound itself is refused (``< maximum``).
        allow_inf: Accept ``±inf`` (still subject to the bounds).
        optional: Accept ``None``.

    Raises:
        ValueError: ``f"{name}={value!r} must be a finite number > 0"`` and the like.
    """
    if value is None and optional:
        return
    # Exact float and int first: Request and Prior are checked on every submit.
    kind = type(value)
    if kind is float or kind is int or (kind is not bool and isinstance(value, numbers.Real)):
        number: float = value  # type: ignore[assignment]
        # Comparisons only (no float() of a huge int); NaN fails every comparison.
        if (
            (number == number if allow_inf else _NEG_INF < number < _INF)
            and (minimum is None or (number > minimum if strict_min else number >= minimum))
            and (maximum is None or (number < maximum if strict_max else number <= maximum))
        ):
            return
    bounds = _bounds(minimum, maximum, strict_min, strict_max)
    if minimum is not None and maximum is not None:
        what = "a number" + bounds  # a bounded range says "finite" already
    else:
        what = ("a number" if allow_inf else "a finite number") + bounds
    raise _fail(name, value, what, optional)


def check_fraction(
    name: str,
    value: object,
    *,
    strict_min: bool = False,
    strict_max: bool = False,
    optional: bool = False,
) -> None:
    """Require a number in ``[0, 1]`` (ends excluded with ``strict_min``/``strict_max``).

    Raises:
        ValueError: ``f"{name}={value!r} must be a number in [0, 1]"`` and the like.
    """
    check_number(
        name,
        value,
        minimum=0,
        maximum=1,
        strict_min=strict_min,
        strict_max=strict_max,
        optional=optional,
    )


def check_positive(
    name: str, value: object, *, allow_zero: bool = False, optional: bool = False
) -> None:
    """A finite number > 0 (``>= 0`` with ``allow_zero``): most of the configs' knobs."""
    check_number(name, value, minimum=0, strict_min=not allow_zero, optional=optional)


def check_bool(name: str, value: object) -> None:
    """Require a real ``bool`` (``0``/``1`` and other truthy values are refused).

    Raises:
        ValueError: ``f"{name}={value!r} must be a bool"``.
    """
    if not isinstance(value, bool):
        raise _fail(name, value, "a bool", False)


def check_str(name: str, value: object, *, optional: bool = False) -> None:
    """Require a non-empty string.

    Raises:
        ValueError: ``f"{name}={value!r} must be a non-empty string"``.
    """
    if optional and value is None:
        return
    if not isinstance(value, str) or not value:
        raise _fail(name, value, "a non-empty string", optional)


def check_choice(name: str, value: object, choices: Collection[str]) -> None:
    """Require one of ``choices`` (policy and preset names); the message lists them.

    Raises:
        ValueError: ``f"{name}={value!r} must be one of ['a', 'b']"``.
    """
    if not isinstance(value, str) or value not in choices:
        raise _fail(name, value, f"one of {sorted(choices)}", False)


def check_policy(policy: object, names: Mapping[str, object]) -> None:
    """A built-in policy's name, or a policy class (its factory checks the base class)."""
    if isinstance(policy, type):
        if not isinstance(getattr(policy, "name", None), str):
            raise ValueError(f"policy={policy!r} must have a str class attribute 'name'")
        return
    check_choice("policy", policy, names)


def check_instance(
    name: str, value: object, cls: type | tuple[type, ...], *, optional: bool = False
) -> None:
    """Require an instance of ``cls`` (a nested config, a prior).

    Raises:
        TypeError: ``f"{name}={value!r} must be a ClassSpec"`` and the like.
    """
    if optional and value is None:
        return
    if not isinstance(value, cls):
        classes = cls if isinstance(cls, tuple) else (cls,)
        what = " or ".join(_article(c.__name__) for c in classes)
        prefix = "None or " if optional else ""
        raise TypeError(f"{name}={short_repr(value)} must be {prefix}{what}")


def check_named(name: str, value: object, cls: type, noun: str) -> list[str]:
    r"""Require a non-empty tuple of ``cls`` instances with unique ``.name``s (the
    classes of a config, its tenants); return the names in order.

    Raises:
        TypeError: Not a tuple, or an item of another class.
        ValueError: ``f"{name}=() must hold at least one {noun}"``, or two items of one name.
    """
    check_instance(name, value, tuple)
    assert isinstance(value, tuple)
    if not value:
        raise ValueError(f"{name}=() must hold at least one {noun}")
    for i, item in enumerate(value):
        check_instance(f"{name}[{i}]", item, cls)
    names = [item.name for item in value]
    if len(set(names)) != len(names):
        raise ValueError(f"{name}={names!r} must have unique names")
    return names


def token_count(value: int) -> int:
    """``value`` as an int token count, or -1 when it is not one (bools are not)."""
    if isinstance(value, bool):
        return -1
    try:
        return operator.index(value)
    except TypeError:
        return -1
