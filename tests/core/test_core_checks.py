"""The argument checks every config uses: one set of rules, one message style."""

from __future__ import annotations

import math
from collections.abc import Callable
from fractions import Fraction
from typing import Any

import pytest

from semisched.core.checks import (
    check_bool,
    check_choice,
    check_fraction,
    check_instance,
    check_int,
    check_number,
    check_str,
)

Check = Callable[..., None]


@pytest.mark.parametrize(
    ("check", "value", "kwargs"),
    [
        (check_int, 0, {}),
        (check_int, 3, {"minimum": 3}),
        (check_int, 3, {"minimum": 1, "maximum": 3}),
        (check_int, None, {"optional": True}),
        (check_number, 0.5, {"minimum": 0}),
        (check_number, 2, {"minimum": 1, "strict_min": True}),  # an int where a float goes
        (check_number, Fraction(1, 3), {}),
        (check_number, math.inf, {"minimum": 0, "allow_inf": True}),
        (check_number, None, {"optional": True}),
        (check_fraction, 0, {}),
        (check_fraction, 1.0, {}),
        (check_fraction, 1.0, {"strict_min": True}),
        (check_bool, False, {}),
        (check_str, "x", {}),
        (check_str, None, {"optional": True}),
    ],
)
def test_good_values_pass(check: Check, value: object, kwargs: dict[str, Any]) -> None:
    check("field", value, **kwargs)


@pytest.mark.parametrize(
    ("check", "value", "kwargs", "message"),
    [
        (check_int, True, {}, "field=True must be an int"),  # a bool is not an int
        (check_int, 1.0, {}, "field=1.0 must be an int"),
        (check_int, "3", {}, "field='3' must be an int"),
        (check_int, 0, {"minimum": 1}, "field=0 must be an int >= 1"),
        (check_int, 4, {"minimum": 1, "maximum": 3}, "field=4 must be an int in [1, 3]"),
        (check_int, None, {"minimum": 1}, "field=None must be an int >= 1"),
        (check_int, 0, {"minimum": 1, "optional": True}, "field=0 must be None or an int >= 1"),
        (check_number, False, {}, "field=False must be a finite number"),  # nor a number
        (check_number, "1", {}, "field='1' must be a finite number"),
        (check_number, math.nan, {}, "field=nan must be a finite number"),
        (check_number, math.inf, {}, "field=inf must be a finite number"),
        (check_number, math.nan, {"allow_inf": True}, "field=nan must be a number"),
        (
            check_number,
            0.0,
            {"minimum": 0, "strict_min": True},
            "field=0.0 must be a finite number > 0",
        ),
        (check_number, -1, {"minimum": 0}, "field=-1 must be a finite number >= 0"),
        (
            check_number,
            5,
            {"maximum": 5, "strict_max": True},
            "field=5 must be a finite number < 5",
        ),
        (check_fraction, 1.5, {}, "field=1.5 must be a number in [0, 1]"),
        (check_fraction, 0.0, {"strict_min": True}, "field=0.0 must be a number in (0, 1]"),
        (check_fraction, math.inf, {}, "field=inf must be a number in [0, 1]"),
        (check_fraction, 2, {"optional": True}, "field=2 must be None or a number in [0, 1]"),
        (check_bool, 1, {}, "field=1 must be a bool"),
        (check_str, "", {}, "field='' must be a non-empty string"),
        (check_str, 3, {}, "field=3 must be a non-empty string"),
    ],
)
def test_bad_values_raise_one_message_style(
    check: Check, value: object, kwargs: dict[str, Any], message: str
) -> None:
    with pytest.raises(ValueError, match=r"^field=") as info:
        check("field", value, **kwargs)
    assert str(info.value) == message


def test_choice_lists_the_valid_names() -> None:
    check_choice("policy", "fifo", ("fifo", "ladder"))
    with pytest.raises(ValueError, match=r"^policy=") as info:
        check_choice("policy", "lifo", ("ladder", "fifo"))
    assert str(info.value) == "policy='lifo' must be one of ['fifo', 'ladder']"
    with pytest.raises(ValueError, match=r"^policy=None must be one of"):
        check_choice("policy", None, ("fifo",))


def test_instance_check_is_a_type_error() -> None:
    check_instance("prior", 1.5, (int, float))
    check_instance("prior", None, int, optional=True)
    with pytest.raises(TypeError) as info:
        check_instance("prior", "x", int, optional=True)
    assert str(info.value) == "prior='x' must be None or an int"
    with pytest.raises(TypeError, match=r"^prior=1 must be a str or a bytes$"):
        check_instance("prior", 1, (str, bytes))
