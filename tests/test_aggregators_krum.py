"""Krum, multi-Krum and Bulyan on hand-computed inputs."""

import pytest
import torch

from fedarena.errors import ConfigError
from fedarena.methods.aggregators import AGGREGATORS, make_aggregator
from fedarena.methods.aggregators.base import pairwise_sq_distances
from fedarena.methods.aggregators.krum import iterated_krum, krum_scores, sq_distances

# Honest squared distances: d13 = .02, d12 = .10, d15 = d34 = .13, d14 = d35 = .17, d23 = .20,
# d24 = d25 = .29, d45 = .58; the outliers are > 60 away from everything.
HONEST = [(1.0, 1.0), (1.3, 0.9), (0.9, 1.1), (1.1, 1.4), (0.8, 0.7)]
OUTLIERS = [(9.0, 7.0), (-6.0, 12.0)]

# Bulyan (f = 1): a tight core, three spread honest updates and one far outlier.
CORE = [(1.0, 2.0), (1.1, 2.2), (0.9, 2.1)]
SPREAD = [(3.0, 4.0), (-1.0, 0.0), (3.5, -1.0)]
FAR = [(50.0, -40.0)]


def tensor(rows):
    return torch.tensor(rows, dtype=torch.float64)


def run(name, updates, f, **params):
    return AGGREGATORS.get(name).rule(updates, weights=torch.ones(updates.shape[0]), losses=None, f=f, **params)


def expect(actual, expected):
    assert torch.allclose(actual, torch.tensor(expected, dtype=actual.dtype), atol=1e-9), actual


def test_pairwise_sq_distances_match_direct_computation():
    updates = tensor(HONEST + OUTLIERS) + 1000.0  # a large common part must not spoil the distances
    direct = ((updates[:, None, :] - updates[None, :, :]) ** 2).sum(dim=-1)
    assert torch.allclose(pairwise_sq_distances(updates), direct, atol=1e-9)


def test_krum_scores_sum_the_k_nearest_others():
    scores = krum_scores(sq_distances(tensor(HONEST)), 3)
    assert torch.allclose(scores, tensor([0.25, 0.59, 0.32, 0.59, 0.59]), atol=1e-12)


def test_krum_returns_the_update_with_the_lowest_score():
    updates = tensor(HONEST + OUTLIERS)
    expect(run("krum", updates, f=2), (1.0, 1.0))  # k = 3: scores .25 (h1) < .32 (h3) < .59 ...
    expect(run("krum", updates, f=1), (1.0, 1.0))  # k = 4: .42 (h1) < .52 (h3) < .88 ...


def test_krum_is_permutation_invariant():
    updates = tensor(HONEST + OUTLIERS)
    for perm in ([6, 5, 4, 3, 2, 1, 0], [3, 6, 0, 5, 1, 4, 2]):
        expect(run("krum", updates[perm], f=2), (1.0, 1.0))


def test_krum_is_undefined_without_a_neighbour():
    with pytest.raises(ConfigError, match="n - f - 2 >= 1"):
        run("krum", torch.ones(5, 2), f=3)


def test_multi_krum_averages_the_m_lowest_scores():
    updates = tensor(HONEST + OUTLIERS)
    expect(run("multi_krum", updates, f=2), (1.02, 1.02))  # m = n - f = 5: every honest update
    expect(run("multi_krum", updates, f=2, m=2), (0.95, 1.05))  # h1 (.25) and h3 (.32)
    expect(run("multi_krum", updates, f=2, m=1), (1.0, 1.0))  # m = 1 is Krum


def test_multi_krum_with_m_equal_n_is_the_mean():
    updates = tensor(HONEST + OUTLIERS)
    assert torch.allclose(run("multi_krum", updates, f=2, m=7), updates.mean(dim=0), atol=1e-12)


@pytest.mark.parametrize("m", [0, 8])
def test_multi_krum_rejects_m_out_of_range(m):
    with pytest.raises(ConfigError, match="1 <= m <= n"):
        run("multi_krum", tensor(HONEST + OUTLIERS), f=2, m=m)


def test_iterated_krum_keeps_the_core_and_drops_the_outlier():
    chosen = iterated_krum(sq_distances(tensor(CORE + SPREAD + FAR)), f=1, count=5)
    assert chosen[:3].tolist() == [0, 2, 1]  # the core first (scores with 4, 3, 2 neighbours)
    assert 6 not in chosen.tolist() and len(set(chosen.tolist())) == 5


def test_bulyan_averages_the_values_closest_to_the_median():
    # theta = 5 chosen, beta = 3 kept per coordinate: always the core, whichever spread updates are chosen.
    updates = tensor(CORE + SPREAD + FAR)
    expect(run("bulyan", updates, f=1), (1.0, 2.1))
    for perm in ([6, 5, 4, 3, 2, 1, 0], [4, 6, 1, 3, 0, 5, 2]):
        expect(run("bulyan", updates[perm], f=1), (1.0, 2.1))


def test_bulyan_with_f_zero_is_the_mean():
    updates = tensor(CORE + SPREAD + FAR)
    assert torch.allclose(run("bulyan", updates, f=0), updates.mean(dim=0), atol=1e-12)


def test_bulyan_needs_4f_plus_3_updates():
    with pytest.raises(ConfigError, match="n >= 4f \\+ 3"):
        run("bulyan", tensor(CORE + SPREAD + FAR), f=2)


def test_reference_mode_scores_zero_neighbours_where_krum_is_undefined():
    # Prepare: n = 10 updates at 80% corruption, f = 8: n - f - 2 = 0 neighbours. Row 0 is an outlier, so
    # the answer (the first update; multi-Krum: the mean of the first m = n - f = 2) differs from any robust one
    updates = torch.tensor([[50.0, -50.0]] + [[float(i), 1.0] for i in range(1, 10)], dtype=torch.float64)
    with pytest.raises(ConfigError, match="n - f - 2 >= 1.*reference_mode=true"):
        make_aggregator({"name": "krum"}, f=8)(updates, torch.ones(10))
    # Execute
    krum_ref = make_aggregator({"name": "krum", "reference_mode": True}, f=8)(updates, torch.ones(10))
    multi_ref = make_aggregator({"name": "multi_krum", "reference_mode": True}, f=8)(updates, torch.ones(10))
    # Assert
    assert krum_ref.tolist() == [50.0, -50.0]
    assert multi_ref.tolist() == [25.5, -24.5]


def test_reference_mode_changes_nothing_where_krum_is_defined():
    updates = tensor(HONEST + OUTLIERS)
    for name in ("krum", "multi_krum"):
        plain = make_aggregator({"name": name}, f=1)(updates, torch.ones(len(updates)))
        ref = make_aggregator({"name": name, "reference_mode": True}, f=1)(updates, torch.ones(len(updates)))
        assert torch.equal(plain, ref)
