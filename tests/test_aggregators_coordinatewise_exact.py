"""fedarena/methods/aggregators/coordinatewise.py checked against hand computations, one behaviour per test: the
coordinate-wise median (np.median's even case), the trimmed mean per coordinate (t = f or floor(beta n), summed in
float64), its settings' edges and errors word for word, its sensitivity and the registry entries
(make mutants MODULE=fedarena/methods/aggregators/coordinatewise.py)."""

import pytest
import torch

from fedarena.errors import ConfigError
from fedarena.methods.aggregators.base import AGGREGATORS, ball_sensitivity
from fedarena.methods.aggregators.coordinatewise import (
    check_trimmed_mean,
    median,
    trim_count,
    trimmed_mean,
    trimmed_mean_sensitivity,
)

F64 = torch.float64
# 6 updates of 3 coordinates; sorted per coordinate: [-5, 0, 1, 2, 3, 40], [-9, -1, 1, 1, 6, 8], [0, 1, 2, 3, 4, 5]
UPDATES = torch.tensor([[1.0, 1.0, 5.0], [40.0, -9.0, 0.0], [0.0, 6.0, 3.0], [-5.0, 1.0, 4.0], [3.0, -1.0, 1.0],
                        [2.0, 8.0, 2.0]], dtype=F64)


def rule(function, updates, f, **params):
    return function(updates, weights=torch.ones(updates.shape[0]), losses=None, f=f, **params)


def test_the_median_of_an_even_count_is_the_mean_of_the_two_middle_values_of_each_coordinate():
    assert rule(median, UPDATES, 0).tolist() == [1.5, 1.0, 2.5]
    assert rule(median, UPDATES[:5], 0).tolist() == [1.0, 1.0, 3.0]  # odd: the middle value


@pytest.mark.parametrize("f, beta, expected", [
    (1, None, [(0 + 1 + 2 + 3) / 4, (-1 + 1 + 1 + 6) / 4, (1 + 2 + 3 + 4) / 4]),  # t = f = 1
    (2, None, [(1 + 2) / 2, (1 + 1) / 2, (2 + 3) / 2]),  # t = 2
    (0, 0.2, [(0 + 1 + 2 + 3) / 4, (-1 + 1 + 1 + 6) / 4, (1 + 2 + 3 + 4) / 4]),  # t = floor(0.2 * 6) = 1, f unread
    (2, 0.0, [41 / 6, 6 / 6, 15 / 6]),  # beta 0: nothing trimmed, the mean
    (0, None, [41 / 6, 6 / 6, 15 / 6]),
])
def test_the_trimmed_mean_drops_t_values_at_each_end_of_every_coordinate(f, beta, expected):
    params = {} if beta is None else {"beta": beta}
    assert rule(trimmed_mean, UPDATES, f, **params).tolist() == pytest.approx(expected, rel=1e-15)


def test_the_trimmed_mean_sums_in_float64_and_returns_the_updates_dtype():
    # float32 alone would lose the ones beside 1e8 (its spacing there is 8); float64 keeps them
    updates = torch.tensor([[1e8], [1.0], [-1e8], [1.0], [1.0]], dtype=torch.float32)
    out = rule(trimmed_mean, updates, 1)
    assert out.tolist() == [1.0] and out.dtype == torch.float32


def test_t_is_f_or_floor_beta_n():
    assert trim_count(10, 3, None) == 3
    assert trim_count(10, 3, 0.25) == 2 and trim_count(7, 0, 0.29) == 2 and trim_count(7, 5, 0.0) == 0


def test_the_sensitivity_is_two_bounds_over_the_values_kept():
    assert trimmed_mean_sensitivity(10, 2) == 2.0 / 6
    assert trimmed_mean_sensitivity(10, 0, beta=0.3) == 2.0 / 4
    assert trimmed_mean_sensitivity(5, 0) == 2.0 / 5


def test_beta_in_0_to_one_half_and_fewer_than_half_the_values_trimmed_are_allowed():
    check_trimmed_mean(5, 2)
    check_trimmed_mean(10, 9, beta=0.0)
    check_trimmed_mean(100, 0, beta=0.49)


@pytest.mark.parametrize("beta", [0.5, -0.01, 0.7, 1.2])
def test_a_beta_outside_0_to_one_half_is_refused_in_words(beta):
    with pytest.raises(ConfigError) as err:
        check_trimmed_mean(100, 0, beta=beta)
    assert str(err.value) == (f"trimmed_mean: beta is the fraction trimmed at each end and must be in [0, 0.5), got "
                              f"{beta}")


@pytest.mark.parametrize("n, f, beta, t", [(4, 2, None, 2), (5, 3, None, 3), (2, 1, None, 1), (6, 3, None, 3)])
def test_trimming_half_the_values_or_more_is_refused_in_words(n, f, beta, t):
    with pytest.raises(ConfigError) as err:
        check_trimmed_mean(n, f, beta=beta)
    assert str(err.value) == (f"trimmed_mean drops {t} values at each end of every coordinate and needs 2 * {t} < n = "
                              f"{n}")


def test_the_rules_are_registered_with_their_sensitivity_and_check():
    assert AGGREGATORS.get("median").rule is median and AGGREGATORS.get("median").sensitivity is ball_sensitivity
    entry = AGGREGATORS.get("trimmed_mean")
    assert entry.rule is trimmed_mean and entry.check is check_trimmed_mean
    assert entry.sensitivity is trimmed_mean_sensitivity
