"""FLAME's edges, exactly (the mutation score of ``methods/aggregators/flame.py``: docs/testing.md): its checks'
defaults, edges and wording, the cosine distance of opposite updates at its bound 2, its registry entry (what it
reads, its search space) and its noise recomputed from the round's seed and added to the clipped mean."""

import inspect
import math

import pytest
import torch

from fedarena.errors import ConfigError
from fedarena.methods.aggregators import AGGREGATORS
from fedarena.methods.aggregators.base import RoundDraw
from fedarena.methods.aggregators.builder import check_aggregator, make_aggregator
from fedarena.methods.aggregators.flame import check_flame, cosine_distances, flame
from fedarena.search_space import Domain

F64 = torch.float64
# three updates along (3, 4): norms 5, 10, 2.5 (median S = 5), every cosine distance 0, so HDBSCAN keeps all
# three; clipped to S: (3, 4), (3, 4), (1.5, 2); their uniform mean (2.5, 10 / 3)
ALIGNED = [[3.0, 4.0], [6.0, 8.0], [1.5, 2.0]]
ALIGNED_MEAN = [2.5, 10.0 / 3.0]


def flame_out(updates, lam, draw=None):
    rule = make_aggregator({"name": "flame", "lam": lam}, f=0)
    if draw is not None:
        rule = rule.for_round(draw)
    return rule(torch.tensor(updates, dtype=F64), torch.ones(len(updates), dtype=F64))


def test_the_checks_default_noise_level_is_the_rules():
    assert inspect.signature(check_flame).parameters["lam"].default == 0.001
    assert inspect.signature(flame).parameters["lam"].default == 0.001


def test_two_updates_are_enough_and_one_is_refused_in_words():
    check_flame(2, 0)
    check_aggregator({"name": "flame"}, n=2, f=0)
    with pytest.raises(ConfigError) as err:
        check_flame(1, 0)
    assert str(err.value) == ("flame clusters the updates with HDBSCAN (min_cluster_size n // 2 + 1 >= 2) and needs "
                              "n >= 2 updates, got n=1")


def test_a_noise_level_of_zero_or_any_finite_one_passes_and_below_zero_or_not_finite_is_refused_in_words():
    for lam in (0.0, 1e-300, 1.7e308):
        check_flame(5, 0, lam=lam)
    for lam in (-5e-324, -1.0, math.inf, math.nan):
        with pytest.raises(ConfigError) as err:
            check_flame(5, 0, lam=lam)
        assert str(err.value) == ("flame needs a finite noise level lam >= 0 (noise std = lam * the median norm), "
                                  f"got {lam}")


def test_opposite_updates_are_at_distance_exactly_two_where_the_gram_rounds_past_it():
    # u = (1.4, -2.7, 0.1) and -u: 1 - u.(-u) / (|u| |u|) rounds to 2.0000000000000004 before the clamp to [0, 2]
    u = torch.tensor([1.4, -2.7, 0.1], dtype=F64)
    dist = cosine_distances(torch.stack([u, -u]))
    assert dist.tolist() == [[0.0, 2.0], [2.0, 0.0]]


def test_registry_entry_reads_the_round_and_searches_lam_log_uniformly_in_1e_4_to_1e_2():
    entry = AGGREGATORS.get("flame")
    assert entry.rule is flame and entry.check is check_flame
    assert entry.reads == ("round",)
    assert AGGREGATORS.search("flame") == {"lam": Domain("loguniform", 1e-4, 1e-2)}


def test_without_noise_the_rule_is_the_mean_of_the_kept_updates_clipped_to_the_median_norm():
    out = flame_out(ALIGNED, 0.0, RoundDraw(torch.arange(3), seed=7))
    torch.testing.assert_close(out, torch.tensor(ALIGNED_MEAN, dtype=F64), rtol=0, atol=1e-15)


@pytest.mark.parametrize("seed", [0, 3])
def test_the_noise_is_lam_times_the_median_norm_times_the_rounds_normal_draws_added_to_the_mean(seed):
    # sigma = lam * S = 0.1 * 5 = 0.5; the draws are torch.randn in float64 from a generator seeded with the round's
    # seed (seed 0 for a direct call)
    draws = torch.randn(2, generator=torch.Generator().manual_seed(seed), dtype=F64)
    expected = torch.tensor(ALIGNED_MEAN, dtype=F64) + 0.5 * draws
    draw = RoundDraw(torch.arange(3), seed=seed) if seed else None
    out = flame_out(ALIGNED, 0.1, draw)
    torch.testing.assert_close(out, expected, rtol=0, atol=1e-15)
    assert not torch.allclose(out, torch.tensor(ALIGNED_MEAN, dtype=F64) - 0.5 * draws)
