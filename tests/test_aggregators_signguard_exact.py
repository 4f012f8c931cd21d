"""SignGuard's edges, exactly (the mutation score of ``methods/aggregators/signguard.py``: docs/testing.md): the
paper's defaults (0.1 < |g| / median < 3.0, a window of 10% of the coordinates) and the check's bounds and wording,
the sign features (fractions of positive, zero and negative coordinates in the window over their column maxima +
1e-8), the zero-bandwidth branch (the largest group of identical rows), the bandwidth read on sklearn's subset of
50 rows, the strict norm filter, the window's width (at least one coordinate; the whole update from coordinate 0 at
window 1), NaN coordinates read as 0, the output (the kept updates clipped to the lower middle norm, averaged; one
kept, none kept, norms below 1) and the registry entry (make mutants MODULE=fedarena/methods/aggregators/signguard.py).
"""

import inspect

import numpy as np
import pytest
import torch

from fedarena.errors import ConfigError
from fedarena.methods.aggregators import AGGREGATORS
from fedarena.methods.aggregators.signguard import (
    check_signguard,
    largest_cluster,
    sign_features,
    signguard,
    signguard_selection,
)

F64 = torch.float64


def kept(rows, **params):
    return signguard_selection(torch.tensor(rows, dtype=F64), f=0, **params).tolist()


def aggregate(rows, **params):
    updates = torch.tensor(rows, dtype=F64)
    return signguard(updates, weights=torch.ones(len(rows), dtype=F64), losses=None, f=0, **params)


def bounds_message(lower, upper):
    return ("signguard keeps updates with lower < norm / median norm < upper and needs 0 <= lower < upper; "
            f"got lower={lower}, upper={upper}")


def window_message(window):
    return f"signguard's window is the fraction of coordinates its sign statistics read, in (0, 1]; got {window}"


# --- defaults and the check ----------------------------------------------------------------------------------------

def test_the_defaults_are_the_papers_in_the_check_the_selection_and_the_rule():
    for fn in (check_signguard, signguard_selection, signguard):
        params = inspect.signature(fn).parameters
        assert (params["lower"].default, params["upper"].default, params["window"].default) == (0.1, 3.0, 0.1)


def test_the_checks_defaults_pass_and_bound_the_one_bound_given():
    check_signguard(5, 1)
    check_signguard(5, 1, upper=0.5)  # default lower 0.1 < 0.5
    with pytest.raises(ConfigError) as err:
        check_signguard(5, 1, lower=3.5)  # default upper 3.0 <= 3.5
    assert str(err.value) == bounds_message(3.5, 3.0)


def test_a_lower_bound_of_zero_passes_and_equal_or_crossed_or_negative_bounds_are_refused_in_words():
    check_signguard(4, 0, lower=0.0, upper=1.0)
    for lower, upper in ((1.0, 1.0), (2.0, 1.0), (-0.1, 3.0)):
        with pytest.raises(ConfigError) as err:
            check_signguard(4, 0, lower=lower, upper=upper)
        assert str(err.value) == bounds_message(lower, upper)


def test_a_window_in_0_1_passes_and_zero_negative_or_past_1_is_refused_in_words():
    for window in (1e-9, 0.5, 1.0):
        check_signguard(4, 0, window=window)
    for window in (0.0, -0.1, 1.0000001, 1.5, 2.0):
        with pytest.raises(ConfigError) as err:
            check_signguard(4, 0, window=window)
        assert str(err.value) == window_message(window)


def test_the_rule_and_the_selection_refuse_bad_bounds_themselves():
    with pytest.raises(ConfigError, match="needs 0 <= lower < upper"):
        aggregate([[1.0, 1.0], [1.0, 1.0]], lower=2.0, upper=2.0)
    with pytest.raises(ConfigError, match=r"in \(0, 1\]; got 0.0"):
        kept([[1.0, 1.0], [1.0, 1.0]], window=0.0)


# --- sign features -------------------------------------------------------------------------------------------------

def test_sign_features_are_the_fractions_of_positive_zero_and_negative_over_their_column_maxima_plus_1e_8():
    # width 4 (exact quarters): row 0 (+, +, 0, -): 1/2, 1/4, 1/4; row 1 (+, -, -, -): 1/4, 0, 3/4; row 2 (0, 0, 0,
    # +): 1/4, 3/4, 0. Column maxima 1/2, 3/4, 3/4
    updates = torch.tensor([[9.0, 2.0, 0.5, 0.0, -1.0, 7.0],
                            [9.0, 3.0, -2.0, -0.1, -5.0, 7.0],
                            [9.0, 0.0, 0.0, 0.0, 4.0, 7.0]], dtype=F64)
    g = 1e-8
    expected = np.array([[0.5 / (0.5 + g), 0.25 / (0.75 + g), 0.25 / (0.75 + g)],
                         [0.25 / (0.5 + g), 0.0, 0.75 / (0.75 + g)],
                         [0.25 / (0.5 + g), 0.75 / (0.75 + g), 0.0]])
    out = sign_features(updates, 1, 4)  # columns 1..4: the first and last columns are not read
    assert out.shape == (3, 3)
    np.testing.assert_allclose(out, expected, rtol=1e-13, atol=0)


def test_a_sign_no_row_has_gives_a_zero_column_not_a_division_by_zero():
    out = sign_features(torch.tensor([[1.0, 2.0], [3.0, -1.0]], dtype=F64), 0, 2)
    np.testing.assert_allclose(out, [[1 / (1 + 1e-8), 0.0, 0.0], [0.5 / (1 + 1e-8), 0.0, 0.5 / (0.5 + 1e-8)]],
                               rtol=1e-13, atol=0)


# --- the largest cluster -------------------------------------------------------------------------------------------

def test_a_zero_bandwidth_keeps_the_rows_of_the_largest_group_of_identical_feature_vectors():
    # every feature positive (mixed signs in the window); 3 rows of A, 2 of B: each row's 2nd nearest (quantile 0.5
    # of 5) is a copy of itself, so the bandwidth is 0
    a, b = [0.25, 0.25, 0.5], [0.25, 0.5, 0.25]
    features = np.array([b, a, b, a, a])
    assert largest_cluster(features).tolist() == [1, 3, 4]


def test_a_zero_bandwidth_tie_goes_to_the_lower_group_in_np_uniques_order():
    features = np.array([[1.0, 0.0, 0.0], [0.0, 0.0, 1.0], [1.0, 0.0, 0.0], [0.0, 0.0, 1.0]])
    assert largest_cluster(features).tolist() == [1, 3]


def test_the_bandwidth_is_estimated_on_sklearns_random_state_0_subset_of_50_rows():
    # 52 rows: the subset (the first 50 of RandomState(0)'s permutation) holds 25 rows of A and 25 of B, so every
    # sampled row's 25th nearest is a copy and the bandwidth is 0: the largest group of identical rows, A's 26 (the
    # 52nd drawn is A). Were the 51st drawn (C, 1 away) read, the bandwidth would be 0.995 / 51 > |A - B| = 0.005
    # and A and B one cluster of 51
    order = np.random.RandomState(0).permutation(52)
    features = np.zeros((52, 3))
    features[order[25:50]] = [0.005, 0.0, 0.0]
    features[order[50]] = [1.0, 0.0, 0.0]
    expected = sorted(order[:25].tolist() + [int(order[51])])
    assert largest_cluster(features).tolist() == expected


def test_two_sign_clusters_keep_the_more_populous():
    # 3 positive, 2 negative rows (bandwidth > 0: a flipped row's 2nd nearest is its twin, a positive's too)
    assert kept([[1.0, 2.0], [2.0, 1.0], [1.0, 1.5], [-1.0, -2.0], [-2.0, -1.0]], window=1.0) == [0, 1, 2]


# --- the norm filter -----------------------------------------------------------------------------------------------

def test_the_lower_norm_bound_is_strict_and_a_multiple_of_the_median():
    # norms 1, 2, 2: median 2, 0.5 * 2 = 1 exactly: row 0 is not above it
    assert kept([[1.0, 0.0], [2.0, 0.0], [2.0, 0.0]], lower=0.5) == [1, 2]
    assert kept([[1.0 + 2**-52, 0.0], [2.0, 0.0], [2.0, 0.0]], lower=0.5) == [0, 1, 2]  # one ulp above it
    assert kept([[1.0, 0.0], [2.0, 0.0], [2.0, 0.0]], lower=0.49) == [0, 1, 2]


def test_the_upper_norm_bound_is_strict_and_a_multiple_of_the_median():
    # norms 1, 1, 2: median 1, 2 * 1 = 2 exactly: row 2 is not below it
    assert kept([[1.0, 0.0], [1.0, 0.0], [2.0, 0.0]], upper=2.0) == [0, 1]
    assert kept([[1.0, 0.0], [1.0, 0.0], [2.0 - 2**-51, 0.0]], upper=2.0) == [0, 1, 2]  # one ulp below it
    assert kept([[1.0, 0.0], [1.0, 0.0], [2.0, 0.0]], upper=2.01) == [0, 1, 2]


def test_the_median_norm_is_nps_mean_of_the_middle_two_for_an_even_count():
    # norms 1, 2, 4, 8: np.median 3 (torch's lower middle would be 2); 2.5 * 3 = 7.5 < 8 < 2.5 * 4
    assert kept([[1.0, 0.0], [2.0, 0.0], [4.0, 0.0], [8.0, 0.0]], upper=2.5) == [0, 1, 2]


# --- the window ----------------------------------------------------------------------------------------------------

def test_a_window_narrower_than_one_coordinate_reads_one():
    # d = 2, window 0.5: width int(1.0) = 1, start randint(0, 1) = 0: only coordinate 0, positive in every row, so
    # every row has the same features and all are kept (coordinate 1 would split them 3 / 2)
    rows = [[1.0, 1.0], [1.0, 1.0], [1.0, 1.0], [1.0, -1.0], [1.0, -1.0]]
    assert kept(rows, window=0.5) == [0, 1, 2, 3, 4]
    # d = 5, window 0.1: int(0.5) = 0, still one coordinate
    assert sign_features(torch.ones(2, 5, dtype=F64), 0, max(1, int(0.1 * 5))).tolist() == [[1 / (1 + 1e-8), 0, 0]] * 2


def test_a_window_of_one_reads_every_coordinate_from_the_first():
    # coordinate 0 splits the rows 3 / 2 (coordinate 1 alone would not)
    assert kept([[1.0, 1.0], [1.0, 1.0], [1.0, 1.0], [-1.0, 1.0], [-1.0, 1.0]], window=1.0) == [0, 1, 2]
    out = aggregate([[1.0, 1.0], [1.0, 1.0], [1.0, 1.0], [-1.0, 1.0], [-1.0, 1.0]], window=1.0)
    assert out.tolist() == [1.0, 1.0]


# --- NaN coordinates -----------------------------------------------------------------------------------------------

def test_a_nan_update_reads_as_zero_in_the_selection_and_its_norm_is_refused():
    rows = [[1.0] * 10] * 4 + [[float("nan")] * 10]
    assert kept(rows, window=1.0) == [0, 1, 2, 3]


def test_nan_coordinates_add_zero_to_the_mean():
    # every row is 0 on coordinate 0: signs (0, +, +) alike, norms sqrt 5, sqrt 5, sqrt 2 (median sqrt 5: none clipped)
    nan = float("nan")
    out = aggregate([[nan, 1.0, 2.0], [nan, 2.0, 1.0], [nan, 1.0, 1.0]], window=1.0)
    torch.testing.assert_close(out, torch.tensor([0.0, 4 / 3, 4 / 3], dtype=F64), rtol=0, atol=1e-15)


# --- the output ----------------------------------------------------------------------------------------------------

def test_the_kept_updates_are_clipped_to_the_lower_middle_norm_and_averaged():
    # along u = (0.6, 0.8): norms 0.5, 1, 1.5, 2; torch's lower middle 1: 0.5u, u, u, u; mean 0.875u
    u = torch.tensor([0.6, 0.8], dtype=F64)
    out = aggregate([(s * u).tolist() for s in (0.5, 1.0, 1.5, 2.0)])
    torch.testing.assert_close(out, 0.875 * u, rtol=0, atol=1e-15)


def test_updates_with_norms_below_one_are_averaged_unscaled():
    out = aggregate([[0.3, 0.4], [0.3, 0.4], [0.6, 0.8]])  # norms 0.5, 0.5, 1: median 0.5
    torch.testing.assert_close(out, torch.tensor([0.3, 0.4], dtype=F64), rtol=0, atol=1e-15)


def test_one_kept_update_is_returned_clipped_to_the_median_norm():
    # norms 1, 2, 4: only 4 / 2 = 2 lies in (1.5, 2.5); clipped to the median 2
    out = aggregate([[1.0, 0.0], [2.0, 0.0], [4.0, 0.0]], lower=1.5, upper=2.5)
    assert out.tolist() == [2.0, 0.0]


def test_no_kept_update_gives_a_zero_update_of_the_models_size():
    # a median norm of 0: no norm lies in (0.1 * 0, 3 * 0)
    out = aggregate([[0.0, 0.0, 0.0]] * 3 + [[1.0, 2.0, 3.0], [-1.0, 0.0, 4.0]])
    assert out.dtype == F64 and out.tolist() == [0.0, 0.0, 0.0]
    # the largest sign cluster (norms 1) outside (1.5, 2) x the median 1; the rows inside it (1.8) outside the cluster
    out = aggregate([[1.0, 0.0]] * 3 + [[-1.8, 0.0]] * 2, lower=1.5, upper=2.0, window=1.0)
    assert out.tolist() == [0.0, 0.0]


# --- registry ------------------------------------------------------------------------------------------------------

def test_registry_entry_reads_the_round_selects_its_rows_and_is_version_2():
    entry = AGGREGATORS.get("signguard")
    assert entry.rule is signguard and entry.check is check_signguard and entry.selects is signguard_selection
    assert entry.reads == ("round",)
    assert AGGREGATORS.version("signguard") == 2
