"""Fashion-MNIST as Ditto's reference script builds it (``fmnist`` with ``pool="reference"``, issue 17 item 5).

Hand-computed per-device counts (int(p n) + 1 training, int(p n / 6) + 1 test images per class), the file
order with its wraparound reuse, the training file's standardisation, and the 90/10 train/validation cut,
read end to end from tiny IDX files in torchvision's layout.
"""

import gzip
import struct

import numpy as np
import pytest
import torch

from fedarena.datasets import fmnist_reference
from fedarena.datasets.catalog import DATASETS
from fedarena.datasets.fmnist_reference import device_counts, draw_shares, take_in_order
from fedarena.errors import ConfigError
from fedarena.suites.grid import expand
from fedarena.suites.parse import load_suite

# 4 devices of equal raw size: rescaled to 400 training images, n = 100 each; every device the same shares
SIZES = np.full(4, 10.0)
PROPS = np.tile([0.363, 0.263, 0.187, 0.113, 0.074], (4, 1))  # p * n = 36.3, 26.3, 18.7, 11.3, 7.4
TRAIN_PER_DEVICE = [37, 27, 19, 12, 8]  # int(p * n) + 1
TEST_PER_DEVICE = [7, 5, 4, 2, 2]  # int(p * n / 6) + 1: 6.05, 4.38, 3.12, 1.88, 1.23


def write_idx(root, train_per_class=40, test_per_class=8):
    """FashionMNIST/raw/*.gz with labels cycling 0..9 (class c's k-th image at position 10 k + c)."""
    raw = root / "FashionMNIST" / "raw"
    raw.mkdir(parents=True)
    gen = np.random.default_rng(0)
    files = {}
    for split, n in (("train", train_per_class), ("t10k", test_per_class)):
        labels = np.tile(np.arange(10, dtype=np.uint8), n)
        images = gen.integers(0, 256, (len(labels), 28, 28), dtype=np.uint8)
        for kind, arr in (("images-idx3", images), ("labels-idx1", labels)):
            header = bytes([0, 0, 0x08, arr.ndim]) + struct.pack(f">{arr.ndim}I", *arr.shape)
            (raw / f"{split}-{kind}-ubyte.gz").write_bytes(gzip.compress(header + arr.tobytes()))
        files[split] = (images, labels)
    return files


def standardized(train_images, images):
    flat = train_images.reshape(len(train_images), -1).astype(np.float32)
    out = (images.reshape(len(images), -1).astype(np.float32) - flat.mean(0)) / (flat.std(0) + 0.001)
    return torch.from_numpy(out)


def rows(split, label):
    return sorted(map(tuple, split.x[split.y == label].flatten(1).tolist()))


def test_counts_are_int_p_n_plus_one_for_training_and_a_sixth_for_test():
    # Execute
    train, test = device_counts(SIZES, PROPS, total=400)
    # Assert: device u holds classes u..u+4, in that order of shares
    assert train[0].tolist() == TRAIN_PER_DEVICE + [0] * 5
    assert train[3].tolist() == [0, 0, 0] + TRAIN_PER_DEVICE + [0, 0]
    assert test[1].tolist() == [0] + TEST_PER_DEVICE + [0] * 4


def test_a_class_is_taken_in_file_order_and_starts_over_where_too_little_is_left():
    # Prepare: class 3's training counts of devices 0..3 (shares 0.113, 0.187, 0.263, 0.363), 40 images
    counts = np.array([12, 19, 27, 37])
    # Execute
    taken = take_in_order(counts, 40, "training")
    # Assert: 0-11, 12-30, then 31 + 27 > 40 starts over at 0, and 27 + 37 > 40 again
    assert [(t[0], t[-1]) for t in taken] == [(0, 11), (12, 30), (0, 26), (0, 36)]
    assert take_in_order(np.array([0, 5]), 5, "test")[1].tolist() == [0, 1, 2, 3, 4]
    with pytest.raises(ConfigError, match="asks for 6 test images of a class that has 5"):
        take_in_order(np.array([6]), 5, "test")


def test_drawn_sizes_sum_to_the_training_images_plus_at_most_one_per_class():
    # Execute: the real draw for 500 devices and 60,000 training images
    train, test = device_counts(*draw_shares(np.random.default_rng(0), 500), total=60_000)
    # Assert: each class count is in (p n, p n + 1], 5 classes a device
    assert 60_000 < train.sum() <= 62_500 and 10_000 < test.sum() <= 12_500
    assert ((train > 0).sum(1) == 5).all() and ((train > 0) == (test > 0)).all()


def test_reference_pool_reads_both_files_with_the_reference_counts(tmp_path, monkeypatch):
    # Prepare: 400 training and 80 test images; the shares fixed to the hand-computed ones
    files = write_idx(tmp_path)
    monkeypatch.setattr(fmnist_reference, "draw_shares", lambda rng, k: (SIZES, PROPS))
    train_images, train_labels = files["train"]
    test_images, test_labels = files["t10k"]
    # Execute
    ds = DATASETS.get("fmnist").build(np.random.default_rng(1), data_dir=str(tmp_path), num_clients=4,
                                      pool="reference")
    # Assert: 103 training images a device, the last 10% (103 - int(92.7) = 11) validate; 20 test images
    assert [len(c.train) for c in ds.clients] == [92] * 4 and [len(c.val) for c in ds.clients] == [11] * 4
    assert [len(c.test) for c in ds.clients] == [20] * 4
    class3 = standardized(train_images, train_images[train_labels == 3])
    device1, device3 = (ds.clients[u] for u in (1, 3))
    joined = [type(device1.train)(torch.cat([c.train.x, c.val.x]), torch.cat([c.train.y, c.val.y]))
              for c in (device1, device3)]
    assert rows(joined[0], 3) == sorted(map(tuple, class3[12:31].tolist()))  # after device 0's 12
    assert rows(joined[1], 3) == sorted(map(tuple, class3[:37].tolist()))  # started over
    class0_test = standardized(train_images, test_images[test_labels == 0])
    assert rows(ds.clients[0].test, 0) == sorted(map(tuple, class0_test[:7].tolist()))


def test_reference_pool_is_fmnist_only_and_builds_its_own_partition(tmp_path):
    # Prepare
    write_idx(tmp_path)
    build = DATASETS.get("fmnist").build
    # Execute / Assert
    with pytest.raises(ConfigError, match=r"pool must be one of train_test, train \(.*got 'reference'"):
        DATASETS.get("fmnist_fedtilt").build(np.random.default_rng(0), data_dir=str(tmp_path), pool="reference")
    with pytest.raises(ConfigError, match="pool=reference builds the reference script's own partition"):
        build(np.random.default_rng(0), data_dir=str(tmp_path), pool="reference", partition_options={"min_size": 5})


def test_reproduction_suites_read_fashion_mnist_as_the_reference_script():
    # Execute
    pools = {name: {t.config.dataset["pool"] for t in expand(load_suite(name), "paper", dataset="fmnist")}
             for name in ("robustness", "fairness", "ditto_lambda", "clean_rounds")}
    # Assert
    assert pools == dict.fromkeys(pools, {"reference"})
