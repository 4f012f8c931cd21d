"""Averages, norm/loss filters and coordinate-wise rules on hand-computed inputs."""

import math

import pytest
import torch

from fedarena.errors import ConfigError
from fedarena.methods.aggregators import AGGREGATORS, clip_to_median_norm

# Five honest updates near (1, 1) and two far outliers; no ties in any rule's decision.
HONEST = [(1.0, 1.0), (1.3, 0.9), (0.9, 1.1), (1.1, 1.4), (0.8, 0.7)]
OUTLIERS = [(9.0, 7.0), (-6.0, 12.0)]
HONEST_MEAN = (1.02, 1.02)


def round_of_seven():
    updates = torch.tensor(HONEST + OUTLIERS, dtype=torch.float64)
    weights = torch.tensor([10.0, 20.0, 30.0, 40.0, 50.0, 60.0, 70.0], dtype=torch.float64)
    losses = torch.tensor([0.5, 0.6, 0.55, 0.65, 0.45, 3.0, 2.0], dtype=torch.float64)
    return updates, weights, losses


def run(name, updates, weights=None, losses=None, f=0, **params):
    weights = torch.ones(updates.shape[0], dtype=updates.dtype) if weights is None else weights
    return AGGREGATORS.get(name).rule(updates, weights=weights, losses=losses, f=f, **params)


def expect(actual, expected):
    assert torch.allclose(actual, torch.tensor(expected, dtype=actual.dtype), atol=1e-9), actual


def test_mean_is_uniform_over_all_updates():
    updates, weights, _ = round_of_seven()
    expect(run("mean", updates, weights), (8.1 / 7, 24.1 / 7))


def test_weighted_mean_uses_sample_counts():
    updates = torch.tensor([[0.0, 0.0], [4.0, 8.0]], dtype=torch.float64)
    expect(run("weighted_mean", updates, torch.tensor([1.0, 3.0], dtype=torch.float64)), (3.0, 6.0))


def test_weighted_mean_rejects_zero_total_weight():
    with pytest.raises(ConfigError, match="positive sum"):
        run("weighted_mean", torch.ones(2, 3), torch.zeros(2))


def test_k_loss_says_so_when_losses_are_missing():
    updates, _, _ = round_of_seven()
    with pytest.raises(ConfigError, match="training loss"):
        run("k_loss", updates, losses=None, f=1)


def test_median_is_coordinatewise_and_ignores_outliers():
    updates, _, _ = round_of_seven()
    expect(run("median", updates, f=2), (1.0, 1.1))


def test_median_of_even_count_averages_the_middle_pair():
    updates = torch.tensor([[0.0, 5.0], [1.0, 6.0], [3.0, 8.0], [100.0, -50.0]], dtype=torch.float64)
    expect(run("median", updates), (2.0, 5.5))


@pytest.mark.parametrize("count", [3, 4])
def test_median_is_nan_in_a_coordinate_holding_a_nan_and_exact_with_infinities(count):
    # Prepare: coordinate 0 holds a NaN (a diverged client); coordinate 1 two infinities around an honest pair
    rows = [[float("nan"), float("inf")], [1.0, 2.0], [2.0, 3.0], [3.0, -float("inf")]][:count]
    # Execute
    median = run("median", torch.tensor(rows, dtype=torch.float64))
    # Assert: NaN propagates as torch.median does (a sort would put it last and hide it); then the middle
    assert math.isnan(median[0]) and median[1] == (3.0 if count == 3 else 2.5)


def test_trimmed_mean_drops_f_at_each_end_per_coordinate():
    updates, _, _ = round_of_seven()
    expect(run("trimmed_mean", updates, f=2), (1.0, 3.5 / 3))
    expect(run("trimmed_mean", updates, f=1), (1.02, 2.28))  # one trimmed: the second outlier leaks into y


def test_trimmed_mean_matches_sorting_on_random_data():
    updates = torch.randn(11, 40, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    expected = updates.sort(dim=0).values[3:8].mean(dim=0)
    assert torch.allclose(run("trimmed_mean", updates, f=3), expected, atol=1e-12)


def test_trimmed_mean_beta_overrides_f():
    updates, _, _ = round_of_seven()
    expect(run("trimmed_mean", updates, f=0, beta=0.3), (1.0, 3.5 / 3))  # floor(0.3 * 7) = 2


def test_trimmed_mean_is_undefined_when_everything_is_trimmed():
    with pytest.raises(ConfigError, match="2 \\* 2 < n = 4"):
        run("trimmed_mean", torch.ones(4, 2), f=2)
    with pytest.raises(ConfigError, match="beta"):
        run("trimmed_mean", torch.ones(4, 2), beta=0.5)


def test_clip_to_median_norm_rescales_only_the_larger_updates():
    updates, _, _ = round_of_seven()
    threshold = math.sqrt(2.5)  # norms: 1.063, 1.414, 1.421, |h2| = 1.581, 1.780, 11.40, 13.42
    clipped = clip_to_median_norm(updates)
    expected = updates.clone()
    for row, sq_norm in ((3, 3.17), (5, 130.0), (6, 180.0)):
        expected[row] *= threshold / (math.sqrt(sq_norm) + 1e-10)
    assert torch.allclose(clipped, expected, atol=1e-12)


def test_clipping_is_the_mean_after_median_norm_clipping():
    updates, _, _ = round_of_seven()
    threshold = math.sqrt(2.5)
    h4 = [c * threshold / math.sqrt(3.17) for c in (1.1, 1.4)]
    o1 = [c * threshold / math.sqrt(130.0) for c in (9.0, 7.0)]
    o2 = [c * threshold / math.sqrt(180.0) for c in (-6.0, 12.0)]
    x = 1.0 + 1.3 + 0.9 + 0.8 + h4[0] + o1[0] + o2[0]
    y = 1.0 + 0.9 + 1.1 + 0.7 + h4[1] + o1[1] + o2[1]
    expect(run("clipping", updates), (x / 7, y / 7))


def test_clipping_equal_norms_is_the_mean():
    updates = torch.tensor([[3.0, 4.0], [5.0, 0.0], [0.0, -5.0]], dtype=torch.float64)
    expect(run("clipping", updates), (8.0 / 3, -1.0 / 3))


def test_k_norm_drops_the_f_largest_norms():
    updates, _, _ = round_of_seven()
    expect(run("k_norm", updates, f=2), HONEST_MEAN)
    expect(run("k_norm", updates, f=1), (14.1 / 6, 12.1 / 6))  # only (-6, 12), the largest, dropped


def test_k_loss_returns_the_update_with_the_n_minus_f_th_smallest_loss():
    updates, _, losses = round_of_seven()
    expect(run("k_loss", updates, losses=losses, f=2), (1.1, 1.4))  # losses sorted: .45 .5 .55 .6 [.65] 2 3
    expect(run("k_loss", updates, losses=losses, f=0), (9.0, 7.0))  # the largest loss
    expect(run("k_loss", updates, losses=losses, f=6), (0.8, 0.7))  # the smallest loss


@pytest.mark.parametrize("name", ["k_norm", "k_loss"])
def test_filters_need_f_below_n(name):
    updates, _, losses = round_of_seven()
    with pytest.raises(ConfigError, match="f < n"):
        run(name, updates, losses=losses, f=7)


@pytest.mark.parametrize("name", ["trimmed_mean", "k_norm"])
def test_f_zero_reduces_to_the_mean(name):
    updates, _, _ = round_of_seven()
    assert torch.allclose(run(name, updates, f=0), updates.mean(dim=0), atol=1e-12)


def test_negative_f_and_bad_shapes_are_errors():
    with pytest.raises(ConfigError, match="f must be >= 0"):
        run("mean", torch.ones(3, 2), f=-1)
    with pytest.raises(ConfigError, match="2-D"):
        run("median", torch.ones(3))
