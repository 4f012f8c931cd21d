"""Fashion-MNIST, MNIST and CIFAR-10 in torchvision's on-disk layout, with the papers' partitions.

- ``fmnist``: Ditto (Li et al. 2021, App. C): 500 devices, device u holds classes (u + j) mod 10,
  j < 5, lognormal(3, 1) + 10 sizes, lognormal(1, 1) class proportions; pixels standardised per pixel.
- ``fmnist_fedtilt``, ``mnist``, ``cifar10``: FedTilt: 100 clients, 2 classes each, equal sizes.

``pool``: by default the training and test files are pooled (train first) before partitioning (all 70,000
Fashion-MNIST images, which Ditto's script also uses); ``pool="train"`` partitions the training files alone,
the paper's text ("rescaled to the 60,000 training images"). Either way every device then splits its own
samples 72/8/20. ``fmnist`` also takes ``pool="reference"``: the script that produced the published numbers
takes each device's training images from the training file and its test images from the test file, with
its own per-device counts, file order, reuse and standardisation (``fmnist_reference``).
``normalize``: pixels standardised one by one (``pixel``: the default of fmnist, as Ditto, and of the FedTilt
MNIST datasets) or per colour channel (``channel``: CIFAR-10's default, the backdoor papers' convention); the
dataset keeps its ``PixelScale`` (``datasets.pixels``) so raw pixels are recoverable.
Builders never download: ``fedarena data fetch NAME`` does (see fetch.py); a missing or damaged file is a
DataError naming the remedy.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from fedarena.datasets.base import FederatedDataset
from fedarena.datasets.catalog import register_dataset
from fedarena.datasets.files import cifar, idx
from fedarena.datasets.files.sources import Source, require
from fedarena.datasets.files.storage import data_root, size_digest
from fedarena.datasets.files.torchvision import CIFAR_SOURCE, FMNIST_SOURCE, MNIST_SOURCE
from fedarena.datasets.fmnist_reference import build_reference
from fedarena.datasets.pipeline import assemble, partition_pool, seed_streams
from fedarena.datasets.pixels import PIXELS, PixelScale, check_normalization, standardize_images
from fedarena.errors import ConfigError

DITTO_FMNIST = {"classes_per_client": 5, "sizes": "lognormal"}
POOLS = ("train_test", "train")  # which files are partitioned (see the module docstring)
REFERENCE_POOL = "reference"  # fmnist only: Ditto's reference script (fmnist_reference)
FEDTILT = {"classes_per_client": 2, "sizes": "equal"}


def load_idx_pool(dataset: str, root: Path, source: Source, train_only: bool = False,
                  normalize: str = "pixel") -> tuple[np.ndarray, np.ndarray, list[Path], PixelScale]:
    """Pooled images standardised as ``normalize`` says (default per pixel), as [n, 1, 28, 28] float32,
    labels, files read and their ``PixelScale`` (raw values 0-255)."""
    require(dataset, source, root)
    x, y, files = idx.load_pooled(dataset, root / f"{source.name}/raw", source.how, train_only)
    images, scale = standardize_images(x.reshape(len(x), 1, *x.shape[1:]), normalize, channel_axis=0)
    return images, y, files, scale


def load_cifar_pool(dataset: str, root: Path, train_only: bool = False,
                    normalize: str = "channel") -> tuple[np.ndarray, np.ndarray, list[Path], PixelScale]:
    """Pooled images standardised as ``normalize`` says (default per colour channel), [n, 3, 32, 32] float32,
    labels, files read and their ``PixelScale`` (raw values scaled to [0, 1])."""
    require(dataset, CIFAR_SOURCE, root)
    x, y, files = cifar.load_pooled(dataset, root, CIFAR_SOURCE.how, train_only)
    images, scale = standardize_images(x.astype(np.float32) / 255.0, normalize, channel_axis=0)
    return images, y, files, scale


def build_pooled(
    dataset: str,
    rng: np.random.Generator,
    root: Path,
    pool: tuple,
    *,
    num_clients: int,
    partition: str,
    options: dict,
    max_samples: int | None,
    shown_normalize: str | None = None,
) -> FederatedDataset:
    """Partition a pooled (x, y, files, PixelScale) source with the partition cache, then split every client;
    ``shown_normalize``, a normalisation other than the dataset's default, joins the fingerprint's source."""
    x, y, files, scale = pool
    token, part_rng, split_rng = seed_streams(rng)
    parts = partition_pool(
        dataset,
        y,
        num_clients,
        partition,
        options,
        token=token,
        rng=part_rng,
        root=root,
        files=files,
        max_samples=max_samples,
    )
    source = (
        f"{dataset}|files={size_digest(files, root)}|{partition}|{sorted(options.items())}|max={max_samples}"
        + (f"|normalize={shown_normalize}" if shown_normalize else "")
    )
    meta = {"partition": partition, **options, "max_samples": max_samples, PIXELS: scale}
    return assemble(
        dataset,
        parts,
        lambda order: torch.from_numpy(x[order]),
        y,
        split_rng,
        num_classes=10,
        source=source,
        meta=meta,
    )


def _options(partition: str, defaults: dict, given: dict | None) -> dict:
    """The paper's k_classes options unless another partitioner is chosen; user options override."""
    return {**(defaults if partition == "k_classes" else {}), **(given or {})}


def check_pool(name: str, pool: str, partition: str, partition_options: dict | None,
               max_samples: int | None, normalize: str = "pixel") -> None:
    """``pool`` is one of POOLS, or ``reference`` for fmnist, which builds its own partition."""
    allowed = POOLS + ((REFERENCE_POOL,) if name == "fmnist" else ())
    if pool not in allowed:
        raise ConfigError(f"dataset {name!r}: pool must be one of {', '.join(allowed)} (train_test: training and "
                          "test files pooled; train: the training files alone"
                          + ("; reference: Ditto's reference script" if name == "fmnist" else "") + f"); got {pool!r}")
    if pool == REFERENCE_POOL and (partition != "k_classes" or partition_options or max_samples is not None
                                   or normalize != "pixel"):
        raise ConfigError("dataset 'fmnist': pool=reference builds the reference script's own partition and "
                          "standardisation; leave partition, partition_options, max_samples and normalize (pixel) at "
                          "their defaults")


def _register_torchvision(name: str, model: str, clients: int, load, defaults: dict, doc: str, source,
                          normalization: str = "pixel") -> None:
    """Register a torchvision-format dataset: ``load(name, root, train_only, normalize)`` gives the pooled images
    and labels, ``defaults`` the paper's k_classes options and ``normalization`` its default (the builder's
    signature is its hyperparameter schema)."""

    def build(
        rng: np.random.Generator,
        *,
        data_dir: str | None = None,
        num_clients: int = clients,
        partition: str = "k_classes",
        partition_options: dict | None = None,
        max_samples: int | None = None,
        pool: str = "train_test",
        normalize: str = normalization,
    ) -> FederatedDataset:
        check_pool(name, pool, partition, partition_options, max_samples, check_normalization(name, normalize))
        if pool == REFERENCE_POOL:
            return build_reference(rng, FMNIST_SOURCE, data_dir=data_dir, num_clients=num_clients)
        root = data_root(data_dir)
        return build_pooled(name, rng, root, load(name, root, pool == "train", normalize), num_clients=num_clients,
                            partition=partition, options=_options(partition, defaults, partition_options),
                            max_samples=max_samples, shown_normalize=None if normalize == normalization else normalize)

    build.__doc__ = doc
    build.__name__ = name
    register_dataset(name, model=model, source=source)(build)


def _idx(source):
    return lambda name, root, train_only, normalize: load_idx_pool(name, root, source, train_only, normalize)


_register_torchvision("fmnist", "cnn_fmnist", 500, _idx(FMNIST_SOURCE), DITTO_FMNIST,
                      "Fashion-MNIST with Ditto's partition (500 devices, 5 classes each, lognormal sizes), [1, 28, 28].",
                      FMNIST_SOURCE)
_register_torchvision("fmnist_fedtilt", "mlp", 100, _idx(FMNIST_SOURCE), FEDTILT,
                      "Fashion-MNIST with FedTilt's partition (100 clients, 2 classes each, equal sizes), [1, 28, 28].",
                      FMNIST_SOURCE)
_register_torchvision("mnist", "mlp", 100, _idx(MNIST_SOURCE), FEDTILT,
                      "MNIST with FedTilt's partition (100 clients, 2 classes each, equal sizes), [1, 28, 28].", MNIST_SOURCE)
_register_torchvision("cifar10", "cnn_cifar", 100, load_cifar_pool, FEDTILT,
                      "CIFAR-10 with FedTilt's partition (100 clients, 2 classes each, equal sizes), [3, 32, 32].", CIFAR_SOURCE,
                      normalization="channel")
