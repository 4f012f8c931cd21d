"""Vehicle from a tiny MOCHA-style vehicle.mat (cells X, Y written with scipy.io.savemat)."""

import numpy as np
import pytest
import scipy.io
import torch

from fedarena.datasets import vehicle  # noqa: F401  (registers the builder)
from fedarena.datasets.catalog import DATASETS
from fedarena.datasets.files.storage import DataCorruptError, DataNotFoundError
from fedarena.errors import ConfigError

SIZES = (400, 450, 500, 550)  # distinct device sizes identify the device of each client


def write_vehicle(root, sizes=SIZES, labels=(-1.0, 1.0), dim=100):
    """X: cell (devices x 1) of [n_k, dim] arrays; Y: cell of [n_k, 1] labels, as MATLAB stores cells."""
    gen = np.random.default_rng(0)
    cells_x, cells_y = np.empty((len(sizes), 1), dtype=object), np.empty((len(sizes), 1), dtype=object)
    for k, n in enumerate(sizes):
        cells_x[k, 0] = gen.normal(3.0 * k, 1.0 + k, (n, dim))
        cells_y[k, 0] = gen.choice(labels, size=(n, 1))
    path = root / "vehicle" / "vehicle.mat"
    path.parent.mkdir(parents=True, exist_ok=True)
    scipy.io.savemat(path, {"X": cells_x, "Y": cells_y})
    return path


def build(root, seed=0, **options):
    return DATASETS.get("vehicle").build(np.random.default_rng(seed), data_dir=str(root), **options)


def test_vehicle_full_training_parts_are_72_8_20_of_each_device_standardised_per_device(tmp_path):
    write_vehicle(tmp_path)

    ds = build(tmp_path, num_clients=4, train_sizes="full")

    assert (
        ds.num_clients == 4 and ds.task == "binary_pm1" and ds.num_classes == 2 and ds.input_shape == (100,)
    )
    sizes = sorted((len(c.train), len(c.val), len(c.test)) for c in ds.clients)
    assert sizes == [(288, 32, 80), (324, 36, 90), (360, 40, 100), (396, 44, 110)]
    for client in ds.clients:
        x = torch.cat([client.train.x, client.val.x, client.test.x])
        y = torch.cat([client.train.y, client.val.y, client.test.y])
        assert torch.allclose(x.mean(0), torch.zeros(100), atol=1e-5)
        assert torch.allclose(x.std(0, unbiased=False), torch.ones(100), atol=1e-4)
        assert set(y.tolist()) == {-1.0, 1.0} and y.dtype == torch.float32
    assert DATASETS.get("vehicle").model == "svm"


def test_vehicle_power_law_cuts_only_the_training_part(tmp_path):
    write_vehicle(tmp_path)

    full, power = build(tmp_path, 3, num_clients=4, train_sizes="full"), build(tmp_path, 3, num_clients=4)

    for f, p in zip(full.clients, power.clients, strict=True):
        assert 5 <= len(p.train) < len(f.train)
        assert torch.equal(p.train.x, f.train.x[: len(p.train)])  # a prefix of the same random split
        assert torch.equal(p.test.x, f.test.x) and torch.equal(p.val.y, f.val.y)
    assert full.fingerprint != power.fingerprint


def test_vehicle_num_clients_samples_devices_and_fingerprint_follows_the_seed(tmp_path):
    write_vehicle(tmp_path)

    a, b, c = (
        build(tmp_path, 1, num_clients=2),
        build(tmp_path, 1, num_clients=2),
        build(tmp_path, 2, num_clients=2),
    )

    assert a.num_clients == 2 and a.fingerprint == b.fingerprint != c.fingerprint
    totals = {len(cl.val) + len(cl.test) for cl in a.clients}
    assert totals <= {32 + 80, 36 + 90, 40 + 100, 44 + 110}


def test_vehicle_missing_file_is_named(tmp_path):
    with pytest.raises(DataNotFoundError) as err:
        build(tmp_path)

    msg = str(err.value)
    assert str(tmp_path / "vehicle" / "vehicle.mat") in msg and "vehicle.mat" in msg
    assert "fedarena data fetch vehicle" in msg


def test_truncated_mat_file_is_corrupt(tmp_path):
    path = write_vehicle(tmp_path)
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])

    with pytest.raises(DataCorruptError, match="unreadable .mat file") as err:
        build(tmp_path)

    assert str(path) in str(err.value)


def test_labels_other_than_plus_minus_one_are_corrupt(tmp_path):
    write_vehicle(tmp_path, labels=(0.0, 1.0))

    with pytest.raises(DataCorruptError, match=r"device 0: Y must hold 400 labels in \{-1, \+1\}"):
        build(tmp_path)


def test_mat_without_the_x_and_y_cells_is_corrupt(tmp_path):
    path = tmp_path / "vehicle" / "vehicle.mat"
    path.parent.mkdir()
    scipy.io.savemat(path, {"features": np.zeros((3, 100))})

    with pytest.raises(DataCorruptError, match=r"expected variables X and Y, found \['features'\]"):
        build(tmp_path)


def test_unknown_train_sizes_option_is_a_config_error(tmp_path):
    write_vehicle(tmp_path)

    with pytest.raises(ConfigError, match="train_sizes must be 'power_law' or 'full'"):
        build(tmp_path, train_sizes="powerlaw")
