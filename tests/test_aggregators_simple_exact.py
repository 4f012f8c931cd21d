"""fedarena/methods/aggregators/simple.py checked against hand computations, one behaviour per test: the means, the
clip to the median norm (its 1e-10 guard and a norm exactly at the median), k-norm and k-loss (which row, ties in
row order), f < n, and each rule's registry entry (make mutants MODULE=fedarena/methods/aggregators/simple.py)."""

import pytest
import torch

from fedarena.errors import ConfigError
from fedarena.methods.aggregators.base import AGGREGATORS, PRE_AGGREGATORS, ball_sensitivity, mean_sensitivity
from fedarena.methods.aggregators.simple import (
    check_keeps_one,
    clip_to_median_norm,
    clipping,
    k_loss,
    k_norm,
    mean,
    median_norm_factors,
    weighted_mean,
)

F64 = torch.float64
UPDATES = torch.tensor([[3.0, 4.0], [0.0, 1.0], [6.0, 8.0], [1.0, 0.0], [0.0, -2.0]], dtype=F64)  # norms 5 1 10 1 2


def test_mean_averages_the_rows_uniformly_whatever_the_weights():
    out = mean(UPDATES, weights=torch.tensor([9.0, 1, 1, 1, 1]), losses=None, f=0)
    assert out.tolist() == pytest.approx([2.0, 2.2])


def test_weighted_mean_is_the_sum_of_w_i_u_i_over_the_sum_of_w_i():
    out = weighted_mean(UPDATES[:3], weights=torch.tensor([1.0, 2.0, 1.0]), losses=None, f=0)
    assert out.tolist() == pytest.approx([(3 + 6) / 4, (4 + 2 + 8) / 4])


def test_each_norm_above_the_median_is_scaled_to_it_over_norm_plus_1e_10():
    # Prepare: norms 5, 1, 10, 1, 2: median 2
    factors = median_norm_factors(UPDATES)
    # Assert: min(1, 2 / (norm + 1e-10))
    assert factors.tolist() == [2 / (5 + 1e-10), 1.0, 2 / (10 + 1e-10), 1.0, 1.0]
    # tiny norms show the guard: 1e-10, 3e-10, 5e-10 (median 3e-10): 5e-10 -> 3e-10 / 6e-10 = 0.5
    tiny = torch.tensor([[1e-10], [3e-10], [5e-10]], dtype=F64)
    assert median_norm_factors(tiny).tolist() == pytest.approx([1.0, 1.0, 0.5], rel=1e-12)


def test_a_norm_exactly_at_the_median_is_kept_as_it_is():
    # at the median 1e-10 a factor median / (norm + 1e-10) would be 0.5; the row is not above it, so 1
    tiny = torch.tensor([[0.5e-10], [1e-10], [1e-10], [4e-10]], dtype=F64)  # median (1 + 1) / 2 = 1e-10
    assert median_norm_factors(tiny).tolist()[:3] == [1.0, 1.0, 1.0]


def test_the_clip_pre_aggregator_scales_each_row_and_clipping_then_averages():
    scale = torch.tensor([2 / (5 + 1e-10), 1.0, 2 / (10 + 1e-10), 1.0, 1.0], dtype=F64)
    torch.testing.assert_close(clip_to_median_norm(UPDATES), UPDATES * scale[:, None], rtol=1e-15, atol=0.0)
    out = clipping(UPDATES, weights=torch.ones(5), losses=None, f=0)
    torch.testing.assert_close(out, (UPDATES * scale[:, None]).mean(0), rtol=1e-12, atol=1e-15)
    assert PRE_AGGREGATORS.get("clip").fn is clip_to_median_norm


def test_k_norm_drops_the_f_largest_norms_and_averages_the_rest():
    out = k_norm(UPDATES, weights=torch.ones(5), losses=None, f=2)
    assert out.tolist() == pytest.approx([1 / 3, -1 / 3])  # rows 1, 3, 4 (norms 1, 1, 2)
    assert k_norm(UPDATES, weights=torch.ones(5), losses=None, f=0).tolist() == pytest.approx([2.0, 2.2])


def test_k_norm_ties_keep_the_earlier_rows():
    # 17 rows of norm 1 (an unstable sort reorders ties from 17 on): f = 1 drops the last
    rows = torch.eye(17, dtype=F64)
    out = k_norm(rows, weights=torch.ones(17), losses=None, f=1)
    assert out.tolist() == [1 / 16] * 16 + [0.0]


def test_k_loss_returns_the_row_of_the_n_less_f_th_smallest_loss():
    losses = torch.tensor([0.3, 0.1, 0.4, 0.2, 0.5])
    # order 1, 3, 0, 2, 4: f = 1 -> the 4th smallest (row 2), f = 3 -> the 2nd (row 3), f = 0 the largest (row 4)
    for f, row in ((1, 2), (3, 3), (0, 4), (4, 1)):
        out = k_loss(UPDATES, weights=torch.ones(5), losses=losses, f=f)
        assert torch.equal(out, UPDATES[row]) and out.data_ptr() != UPDATES[row].data_ptr()


def test_k_loss_ties_keep_the_row_order():
    rows = torch.eye(17, dtype=F64)
    out = k_loss(rows, weights=torch.ones(17), losses=torch.ones(17), f=0)
    assert out.tolist() == rows[16].tolist()


def test_k_loss_without_losses_is_refused_in_words():
    with pytest.raises(ConfigError) as err:
        k_loss(UPDATES, weights=torch.ones(5), losses=None, f=1)
    assert str(err.value) == "aggregator 'k_loss' needs each client's training loss at the global model; got none"


@pytest.mark.parametrize("rule", [k_norm, k_loss])
def test_keeping_n_less_f_rows_needs_f_below_n(rule):
    check_keeps_one(5, 4)
    with pytest.raises(ConfigError) as err:
        rule(UPDATES, weights=torch.ones(5), losses=torch.ones(5), f=5)
    assert str(err.value) == "this rule keeps n - f updates and needs f < n, got n=5, f=5"


def test_each_rule_is_registered_with_what_it_reads_its_check_and_its_sensitivity():
    entries = {name: AGGREGATORS.get(name) for name in ("mean", "weighted_mean", "clipping", "k_norm", "k_loss")}
    assert {name: e.rule for name, e in entries.items()} == {"mean": mean, "weighted_mean": weighted_mean,
                                                            "clipping": clipping, "k_norm": k_norm, "k_loss": k_loss}
    assert {name: e.reads for name, e in entries.items()} == {"mean": (), "weighted_mean": ("weights",),
                                                             "clipping": (), "k_norm": (), "k_loss": ("losses",)}
    assert {name: e.sum_only for name, e in entries.items()} == {"mean": True, "weighted_mean": True,
                                                                "clipping": False, "k_norm": False, "k_loss": False}
    assert entries["mean"].sensitivity is mean_sensitivity and entries["weighted_mean"].sensitivity is mean_sensitivity
    assert entries["clipping"].sensitivity is ball_sensitivity and entries["k_norm"].sensitivity is ball_sensitivity
    assert entries["k_loss"].sensitivity is None
    assert entries["k_norm"].check is check_keeps_one and entries["k_loss"].check is check_keeps_one
