"""Fashion-MNIST / MNIST (IDX, gzipped as torchvision stores them) and CIFAR-10 (pickled batches).

Tiny files in the exact on-disk formats are written to tmp_path and read through the registered
builders. Every image is distinct, so a sample given to two clients or two splits would show up as a
duplicate row.
"""

import gzip
import pickle
import struct

import numpy as np
import pytest
import torch

from fedarena.datasets import pipeline, vision  # noqa: F401  (vision registers the builders)
from fedarena.datasets.catalog import DATASETS
from fedarena.datasets.files.storage import DataCorruptError, DataNotFoundError
from fedarena.errors import ConfigError

IDX_NAMES = {
    "train": ("train-images-idx3-ubyte", "train-labels-idx1-ubyte"),
    "t10k": ("t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"),
}


def idx_bytes(arr: np.ndarray) -> bytes:
    return (
        bytes([0, 0, 0x08, arr.ndim])
        + struct.pack(f">{arr.ndim}I", *arr.shape)
        + arr.astype(np.uint8).tobytes()
    )


def write_idx_dataset(root, folder="FashionMNIST", per_class=(16, 4), seed=0):
    """torchvision's layout <root>/<folder>/raw/*-idx?-ubyte.gz; per_class: (train, test) images per class."""
    raw = root / folder / "raw"
    raw.mkdir(parents=True)
    gen = np.random.default_rng(seed)
    for split, n in zip(("train", "t10k"), per_class, strict=True):
        labels = np.repeat(np.arange(10, dtype=np.uint8), n)
        images = gen.integers(0, 256, (len(labels), 28, 28), dtype=np.uint8)
        for name, arr in zip(IDX_NAMES[split], (images, labels), strict=True):
            (raw / f"{name}.gz").write_bytes(gzip.compress(idx_bytes(arr)))
    return raw


def write_cifar(root, per_batch=10):
    """cifar-10-batches-py/ with data_batch_1..5, test_batch (one image per class each) and batches.meta."""
    folder = root / "cifar-10-batches-py"
    folder.mkdir(parents=True)
    gen = np.random.default_rng(1)
    for name in [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]:
        batch = {
            "batch_label": name,
            "labels": list(range(10)) * (per_batch // 10),
            "data": gen.integers(0, 256, (per_batch, 3072), dtype=np.uint8),
            "filenames": [f"img_{i}.png" for i in range(per_batch)],
        }
        (folder / name).write_bytes(pickle.dumps(batch, protocol=2))
    meta = {
        "label_names": [
            "airplane",
            "automobile",
            "bird",
            "cat",
            "deer",
            "dog",
            "frog",
            "horse",
            "ship",
            "truck",
        ],
        "num_vis": 3072,
        "num_cases_per_batch": per_batch,
    }
    (folder / "batches.meta").write_bytes(pickle.dumps(meta, protocol=2))
    return folder


def build(name, root, seed=0, **options):
    return DATASETS.get(name).build(np.random.default_rng(seed), data_dir=str(root), **options)


def all_rows(ds):
    xs = [s.x.flatten(1) for c in ds.clients for s in (c.train, c.val, c.test)]
    return torch.cat(xs)


def client_labels(client):
    return set(torch.cat([client.train.y, client.val.y, client.test.y]).tolist())


def test_fmnist_ditto_partition_from_gzipped_idx(tmp_path):
    write_idx_dataset(tmp_path)

    ds = build("fmnist", tmp_path, num_clients=4, partition_options={"min_size": 5})

    assert ds.num_clients == 4 and ds.num_classes == 10 and ds.input_shape == (1, 28, 28)
    assert ds.clients[0].train.x.dtype == torch.float32 and ds.clients[0].train.y.dtype == torch.long
    for u, client in enumerate(ds.clients):
        assert client_labels(client) <= {(u + j) % 10 for j in range(5)}
    rows = all_rows(ds)
    assert len(torch.unique(rows, dim=0)) == len(rows) <= 200  # no image in two clients or two splits
    assert DATASETS.get("fmnist").model == "cnn_fmnist"


def test_fedtilt_partition_gives_each_client_exactly_its_two_classes(tmp_path):
    write_idx_dataset(tmp_path, folder="MNIST")

    ds = build("mnist", tmp_path, num_clients=5)

    assert [client_labels(c) for c in ds.clients] == [{u, u + 1} for u in range(5)]
    assert ds.input_shape == (1, 28, 28) and DATASETS.get("mnist").model == "mlp"


def test_fmnist_fedtilt_reads_the_same_files_with_the_fedtilt_partition(tmp_path):
    write_idx_dataset(tmp_path)

    ds = build("fmnist_fedtilt", tmp_path, num_clients=3)

    assert [client_labels(c) for c in ds.clients] == [{0, 1}, {1, 2}, {2, 3}]


def test_pixels_are_standardised_per_pixel_over_train_and_test_pooled(tmp_path):
    write_idx_dataset(tmp_path)

    x, y, files, _ = vision.load_idx_pool("fmnist", tmp_path, vision.FMNIST_SOURCE)

    assert x.shape == (200, 1, 28, 28) and y.tolist()[:16] == [0] * 16 and y.tolist()[160:162] == [0, 0]
    assert np.allclose(x.mean(0), 0, atol=1e-5) and np.allclose(x.std(0), 1, atol=1e-4)
    assert [f.name for f in files][:2] == ["train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz"]


def test_unpacked_idx_file_is_read_when_torchvision_extracted_it(tmp_path):
    raw = write_idx_dataset(tmp_path)
    packed = gzip.decompress((raw / "train-labels-idx1-ubyte.gz").read_bytes())
    (raw / "train-labels-idx1-ubyte").write_bytes(packed[:8] + bytes([9] * 160))  # all 9s, unpacked copy

    _, y, _, _ = vision.load_idx_pool("fmnist", tmp_path, vision.FMNIST_SOURCE)

    assert y[:160].tolist() == [9] * 160


def test_fingerprint_is_stable_for_a_seed_and_differs_across_seeds(tmp_path):
    write_idx_dataset(tmp_path)
    opts = {"num_clients": 4, "partition_options": {"min_size": 5}}

    a, b, c = (
        build("fmnist", tmp_path, 3, **opts),
        build("fmnist", tmp_path, 3, **opts),
        build("fmnist", tmp_path, 4, **opts),
    )

    assert a.fingerprint == b.fingerprint != c.fingerprint
    assert torch.equal(a.clients[2].test.x, b.clients[2].test.x)


def test_cached_partition_gives_the_same_dataset_and_generator_state(tmp_path, monkeypatch):
    write_idx_dataset(tmp_path, folder="MNIST")
    rng_fresh, rng_cached = np.random.default_rng(7), np.random.default_rng(7)
    fresh = DATASETS.get("mnist").build(rng_fresh, data_dir=str(tmp_path), num_clients=3)
    assert len(list((tmp_path / "partitions").glob("*.npz"))) == 1

    def no_partition(*args, **kwargs):
        raise AssertionError("the partition should come from the cache")

    monkeypatch.setattr(pipeline, "partition_labels", no_partition)
    cached = DATASETS.get("mnist").build(rng_cached, data_dir=str(tmp_path), num_clients=3)

    assert cached.fingerprint == fresh.fingerprint
    assert all(torch.equal(a.train.x, b.train.x) for a, b in zip(fresh.clients, cached.clients, strict=True))
    assert rng_fresh.random() == rng_cached.random()


def test_damaged_cache_entry_is_rebuilt(tmp_path):
    write_idx_dataset(tmp_path, folder="MNIST")
    first = build("mnist", tmp_path, num_clients=3)
    (entry,) = (tmp_path / "partitions").glob("*.npz")
    entry.write_bytes(b"not a zip")

    again = build("mnist", tmp_path, num_clients=3)

    assert again.fingerprint == first.fingerprint


def test_max_samples_scales_the_pool_down(tmp_path):
    write_idx_dataset(tmp_path, folder="MNIST")

    ds = build("mnist", tmp_path, num_clients=2, max_samples=40)

    assert sum(len(c.train) + len(c.val) + len(c.test) for c in ds.clients) <= 40


def test_missing_file_error_names_dataset_directory_file_and_command(tmp_path):
    raw = write_idx_dataset(tmp_path)
    (raw / "t10k-labels-idx1-ubyte.gz").unlink()

    with pytest.raises(DataNotFoundError) as err:
        build("fmnist", tmp_path, num_clients=4)

    msg = str(err.value)
    assert "'fmnist'" in msg and str(tmp_path) in msg and "t10k-labels-idx1-ubyte.gz" in msg
    assert "fedarena data fetch fmnist" in msg and "train-images" not in msg.split("To get them")[0]


@pytest.mark.parametrize(
    "damage, problem",
    [
        (lambda b: b[:-25], "damaged gzip"),  # truncated download
        (lambda b: gzip.compress(gzip.decompress(b)[:-30]), "size mismatch"),  # valid gzip, data cut short
        (lambda b: gzip.compress(b"\x08\x08" + gzip.decompress(b)[2:]), "not an IDX file"),  # bad magic
    ],
)
def test_corrupt_idx_file_is_reported_not_read_partially(tmp_path, damage, problem):
    raw = write_idx_dataset(tmp_path)
    path = raw / "train-images-idx3-ubyte.gz"
    path.write_bytes(damage(path.read_bytes()))

    with pytest.raises(DataCorruptError) as err:
        build("fmnist", tmp_path, num_clients=4)

    msg = str(err.value)
    assert problem in msg and str(path) in msg and "fedarena data fetch fmnist" in msg


def test_label_count_that_does_not_match_the_images_is_corrupt(tmp_path):
    raw = write_idx_dataset(tmp_path)
    (raw / "t10k-labels-idx1-ubyte.gz").write_bytes(gzip.compress(idx_bytes(np.zeros(7, np.uint8))))

    with pytest.raises(DataCorruptError, match="expected 40 labels"):
        build("fmnist", tmp_path, num_clients=4)


def test_cifar10_from_pickled_batches(tmp_path):
    write_cifar(tmp_path)

    ds = build("cifar10", tmp_path, num_clients=4)

    assert ds.input_shape == (3, 32, 32) and ds.num_classes == 10
    assert [client_labels(c) for c in ds.clients] == [{0, 1}, {1, 2}, {2, 3}, {3, 4}]
    rows = all_rows(ds)
    assert len(torch.unique(rows, dim=0)) == len(rows)
    assert DATASETS.get("cifar10").model == "cnn_cifar"


def test_cifar_is_standardised_per_channel(tmp_path):
    write_cifar(tmp_path)

    x, y, _, scale = vision.load_cifar_pool("cifar10", tmp_path)

    assert x.shape == (60, 3, 32, 32) and y.tolist()[:3] == [0, 1, 2]
    # the raw pixels (/ 255) recoverable: one mean and std per channel, white 1
    assert scale.mode == "channel" and scale.mean.shape == scale.std.shape == (3, 1, 1) and scale.white <= 1.0
    assert np.allclose(x * scale.std + scale.mean, x * scale.std + scale.mean, atol=0) and (scale.std > 0).all()
    assert (0 < scale.mean).all() and (scale.mean < 1).all()
    assert np.allclose(x.mean(axis=(0, 2, 3)), 0, atol=1e-5) and np.allclose(
        x.std(axis=(0, 2, 3)), 1, atol=1e-4
    )


def test_truncated_cifar_batch_is_corrupt(tmp_path):
    folder = write_cifar(tmp_path)
    data = (folder / "data_batch_3").read_bytes()
    (folder / "data_batch_3").write_bytes(data[: len(data) // 2])

    with pytest.raises(DataCorruptError, match="data_batch_3.*not a readable CIFAR pickle"):
        build("cifar10", tmp_path, num_clients=4)


def test_foreign_pickle_is_refused_without_running_it(tmp_path):
    folder = write_cifar(tmp_path)
    (folder / "test_batch").write_bytes(pickle.dumps({"data": print}, protocol=2))

    with pytest.raises(DataCorruptError, match="unexpected object .*print"):
        build("cifar10", tmp_path, num_clients=4)


def test_missing_cifar_meta_is_reported(tmp_path):
    folder = write_cifar(tmp_path)
    (folder / "batches.meta").unlink()

    with pytest.raises(DataNotFoundError, match="cifar-10-batches-py/batches.meta"):
        build("cifar10", tmp_path, num_clients=4)


def test_fmnist_pool_train_partitions_the_training_files_alone(tmp_path):
    # Prepare: 160 training and 40 test images; the default pools both (Ditto's script), "train" is the
    # paper's "rescaled to the 60,000 training images"
    write_idx_dataset(tmp_path)
    opts = {"num_clients": 4, "partition_options": {"min_size": 5}}
    # Execute
    x, _, files, _ = vision.load_idx_pool("fmnist", tmp_path, vision.FMNIST_SOURCE, train_only=True)
    pooled, train_only = build("fmnist", tmp_path, **opts), build("fmnist", tmp_path, pool="train", **opts)
    # Assert
    assert x.shape[0] == 160 and all(f.name.startswith("train-") for f in files)
    assert pooled.fingerprint != train_only.fingerprint
    with pytest.raises(ConfigError, match="pool must be one of train_test, train"):
        build("fmnist", tmp_path, pool="test", **opts)
