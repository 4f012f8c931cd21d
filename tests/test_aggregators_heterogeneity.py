"""Heterogeneity: the NNM, bucketing and ARC pre-aggregators, SignGuard and the Mimic attack.

Unique hand-checked answers (an honest cluster and clear outliers), and float64 transcriptions of the authors'
computations (ByzFL's NNM, Bucketing and ARC; SignGuard's ``signguard_multiclass``) compared on tiny inputs.
"""

import math

import numpy as np
import pytest
import torch

from fedarena.attacks.mimic import mimicked_updates, outlier_ranking
from fedarena.datasets.base import ClientData, FederatedDataset, Split
from fedarena.errors import ConfigError
from fedarena.methods.aggregators import AGGREGATORS, check_aggregator, make_aggregator
from fedarena.methods.aggregators.base import RoundDraw
from fedarena.methods.aggregators.mixing import (
    adaptive_robust_clipping,
    bucket_members,
    bucketing,
    nearest_neighbour_mixing,
)
from fedarena.methods.aggregators.signguard import signguard, signguard_selection

THREE = torch.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0], [7.0, 8.0, 9.0]], dtype=torch.float64)


# --- transcriptions of the authors' code (float64 numpy), for comparison only ---

def byzfl_nnm(x: np.ndarray, f: int) -> np.ndarray:
    dist = np.sqrt(((x[:, None, :] - x[None, :, :]) ** 2).sum(-1))
    k = len(x) - f
    nearest = np.argsort(dist, axis=1, kind="stable")[:, :k]
    return x[nearest].mean(axis=1)


def byzfl_arc(x: np.ndarray, f: int) -> np.ndarray:
    x = x.copy()
    magnitudes = sorted(((np.linalg.norm(v), i) for i, v in enumerate(x)), key=lambda m: m[0])
    n = len(x)
    clipped = int((2 * f / n) * (n - f))
    cut = n - clipped
    threshold = magnitudes[cut - 1][0]
    for norm, i in magnitudes[cut:]:
        if norm > threshold:
            x[i] = x[i] * (threshold / norm)
    return x


def byzfl_bucketing(x: np.ndarray, s: int, permutation: np.ndarray) -> np.ndarray:
    x = x[permutation]
    full = len(x) // s
    out = x[: full * s].reshape(full, s, -1).mean(axis=1)
    if full != len(x) / s:
        out = np.concatenate([out, x[full * s:].mean(axis=0, keepdims=True)])
    return out


def authors_signguard(grads: np.ndarray, start: int):
    from sklearn.cluster import MeanShift, estimate_bandwidth

    n, d = grads.shape
    norms = np.linalg.norm(grads, axis=1)
    med = np.median(norms)
    idx1 = set(np.flatnonzero(norms > 0.1 * med)) & set(np.flatnonzero(norms < 3.0 * med))
    k = int(0.1 * d)
    signs = np.sign(grads[:, start:start + k])
    feats = [(signs == s).sum(1) / k for s in (1.0, 0.0, -1.0)]
    feat = np.stack([v / (v.max() + 1e-8) for v in feats], axis=1)
    bw = estimate_bandwidth(feat, quantile=0.5, n_samples=50)
    labels = MeanShift(bandwidth=bw, bin_seeding=True, cluster_all=False).fit(feat).labels_
    uniq = np.unique(labels)
    sizes = [np.sum(labels == i) for i in range(len(uniq) - (1 if -1 in uniq else 0))]
    idx = sorted(idx1 & set(np.flatnonzero(labels == np.argmax(sizes))))
    clip = np.sort(norms)[(n - 1) // 2]  # torch.median: the lower middle value
    clipped = grads / norms[:, None] * np.minimum(norms, clip)[:, None]
    return idx, clipped[idx].mean(axis=0)


# --- NNM ---

def test_nnm_mixes_each_update_with_its_nearest_neighbours():
    out = nearest_neighbour_mixing(THREE, f=1)
    expected = torch.tensor([[2.5, 3.5, 4.5], [2.5, 3.5, 4.5], [5.5, 6.5, 7.5]], dtype=torch.float64)
    assert torch.allclose(out, expected)
    assert torch.allclose(nearest_neighbour_mixing(THREE, f=0), THREE.mean(0).expand(3, 3))


@pytest.mark.parametrize("seed", range(5))
def test_nnm_and_arc_equal_byzfl_in_float64(seed):
    x = np.random.default_rng(seed).normal(size=(7, 4))
    for f in (0, 1, 2, 3):
        assert np.allclose(nearest_neighbour_mixing(torch.from_numpy(x), f=f).numpy(), byzfl_nnm(x, f))
        assert np.allclose(adaptive_robust_clipping(torch.from_numpy(x), f=f).numpy(), byzfl_arc(x, f))


def test_nnm_lets_krum_keep_a_heterogeneous_honest_round_close_to_its_mean():
    # three honest pairs far apart (non-IID) and one attacker beside the first pair: Krum alone picks a member
    # of that pair (4.6 from the honest mean); after mixing each row with its n - f = 6 nearest, Krum's pick is
    # the mean of every row but the farthest honest one, (10.2, 0), at 2.3
    honest = torch.tensor([[0.0, 0.0], [0.2, 0.0], [10.0, 0.0], [10.2, 0.0], [0.0, 10.0], [0.2, 10.0]],
                          dtype=torch.float64)
    updates = torch.cat([honest, torch.tensor([[-3.0, -3.0]], dtype=torch.float64)])
    plain = make_aggregator({"name": "krum"}, f=1)(updates, torch.ones(7, dtype=torch.float64))
    mixed = make_aggregator({"name": "krum", "pre": ["nnm"]}, f=1)(updates, torch.ones(7, dtype=torch.float64))
    target = honest.mean(0)
    assert torch.allclose(plain, torch.tensor([0.2, 0.0], dtype=torch.float64))
    assert torch.allclose(mixed, updates[[0, 1, 2, 4, 5, 6]].mean(0))
    assert (mixed - target).norm() < 0.5 * (plain - target).norm()


# --- ARC ---

def test_arc_clips_the_largest_updates_to_the_next_norm():
    assert torch.allclose(adaptive_robust_clipping(THREE, f=1)[2], torch.tensor([4.41004009, 5.04004582, 5.67005155],
                                                                                 dtype=torch.float64))
    assert torch.equal(adaptive_robust_clipping(THREE, f=1)[:2], THREE[:2])
    # n = 10, f = 2: k = floor(2 * 0.2 * 8) = 3 largest clipped to the 4th largest norm (4.0)
    updates = torch.diag(torch.tensor([1.0, 2.0, 3.0, 4.0, 1.0, 1.0, 1.0, 9.0, 20.0, 50.0], dtype=torch.float64))
    norms = adaptive_robust_clipping(updates, f=2).norm(dim=1)
    assert torch.allclose(norms, torch.tensor([1, 2, 3, 4, 1, 1, 1, 4, 4, 4], dtype=torch.float64))


# --- bucketing ---

@pytest.mark.parametrize("n, s", [(10, 2), (10, 3), (7, 7), (5, 1)])
def test_bucketing_averages_a_seeded_permutation_as_byzfl(n, s):
    x = np.random.default_rng(n * s).normal(size=(n, 3))
    draw = RoundDraw(torch.arange(n), seed=1234)
    members = bucket_members(n, draw, s=s)
    permutation = torch.cat(members).numpy()
    assert sorted(permutation.tolist()) == list(range(n)) and len(members) == math.ceil(n / s)
    out = bucketing(torch.from_numpy(x), round=draw, s=s).numpy()
    assert np.allclose(out, byzfl_bucketing(x, s, permutation))
    assert torch.equal(torch.cat(bucket_members(n, draw, s=s)), torch.cat(members))  # same seed, same buckets


def test_bucketing_feeds_the_rule_its_bucket_count_and_summed_weights():
    rule = make_aggregator({"name": "weighted_mean", "pre": [{"name": "bucketing", "s": 3}]}, f=0)
    updates = torch.arange(14.0, dtype=torch.float64).reshape(7, 2)
    weights = torch.tensor([1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0], dtype=torch.float64)
    draw = RoundDraw(torch.arange(7), seed=5)
    out = rule.for_round(draw)(updates, weights)
    members = bucket_members(7, draw, s=3)
    means = torch.stack([updates[m].mean(0) for m in members])
    bucket_weights = torch.stack([weights[m].sum() for m in members])
    assert torch.allclose(out, bucket_weights @ means / bucket_weights.sum())


def test_krum_after_bucketing_keeps_the_clients_of_its_bucket():
    rule = make_aggregator({"name": "krum", "pre": [{"name": "bucketing", "s": 2}]}, f=1)
    draw = RoundDraw(torch.arange(8), seed=3)
    updates = torch.randn(8, 4, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    kept = rule.for_round(draw).kept(updates)
    assert int(kept.sum()) == 2
    assert any(set(torch.nonzero(kept).reshape(-1).tolist()) == set(m.tolist()) for m in bucket_members(8, draw, s=2))


# --- SignGuard ---

def honest_cluster_and_outliers():
    gen = torch.Generator().manual_seed(0)
    honest = torch.rand(7, 40, generator=gen, dtype=torch.float64) + 0.5  # positive, norms ~6.5
    flipped = -honest[:2]  # sign flip: same norms, negative signs
    huge = honest[2:3] * 30  # right signs, norm 30x the median
    return torch.cat([honest, flipped, huge])


def test_signguard_keeps_exactly_the_honest_cluster():
    updates = honest_cluster_and_outliers()
    kept = signguard_selection(updates, f=3)
    assert kept.tolist() == list(range(7))
    out = signguard(updates, weights=torch.ones(10), losses=None, f=3)
    norms = updates.norm(dim=1)
    clip = norms.median()
    expected = (updates[:7] * (norms[:7].clamp(max=clip) / norms[:7])[:, None]).mean(0)
    assert torch.allclose(out, expected)


@pytest.mark.parametrize("seed", range(6))
def test_signguard_equals_the_authors_computation_in_float64(seed):
    rng = np.random.default_rng(seed)
    grads = rng.normal(loc=0.3, size=(10, 50))
    grads[:3] = rng.normal(loc=-0.5, size=(3, 50)) * rng.uniform(0.5, 5.0)
    draw = RoundDraw(torch.arange(10), seed=seed)
    start = int(torch.randint(0, 50 - 5, (1,), generator=draw.generator()))
    idx, expected = authors_signguard(grads, start)
    kept = signguard_selection(torch.from_numpy(grads), f=3, round=draw)
    assert kept.tolist() == idx
    out = signguard(torch.from_numpy(grads), weights=torch.ones(10), losses=None, f=3, round=draw)
    assert np.allclose(out.numpy(), expected)


# --- Mimic ---

def tiny_dataset(labels_per_client):
    clients = []
    for labels in labels_per_client:
        y = torch.tensor(labels)
        split = Split(torch.zeros(len(labels), 2), y)
        clients.append(ClientData(train=split, val=split, test=split))
    return FederatedDataset("tiny", clients, num_classes=3, input_shape=(2,), fingerprint="tiny")


def test_mimic_copies_the_most_outlying_honest_device_present():
    # devices 0-3 hold balanced labels; device 4 only class 2 (the outlier), device 5 mostly class 2
    data = tiny_dataset([[0, 1, 2]] * 4 + [[2, 2, 2], [2, 2, 0]])
    malicious = np.array([True, False, False, False, False, False])
    rank = outlier_ranking(data, malicious)
    assert rank[4] == 0 and rank[5] == 1 and rank[0] == 5
    updates = torch.arange(12.0).reshape(4, 3)
    bad = torch.tensor([True, False, False, False])
    out = mimicked_updates(updates, bad, None, ids=torch.tensor([0, 2, 4, 5]), rank=torch.from_numpy(rank))
    assert torch.equal(out[0], updates[2]) and torch.equal(out[1:], updates[1:])
    # device 4 not sampled: the next outlier, device 5
    out = mimicked_updates(updates, bad, None, ids=torch.tensor([0, 1, 3, 5]), rank=torch.from_numpy(rank))
    assert torch.equal(out[0], updates[3])


# --- configuration: options, f, bad input ---

def test_pre_aggregator_options_resolve_to_their_names_when_default():
    from fedarena.methods.aggregators.builder import AGGREGATOR_SECTION

    resolved = AGGREGATOR_SECTION.resolve({"name": "median", "pre": [{"name": "bucketing", "s": 2}, "nnm"]})
    assert resolved["pre"] == ["bucketing", "nnm"]
    resolved = AGGREGATOR_SECTION.resolve({"name": "median", "pre": [{"name": "bucketing", "s": 3}]})
    assert resolved["pre"] == [{"name": "bucketing", "s": 3}]


@pytest.mark.parametrize("section, n, f, message", [
    ({"name": "median", "pre": [{"name": "bucketing", "s": 0}]}, 10, 2, "1 <= s <= n"),
    ({"name": "median", "pre": [{"name": "bucketing", "s": 11}]}, 10, 2, "1 <= s <= n"),
    ({"name": "median", "pre": [{"name": "bucketing", "size": 2}]}, 10, 2, "allowed: s"),
    ({"name": "median", "pre": [{"name": "nnm", "s": 2}]}, 10, 2, "takes no option"),
    ({"name": "median", "pre": [{"s": 2}]}, 10, 2, "needs a name"),
    ({"name": "median", "pre": ["nnm"]}, 10, 10, "0 <= f < n"),
    ({"name": "median", "pre": ["arc"]}, 10, 12, "0 <= f < n"),
    ({"name": "krum", "pre": [{"name": "bucketing", "s": 4}]}, 10, 2, "krum"),  # 3 buckets: n - f - 2 < 1
    ({"name": "k_loss", "pre": [{"name": "bucketing", "s": 2}]}, 10, 2, "training loss"),
    ({"name": "foolsgold", "pre": [{"name": "bucketing", "s": 2}]}, 10, 2, "per-client"),
    ({"name": "median", "pre": ["nmm"]}, 10, 2, "available: .*nnm"),
])
def test_bad_pre_aggregator_settings_fail_before_training(section, n, f, message):
    with pytest.raises((ConfigError, KeyError), match=message):
        check_aggregator(section, n=n, f=f)


def test_new_components_are_registered_with_their_sources():
    assert "signguard" in AGGREGATORS.names()
    doc = AGGREGATORS.get("signguard").rule.__doc__ + (signguard.__module__ or "")
    assert "SignGuard" in doc


def test_signguards_mean_shift_labels_as_sklearns_but_for_rounding_boundaries():
    # SignGuard-shaped features (sign fractions over the column maxima, many copies); sklearn's MeanShift is the
    # reference; its distances round differently, so a point on a radius may go either way (a few in 100s)
    import warnings

    from sklearn.cluster import MeanShift
    from sklearn.cluster import estimate_bandwidth as sk_bandwidth

    from fedarena.methods.aggregators.meanshift import estimate_bandwidth, mean_shift_labels

    rng, agree, total = np.random.default_rng(4), 0, 0
    for _ in range(150):
        n, width = int(rng.integers(5, 30)), int(rng.integers(5, 200))
        signs = rng.choice([-1.0, 0.0, 1.0], size=(n, width), p=rng.dirichlet([1, 1, 1]))
        signs[: int(rng.integers(0, n // 2))] = signs[-1]
        fractions = np.stack([(signs == s).mean(axis=1) for s in (1.0, 0.0, -1.0)], axis=1)
        features = fractions / (fractions.max(axis=0) + 1e-8)
        bandwidth = estimate_bandwidth(features)
        assert bandwidth == pytest.approx(sk_bandwidth(features, quantile=0.5, n_samples=50), rel=1e-9)
        if bandwidth <= 0:
            continue
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            expected = MeanShift(bandwidth=bandwidth, bin_seeding=True, cluster_all=False).fit(features).labels_
        total += 1
        agree += np.array_equal(mean_shift_labels(features, bandwidth), expected)
    assert total > 100 and agree >= total - 3, (agree, total)
