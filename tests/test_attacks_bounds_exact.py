"""fedarena/attacks/bounds.py checked exactly, one behaviour per test (the mutation score of the module:
docs/testing.md): the tolerance of 1e-5 of the raw range at both checks (the largest overstep let through and one
just past it), the box's span per value and its 1e-30 floor, a single stamped row, no rows, the positions of an image
of several channels, a malformed position refused, the first three stray positions named, every refusal word for
word, ``TriggerBound``'s declared fields, frozenness and ``at_test``, and ``checked_corrupt``
(make mutants MODULE=fedarena/attacks/bounds.py)."""

import dataclasses
import typing
from collections.abc import Callable

import pytest
import torch

from fedarena.attacks import bounds
from fedarena.attacks.bounds import BoundExceeded, TriggerBound, check_stamped, checked_corrupt

F64 = torch.float64
UNIT_BOX = (torch.zeros(1, 1, 1, dtype=F64), torch.ones(1, 1, 1, dtype=F64))  # one channel of one pixel, [0, 1]


def one_value(v, rows=1):
    """Rows of one channel of one pixel holding v."""
    return torch.full((rows, 1, 1, 1), v, dtype=F64)


def refusal(bound, clean, stamped, box=UNIT_BOX, image_hw=(1, 1), attack="a"):
    with pytest.raises(BoundExceeded) as err:
        check_stamped(attack, bound, clean, stamped, box, image_hw)
    return str(err.value)


# --- the valid box -------------------------------------------------------------------------------------------------

def test_the_tolerance_is_1e_5_of_the_raw_range():
    assert bounds.RAW_TOLERANCE == 1e-5


def test_a_value_outside_the_box_by_exactly_the_tolerance_passes_and_one_just_past_it_is_refused():
    # 0 - (-1e-5) is 1e-5 exactly in float64 (span 1): not more than the tolerance
    check_stamped("a", TriggerBound(), one_value(0.5), one_value(-1e-5), UNIT_BOX, (1, 1))
    check_stamped("a", TriggerBound(), one_value(0.5), one_value(1.0 + 0.9e-5), UNIT_BOX, (1, 1))
    assert refusal(TriggerBound(), one_value(0.5), one_value(-1.5e-5)) == (
        "attack 'a' stamped a sample outside the valid pixel box by 1.5e-05 of the raw range: its trigger is broken "
        "(see fedarena.attacks.bounds)")


def test_the_overstep_is_a_fraction_of_each_values_own_span():
    # two channels of one pixel: channel 0 spans [0, 1], channel 1 spans [-2, 2] (span 4)
    box = (torch.tensor([0.0, -2.0], dtype=F64).reshape(2, 1, 1), torch.tensor([1.0, 2.0], dtype=F64).reshape(2, 1, 1))
    clean = torch.zeros(1, 2, 1, 1, dtype=F64)
    stamped = clean.clone()
    stamped[0, 1] = 2.8  # 0.8 past 2: 0.8 / 4 = 0.2 of the raw range
    assert refusal(TriggerBound(), clean, stamped, box) == (
        "attack 'a' stamped a sample outside the valid pixel box by 0.2 of the raw range: its trigger is broken "
        "(see fedarena.attacks.bounds)")
    # 4e-5 past 2 is 1e-5 of a span of 4: let through (4e-5 times 4 or over 1 would not be)
    inside = clean.clone()
    inside[0, 1] = 2.0 + 4e-5
    check_stamped("a", TriggerBound(), clean, inside, box, (1, 1))


def test_a_value_below_the_box_counts_its_distance_to_the_low_end():
    box = (torch.full((1, 1, 1), -1.0, dtype=F64), torch.full((1, 1, 1), 3.0, dtype=F64))  # span 4
    assert refusal(TriggerBound(), one_value(0.0), one_value(-2.0), box).startswith(
        "attack 'a' stamped a sample outside the valid pixel box by 0.25 of the raw range")


def test_a_box_of_no_span_divides_by_the_floor_1e_30():
    # low = high = 0: a change of 1.5e-35 is 1.5e-35 / 1e-30 = 1.5e-5 of the "range": refused
    box = (torch.zeros(1, 1, 1, dtype=F64), torch.zeros(1, 1, 1, dtype=F64))
    assert refusal(TriggerBound(), one_value(0.0), one_value(1.5e-35), box).startswith(
        "attack 'a' stamped a sample outside the valid pixel box by 1.5e-05 of the raw range")
    check_stamped("a", TriggerBound(), one_value(0.0), one_value(0.5e-35), box, (1, 1))  # 5e-6: let through


def test_values_left_as_they_were_pass_even_outside_the_box_or_beyond_every_bound():
    clean = torch.tensor([[[[2.0, 0.5]]]], dtype=F64)  # [1, 1, 1, 2]: the first value already outside [0, 1]
    box = (torch.zeros(1, 1, 2, dtype=F64), torch.ones(1, 1, 2, dtype=F64))
    stamped = clean.clone()
    stamped[0, 0, 0, 1] = 0.6
    check_stamped("a", TriggerBound(linf=0.1, positions=((0, 1),)), clean, stamped, box, (1, 2))
    check_stamped("a", TriggerBound(linf=0.0, positions=((0, 0),)), clean, clean.clone(), box, (1, 2))


# --- rows and shapes -----------------------------------------------------------------------------------------------

def test_a_single_stamped_row_is_checked():
    assert refusal(TriggerBound(), one_value(0.5), one_value(1.5)).startswith(
        "attack 'a' stamped a sample outside the valid pixel box by 0.5 of the raw range")
    assert refusal(TriggerBound(linf=0.1), one_value(0.5), one_value(0.9)).startswith(
        "attack 'a' changed a pixel by 0.4 of the raw range")


def test_no_rows_pass_whatever_the_bound():
    empty = torch.zeros(0, 1, 2, 2, dtype=F64)
    box = (torch.zeros(1, 2, 2, dtype=F64), torch.ones(1, 2, 2, dtype=F64))
    check_stamped("a", TriggerBound(linf=0.0, positions=((0, 0),)), empty, empty.clone(), box, (2, 2))


def test_a_changed_shape_is_refused_in_words():
    clean = torch.zeros(2, 1, 2, 2, dtype=F64)
    box = (torch.zeros(1, 2, 2, dtype=F64), torch.ones(1, 2, 2, dtype=F64))
    assert refusal(TriggerBound(), clean, clean.reshape(2, 1, 1, 4), box, (2, 2), attack="x") == (
        "attack 'x' changed the stamped samples' shape from [2, 1, 2, 2] to [2, 1, 1, 4]: a trigger stamps samples, "
        "it does not add or reshape them")
    assert refusal(TriggerBound(), clean, clean[:1], box, (2, 2)).startswith(
        "attack 'a' changed the stamped samples' shape from [2, 1, 2, 2] to [1, 1, 2, 2]")


# --- the L-infinity bound ------------------------------------------------------------------------------------------

def test_a_change_of_exactly_the_bound_plus_the_tolerance_passes_and_one_just_past_it_is_refused():
    edge = 0.25 + 1e-5  # float64: worst == bound.linf + RAW_TOLERANCE to the last bit
    check_stamped("a", TriggerBound(linf=0.25), one_value(0.0), one_value(edge), UNIT_BOX, (1, 1))
    assert refusal(TriggerBound(linf=0.25), one_value(0.0), one_value(0.25 + 1.5e-5)) == (
        "attack 'a' changed a pixel by 0.25 of the raw range, beyond its declared L-infinity bound 0.25: its "
        "trigger is broken")


def test_the_change_is_a_fraction_of_each_values_own_span():
    # channel 1 spans [-2, 2]: a change of 1.2 is 0.3 of its range (1.2 x 4 or 1.2 alone would be more)
    box = (torch.tensor([0.0, -2.0], dtype=F64).reshape(2, 1, 1), torch.tensor([1.0, 2.0], dtype=F64).reshape(2, 1, 1))
    clean = torch.zeros(3, 2, 1, 1, dtype=F64)
    stamped = clean.clone()
    stamped[2, 1] = -1.2
    check_stamped("a", TriggerBound(linf=0.3), clean, stamped, box, (1, 1))
    assert refusal(TriggerBound(linf=0.2), clean, stamped, box) == (
        "attack 'a' changed a pixel by 0.3 of the raw range, beyond its declared L-infinity bound 0.2: its "
        "trigger is broken")


# --- positions -----------------------------------------------------------------------------------------------------

def three_channels(changes):
    """Two rows of 3 channels of 2 x 3 pixels at 0.5, with (row, channel, r, c) set to 0.75."""
    clean = torch.full((2, 3, 2, 3), 0.5, dtype=F64)
    stamped = clean.clone()
    for row, channel, r, c in changes:
        stamped[row, channel, r, c] = 0.75
    return clean, stamped


BOX3 = (torch.zeros(3, 2, 3, dtype=F64), torch.ones(3, 2, 3, dtype=F64))


def test_positions_cover_every_channel_of_an_image_of_several():
    clean, stamped = three_channels([(1, 2, 1, 0), (0, 0, 1, 0), (1, 1, 0, 2)])
    check_stamped("a", TriggerBound(positions=((1, 0), (0, 2))), clean, stamped, BOX3, (2, 3))
    assert refusal(TriggerBound(positions=((1, 0),)), clean, stamped, BOX3, (2, 3)) == (
        "attack 'a' changed pixel positions [[0, 2]] outside the 1 it declares: its trigger is broken")


def test_the_refusal_names_the_first_three_stray_positions_row_by_row_and_counts_the_declared():
    clean, stamped = three_channels([(0, 0, 1, 2), (1, 1, 0, 0), (0, 2, 1, 0), (1, 0, 0, 1), (0, 1, 1, 1)])
    assert refusal(TriggerBound(positions=((1, 1), (0, 2))), clean, stamped, BOX3, (2, 3)) == (
        "attack 'a' changed pixel positions [[0, 0], [0, 1], [1, 0]] outside the 2 it declares: its trigger is "
        "broken")


def test_a_position_that_is_not_a_row_column_pair_is_refused_not_truncated():
    clean, stamped = three_channels([(0, 0, 0, 0)])
    with pytest.raises(ValueError, match=r"zip\(\) argument 2 is shorter than argument 1") as err:
        check_stamped("a", TriggerBound(positions=((0, 0, 1), (1, 1))), clean, stamped, BOX3, (2, 3))
    assert type(err.value) is ValueError


# --- TriggerBound --------------------------------------------------------------------------------------------------

def test_trigger_bound_declares_three_optional_fields_all_none_by_default():
    fields = dataclasses.fields(TriggerBound)
    assert [f.name for f in fields] == ["linf", "test_linf", "positions"]
    assert all(f.default is None for f in fields)
    assert TriggerBound() == TriggerBound(None, None, None)
    assert typing.get_type_hints(TriggerBound) == {
        "linf": float | None, "test_linf": float | None, "positions": tuple[tuple[int, int], ...] | None}


def test_trigger_bound_is_frozen_and_hashable():
    bound = TriggerBound(linf=0.1, positions=((0, 0),))
    with pytest.raises(dataclasses.FrozenInstanceError):
        bound.linf = 0.2
    assert len({bound, TriggerBound(linf=0.1, positions=((0, 0),))}) == 1


def test_at_test_takes_test_linf_where_one_is_declared_and_linf_otherwise():
    positions = ((1, 2), (3, 4))
    assert TriggerBound(0.3, 0.05, positions).at_test() == TriggerBound(0.05, None, positions)
    assert TriggerBound(0.3, 0.0).at_test() == TriggerBound(0.0, None, None)  # 0.0 is declared, not None
    assert TriggerBound(0.3, None, positions).at_test() == TriggerBound(0.3, None, positions)
    assert TriggerBound(None, 0.2).at_test() == TriggerBound(0.2)
    assert TriggerBound().at_test() == TriggerBound()


# --- checked_corrupt -----------------------------------------------------------------------------------------------

def test_stamp_check_is_a_callable_of_clean_and_stamped():
    assert bounds.StampCheck == Callable[[torch.Tensor, torch.Tensor], None]
    assert typing.get_type_hints(checked_corrupt) == {"corrupt": Callable, "check": bounds.StampCheck,
                                                      "return": Callable}


def test_checked_corrupt_passes_everything_through_and_checks_the_clean_against_the_stamped():
    calls, checks = [], []

    def corrupt(x, y, *args, **kwargs):
        calls.append((args, kwargs))
        return x + 1, y * 2

    x, y = torch.zeros(2, 1, 1, 1), torch.tensor([1, 2])
    stamped, labels = checked_corrupt(corrupt, lambda c, s: checks.append((c, s)))(x, y, 7, gen=3)
    assert calls == [((7,), {"gen": 3})]
    assert stamped.tolist() == [[[[1.0]]], [[[1.0]]]] and labels.tolist() == [2, 4]
    assert len(checks) == 1 and checks[0][0] is x and checks[0][1] is stamped


def test_checked_corrupt_lets_the_checks_refusal_through():
    def check(clean, stamped):
        check_stamped("c", TriggerBound(linf=0.1), clean, stamped, UNIT_BOX, (1, 1))

    corrupt = checked_corrupt(lambda x, y: (x + 0.5, y), check)
    with pytest.raises(BoundExceeded, match=r"attack 'c' changed a pixel by 0\.5 of the raw range"):
        corrupt(one_value(0.25), torch.tensor([0]))


def test_a_stamped_value_that_is_not_a_finite_number_is_refused_and_hides_no_overstep():
    # a NaN compares false with every limit: it once passed both checks and hid a real overstep beside it
    box = (torch.zeros(1, 2, 2), torch.ones(1, 2, 2))
    clean = torch.full((1, 1, 2, 2), 0.5)
    for bad in (float("nan"), float("inf")):
        stamped = clean.clone()
        stamped[0, 0, 0, 0], stamped[0, 0, 1, 1] = 0.9, bad
        assert refusal(TriggerBound(linf=0.01), clean, stamped, box, (2, 2)) == (
            "attack 'a' stamped a sample with a value that is not a finite number: its trigger is broken "
            "(see fedarena.attacks.bounds)")


def test_a_nan_the_attack_left_as_it_was_is_no_change():
    box = (torch.zeros(1, 2, 2), torch.ones(1, 2, 2))
    clean = torch.full((1, 1, 2, 2), 0.5)
    clean[0, 0, 1, 1] = float("nan")
    check_stamped("a", TriggerBound(linf=0.01, positions=()), clean, clean.clone(), box, (2, 2))


def test_no_declared_position_lets_no_pixel_move():
    box = (torch.zeros(1, 2, 2), torch.ones(1, 2, 2))
    clean = torch.full((1, 1, 2, 2), 0.5)
    stamped = clean.clone()
    stamped[0, 0, 1, 0] = 0.505
    assert refusal(TriggerBound(positions=()), clean, stamped, box, (2, 2)) == (
        "attack 'a' changed pixel positions [[1, 0]] outside the 0 it declares: its trigger is broken")


def test_a_value_that_was_not_a_finite_number_has_an_unbounded_change_and_hides_no_overstep():
    # a clean NaN stamped to a finite value once made the largest change NaN, and every overstep beside it passed
    box = (torch.zeros(1, 4, 4), torch.ones(1, 4, 4))
    clean = torch.full((2, 1, 4, 4), 0.5)
    clean[0, 0, 0, 0] = float("nan")
    stamped = clean.clone()
    stamped[0, 0, 0, 0] = 0.5
    assert refusal(TriggerBound(linf=0.1), clean, stamped, box, (4, 4)) == (
        "attack 'a' changed a pixel by inf of the raw range, beyond its declared L-infinity bound 0.1: its trigger "
        "is broken")
