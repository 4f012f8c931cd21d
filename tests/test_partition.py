"""Partition and split properties: exact classes per client, sizes, disjoint splits, stable fingerprints."""

import numpy as np
import pytest
import torch

from fedarena.datasets import build_dataset
from fedarena.datasets.base import from_partition, split_indices
from fedarena.datasets.partition import dirichlet, iid, k_classes, natural
from fedarena.errors import ConfigError


def labels_10_classes(per_class: int = 300) -> np.ndarray:
    return np.repeat(np.arange(10), per_class)


def test_k_classes_gives_each_client_exactly_its_classes():
    labels = labels_10_classes()
    parts = k_classes(labels, 12, np.random.default_rng(0), classes_per_client=5)
    for u, idx in enumerate(parts):
        assert set(np.unique(labels[idx])) == {(u + j) % 10 for j in range(5)}


def test_k_classes_uses_no_sample_twice_and_respects_total():
    labels = labels_10_classes()
    parts = k_classes(labels, 20, np.random.default_rng(1), classes_per_client=2, total=1000, min_size=10)
    all_idx = np.concatenate(parts)
    assert len(all_idx) == len(np.unique(all_idx))
    assert len(all_idx) <= 1000 + 20 * 2  # rounding up to one sample per owned class at most


def test_k_classes_equal_sizes_are_equal():
    labels = labels_10_classes(100)
    parts = k_classes(labels, 10, np.random.default_rng(0), classes_per_client=2, sizes="equal")
    assert {len(p) for p in parts} == {100}


def test_lognormal_sizes_are_skewed():
    parts = k_classes(labels_10_classes(), 30, np.random.default_rng(0), classes_per_client=5)
    sizes = np.array([len(p) for p in parts])
    assert sizes.max() > 4 * sizes.min()


def test_dirichlet_and_iid_cover_clients():
    labels = labels_10_classes(50)
    for parts in (dirichlet(labels, 8, np.random.default_rng(0), alpha=0.3),
                  iid(labels, 8, np.random.default_rng(0))):
        assert len(parts) == 8
        all_idx = np.concatenate(parts)
        assert len(all_idx) == len(np.unique(all_idx))
    assert {len(p) for p in iid(labels, 10, np.random.default_rng(0))} == {50}


def test_natural_partition_groups_by_id_and_subsamples():
    ids = np.array(["a", "b", "a", "c", "b", "c", "c"])
    parts = natural(ids, None, np.random.default_rng(0))
    assert [p.tolist() for p in parts] == [[0, 2], [1, 4], [3, 5, 6]]
    assert len(natural(ids, 2, np.random.default_rng(0))) == 2
    with pytest.raises(ConfigError, match="only 3 natural clients"):
        natural(ids, 4, np.random.default_rng(0))


def test_split_is_72_8_20_and_disjoint():
    tr, va, te = split_indices(np.arange(100), np.random.default_rng(0))
    assert (len(tr), len(va), len(te)) == (72, 8, 20)
    assert len(set(tr) | set(va) | set(te)) == 100


def test_split_that_leaves_a_client_without_test_data_is_an_error():
    x, y = torch.zeros(3, 2), torch.zeros(3, dtype=torch.long)
    with pytest.raises(ConfigError, match="without test data"):
        from_partition("tiny", x, y, [np.arange(1)], np.random.default_rng(0), num_classes=2, source="t")


def test_fingerprint_stable_for_a_seed_and_different_across_seeds():
    a = build_dataset("digits", {}, np.random.default_rng(0))
    b = build_dataset("digits", {}, np.random.default_rng(0))
    c = build_dataset("digits", {}, np.random.default_rng(1))
    assert a.fingerprint == b.fingerprint != c.fingerprint


def test_a_trial_writing_to_its_digits_tensors_changes_no_later_build():
    # Prepare: one build, whose tensors a trial then overwrites
    first = build_dataset("digits", {}, np.random.default_rng(0))
    kept = first.clients[0].train.x.clone()
    first.clients[0].train.x.add_(1.0)
    # Execute
    again = build_dataset("digits", {}, np.random.default_rng(0))
    # Assert: the same samples as before the write
    assert torch.equal(again.clients[0].train.x, kept)


def test_digits_clients_have_disjoint_splits():
    ds = build_dataset("digits", {"num_clients": 10}, np.random.default_rng(0))
    assert ds.num_clients == 10 and ds.input_shape == (64,) and ds.num_classes == 10
    for c in ds.clients:
        rows = torch.cat([c.train.x, c.val.x, c.test.x])
        assert len(torch.unique(rows, dim=0)) == len(rows)  # digits has no duplicate images


def test_unknown_partition_option_is_an_error():
    with pytest.raises(ConfigError, match="unknown parameter"):
        build_dataset("digits", {"partition_options": {"alpah": 1}}, np.random.default_rng(0))


def test_k_classes_on_scarce_classes_never_reuses_samples():
    labels = np.repeat(np.arange(10), 10)  # 12 clients x 5 classes want more than 10 per class
    parts = k_classes(labels, 12, np.random.default_rng(0), classes_per_client=5, min_size=2)
    all_idx = np.concatenate(parts)
    assert len(all_idx) == len(np.unique(all_idx)) <= 100
    for u, idx in enumerate(parts):
        assert set(np.unique(labels[idx])) == {(u + j) % 10 for j in range(5)}
