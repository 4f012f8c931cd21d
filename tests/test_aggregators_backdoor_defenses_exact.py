"""The backdoor defenses' edges, exactly (the mutation score of ``methods/aggregators/backdoor_defenses.py``:
docs/testing.md): norm bounding's central-DP sensitivity 2 min(M / clip, 1) / n at a clip other than 1, weak DP's
noise recomputed from the round's seed and added (not subtracted) to the clipped mean, sigma 0 as norm bounding bit
for bit, updates with no coordinates, both rules' refusals word for word, RLR's default theta ceil(0.4 n) at every
small n, theta 1 accepted and every non-whole theta refused word for word, and the registry entries (weak DP reads
the round and is version 2; RLR searches theta in choice(2, 3, 4, 5, 6))."""

import math

import pytest
import torch

from fedarena.errors import ConfigError
from fedarena.methods.aggregators import AGGREGATORS, RoundDraw, check_aggregator, make_aggregator
from fedarena.methods.aggregators.backdoor_defenses import (
    NOISE_PER_BOUND,
    check_norm_bound,
    check_rlr,
    norm_bound,
    rlr,
    rlr_threshold,
    weak_dp,
)
from fedarena.search_space import Domain

F64 = torch.float64
# two updates along (3, 4): norms 5 and 10; clipped to 5 both are (3, 4): the mean (3, 4)
ALONG = [[3.0, 4.0], [6.0, 8.0]]


def tensor(rows):
    return torch.tensor(rows, dtype=F64)


def ones(n):
    return torch.ones(n, dtype=F64)


def run(section, rows, f=0, draw=None):
    rule = make_aggregator(section, f=f)
    if draw is not None:
        rule = rule.for_round(draw)
    return rule(tensor(rows), ones(len(rows)))


def seeded_normals(seed, d):
    return torch.randn(d, generator=torch.Generator().manual_seed(seed), dtype=F64)


# --- norm bounding: sensitivity and refusals -------------------------------------------------------------------------

def test_norm_bounds_sensitivity_is_twice_the_bound_inside_the_clip_over_n_at_a_clip_of_two():
    entry = AGGREGATORS.get("norm_bound")
    # M = 1 inside a clip of 2: every row within 1 = half a clip, the mean moves by 2 * 0.5 / 10 clips
    assert entry.sensitivity_at(10, 1, 2.0, max_norm=1.0) == pytest.approx(0.1, rel=1e-15)
    # M = 3 outside a clip of 0.5: the clip binds, the mean's 2 / n
    assert entry.sensitivity_at(4, 0, 0.5, max_norm=3.0) == pytest.approx(0.5, rel=1e-15)
    # the round's median norm: the ball's 2, whatever the clip
    assert entry.sensitivity_at(10, 1, 2.0) == 2.0


def test_a_non_positive_max_norm_is_refused_in_words():
    for max_norm in (0.0, -1.0, math.nan):
        with pytest.raises(ConfigError) as err:
            check_norm_bound(5, 0, max_norm=max_norm)
        assert str(err.value) == f"max_norm must be > 0 (or null: the round's median update norm), got {max_norm}"
    check_norm_bound(5, 0, max_norm=5e-324)


def test_a_negative_or_infinite_sigma_is_refused_in_words_naming_the_default_ratio():
    for sigma in (-0.1, math.inf, math.nan):
        with pytest.raises(ConfigError) as err:
            check_norm_bound(5, 0, sigma=sigma)
        assert str(err.value) == ("weak_dp needs a finite noise standard deviation sigma >= 0 (or null: 0.00833 x the "
                                  f"clipping radius), got {sigma}")
    check_norm_bound(5, 0, sigma=0.0)


def test_updates_without_coordinates_give_an_empty_aggregate_not_a_refusal():
    # n = 3 updates of a model with d = 0 parameters: the clipped mean (and its noise) has no coordinates
    empty = torch.zeros(3, 0, dtype=F64)
    for out in (norm_bound(empty, weights=ones(3), losses=None, f=0),
                norm_bound(empty, weights=ones(3), losses=None, f=0, max_norm=1.0),
                weak_dp(empty, weights=ones(3), losses=None, f=0),
                weak_dp(empty, weights=ones(3), losses=None, f=0, max_norm=1.0, sigma=0.5)):
        assert out.shape == (0,) and out.dtype == F64


# --- weak DP: the noise ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("seed", [7, 21])
def test_weak_dp_adds_sigma_times_the_rounds_normal_draws_to_the_clipped_mean(seed):
    out = run({"name": "weak_dp", "max_norm": 5.0, "sigma": 0.5}, ALONG, draw=RoundDraw(torch.arange(2), seed=seed))
    draws = seeded_normals(seed, 2)
    torch.testing.assert_close(out, tensor([3.0, 4.0]) + 0.5 * draws, rtol=0, atol=1e-15)
    assert not torch.allclose(out, tensor([3.0, 4.0]) - 0.5 * draws)


def test_weak_dp_called_directly_draws_from_seed_zero():
    out = weak_dp(tensor(ALONG), weights=ones(2), losses=None, f=0, max_norm=5.0, sigma=2.0)
    torch.testing.assert_close(out, tensor([3.0, 4.0]) + 2.0 * seeded_normals(0, 2), rtol=0, atol=1e-15)


def test_weak_dp_default_sigma_is_the_papers_ratio_times_the_median_norm():
    # norms 5, 10, 15: the radius 10; clipped: (3, 4), (6, 8), (6, 8): mean (5, 20 / 3); sigma = 0.025 / 3 * 10
    rows = [[3.0, 4.0], [6.0, 8.0], [9.0, 12.0]]
    assert NOISE_PER_BOUND == 0.025 / 3
    out = run({"name": "weak_dp"}, rows, draw=RoundDraw(torch.arange(3), seed=5))
    expected = tensor([5.0, 20.0 / 3.0]) + (0.25 / 3.0) * seeded_normals(5, 2)
    torch.testing.assert_close(out, expected, rtol=0, atol=1e-14)


def test_sigma_zero_is_norm_bound_bit_for_bit_the_sign_of_a_zero_included():
    # three rows of -5e-324 (clip factor 1): the true mean is negative and below the smallest subnormal, so its
    # rounding may be -0.0; weak DP without noise returns norm bounding's bits, never -0.0 + 0.0 = +0.0
    rows = [[-5e-324, 1.0], [-5e-324, 1.0], [-5e-324, 1.0]]
    bounded = run({"name": "norm_bound", "max_norm": 2.0}, rows)
    for draw in (None, RoundDraw(torch.arange(3), seed=0), RoundDraw(torch.arange(3), seed=9)):
        noiseless = run({"name": "weak_dp", "max_norm": 2.0, "sigma": 0.0}, rows, draw=draw)
        assert torch.equal(noiseless.view(torch.int64), bounded.view(torch.int64))
    # all-zero updates: the median norm 0, so the default sigma is 0 too
    zeros = [[0.0, -0.0], [-0.0, 0.0], [0.0, 0.0]]
    noiseless = run({"name": "weak_dp"}, zeros, draw=RoundDraw(torch.arange(3), seed=4))
    assert torch.equal(noiseless.view(torch.int64), run({"name": "norm_bound"}, zeros).view(torch.int64))


def test_weak_dps_registry_entry_reads_the_round_and_is_version_two():
    entry = AGGREGATORS.get("weak_dp")
    assert entry.rule is weak_dp and entry.check is check_norm_bound
    assert entry.reads == ("round",)
    assert AGGREGATORS.version("weak_dp") == 2
    check_aggregator({"name": "weak_dp"}, n=5, f=0)  # every input it reads is one a round provides


# --- RLR -----------------------------------------------------------------------------------------------------------

def test_rlrs_default_theta_is_ceil_of_four_tenths_of_n_at_every_small_n():
    # ceil(0.4 n) for n = 1..10 and 15: 0.4, 0.8, 1.2, 1.6, 2, 2.4, 2.8, 3.2, 3.6, 4, 6 rounded up
    assert [rlr_threshold(n, None) for n in (*range(1, 11), 15)] == [1, 1, 2, 2, 2, 3, 3, 4, 4, 4, 6]
    assert rlr_threshold(7, 6) == 6 and rlr_threshold(3, 1) == 1


def test_rlr_with_three_updates_flips_a_coordinate_with_one_vote_to_spare():
    # n = 3, theta = 2: |sign sums| 3 (keep), 1 (flip); the mean (1, 1 / 3)
    out = run({"name": "rlr"}, [[1.0, 1.0], [1.0, 1.0], [1.0, -1.0]])
    torch.testing.assert_close(out, tensor([1.0, -1.0 / 3.0]), rtol=0, atol=1e-15)


def test_rlr_with_six_updates_flips_a_coordinate_where_only_two_signs_agree():
    # n = 6, theta = 3: |sign sums| 4 (keep), 2 (flip), 3 (keep: a zero votes 0), 0 (flip)
    rows = [[1.0, 1.0, 1.0, 1.0], [1.0, 1.0, 1.0, -1.0], [1.0, 1.0, 1.0, 1.0],
            [1.0, 1.0, 0.0, -1.0], [1.0, -1.0, 0.0, 1.0], [-1.0, -1.0, 0.0, -1.0]]
    out = run({"name": "rlr"}, rows)
    torch.testing.assert_close(out, tensor([4.0 / 6.0, -2.0 / 6.0, 3.0 / 6.0, -0.0]), rtol=0, atol=1e-15)


def test_theta_one_is_allowed_and_flips_only_the_coordinates_without_a_vote():
    check_rlr(5, 0, theta=1)
    check_rlr(1, 0, theta=1)
    check_aggregator({"name": "rlr", "theta": 1}, n=2, f=0)
    # |sign sums| 2, 0 (one +1, one -1), 0 (both zero)
    out = run({"name": "rlr", "theta": 1}, [[1.0, 2.0, 0.0], [3.0, -4.0, 0.0]])
    torch.testing.assert_close(out, tensor([2.0, 1.0, 0.0]), rtol=0, atol=0)


@pytest.mark.parametrize("theta", [True, False, 2.0, "3", 0, 6, -1])
def test_a_theta_that_is_not_a_whole_number_in_one_to_n_is_refused_in_words(theta):
    with pytest.raises(ConfigError) as err:
        check_rlr(5, 0, theta=theta)
    assert str(err.value) == (
        "rlr needs a whole number theta with 0 < theta <= n = 5 (how many clients' update signs must agree in a "
        "coordinate for the server to keep its learning rate there; null: ceil(0.4 n)), got "
        f"theta={theta!r}")


def test_rlrs_registry_entry_searches_theta_among_two_to_six():
    entry = AGGREGATORS.get("rlr")
    assert entry.rule is rlr and entry.check is check_rlr
    assert AGGREGATORS.search("rlr") == {"theta": Domain("choice", values=(2, 3, 4, 5, 6))}
