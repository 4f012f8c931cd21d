"""FedTilt's toy problem (Table IV) as a dataset, and the example that reproduces its three experiments."""

import json

import numpy as np
import pytest

from fedarena.datasets.fedtilt_toy import TABLE_IV, add_outliers, fedtilt_toy
from fedarena.errors import ConfigError
from fedarena.examples.fedtilt_toy_figure import VARIANTS, reproduce


@pytest.mark.parametrize("experiment, train, test", [(1, (100, 100), (20, 20)), (2, (150, 50), (30, 10)),
                                                    (3, (150, 50), (30, 10))])
def test_toy_dataset_has_the_papers_counts(experiment, train, test):
    ds = fedtilt_toy(np.random.default_rng(0), experiment=experiment)
    assert ds.num_clients == 2 and ds.num_classes == 2 and ds.input_shape == (2,)
    for client in ds.clients:
        assert tuple(np.bincount(client.train.y.numpy(), minlength=2)) == train
        assert tuple(np.bincount(client.test.y.numpy(), minlength=2)) == test


def test_toy_classes_are_centred_as_in_table_iv():
    ds = fedtilt_toy(np.random.default_rng(1), experiment=1)
    for client, spec in zip(ds.clients, TABLE_IV[1], strict=True):
        x, y = client.train.x.numpy(), client.train.y.numpy()
        for label, (centre, std) in enumerate(spec):
            points = x[y == label]
            np.testing.assert_allclose(points.mean(0), centre, atol=0.2)
            np.testing.assert_allclose(points.std(0), std, atol=0.15)


def test_outliers_perturb_exactly_the_chosen_share_of_class_zero():
    x = np.zeros((6, 2))
    y = np.array([0, 0, 0, 0, 1, 1])
    out = add_outliers(np.random.default_rng(0), x, y, fraction=0.5, std=1.0)
    moved = (out != 0).any(1)
    assert moved.sum() == 2 and not moved[4:].any() and (x == 0).all()


def test_toy_dataset_rejects_unknown_experiments():
    with pytest.raises(ConfigError, match="experiment"):
        fedtilt_toy(np.random.default_rng(0), experiment=4)


def test_example_writes_the_figure_and_the_tables(tmp_path):
    results = reproduce(tmp_path, rounds=1, seed=0, lr=0.1)
    assert len(results) == sum(len(v) for v in VARIANTS.values())
    assert (tmp_path / "fedtilt_toy.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    table = json.loads((tmp_path / "fedtilt_toy.json").read_text())
    assert all(len(entry["client_acc"]) == 2 for entry in table.values())
    assert "experiment 3: tau=1, lambda=-100" in (tmp_path / "fedtilt_toy.md").read_text()
