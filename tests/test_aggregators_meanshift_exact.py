"""SignGuard's flat-kernel mean shift, exactly (the mutation score of ``methods/aggregators/meanshift.py``:
docs/testing.md): sklearn's constants (300 iterations, stop at 1e-3 x bandwidth), the bandwidth estimate's
defaults, its fixed random_state 0 subset and its k-th nearest point (the point itself counted), a seed's climb
on tiny 1-D sets worked by hand (the window's radius inclusive, an empty window stopping a seed, the stop rule
at exactly its threshold, at most MAX_ITER + 1 moves), and the labels: centres merged when exactly a bandwidth
apart, points exactly a bandwidth from a centre labelled, points further off labelled -1."""

import inspect

import numpy as np
import pytest

from fedarena.methods.aggregators import meanshift
from fedarena.methods.aggregators.meanshift import climb, estimate_bandwidth, mean_shift_labels


def col(*values):
    """1-D points as an [n, 1] float64 array."""
    return np.array(values, dtype=np.float64)[:, None]


# ---------------------------------------------------------------- constants and defaults (sklearn's)


def test_the_iteration_cap_and_stop_threshold_are_sklearns():
    assert meanshift.MAX_ITER == 300
    assert meanshift.STOP == 1e-3


def test_the_bandwidth_estimates_defaults_are_sklearns():
    params = inspect.signature(estimate_bandwidth).parameters
    assert params["quantile"].default == 0.5
    assert params["n_samples"].default == 50


# ---------------------------------------------------------------- estimate_bandwidth


def test_bandwidth_is_the_mean_distance_to_the_farthest_point_at_quantile_one():
    # 0, 1, 3: farthest points 3, 2, 3 -> 8 / 3
    assert estimate_bandwidth(col(0, 1, 3), quantile=1.0) == pytest.approx(8 / 3, rel=1e-15)


def test_bandwidth_counts_the_point_itself_so_its_first_nearest_is_at_distance_zero():
    # int(3 * 0.5) = 1: each point's 1st nearest is itself -> 0 (not the nearest other point: 4 / 3)
    assert estimate_bandwidth(col(0, 1, 3), quantile=0.5) == 0.0
    # int(3 * 0.1) = 0 is raised to 1, again the point itself
    assert estimate_bandwidth(col(0, 1, 3), quantile=0.1) == 0.0


def test_bandwidth_second_nearest_at_quantile_two_thirds():
    # int(3 * 2 / 3) = 2: nearest other points 1, 1, 2 -> 4 / 3
    assert estimate_bandwidth(col(0, 1, 3), quantile=0.67) == pytest.approx(4 / 3, rel=1e-15)


def test_bandwidth_reads_the_random_state_0_subset_of_fifty_by_default():
    # 51 points, 50 at 0 and one at 50: the default subset (sklearn's random_state 0: the first 50 of
    # RandomState(0).permutation(51)) leaves exactly one point out
    left_out = np.random.RandomState(0).permutation(51)[50]
    points = np.zeros((51, 1))
    points[left_out] = 50.0
    # the outlier left out: every sampled point's 25th nearest is at 0
    assert estimate_bandwidth(points) == 0.0
    # the outlier in the subset (it is not left out when it sits anywhere else): its 25th nearest is at 50,
    # the other 49 points' at 0 -> 50 / 50
    kept = np.random.RandomState(0).permutation(51)[0]
    points = np.zeros((51, 1))
    points[kept] = 50.0
    assert estimate_bandwidth(points) == 1.0
    # every point read when n_samples covers them: 50 / 51
    assert estimate_bandwidth(points, n_samples=51) == pytest.approx(50 / 51, rel=1e-15)


# ---------------------------------------------------------------- climb


def test_a_seed_climbs_to_the_mean_of_its_window_until_it_stops_moving():
    # seed 0, bandwidth 2: window {0, 1} -> 0.5; window [-1.5, 2.5] {0, 1, 2.4} -> 3.4 / 3; same window: stop
    means, counts = climb(col(0), col(0, 1, 2.4), 2.0)
    assert means[0, 0] == pytest.approx(3.4 / 3, rel=1e-15)
    assert counts.tolist() == [3]


def test_the_window_includes_a_point_exactly_a_bandwidth_away():
    # seed 0, bandwidth 2: the point at 2 is in the window -> 1, then both points within 1 -> stop at 1
    means, counts = climb(col(0), col(0, 2), 2.0)
    assert means[:, 0].tolist() == [1.0]
    assert counts.tolist() == [2]


def test_an_empty_window_stops_that_seed_where_it_is_and_counts_zero():
    # the seed at 100 has no point within 2: it stays at 100 with count 0; the other climbs to 0.5
    means, counts = climb(col(0, 100), col(0, 1), 2.0)
    assert means[:, 0].tolist() == [0.5, 100.0]
    assert counts.tolist() == [2, 0]


def test_every_seed_starts_with_an_empty_window_and_stays():
    means, counts = climb(col(50, 100), col(0, 1), 2.0)
    assert means[:, 0].tolist() == [50.0, 100.0]
    assert counts.tolist() == [0, 0]


def test_a_move_of_exactly_the_threshold_stops_the_seed():
    # bandwidth 1000, threshold 1e-3 * 1000 = 1: seed 0's window {-500, 502} (1000.5 is outside) -> 1, a move of
    # exactly 1 -> stop there (one more move would reach 1000.5 and go to (-500 + 502 + 1000.5) / 3)
    assert meanshift.STOP * 1000.0 == 1.0
    means, counts = climb(col(0), col(-500, 502, 1000.5), 1000.0)
    assert means[:, 0].tolist() == [1.0]
    assert counts.tolist() == [2]


def test_a_move_below_the_threshold_stops_the_seed_even_if_its_window_would_change():
    # bandwidth 1: seed 10's window {9.5, 10.5001} (11.00003 is 1.00003 away) -> 10.00005, a move of 5e-5 <= 1e-3:
    # stop, though from 10.00005 the window would take 11.00003 in
    means, counts = climb(col(10), col(9.5, 10.5001, 11.00003), 1.0)
    assert means[0, 0] == pytest.approx(10.00005, abs=1e-12)
    assert counts.tolist() == [2]


def test_a_move_above_the_threshold_goes_on():
    # bandwidth 1000, threshold 1: window {-500, 503} -> 1.5, a move of 1.5 > 1: from 1.5 the window takes 1000.5
    # in -> (-500 + 503 + 1000.5) / 3; from there all three stay within -> stop
    means, counts = climb(col(0), col(-500, 503, 1000.5), 1000.0)
    assert means[0, 0] == pytest.approx(1003.5 / 3, rel=1e-15)
    assert counts.tolist() == [3]


def test_seeds_climb_independently_in_one_call():
    # the two seeds of the tests above, together: one stops after a move, the other moves on
    means, counts = climb(col(0, 0), col(0, 1, 2.4), 2.0)
    assert means[:, 0] == pytest.approx([3.4 / 3, 3.4 / 3], rel=1e-15)
    means, counts = climb(col(0, 2.4), col(0, 1, 2.4), 1.0)
    # seed 0: {0, 1} -> 0.5, same window -> stop (count 2); seed 2.4: {2.4} alone -> stays (count 1)
    assert means[:, 0].tolist() == [0.5, 2.4]
    assert counts.tolist() == [2, 1]


def test_the_iteration_cap_allows_max_iter_plus_one_moves(monkeypatch):
    # as sklearn's max_iter: the seed 0 climbing 0 -> 0.5 -> 3.4 / 3 (test above) stops at 0.5 after one move
    # when MAX_ITER is 0, and reaches 3.4 / 3 after two when it is 1
    monkeypatch.setattr(meanshift, "MAX_ITER", 0)
    means, counts = climb(col(0), col(0, 1, 2.4), 2.0)
    assert means[:, 0].tolist() == [0.5]
    assert counts.tolist() == [2]
    monkeypatch.setattr(meanshift, "MAX_ITER", 1)
    means, counts = climb(col(0), col(0, 1, 2.4), 2.0)
    assert means[0, 0] == pytest.approx(3.4 / 3, rel=1e-15)
    assert counts.tolist() == [3]


# ---------------------------------------------------------------- mean_shift_labels


def test_points_exactly_a_bandwidth_from_the_kept_centre_are_labelled():
    # -1, 0, 1 at bandwidth 1: seeds climb to -0.5 (2), 0 (3), 0.5 (2); 0 kept, the others within 1 of it
    # dropped; -1 and 1 lie exactly 1 from 0 -> labelled 0
    assert mean_shift_labels(col(-1, 0, 1), 1.0).tolist() == [0, 0, 0]


def test_centres_exactly_a_bandwidth_apart_merge_and_far_points_get_minus_one():
    # bandwidth 3: seeds (0, 0) and (3, 0) (two bins), each with a window of its two points (the others sqrt(10)
    # away): both count 2, so (3, 0) ranks first (larger centre); (0, 0) is exactly 3 from it -> dropped; the
    # points at x = 0 lie sqrt(10) > 3 from (3, 0) -> -1
    points = np.array([[0.0, 1.0], [0.0, -1.0], [3.0, 1.0], [3.0, -1.0]])
    assert mean_shift_labels(points, 3.0).tolist() == [-1, -1, 0, 0]


def test_centres_more_than_a_bandwidth_apart_are_both_kept_by_decreasing_count():
    # bandwidth 3: seeds (0, 0) with three points within 1 (count 3), (6, 0) with two (count 2): 6 > 3 apart, both
    # kept, the larger cluster labelled 0
    points = np.array([[0.0, 1.0], [0.0, -1.0], [0.0, 0.0], [6.0, 1.0], [6.0, -1.0]])
    assert mean_shift_labels(points, 3.0).tolist() == [0, 0, 0, 1, 1]
