"""DnC (NDSS 2021): spectral removal of the outliers, on an honest cluster plus outliers with a unique answer."""

import pytest
import torch

from fedarena.errors import ConfigError
from fedarena.methods.aggregators import make_aggregator
from fedarena.methods.aggregators.dnc import spectral_scores

HONEST = [[1.0, 1.0, 0.0], [1.2, 0.9, 0.1], [0.9, 1.1, -0.1], [1.1, 1.0, 0.0], [0.8, 1.0, 0.05]]
OUTLIERS = [[-8.0, 9.0, 3.0], [-9.0, 8.5, 3.5]]


def test_dnc_removes_the_outliers_and_averages_the_honest_updates():
    updates = torch.tensor(HONEST + OUTLIERS, dtype=torch.float64)
    out = make_aggregator({"name": "dnc"}, f=2)(updates, torch.ones(7))
    torch.testing.assert_close(out, torch.tensor(HONEST, dtype=torch.float64).mean(0))


def test_spectral_scores_are_squared_projections_on_the_top_singular_vector():
    block = torch.tensor([[1.0, 0.0], [-1.0, 0.0], [3.0, 0.0], [-3.0, 0.0]], dtype=torch.float64)
    torch.testing.assert_close(spectral_scores(block), torch.tensor([1.0, 1.0, 9.0, 9.0], dtype=torch.float64))


def test_dnc_with_f_zero_is_the_mean_and_a_subsample_still_finds_the_outliers():
    updates = torch.tensor(HONEST + OUTLIERS, dtype=torch.float64)
    assert torch.allclose(make_aggregator({"name": "dnc"}, f=0)(updates, torch.ones(7)), updates.mean(0))
    sub = make_aggregator({"name": "dnc", "sub_dim": 2, "iters": 3}, f=2)(updates, torch.ones(7))
    torch.testing.assert_close(sub, torch.tensor(HONEST, dtype=torch.float64).mean(0))


def test_dnc_refuses_to_drop_every_update():
    with pytest.raises(ConfigError, match="fewer than n"):
        make_aggregator({"name": "dnc", "c": 2.0}, f=2)(torch.zeros(4, 3), torch.ones(4))
