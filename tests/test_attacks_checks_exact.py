"""fedarena/attacks/checks.py checked value by value, one behaviour per test: each range's edges (the least value
let through and the one just past it), what is not a number, and every error's wording
(make mutants MODULE=fedarena/attacks/checks.py)."""

import math

import pytest

from fedarena.attacks import checks
from fedarena.errors import ConfigError


def refusal(check, *args) -> str:
    with pytest.raises(ConfigError) as err:
        check(*args)
    return str(err.value)


# --- a finite number ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("check", [checks.positive, checks.non_negative, checks.fraction])
@pytest.mark.parametrize("bad", [True, False, "0.5", None, math.nan, math.inf, -math.inf, [0.5]])
def test_a_bool_a_string_or_a_non_finite_value_is_no_number(check, bad):
    assert refusal(check, "ipm", "scale", bad) == f"attack 'ipm': scale must be a finite number, got {bad!r}"


@pytest.mark.parametrize("check", [checks.positive, checks.non_negative, checks.fraction])
def test_a_number_comes_back_as_a_float(check):
    out = check("ipm", "scale", 1)
    assert out == 1.0 and type(out) is float


# --- the ranges --------------------------------------------------------------------------------------------------


def test_positive_lets_through_every_number_above_0_and_refuses_0_and_below():
    assert checks.positive("lie", "z", 1e-300) == 1e-300
    assert checks.positive("lie", "z", 0.5) == 0.5 and checks.positive("lie", "z", 7) == 7.0
    for bad in (0, 0.0, -1e-300, -2):
        assert refusal(checks.positive, "lie", "z", bad) == f"attack 'lie': z must be > 0, got {bad!r}"


def test_non_negative_lets_through_0_and_refuses_anything_below():
    assert checks.non_negative("mimic", "warmup", 0) == 0.0
    assert checks.non_negative("mimic", "warmup", 0.5) == 0.5 and checks.non_negative("mimic", "warmup", 3) == 3.0
    for bad in (-1e-300, -1):
        assert refusal(checks.non_negative, "mimic", "warmup", bad) == f"attack 'mimic': warmup must be >= 0, got {bad!r}"


def test_a_fraction_is_in_0_to_1_with_1_and_not_0():
    for good in (1e-300, 0.5, 1, 1.0):
        assert checks.fraction("badnets", "poison_frac", good) == float(good)
    for bad in (0, 0.0, -0.5, 1.0000001, 2):
        assert refusal(checks.fraction, "badnets", "poison_frac", bad) == (
            f"attack 'badnets': poison_frac must be a fraction in (0, 1], got {bad!r}")


def test_a_whole_number_is_an_int_at_least_the_least_and_not_a_bool():
    assert checks.whole("a3fl", "steps", 2, 2) == 2 and checks.whole("a3fl", "steps", 0, 0) == 0
    assert checks.whole("a3fl", "steps", 10, 2) == 10
    for bad, least in ((1, 2), (-1, 0), (2.0, 2), (True, 1), (False, 0), ("3", 1), (None, 0)):
        assert refusal(checks.whole, "a3fl", "steps", bad, least) == (
            f"attack 'a3fl': steps must be a whole number >= {least}, got {bad!r}")


def test_a_choice_is_one_of_those_allowed_and_a_refusal_lists_them():
    assert checks.choice("iba", "mode", "fixed", ("fixed", "adaptive")) == "fixed"
    assert checks.choice("iba", "mode", "adaptive", ("fixed", "adaptive")) == "adaptive"
    assert refusal(checks.choice, "iba", "mode", "both", ("fixed", "adaptive")) == (
        "attack 'iba': mode must be one of fixed, adaptive, got 'both'")
    assert refusal(checks.choice, "iba", "mode", None, ("fixed",)) == "attack 'iba': mode must be one of fixed, got None"


def test_optional_keeps_none_and_checks_anything_else():
    calls = []

    def check(attack, key, value):
        calls.append((attack, key, value))
        return 2 * value

    assert checks.optional(check, "edge_case", "frac", None) is None and calls == []
    assert checks.optional(check, "edge_case", "frac", 0) == 0 and calls == [("edge_case", "frac", 0)]
    assert checks.optional(checks.fraction, "edge_case", "frac", 0.25) == 0.25
    assert refusal(checks.optional, checks.fraction, "edge_case", "frac", 0) == (
        "attack 'edge_case': frac must be a fraction in (0, 1], got 0")
