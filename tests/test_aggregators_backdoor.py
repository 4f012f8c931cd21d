"""Defenses made for backdoors (norm_bound, weak_dp, flame, rlr) on hand-computed inputs with a unique answer."""

import pytest
import torch

from fedarena.errors import ConfigError
from fedarena.methods.aggregators import RoundDraw, check_aggregator, make_aggregator
from fedarena.methods.aggregators.flame import cosine_distances, majority_cluster

# Three honest updates of norm <= 5 and two huge outliers; with max_norm = 5 the outliers become (3, -4) and
# (0, 5), (3, 4) sits exactly on the bound. The norms are sqrt5, sqrt5, 5, 1000, 50: their median is 5 too.
BOUNDED = [[1.0, 2.0], [2.0, 1.0], [3.0, 4.0], [600.0, -800.0], [0.0, 50.0]]
BOUNDED_MEAN = [(1 + 2 + 3 + 3 + 0) / 5, (2 + 1 + 4 - 4 + 5) / 5]

# FLAME: four honest updates in the first quadrant of the (x, y) plane (angles 28 to 67 degrees, norms
# 5, 10, 13, 17) and three outliers close to the z axis (norms 3, ~30.07, ~40.11). n = 7: HDBSCAN's minimum
# cluster size is 4, so the honest group is the majority cluster; the median norm of all seven is 13.
HONEST = [[3.0, 4.0, 0.0], [8.0, 6.0, 0.0], [5.0, 12.0, 0.0], [15.0, 8.0, 0.0]]
OUTLIERS = [[0.0, 0.0, 3.0], [0.0, -2.0, 30.0], [-3.0, 0.0, 40.0]]
# The honest updates clipped to 13: only (15, 8) changes, to (15, 8) * 13/17.
FLAME_MEAN = [(3 + 8 + 5 + 15 * 13 / 17) / 4, (4 + 6 + 12 + 8 * 13 / 17) / 4, 0.0]

# RLR: five updates whose sign sums per coordinate are |5|, |3|, |1|, |0|, |-5|, |2| (a zero votes 0).
SIGNS = [
    [1.0, 2.0, 1.0, 1.0, -1.0, 2.0],
    [2.0, 1.0, 1.0, -1.0, -2.0, 1.0],
    [1.0, 1.0, 2.0, 0.0, -1.0, 1.0],
    [3.0, 1.0, -1.0, 4.0, -3.0, -1.0],
    [1.0, -1.0, -2.0, -2.0, -1.0, 0.0],
]
SIGNS_MEAN = [1.6, 0.8, 0.2, 0.4, -1.6, 0.6]


def tensor(rows):
    return torch.tensor(rows, dtype=torch.float64)


def ones(n):
    return torch.ones(n, dtype=torch.float64)


def test_norm_bound_clips_every_update_to_max_norm_then_averages_uniformly():
    # Prepare
    updates = tensor(BOUNDED)
    # Execute
    out = make_aggregator({"name": "norm_bound", "max_norm": 5.0}, f=2)(updates, ones(5))
    # Assert: the outliers enter as (3, -4) and (0, 5), not as (600, -800) and (0, 50)
    torch.testing.assert_close(out, tensor(BOUNDED_MEAN))


def test_norm_bound_defaults_to_the_rounds_median_norm():
    updates = tensor(BOUNDED)
    out = make_aggregator({"name": "norm_bound"}, f=2)(updates, ones(5))
    torch.testing.assert_close(out, tensor(BOUNDED_MEAN))  # median norm = 5
    small = make_aggregator({"name": "norm_bound", "max_norm": 1.0}, f=2)(updates, ones(5))
    assert not torch.allclose(small, out)


def test_weak_dp_without_noise_is_norm_bound():
    updates = tensor(BOUNDED)
    draw = RoundDraw(torch.arange(5), seed=3)
    noiseless = make_aggregator({"name": "weak_dp", "max_norm": 5.0, "sigma": 0.0}, f=2).for_round(draw)
    bounded = make_aggregator({"name": "norm_bound", "max_norm": 5.0}, f=2)
    assert torch.equal(noiseless(updates, ones(5)), bounded(updates, ones(5)))


def test_weak_dp_noise_is_the_rounds_own_draw_with_std_sigma():
    # Prepare: 50,000 coordinates; the clipped mean is the same in every call, so out - mean is the noise
    updates = torch.randn(6, 50_000, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    mean = make_aggregator({"name": "norm_bound", "max_norm": 2.0}, f=1)(updates, ones(6))
    agg = make_aggregator({"name": "weak_dp", "max_norm": 2.0, "sigma": 0.3}, f=1)
    order = torch.tensor([2, 0, 1, 5, 4, 3])
    # Execute
    first = agg.for_round(RoundDraw(order, seed=11))(updates, ones(6)) - mean
    again = agg.for_round(RoundDraw(order, seed=11))(updates, ones(6)) - mean
    other = agg.for_round(RoundDraw(order, seed=12))(updates, ones(6)) - mean
    # Assert: reproducible within a round, fresh across rounds, N(0, 0.3^2) per coordinate
    assert torch.equal(first, again)
    assert not torch.allclose(first, other)
    assert abs(first.std().item() - 0.3) < 0.01 and abs(first.mean().item()) < 0.01
    assert abs(other.std().item() - 0.3) < 0.01


def test_weak_dp_default_noise_is_the_papers_ratio_to_the_clipping_radius():
    # Prepare: 50,000 coordinates; the round's median norm is the radius
    updates = torch.randn(5, 50_000, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    radius = updates.norm(dim=1).median()
    draw = RoundDraw(torch.arange(5), seed=4)
    # Execute
    noise = (make_aggregator({"name": "weak_dp"}, f=1).for_round(draw)(updates, ones(5))
             - make_aggregator({"name": "norm_bound"}, f=1)(updates, ones(5)))
    # Assert: std 0.025 / 3 of the radius (Sun et al.: sigma 0.025 at norm bound 3)
    assert noise.std().item() == pytest.approx(0.025 / 3 * radius.item(), rel=0.02)


def test_norm_bound_and_weak_dp_reject_a_non_positive_bound_or_negative_noise():
    with pytest.raises(ConfigError, match="max_norm must be > 0"):
        check_aggregator({"name": "norm_bound", "max_norm": 0.0}, n=5, f=0)
    with pytest.raises(ConfigError, match="sigma >= 0"):
        make_aggregator({"name": "weak_dp", "sigma": -0.1}, f=0)(tensor(BOUNDED), ones(5))
    with pytest.raises(ConfigError, match="finite"):
        check_aggregator({"name": "weak_dp", "sigma": float("inf")}, n=5, f=0)


def test_flame_keeps_the_honest_cluster_and_clips_it_to_the_median_norm_of_all():
    # Prepare
    updates = tensor(HONEST + OUTLIERS)
    # Execute
    agg = make_aggregator({"name": "flame", "lam": 0.0}, f=3).for_round(RoundDraw(torch.arange(7), seed=5))
    out = agg(updates, ones(7))
    # Assert: the mean of the four honest updates clipped to 13 (the median of all seven norms; the median
    # of the honest norms would be 11.5)
    assert majority_cluster(updates).tolist() == [0, 1, 2, 3]
    torch.testing.assert_close(out, tensor(FLAME_MEAN))
    perm = [5, 2, 6, 0, 4, 1, 3]
    torch.testing.assert_close(agg(updates[perm], ones(7)), tensor(FLAME_MEAN))


def test_flame_noise_has_std_lam_times_the_median_norm_and_follows_the_round():
    # Prepare: the same seven updates, each coordinate repeated 20,000 times (cosines unchanged, every norm
    # times sqrt(20,000), so S = 13 * sqrt(20,000))
    reps = 20_000
    updates = tensor(HONEST + OUTLIERS).repeat(1, reps)
    expected = tensor(FLAME_MEAN).repeat(reps)
    sigma = 0.01 * 13 * reps**0.5
    agg = make_aggregator({"name": "flame", "lam": 0.01}, f=3)
    # Execute
    noise = agg.for_round(RoundDraw(torch.arange(7), seed=1))(updates, ones(7)) - expected
    again = agg.for_round(RoundDraw(torch.arange(7), seed=1))(updates, ones(7)) - expected
    other = agg.for_round(RoundDraw(torch.arange(7), seed=2))(updates, ones(7)) - expected
    # Assert
    assert torch.equal(noise, again) and not torch.allclose(noise, other)
    assert abs(noise.std().item() / sigma - 1) < 0.02 and abs(noise.mean().item()) < 0.02 * sigma


def test_flame_cluster_is_the_points_left_when_the_majority_dissolves():
    # Prepare: five updates near (1, 1) and two far ones; in angle: 34.7, 37.9 (the (9, 7) outlier), 41.2,
    # 45.0 | gap 5.7 | 50.7, 51.8 | gap 64.8 | 116.6 degrees. The (-6, 12) outlier leaves first, then the
    # pair at 50.7 and 51.8 (two points, below the minimum size 4), then the remaining four dissolve.
    updates = tensor([[1.0, 1.0], [1.3, 0.9], [0.9, 1.1], [1.1, 1.4], [0.8, 0.7], [9.0, 7.0], [-6.0, 12.0]])
    # Execute
    kept = majority_cluster(updates)
    # Assert: HDBSCAN's cluster is the four still together when it dissolves; (9, 7) shares their direction
    assert kept.tolist() == [0, 1, 4, 5]


def test_cosine_distances_of_orthogonal_opposite_and_zero_updates():
    dist = cosine_distances(tensor([[2.0, 0.0], [0.0, 3.0], [-1.0, 0.0], [0.0, 0.0]]))
    expected = [[0, 1, 2, 1], [1, 0, 1, 1], [2, 1, 0, 1], [1, 1, 1, 0]]
    assert dist.tolist() == expected


def test_flame_needs_two_updates_and_a_non_negative_noise_level():
    with pytest.raises(ConfigError, match="n >= 2"):
        check_aggregator({"name": "flame"}, n=1, f=0)
    for lam in (-1.0, float("nan"), float("inf")):
        with pytest.raises(ConfigError, match="lam >= 0"):
            check_aggregator({"name": "flame", "lam": lam}, n=5, f=0)
    check_aggregator({"name": "flame"}, n=2, f=0)


def test_rlr_flips_exactly_the_coordinates_where_fewer_than_theta_signs_agree():
    # Prepare
    updates = tensor(SIGNS)
    # Execute
    out = make_aggregator({"name": "rlr", "theta": 3}, f=1)(updates, ones(5))
    unanimous = make_aggregator({"name": "rlr", "theta": 5}, f=1)(updates, ones(5))
    # Assert: |sign sums| 5, 3, 1, 0, 5, 2 against theta = 3 (3 keeps the rate) and theta = 5
    lr = tensor([1, 1, -1, -1, 1, -1])
    torch.testing.assert_close(out, lr * tensor(SIGNS_MEAN))
    torch.testing.assert_close(unanimous, tensor([1, -1, -1, -1, 1, -1]) * tensor(SIGNS_MEAN))


def test_rlr_defaults_to_theta_ceil_of_four_tenths_of_n():
    # Prepare: ten updates; coordinate j has 7 - j positive and 3 + j negative entries, |sign sum| 4 - 2j
    updates = torch.tensor([[1.0 if i < 7 - j else -1.0 for j in range(3)] for i in range(10)],
                           dtype=torch.float64) * torch.arange(1, 11, dtype=torch.float64)[:, None]
    mean = updates.mean(dim=0)
    # Execute
    out = make_aggregator({"name": "rlr"}, f=1)(updates, ones(10))
    # Assert: theta = 4 at n = 10 (the reference's setting): |sums| 4, 2, 0 keep, flip, flip
    torch.testing.assert_close(out, tensor([1, -1, -1]) * mean)
    check_aggregator({"name": "rlr"}, n=3, f=0)  # ceil(1.2) = 2


def test_rlr_needs_theta_between_one_and_n():
    for theta, n in ((0, 5), (6, 5), (4, 3)):
        with pytest.raises(ConfigError, match="0 < theta <= n"):
            check_aggregator({"name": "rlr", "theta": theta}, n=n, f=0)
